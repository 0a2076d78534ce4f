-- leave.lua: a waiter that gives up leaves the queue KEYS[2] of the lock
-- KEYS[1]; if a release had handed it the lock (KEYS[3] holds its token
-- ARGV[1]), it hands the lock on to the next waiter, like a release.
redis.call('ZREM', KEYS[2], ARGV[1])
if redis.call('GET', KEYS[3]) ~= ARGV[1] then
  return 0
end
redis.call('DEL', KEYS[3])
local msg = 'released'
local first = redis.call('ZPOPMIN', KEYS[2])
if first[1] then
  redis.call('SET', KEYS[3], first[1], 'PX', ARGV[2])
  msg = first[1]
end
if not pcall(redis.call, 'SPUBLISH', KEYS[1], msg) then
  redis.call('PUBLISH', KEYS[1], msg)
end
return 1
