-- release.lua: delete the lock KEYS[1] if it still holds the value ARGV[1],
-- and announce the release to waiters on the channel named like the key
-- (sharded pub/sub where the server has it).
-- Returns 1 if it was deleted, 0 if it was not ours (or gone).
if redis.call('GET', KEYS[1]) == ARGV[1] then
  redis.call('DEL', KEYS[1])
  if not pcall(redis.call, 'SPUBLISH', KEYS[1], 'released') then
    redis.call('PUBLISH', KEYS[1], 'released')
  end
  return 1
end
return 0
