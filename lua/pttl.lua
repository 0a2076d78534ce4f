-- pttl.lua: the remaining time to live of the lock KEYS[1], in
-- milliseconds, if it still holds the value ARGV[1]; -3 if it does not.
-- (-1 means ours with no expiry, which padlock never sets.)
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('PTTL', KEYS[1])
end
return -3
