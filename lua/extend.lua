-- extend.lua: set the lock KEYS[1] to expire ARGV[2] milliseconds from now
-- if it still holds the value ARGV[1]. It never creates the key.
-- Returns 1 if the expiry was set, 0 if the lock was not ours (or gone).
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('PEXPIRE', KEYS[1], ARGV[2])
end
return 0
