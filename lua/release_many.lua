-- release_many.lua: delete every lock KEYS[1..n] that still holds the
-- value ARGV[1], and announce each release on its key's channel.
-- Returns how many were deleted.
local n = 0
for i = 1, #KEYS do
  if redis.call('GET', KEYS[i]) == ARGV[1] then
    redis.call('DEL', KEYS[i])
    if not pcall(redis.call, 'SPUBLISH', KEYS[i], 'released') then
      pcall(redis.call, 'PUBLISH', KEYS[i], 'released') -- refused (no channel permission): waiters find out on their timers
    end
    n = n + 1
  end
end
return n
