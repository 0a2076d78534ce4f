-- release.lua: delete the lock KEYS[1] if it still holds the value ARGV[1].
-- KEYS[2], when present, is the key's queue of waiters (see wait.lua): the
-- first of them is handed the lock for ARGV[2] ms and told so on the
-- channel named like the key (sharded pub/sub where the server has it).
-- With no queue key, the release is announced to all waiters.
-- Returns 1 if it was deleted, 0 if it was not ours (or gone).
if redis.call('GET', KEYS[1]) ~= ARGV[1] then
  return 0
end
redis.call('DEL', KEYS[1])
local msg = 'released'
if KEYS[2] then
  -- A lapsed hand-off sorts first (negative score): drop it.
  local first = redis.call('ZPOPMIN', KEYS[2])
  while first[1] and tonumber(first[2]) < 0 do
    first = redis.call('ZPOPMIN', KEYS[2])
  end
  if not first[1] then
    return 1 -- nobody waits: nobody to tell
  end
  if tonumber(first[2]) >= 4e15 then
    -- Only shared holds wait (see count.lua): they stay queued; wake them.
    redis.call('ZADD', KEYS[2], first[2], first[1])
  else
    local t = redis.call('TIME')
    local deadline = t[1] * 1000 + math.floor(t[2] / 1000) + tonumber(ARGV[2])
    redis.call('ZADD', KEYS[2], -deadline, '>' .. first[1])
    msg = first[1]
  end
end
if not pcall(redis.call, 'SPUBLISH', KEYS[1], msg) then
  redis.call('PUBLISH', KEYS[1], msg)
end
return 1
