-- wait.lua: an attempt by a waiting Acquire, fair across clients: waiters
-- queue in Redis and a release hands the lock to the first of them (see
-- handoff.lua, prepended). ARGV[1] the caller's value; ARGV[2] its ttl in
-- ms; ARGV[3] its token; ARGV[4] 1 if it is fenced, else 0; ARGV[5] its
-- client (see handoff.lua's handTo); from ARGV[6] on, the client's
-- waiters for the key to queue or renew (as in
-- handoff.lua's register, the caller among them).
--
-- Returns {1, fence} when the lock is the caller's (fence 0 unfenced), and
-- {1, fence, 1} when it found the lock already set for it (handed over);
-- {0, pttl, holder, fence, now} when someone holds it for pttl more ms (-1:
-- no expiry), where holder is the first 36 bytes of its value, and now 1
-- if this call handed it to that waiter (the lock was free), with its
-- fence (else 0: a waiter that finds the lock was handed to it earlier
-- confirms it, and learns its fence then); {2, ms} when it is free but
-- reserved for another waiter for ms more.
if not redis.setresp then return redis.error_reply('PADLOCK_UNSUPPORTED_SERVER') end

local function counter()
  return tonumber(redis.call('GET', KEYS[3]) or '0')
end

local function take(t)
  unqueue(ARGV[3])
  took(ARGV[3], t)
  local fence = 0
  if ARGV[4] == '1' then fence = redis.call('INCR', KEYS[3]) end
  redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
  return {1, fence}
end

local v = redis.call('GET', KEYS[1])
if v == ARGV[1] then
  -- Ours: handed to us, or our own attempt again after a lost reply.
  unqueue(ARGV[3])
  took(ARGV[3], now())
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  if ARGV[4] == '1' then return {1, counter(), 1} end
  return {1, 0, 1}
end
local t = now()
register(6, t, v)
if v then
  return {0, redis.call('PTTL', KEYS[1]), string.sub(v, 1, 36), 0, 0}
end
local kind, tok, fence, ttl = handTo(t, ARGV[5])
if kind == 'handed' then
  if tok == ARGV[3] then return {1, fence} end
  return {0, ttl, tok, fence, 1}
elseif kind == 'reserved' and tok ~= '>' .. ARGV[3] then
  return {2, fence} -- ms left of another waiter's reservation
end
return take(t)
