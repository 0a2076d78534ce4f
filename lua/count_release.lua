-- count_release.lua: a holder of a semaphore or a shared hold leaves (see
-- grant.lua): KEYS[1] the key, KEYS[2] its queue; ARGV[1] the holder's
-- value, ARGV[2] 's' (shared) or 'n' (semaphore), ARGV[3] the releasing
-- client, ARGV[4] how long a ticket lives (ms), ARGV[5] flags as in
-- release.lua ('m' may be held for a minimum, 'u' undo), then waiters to
-- queue first, as in release.lua. It serves the queue. A holder kept for
-- its minimum (see hold.lua) stays until the minimum ends instead.
-- Returns {1, grants, hints} (as release.lua's) if the value was a
-- holder, {0} if not (expired, or released).
--@grant
local K, Q, kind = KEYS[1], KEYS[2], ARGV[2]
local P = prefix(Q)
if moving(P) then return redis.error_reply(tryAgain) end
local t = now()
expire(K, P, kind, t)
local H = holders(K, P, kind)
local score = redis.call('ZSCORE', H, ARGV[1])
if not score then return {0} end
local keep = 0
if ARGV[5] == 'm' then keep = keptFor(P .. 'mins', tokenOf(ARGV[1])) end
if keep > 0 then
  redis.call('ZADD', H, t + keep, ARGV[1])
else
  redis.call('ZREM', H, ARGV[1])
  redis.call('HDEL', P .. 'fences', tokenOf(ARGV[1]), tokenOf(ARGV[1]) .. ' since')
end
local queued = carry(Q, t, 6, ARGV[4])
settle(K, P, kind, t)
local mine = serve(K, Q, t, ARGV[3], news())
tellCarried(K, t, queued, mine)
return {1, mine[1], mine[2]}
