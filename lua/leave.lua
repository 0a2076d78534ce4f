-- leave.lua: a waiter with token ARGV[1] gives up: it leaves the queue
-- KEYS[2] of the lock KEYS[1] (see wait.lua), and if a release had handed
-- it the lock, hands it on to the next waiter, as a release would, for
-- ARGV[2] ms. Returns 1 if it handed the lock on.
local handed = redis.call('ZREM', KEYS[2], '>' .. ARGV[1])
redis.call('ZREM', KEYS[2], ARGV[1])
if handed == 0 or redis.call('EXISTS', KEYS[1]) == 1 then
  return 0
end
local first = redis.call('ZPOPMIN', KEYS[2])
if not first[1] then
  return 1
end
local msg = first[1]
if tonumber(first[2]) >= 4e15 then
  -- Only shared holds wait (see count.lua): they stay queued; wake them.
  redis.call('ZADD', KEYS[2], first[2], first[1])
  msg = 'released'
else
  local t = redis.call('TIME')
  local deadline = t[1] * 1000 + math.floor(t[2] / 1000) + tonumber(ARGV[2])
  redis.call('ZADD', KEYS[2], -deadline, '>' .. first[1])
end
if not pcall(redis.call, 'SPUBLISH', KEYS[1], msg) then
  redis.call('PUBLISH', KEYS[1], msg)
end
return 1
