-- extend_many.lua: set every lock KEYS[1..n] to expire ARGV[2] ms from now
-- if all of them still hold the token of the value ARGV[1]; if any does not, change
-- nothing. Returns 1 if extended, 0 if not.
for i = 1, #KEYS do
  local v = redis.call('GET', KEYS[i])
  if not sameToken(v, ARGV[1]) then return 0 end
end
for i = 1, #KEYS do
  redis.call('PEXPIRE', KEYS[i], ARGV[2])
end
return 1
