-- pttl.lua: the remaining time to live of the lock KEYS[1], in
-- milliseconds, if it still holds the token of the value ARGV[1]; -3 if
-- it does not.
-- (-1 means ours with no expiry, which padlock never sets.)
local v = redis.call('GET', KEYS[1])
if sameToken(v, ARGV[1]) then
  return redis.call('PTTL', KEYS[1])
end
return -3
