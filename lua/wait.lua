-- wait.lua: an attempt by a waiting Acquire, fair across clients. Waiting
-- clients queue in Redis in order of arrival, and a release hands the lock
-- to the first of them for a short grace, during which other waiters do
-- not take it (see release.lua).
--
-- KEYS[1] the lock; KEYS[2] its queue: a sorted set of waiters' tokens
-- scored by arrival (ms), and at most one hand-off, the member ">" ..
-- token scored by minus its deadline (ms), so that it sorts first;
-- KEYS[3], when present, the fencing counter.
-- ARGV[1] the value; ARGV[2] the ttl in ms; ARGV[3] the token; ARGV[4] the
-- token of the caller's successor in its own client's queue, or ''; ARGV[5]
-- how long the queue lives without attempts, in ms.
--
-- Returns {1, fence} when the lock is ours (fence 0 unfenced); {0, pttl}
-- when someone holds it for pttl more ms (-1: no expiry); {2, ms} when it
-- is free but handed to another waiter for ms more.
if not redis.setresp then return redis.error_reply('PADLOCK_UNSUPPORTED_SERVER') end
local function now()
  local t = redis.call('TIME')
  return t[1] * 1000 + math.floor(t[2] / 1000)
end

local function enqueue(token)
  redis.call('ZADD', KEYS[2], 'NX', now(), token)
  redis.call('PEXPIRE', KEYS[2], ARGV[5])
end

local function won(fence)
  redis.call('ZREM', KEYS[2], ARGV[3], '>' .. ARGV[3])
  -- Queue our successor now, so that the next release hands it the lock.
  if ARGV[4] ~= '' then enqueue(ARGV[4]) end
  return {1, fence}
end

local v = redis.call('GET', KEYS[1])
if v == ARGV[1] then
  -- Our own attempt again, after a lost reply.
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  if KEYS[3] then return won(tonumber(redis.call('GET', KEYS[3]) or '0')) end
  return won(0)
end
if v == false then
  local first = redis.call('ZRANGE', KEYS[2], 0, 0, 'WITHSCORES')
  if first[1] and tonumber(first[2]) < 0 and first[1] ~= '>' .. ARGV[3] then
    local left = -tonumber(first[2]) - now()
    if left > 0 then
      enqueue(ARGV[3])
      return {2, left}
    end
    redis.call('ZREM', KEYS[2], first[1]) -- the hand-off lapsed
  end
  local fence = 0
  if KEYS[3] then fence = redis.call('INCR', KEYS[3]) end
  redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
  return won(fence)
end
enqueue(ARGV[3])
return {0, redis.call('PTTL', KEYS[1])}
