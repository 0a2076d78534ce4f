-- release_many.lua: delete every lock KEYS[1..n] that still holds the
-- token of the value ARGV[1] (up to its first space), and announce each release on its key's channel, for the
-- waiters on the attempt path: sharded where the server has it, and plain
-- as well (clients on a Cluster listen with plain pub/sub). A refused
-- channel (ACL) only leaves the waiters to their timers.
-- Returns how many were deleted.
local n = 0
for i = 1, #KEYS do
  local v = redis.call('GET', KEYS[i])
  if sameToken(v, ARGV[1]) then
    redis.call('DEL', KEYS[i])
    pcall(redis.call, 'SPUBLISH', KEYS[i], 'released')
    pcall(redis.call, 'PUBLISH', KEYS[i], 'released')
    n = n + 1
  end
end
return n
