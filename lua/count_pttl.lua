-- count_pttl.lua: the remaining ttl in ms of the holder ARGV[1] of a
-- semaphore or shared hold (KEYS[1] the key, KEYS[2] its queue; ARGV[2]
-- 's' or 'n'), or -3 if it does not hold.
local t = redis.call('TIME')
local now = t[1] * 1000 + math.floor(t[2] / 1000)
local H = KEYS[1]
if ARGV[2] == 's' then H = string.sub(KEYS[2], 1, -6) .. 'shared' end
local score = redis.call('ZSCORE', H, ARGV[1])
if not score or tonumber(score) <= now then
  return -3
end
return tonumber(score) - now
