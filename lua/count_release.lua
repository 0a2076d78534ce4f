-- count_release.lua: a holder of a semaphore or a shared hold leaves (see
-- grant.lua): KEYS[1] the key, KEYS[2] its queue; ARGV[1] the holder's
-- value, ARGV[2] 's' (shared) or 'n' (semaphore), ARGV[3] the releasing
-- client, ARGV[4] how long a ticket lives (ms), then waiters to queue
-- first, as in release.lua. It serves the queue.
-- Returns {1, grants...} if the value was a holder, {0} if not (expired,
-- or released).
--@grant
local K, Q, kind = KEYS[1], KEYS[2], ARGV[2]
local P = prefix(Q)
local t = now()
expire(K, P, kind, t)
local H = holders(K, P, kind)
if redis.call('ZREM', H, ARGV[1]) == 0 then return {0} end
redis.call('HDEL', P .. 'fences', string.match(ARGV[1], '^%S+'))
for i = 5, #ARGV, 2 do
  local ticket = P .. 't:' .. ARGV[i]
  if redis.call('SET', ticket, ARGV[i + 1], 'PX', ARGV[4], 'NX') then
    redis.call('ZADD', Q, 'NX', arrival(t), ticket) -- in the order given
  end
end
if ARGV[5] then redis.call('PEXPIRE', Q, QUEUE_LIFE) end
settle(K, P, kind, t)
return serve(K, Q, t, ARGV[3], {1})
