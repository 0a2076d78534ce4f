-- count_pttl.lua: the remaining ttl in ms of the holder ARGV[1] of a
-- semaphore or shared hold (see count.lua for the keys), or -3 if it does
-- not hold.
local t = redis.call('TIME')
local now = t[1] * 1000 + math.floor(t[2] / 1000)
local score = redis.call('ZSCORE', KEYS[2], ARGV[1])
if not score or tonumber(score) <= now then
  return -3
end
return tonumber(score) - now
