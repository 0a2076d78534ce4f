-- count.lua: an attempt to take a place among the holders of a counting
-- semaphore (WithLimit) or a shared hold of a reader-writer lock
-- (WithShared). Each holder is a member of a sorted set, its value (token,
-- and metadata) scored by its expiry in ms on the server's clock; expired
-- holders are dropped by every call that looks.
--
-- KEYS[1] the lock's key; KEYS[2] the holders: KEYS[1] itself for a
-- semaphore, a side key for shared holds (KEYS[1] then holds MARKER, with
-- the expiry of the last shared holder, while any is held, so that an
-- exclusive acquire finds it held); KEYS[3] the queue of waiters;
-- KEYS[4] when the semaphore's waiters were last seen; KEYS[5] the
-- holders' fences (token -> fence); KEYS[6], when present, the fencing
-- counter.
-- ARGV[1] the value; ARGV[2] the ttl in ms; ARGV[3] the limit (0 for a
-- shared hold); ARGV[4] the token; ARGV[5] '1' when the caller waits
-- (queues), '' for one try; ARGV[6] how long a waiter not seen counts as
-- gone, in ms; ARGV[7] how long the queue lives without attempts, in ms.
--
-- Semaphore waiters queue in KEYS[3] by arrival; a waiter is admitted
-- while fewer than the limit hold and fewer waiters are ahead of it than
-- places are free, and one try only when more places are free than
-- waiters wait. Shared holds wait while an exclusive holder holds, and
-- while an exclusive Acquire waits (writers first); shared waiters queue
-- in KEYS[3] too, after every exclusive waiter (score READERS + arrival),
-- so that an exclusive release wakes them.
--
-- Returns {1, fence} when admitted (fence 0 unfenced), or {0, ms}: wait
-- up to ms (the first holder's remaining ttl; -1 unknown) before trying
-- again.
if not redis.setresp then return redis.error_reply('PADLOCK_UNSUPPORTED_SERVER') end
local MARKER = 'padlock:shared'
local READERS = 4e15
local t = redis.call('TIME')
local now = t[1] * 1000 + math.floor(t[2] / 1000)
local shared = KEYS[1] ~= KEYS[2]
local token = ARGV[4]

-- Drop expired holders, and their fences.
local gone = redis.call('ZRANGEBYSCORE', KEYS[2], '-inf', now)
if #gone > 0 then
  redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', now)
  for _, v in ipairs(gone) do redis.call('HDEL', KEYS[5], string.sub(v, 1, 36)) end
end

-- settle makes the keys expire with the last holder.
local function settle()
  local last = redis.call('ZRANGE', KEYS[2], -1, -1, 'WITHSCORES')
  local ms = last[1] and (tonumber(last[2]) - now) or 0
  if ms <= 0 then
    if shared then redis.call('DEL', KEYS[1]) end
    redis.call('DEL', KEYS[2], KEYS[5])
    return
  end
  if shared then redis.call('SET', KEYS[1], MARKER, 'PX', ms) end
  redis.call('PEXPIRE', KEYS[2], ms)
  if redis.call('EXISTS', KEYS[5]) == 1 then redis.call('PEXPIRE', KEYS[5], ms) end
end

local function admit(fence)
  redis.call('ZADD', KEYS[2], now + tonumber(ARGV[2]), ARGV[1])
  redis.call('ZREM', KEYS[3], token)
  if not shared then redis.call('ZREM', KEYS[4], token) end
  settle()
  return {1, fence}
end

-- wait returns the hint for a caller that must wait: the first holder's
-- remaining ttl.
local function wait()
  local first = redis.call('ZRANGE', KEYS[2], 0, 0, 'WITHSCORES')
  if first[1] then return {0, tonumber(first[2]) - now} end
  return {0, -1}
end

if redis.call('ZSCORE', KEYS[2], ARGV[1]) then
  -- Our own attempt again, after a lost reply: it was admitted.
  return admit(tonumber(redis.call('HGET', KEYS[5], token) or '0'))
end

local queued = ARGV[5] == '1'
if shared then
  local v = redis.call('GET', KEYS[1])
  if v and v ~= MARKER then
    -- An exclusive holder.
    if queued then
      redis.call('ZADD', KEYS[3], 'NX', READERS + now, token)
      redis.call('PEXPIRE', KEYS[3], ARGV[7])
    end
    return {0, redis.call('PTTL', KEYS[1])}
  end
  -- Writers first: an exclusive waiter, or a hand-off to one in its grace.
  local first = redis.call('ZRANGE', KEYS[3], 0, 0, 'WITHSCORES')
  if first[1] and tonumber(first[2]) < 0 and -tonumber(first[2]) <= now then
    redis.call('ZREM', KEYS[3], first[1]) -- a lapsed hand-off
    first = redis.call('ZRANGE', KEYS[3], 0, 0, 'WITHSCORES')
  end
  if first[1] and tonumber(first[2]) < READERS then
    if queued then
      redis.call('ZADD', KEYS[3], 'NX', READERS + now, token)
      redis.call('PEXPIRE', KEYS[3], ARGV[7])
    end
    return wait()
  end
else
  -- Drop waiters not seen for a while: they are gone.
  local stale = redis.call('ZRANGEBYSCORE', KEYS[4], '-inf', now - tonumber(ARGV[6]))
  for _, w in ipairs(stale) do
    redis.call('ZREM', KEYS[3], w)
    redis.call('ZREM', KEYS[4], w)
  end
  local free = tonumber(ARGV[3]) - redis.call('ZCARD', KEYS[2])
  local ahead
  if queued then
    redis.call('ZADD', KEYS[3], 'NX', now, token)
    redis.call('ZADD', KEYS[4], now, token)
    redis.call('PEXPIRE', KEYS[3], ARGV[7])
    redis.call('PEXPIRE', KEYS[4], ARGV[7])
    ahead = redis.call('ZRANK', KEYS[3], token)
  else
    ahead = redis.call('ZCARD', KEYS[3])
  end
  if free <= ahead then
    return wait()
  end
end

local fence = 0
if KEYS[6] then
  fence = redis.call('INCR', KEYS[6])
  redis.call('HSET', KEYS[5], token, fence)
end
return admit(fence)
