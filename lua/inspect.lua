-- inspect.lua: what Redis holds for the lock KEYS[1] now, read atomically.
-- KEYS[2] the fencing counter, KEYS[3] the shared holders, KEYS[4] the
-- queue of waiters and KEYS[5] the holders' fences (see hold.lua); all
-- but KEYS[1] are absent for a key that can have no side keys.
--
-- Returns {value (false if none or not a string), PTTL, fence counter
-- (false if none), holders (value, expiry ms, fence, for each holder of a
-- semaphore or shared hold), the server's time (ms), waiters, type}.
local t = redis.call('TIME')
local now = t[1] * 1000 + math.floor(t[2] / 1000)
local kind = redis.call('TYPE', KEYS[1])['ok']
local value, holders = false, {}
local function list(k)
  local hs = redis.call('ZRANGEBYSCORE', k, '(' .. now, '+inf', 'WITHSCORES')
  for i = 1, #hs, 2 do
    local fence = false
    if KEYS[5] then fence = redis.call('HGET', KEYS[5], tokenOf(hs[i])) end
    holders[#holders + 1] = hs[i]
    holders[#holders + 1] = hs[i + 1]
    holders[#holders + 1] = fence
  end
end
if kind == 'zset' then
  list(KEYS[1])
elseif kind == 'string' then
  value = redis.call('GET', KEYS[1])
  if value == 'padlock:shared' and KEYS[3] then list(KEYS[3]) end
end
local fence = false
if KEYS[2] then fence = redis.call('GET', KEYS[2]) end
local waiting = 0
if KEYS[4] then waiting = redis.call('ZCOUNT', KEYS[4], 0, '+inf') end
return {value, redis.call('PTTL', KEYS[1]), fence, holders, now, waiting, kind}
