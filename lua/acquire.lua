-- acquire.lua: take the lock KEYS[1] for the value ARGV[1] (token, and
-- metadata) for ARGV[2] milliseconds. KEYS[3], when present, is the key's
-- fencing counter. With ARGV[3], KEYS[2] is the hash of the key's
-- minimums (see hold.lua) and ARGV[3] this hold's minimum (WithMinHold,
-- ms; 0 for none): the key expires at the later of the ttl and the
-- minimum, or of a minimum the token still holds with; without it, KEYS[2]
-- (the key's queue) is unused. The token is the value up to its first
-- space; the same token is the same holder. A fenced holder's fence is
-- recorded beside it, in the hash of the key's holders' fences (as a
-- semaphore's places have theirs), for Resume; it expires with the lock.
--
-- Returns, as one integer:
--   >= 0       the lock is ours; the number is the fence (0 without KEYS[3]);
--   -2 - PTTL  someone else holds it for PTTL more milliseconds
--              (so -1 means held with no expiry).
-- On a server older than Redis 6.0 it changes nothing and fails with
-- PADLOCK_UNSUPPORTED_SERVER. It uses only commands Redis 6.0 has.
if not redis.setresp then return redis.error_reply('PADLOCK_UNSUPPORTED_SERVER') end
if not KEYS[3] and (ARGV[3] or '0') == '0' and redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then
  return 0 -- the common case, in one command
end
--@hold
local v = redis.call('GET', KEYS[1])
if v and not sameToken(v, ARGV[1]) then return -2 - redis.call('PTTL', KEYS[1]) end
-- Free, or held by our own token: a retry after a lost reply, or a token
-- chosen with WithToken that holds the key. Take it, with this call's
-- value and ttl, kept at least for a minimum this call asks for or one
-- the token still holds with.
local tok, F = tokenOf(ARGV[1]), KEYS[3]
local M = ARGV[3] and KEYS[2]
-- Increment first: if the counter cannot be incremented (wrong type), the
-- script fails before it has written anything.
local fence = 0
if F and not v then fence = redis.call('INCR', F) end
local ms = tonumber(ARGV[2])
if M then
  if ARGV[3] ~= '0' then recordMin(M, tok, now(), tonumber(ARGV[3])) end
  ms = math.max(ms, keptFor(M, tok))
end
ms = string.format('%d', ms)
-- The fence's record is written before the key: a script that fails on
-- the way (an ACL refusal) must not leave the key taken.
if F then
  if v then
    -- Held by our token till now: the fence it holds with, the recorded
    -- one, or, held unfenced till now, a new one above every earlier
    -- holder's.
    fence = heldFence(F, tok, ms)
  else
    recordFence(F, tok, fence, ms)
  end
end
if v then
  moveHold(KEYS[1], v, ARGV[1], ms) -- the same holder: taken when it was
elseif ms ~= ARGV[2] then
  redis.call('SET', KEYS[1], spanned(ARGV[1], ms), 'PX', ms)
else
  redis.call('SET', KEYS[1], ARGV[1], 'PX', ms)
end
return fence
