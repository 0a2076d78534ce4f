-- release.lua: delete the lock KEYS[1] if it still holds the value ARGV[1].
-- Returns 1 if it was deleted, 0 if it was not ours (or gone).
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('DEL', KEYS[1])
end
return 0
