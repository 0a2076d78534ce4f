-- extend.lua: set the lock KEYS[1] to expire ARGV[2] milliseconds from now
-- if it still holds the token of the value ARGV[1] (the value up to its
-- first space: the metadata may have changed). It never creates the key.
-- KEYS[2], for a fenced lock, is the hash of its holders' fences (see
-- hold.lua's recordFence), which lives as long as the lock. With ARGV[3]
-- 'min', the last key is the hash of the key's minimums (see hold.lua):
-- a hold kept for its minimum is not set to expire before it ends.
-- Returns 1 if the expiry was set, 0 if the lock is someone else's, -1 if
-- the key is gone (a Redlock node restarted empty, say). The hold keeps
-- when it was taken (see hold.lua's moveHold).
local v = redis.call('GET', KEYS[1])
if sameToken(v, ARGV[1]) then
--@hold
  local ms, F = ARGV[2], KEYS[2]
  if ARGV[3] == 'min' then
    if #KEYS == 2 then F = nil end
    ms = string.format('%d', math.max(tonumber(ms), keptFor(KEYS[#KEYS], tokenOf(v))))
  end
  if F then redis.call('PEXPIRE', F, ms) end
  moveHold(KEYS[1], v, v, ms)
  return 1
end
if not v then return -1 end
return 0
