-- count_extend.lua: set the holder ARGV[1] of a semaphore or shared hold
-- (see count.lua for the keys) to expire ARGV[2] ms from now, if it still
-- holds. It never brings back an expired holder.
-- Returns 1 if extended, 0 if not.
local MARKER = 'padlock:shared'
local t = redis.call('TIME')
local now = t[1] * 1000 + math.floor(t[2] / 1000)
local score = redis.call('ZSCORE', KEYS[2], ARGV[1])
if not score or tonumber(score) <= now then
  return 0
end
redis.call('ZADD', KEYS[2], now + tonumber(ARGV[2]), ARGV[1])
local last = redis.call('ZRANGE', KEYS[2], -1, -1, 'WITHSCORES')
local ms = tonumber(last[2]) - now
if KEYS[1] ~= KEYS[2] then redis.call('SET', KEYS[1], MARKER, 'PX', ms) end
redis.call('PEXPIRE', KEYS[2], ms)
if redis.call('EXISTS', KEYS[5]) == 1 then redis.call('PEXPIRE', KEYS[5], ms) end
return 1
