-- wait.lua: an attempt by a waiting Acquire, fair across clients. Waiting
-- clients queue in Redis by arrival, and a release hands the lock to the
-- first of them for a short grace: others do not take it meanwhile.
--
-- KEYS[1] the lock; KEYS[2] the queue (a sorted set of waiters' tokens,
-- scored by arrival in ms); KEYS[3] "next": the token of the waiter a
-- release handed the lock to, for the grace; KEYS[4], when present, the
-- fencing counter.
-- ARGV[1] the value; ARGV[2] the ttl in ms; ARGV[3] the token; ARGV[4] the
-- arrival score to keep, or '' on a first attempt; ARGV[5] the token of
-- the caller's successor in its own client's queue, or ''; ARGV[6] how
-- long the queue lives without attempts, in ms.
--
-- Returns {1, fence} when the lock is ours (fence 0 unfenced);
-- {0, pttl, score} when someone holds it for pttl more ms (-1: no expiry);
-- {2, pttl, score} when it is free but handed to another waiter for pttl
-- more ms. score is the caller's place in the queue.
local function queue()
  local score = ARGV[4]
  if score == '' then
    local t = redis.call('TIME')
    score = tostring(t[1] * 1000 + math.floor(t[2] / 1000))
  end
  redis.call('ZADD', KEYS[2], 'NX', score, ARGV[3])
  redis.call('PEXPIRE', KEYS[2], ARGV[6])
  return tonumber(score)
end

local function won(fence)
  redis.call('ZREM', KEYS[2], ARGV[3])
  if ARGV[5] ~= '' then
    -- Queue our successor now, so the next release can hand it the lock.
    local t = redis.call('TIME')
    redis.call('ZADD', KEYS[2], 'NX', t[1] * 1000 + math.floor(t[2] / 1000), ARGV[5])
    redis.call('PEXPIRE', KEYS[2], ARGV[6])
  end
  return {1, fence}
end

local v = redis.call('GET', KEYS[1])
if v == ARGV[1] then
  -- Our own attempt again, after a lost reply.
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  if KEYS[4] then return won(tonumber(redis.call('GET', KEYS[4]) or '0')) end
  return won(0)
end
if v == false then
  local nxt = redis.call('GET', KEYS[3])
  if nxt == false or nxt == ARGV[3] then
    local fence = 0
    if KEYS[4] then fence = redis.call('INCR', KEYS[4]) end
    redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
    if nxt then redis.call('DEL', KEYS[3]) end
    return won(fence)
  end
  return {2, redis.call('PTTL', KEYS[3]), queue()}
end
return {0, redis.call('PTTL', KEYS[1]), queue()}
