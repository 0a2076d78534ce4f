-- extend_many.lua: set every lock KEYS[1..n] to expire ARGV[2] ms from now
-- if all of them still hold the token of the value ARGV[1]; if any does not, change
-- nothing. Each keeps when it was taken (see hold.lua's moveHold).
-- Returns 1 if extended, 0 if not.
local vs = {}
for i = 1, #KEYS do
  vs[i] = redis.call('GET', KEYS[i])
  if not sameToken(vs[i], ARGV[1]) then return 0 end
end
--@hold
for i = 1, #KEYS do
  moveHold(KEYS[i], vs[i], vs[i], ARGV[2])
end
return 1
