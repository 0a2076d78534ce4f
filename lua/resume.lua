-- resume.lua: what the token ARGV[1] holds of the key KEYS[1] now, for
-- Client.Resume. KEYS[2] its queue (for the prefix of its side keys),
-- absent for a key that can have no side keys.
--
-- Returns {kind, value, ms, fence, limit, min}: kind 'x' a lock, 's' a
-- shared hold, 'n' a place of a semaphore of limit places; value what the
-- key (or the holders) hold for the token; ms the time it has left; fence
-- the holder's fence, false if it took none; min how many ms more it is
-- kept for its minimum (see hold.lua's keptFor), 0 for none. {} when the
-- token holds nothing of the key. It uses grant.lua's functions to read
-- the holders.
--@grant
local K, tok = KEYS[1], ARGV[1]
local kind = redis.call('TYPE', K)['ok']
if kind == 'string' then
  local v = redis.call('GET', K)
  if v ~= MARKER then
    if tokenOf(v) ~= tok then return {} end
    local fence, min = false, 0
    if KEYS[2] then
      local P = prefix(KEYS[2])
      fence, min = redis.call('HGET', P .. 'fences', tok), keptFor(P .. 'mins', tok)
    end
    return {'x', v, redis.call('PTTL', K), fence, 0, min}
  end
elseif kind ~= 'zset' then
  return {}
end
if not KEYS[2] then return {} end
local P, t = prefix(KEYS[2]), now()
local k = 'n'
if kind == 'string' then k = 's' end
local H = holders(K, P, k)
local v = member(H, tok, t)
if not v then return {} end
local limit = 0
if k == 'n' then limit = tonumber(redis.call('GET', P .. 'limit') or '0') end
return {k, v, tonumber(redis.call('ZSCORE', H, v)) - t, redis.call('HGET', P .. 'fences', tok), limit, keptFor(P .. 'mins', tok)}
