-- token.lua: what every script shares (scripts.go puts it in front of
-- each). A value is a token, a space and metadata; the same token is the
-- same holder, whatever metadata it stores.

local function tokenOf(v) return string.match(v, '^%S+') end

-- sameToken reports whether v, a key's value (false: none), holds the
-- token of value.
local function sameToken(v, value)
  return v == value or (v and tokenOf(v) == tokenOf(value))
end

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

