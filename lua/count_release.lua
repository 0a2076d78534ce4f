-- count_release.lua: a holder of a semaphore or a shared hold leaves (see
-- grant.lua): KEYS[1] the key, KEYS[2] its queue; ARGV[1] the holder's
-- value, ARGV[2] 's' (shared) or 'n' (semaphore), ARGV[3] the releasing
-- client, ARGV[4] how long a ticket lives (ms), then waiters to queue
-- first, as in release.lua. It serves the queue.
-- Returns {1, grants...} (with hints, as release.lua's) if the value was a holder, {0} if not (expired,
-- or released).
--@grant
local K, Q, kind = KEYS[1], KEYS[2], ARGV[2]
local P = prefix(Q)
local t = now()
expire(K, P, kind, t)
local H = holders(K, P, kind)
if redis.call('ZREM', H, ARGV[1]) == 0 then return {0} end
redis.call('HDEL', P .. 'fences', tokenOf(ARGV[1]))
local queued = carry(Q, t, 5, ARGV[4])
settle(K, P, kind, t)
return tellCarried(K, t, queued, serve(K, Q, t, ARGV[3], {1}))
