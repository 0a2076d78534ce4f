-- acquire.lua: take the lock KEYS[1] for the value ARGV[1] (token, and
-- metadata) for ARGV[2] milliseconds. KEYS[3], when present, is the key's
-- fencing counter (KEYS[2], its queue, is unused here). The token is the
-- value up to its first space; the same token is the same holder. A
-- fenced holder's fence is recorded beside it, in the hash of the key's
-- holders' fences (as a semaphore's places have theirs), for Resume; it
-- expires with the lock.
--
-- Returns, as one integer:
--   >= 0       the lock is ours; the number is the fence (0 without KEYS[3]);
--   -2 - PTTL  someone else holds it for PTTL more milliseconds
--              (so -1 means held with no expiry).
-- On a server older than Redis 6.0 it changes nothing and fails with
-- PADLOCK_UNSUPPORTED_SERVER. It uses only commands Redis 6.0 has.
if not redis.setresp then return redis.error_reply('PADLOCK_UNSUPPORTED_SERVER') end
if not KEYS[3] and redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then
  return 0 -- the common case, in one command
end
local v = redis.call('GET', KEYS[1])
if v == false then
  local fence = 0
  if KEYS[3] then
    -- Increment first: if the counter cannot be incremented (wrong type),
    -- the script fails before it has written anything.
    fence = redis.call('INCR', KEYS[3])
    recordFence(KEYS[3], tokenOf(ARGV[1]), fence, ARGV[2])
  end
  redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
  return fence
end
if sameToken(v, ARGV[1]) then
  -- Our own token: a retry after a lost reply, or a token chosen with
  -- WithToken that holds the key. Succeed again, with this call's value and
  -- ttl, and the fence it holds with: the recorded one, or, held unfenced
  -- till now, a new one above every earlier holder's.
  redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
  if KEYS[3] then return heldFence(KEYS[3], tokenOf(ARGV[1]), ARGV[2]) end
  return 0
end
return -2 - redis.call('PTTL', KEYS[1])
