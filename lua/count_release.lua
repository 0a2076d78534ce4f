-- count_release.lua: a holder of a semaphore or a shared hold leaves (see
-- count.lua for the keys). ARGV[1] the value; ARGV[2] the hand-off grace
-- in ms; ARGV[3] the semaphore's limit (0 for a shared hold).
-- A semaphore's release names the waiter its place now goes to: the one
-- at the rank of the last free place (those ahead were named by earlier
-- releases). The last shared holder out hands the lock to the first
-- exclusive waiter for the grace, naming it, as release.lua does; with no
-- exclusive waiter it wakes everyone.
-- Returns 1 if the value was a holder, 0 if not (expired, or released).
local MARKER = 'padlock:shared'
local READERS = 4e15
local t = redis.call('TIME')
local now = t[1] * 1000 + math.floor(t[2] / 1000)
local shared = KEYS[1] ~= KEYS[2]
local gone = redis.call('ZRANGEBYSCORE', KEYS[2], '-inf', now)
if #gone > 0 then
  redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', now)
  for _, v in ipairs(gone) do redis.call('HDEL', KEYS[5], string.sub(v, 1, 36)) end
end
if redis.call('ZREM', KEYS[2], ARGV[1]) == 0 then
  return 0
end
redis.call('HDEL', KEYS[5], string.sub(ARGV[1], 1, 36))
local left = redis.call('ZCARD', KEYS[2])
if shared and left == 0 and redis.call('GET', KEYS[1]) == MARKER then
  redis.call('DEL', KEYS[1])
end

local function publish(msg)
  if not pcall(redis.call, 'SPUBLISH', KEYS[1], msg) then
    pcall(redis.call, 'PUBLISH', KEYS[1], msg) -- refused (no channel permission): waiters find out on their timers
  end
end

if not shared then
  local free = tonumber(ARGV[3]) - left
  if free > 0 then
    local next = redis.call('ZRANGE', KEYS[3], free - 1, free - 1)
    if next[1] then publish(next[1]) end
  end
  return 1
end
if left > 0 then return 1 end
local first = redis.call('ZPOPMIN', KEYS[3])
while first[1] and tonumber(first[2]) < 0 do
  first = redis.call('ZPOPMIN', KEYS[3])
end
if not first[1] then return 1 end
if tonumber(first[2]) >= READERS then
  -- Only shared holds wait: wake them all.
  redis.call('ZADD', KEYS[3], first[2], first[1])
  publish('released')
  return 1
end
redis.call('ZADD', KEYS[3], -(now + tonumber(ARGV[2])), '>' .. first[1])
publish(first[1])
return 1
