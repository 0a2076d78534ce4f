-- release_many.lua: delete every lock KEYS[1..n] that still holds the
-- token of the value ARGV[1] (up to its first space), and announce each
-- release on its key's channel, for the waiters on the attempt path:
-- sharded where the server has it, and plain as well (clients on a Cluster
-- listen with plain pub/sub). A refused channel (ACL) only leaves the
-- waiters to their timers. With ARGV[2] 'min', KEYS[2] is not a lock but
-- the hash of the minimums of the one lock KEYS[1] (see hold.lua): held
-- for its minimum, the lock is set to expire when it ends instead.
-- Returns how many were ours (deleted, or kept for their minimum).
local n, last = 0, #KEYS
if ARGV[2] == 'min' then last = 1 end
for i = 1, last do
  local v = redis.call('GET', KEYS[i])
  if sameToken(v, ARGV[1]) then
    local keep = 0
    if last < #KEYS then
--@hold
      keep = keptFor(KEYS[2], tokenOf(v))
      if keep > 0 then moveHold(KEYS[i], v, v, keep) end
    end
    if keep == 0 then redis.call('DEL', KEYS[i]) end
    pcall(redis.call, 'SPUBLISH', KEYS[i], 'released')
    pcall(redis.call, 'PUBLISH', KEYS[i], 'released')
    n = n + 1
  end
end
return n
