-- count_extend.lua: set the holder ARGV[1] of a semaphore or shared hold
-- (KEYS[1] the key, KEYS[2] its queue; ARGV[3] 's' or 'n') to expire
-- ARGV[2] ms from now, or when its minimum ends if that is later (see
-- hold.lua), if it still holds. It never brings back an expired holder.
-- Returns 1 if extended, 0 if not.
--@grant
local K, kind = KEYS[1], ARGV[3]
local P = prefix(KEYS[2])
if moving(P) then return redis.error_reply(tryAgain) end
local t = now()
local H = holders(K, P, kind)
local score = redis.call('ZSCORE', H, ARGV[1])
if not score or tonumber(score) <= t then
  return 0
end
local ms = math.max(tonumber(ARGV[2]), keptFor(P .. 'mins', tokenOf(ARGV[1])))
redis.call('ZADD', H, t + ms, ARGV[1])
settle(K, P, kind, t)
return 1
