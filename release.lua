-- release.lua: delete the lock KEYS[1] if it still holds the value ARGV[1],
-- and announce the release on the channel named like the key (sharded
-- pub/sub where the server has it). KEYS[2] and KEYS[3], when present, are
-- the key's waiter queue and "next" (see wait.lua): the first waiter in the
-- queue is handed the lock for ARGV[2] ms, and the announcement names it.
-- Returns 1 if it was deleted, 0 if it was not ours (or gone).
if redis.call('GET', KEYS[1]) ~= ARGV[1] then
  return 0
end
redis.call('DEL', KEYS[1])
local msg = 'released'
if KEYS[2] then
  local first = redis.call('ZPOPMIN', KEYS[2])
  if first[1] then
    redis.call('SET', KEYS[3], first[1], 'PX', ARGV[2])
    msg = first[1]
  end
end
if not pcall(redis.call, 'SPUBLISH', KEYS[1], msg) then
  redis.call('PUBLISH', KEYS[1], msg)
end
return 1
