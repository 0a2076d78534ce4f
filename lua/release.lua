-- release.lua: release the lock KEYS[1] if it still holds the value ARGV[1].
-- With a queue (KEYS[2..5], see handoff.lua), first queue the waiters
-- given from ARGV[4] on (of the releasing client, who would otherwise
-- queue with a round trip of their own), then hand the lock to the first
-- waiter, or delete it; ARGV[2] is the grace of a reservation, ARGV[3]
-- the releasing client (a hand-off to its own waiter is not announced:
-- the reply says it). With no
-- queue key, delete it and announce "released" to all waiters.
-- Returns 0 if it was not ours (or gone), and changes nothing; 1 if it was
-- deleted; {token, fence} if it was handed to that waiter.
--
-- The common case, nobody waiting, comes before handoff.lua's functions
-- (inserted at the marker below), which would otherwise be built on every
-- call.
if redis.call('GET', KEYS[1]) ~= ARGV[1] then
  return 0
end
if not KEYS[2] then
  redis.call('DEL', KEYS[1])
  if not pcall(redis.call, 'SPUBLISH', KEYS[1], 'released') then
    pcall(redis.call, 'PUBLISH', KEYS[1], 'released') -- refused (no channel permission): waiters find out on their timers
  end
  return 1
end
if not ARGV[4] and redis.call('EXISTS', KEYS[2]) == 0 then
  redis.call('DEL', KEYS[1]) -- nobody waits
  return 1
end
--@handoff
local t = now()
register(4, t, ARGV[1])
return pass(t, ARGV[2], ARGV[3])
