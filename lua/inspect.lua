-- inspect.lua: what Redis holds for the lock KEYS[1] now, read atomically.
-- KEYS[2] the fencing counter, KEYS[3] the shared holders, KEYS[4] the
-- queue of waiters, KEYS[5] the holders' fences (see hold.lua), KEYS[6] a
-- semaphore's limit and KEYS[7] the holds' minimums; all but KEYS[1] are
-- absent for a key that can have no side keys. With ARGV[1] 'page' (see
-- Client.Locks: one script for a SCAN page, on the node that SCAN ran
-- on), no KEYS are given: ARGV[2], ARGV[3]... are pairs of a key and the
-- prefix of its side keys ('' for none; the script names them, see
-- sideKey), and the reply is, for each key, false if it holds no lock
-- padlock wrote (a string with no span, see hold.lua, and not the shared
-- marker; a sorted set with no limit; any other type: at the cost of a
-- TYPE and a GET), else what it returns for KEYS[1] alone, or the text of
-- the error its reading raised (a key the ACL refuses, or one that moved
-- off this Cluster node).
--
-- Returns {value (false if none or not a string), PTTL, fence counter
-- (false if none), holders (value, expiry ms, fence, minimum's end ms
-- and when it came in, ms, for each holder of a semaphore or shared
-- hold), the server's time (ms),
-- waiters, type, limit (false if none), the oldest waiter's arrival (ms,
-- false if none), the lock's holder's minimum's end (ms, false if none)}.

-- sides is the keys of the lock key whose side keys begin with P: key
-- alone if P is ''.
local function sides(key, P)
  if P == '' then return {key} end
  return {key, P .. 'fence', P .. 'shared', P .. 'queue', P .. 'fences', P .. 'limit', P .. 'mins'}
end

-- inspect is the reply for the lock K[1] with side keys K; with listing,
-- false for a key that holds no lock padlock wrote.
local function inspect(K, listing)
  local kind = redis.call('TYPE', K[1])['ok']
  local value, holders = false, {}
  if listing then
    if kind == 'string' then
      value = redis.call('GET', K[1])
      if value ~= 'padlock:shared' and not string.find(value, '^%S+ ~%d') then return false end
    elseif kind ~= 'zset' or not K[6] or redis.call('EXISTS', K[6]) == 0 then
      return false
    end
  end
  local t = redis.call('TIME')
  local now = t[1] * 1000 + math.floor(t[2] / 1000)
  local function minOf(v)
    local tok = tokenOf(v)
    if not K[7] or not tok then return false end
    return redis.call('HGET', K[7], tok)
  end
  local function list(k)
    local hs = redis.call('ZRANGEBYSCORE', k, '(' .. now, '+inf', 'WITHSCORES')
    for i = 1, #hs, 2 do
      local fence, since = false, false
      if K[5] then
        fence = redis.call('HGET', K[5], tokenOf(hs[i]))
        since = redis.call('HGET', K[5], tokenOf(hs[i]) .. ' since')
      end
      holders[#holders + 1] = hs[i]
      holders[#holders + 1] = hs[i + 1]
      holders[#holders + 1] = fence
      holders[#holders + 1] = minOf(hs[i])
      holders[#holders + 1] = since
    end
  end
  local min = false
  if kind == 'zset' then
    list(K[1])
  elseif kind == 'string' then
    value = value or redis.call('GET', K[1])
    if value == 'padlock:shared' and K[3] then
      list(K[3])
    else
      min = minOf(value)
    end
  end
  local fence, limit, waiting, oldest = false, false, 0, false
  if K[2] then fence = redis.call('GET', K[2]) end
  if K[6] then limit = redis.call('GET', K[6]) end
  if K[4] then
    waiting = redis.call('ZCOUNT', K[4], 0, '+inf')
    if waiting > 0 then
      oldest = redis.call('ZRANGEBYSCORE', K[4], 0, '+inf', 'WITHSCORES', 'LIMIT', 0, 1)[2]
    end
  end
  return {value, redis.call('PTTL', K[1]), fence, holders, now, waiting, kind, limit, oldest, min}
end

if ARGV[1] == 'page' then
  local out = {}
  for i = 2, #ARGV, 2 do
    local ok, r = pcall(inspect, sides(ARGV[i], ARGV[i + 1]), true)
    if not ok then
      if type(r) == 'table' then r = r.err end -- Redis 7's error is a table
      r = tostring(r)
    end
    out[#out + 1] = r
  end
  return out
end
return inspect(KEYS, false)
