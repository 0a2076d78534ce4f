-- hold.lua: the records kept beside a hold, which only some calls need:
-- its fence, and its minimum. scripts.go inserts it at a script's line
-- "--@hold", where the script first needs it (a local function costs
-- every call that reaches its definition, so a script's common case comes
-- before it).

-- A fenced lock's holder's fence is recorded in the hash of the key's
-- holders' fences, beside the counter F (P .. 'fence': the hash is P ..
-- 'fences'), for as long as the lock lives (ms).
local function recordFence(F, token, fence, ms)
  local H = F .. 's'
  redis.call('HSET', H, token, fence)
  redis.call('PEXPIRE', H, ms)
end

-- heldFence is the fence of token, which holds the lock whose counter is
-- F, now renewed for ms: the recorded one, or, if it took none so far, a
-- new one (above every earlier holder's), recorded.
local function heldFence(F, token, ms)
  local f = redis.call('HGET', F .. 's', token)
  if not f then
    f = redis.call('INCR', F)
  end
  recordFence(F, token, f, ms)
  return tonumber(f)
end

-- now is the server's time, in ms.
local function now()
  local t = redis.call('TIME')
  return t[1] * 1000 + math.floor(t[2] / 1000)
end

-- A hold taken WithMinHold is not freed before a moment recorded in the
-- hash M of the key's minimums (P .. 'mins'), under its token, in the
-- server's ms. A release before then leaves the hold in place until that
-- moment, and no renewal sets it to expire earlier.

-- recordMin records that token's hold, taken at t, is kept for min ms
-- (or until a later moment it already holds with).
local function recordMin(M, token, t, min)
  local u = tonumber(redis.call('HGET', M, token) or '0')
  redis.call('HSET', M, token, string.format('%d', math.max(u, t + min)))
  if redis.call('PTTL', M) < min then redis.call('PEXPIRE', M, string.format('%d', min)) end
end

-- keptFor is how many ms more token's hold must be kept for its minimum
-- (0: none, or it has passed).
local function keptFor(M, token)
  local u = redis.call('HGET', M, token)
  if not u then return 0 end
  return math.max(tonumber(u) - now(), 0)
end

-- A lock's value carries its span after its token (' ~' and ms, before
-- the metadata): how long after the hold was taken its key was last set
-- to expire, so the hold was taken span - PTTL ms ago (see Inspect). A
-- new hold's value comes with its ttl for span; what gives a hold a ttl of
-- another length sets the span so (spanned), and what moves a hold's
-- expiry adds the move to its span (moveHold).

-- spanOf is the span of the value v, or nil if it has none.
local function spanOf(v)
  return tonumber(string.match(v, '^%S+ ~(%d+) ') or string.match(v, '^%S+ ~(%d+)$'))
end

-- spanned is the value v with the span ms.
local function spanned(v, ms)
  local tok = tokenOf(v)
  if not tok then return v end
  local rest = string.sub(v, #tok + 1)
  if spanOf(v) then rest = string.match(rest, '^ ~%d+(.*)$') end
  return tok .. ' ~' .. string.format('%d', ms) .. rest
end

-- moveHold sets the hold K, whose value is v, to expire ms from now, with
-- the value nv (v, or the same holder's new one), as taken when it was (a
-- value with no span, another version's, is taken now).
-- A Redis out of memory refuses the SET (OOM) but not a PEXPIRE: the
-- expiry moves then, and the value (its span) stays.
local function moveHold(K, v, nv, ms)
  ms = tonumber(ms)
  local s, pt = spanOf(v), redis.call('PTTL', K)
  if s and pt >= 0 then s = s + ms - pt else s = ms end
  ms = string.format('%d', ms)
  if not pcall(redis.call, 'SET', K, spanned(nv, s), 'PX', ms) then
    redis.call('PEXPIRE', K, ms)
  end
end
