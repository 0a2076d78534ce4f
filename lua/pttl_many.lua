-- pttl_many.lua: the shortest remaining ttl, in ms, of the locks
-- KEYS[1..n] if all still hold the token of the value ARGV[1]; -3 if any does not.
local shortest = nil
for i = 1, #KEYS do
  local v = redis.call('GET', KEYS[i])
  if not sameToken(v, ARGV[1]) then return -3 end
  local pttl = redis.call('PTTL', KEYS[i])
  if not shortest or pttl < shortest then shortest = pttl end
end
return shortest
