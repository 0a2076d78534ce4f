-- wait.lua: one attempt of an acquire, of any kind (see grant.lua).
-- KEYS: the lock's key and its queue, and for a multi-key lock the same
-- for every key. ARGV[1] the caller's ticket (as grant.lua's parse reads
-- them); ARGV[2] how long a ticket lives, in ms, 0 for one try (no
-- queueing); ARGV[3] 'new' for the first attempt of a wait, 'keep' once
-- the caller has a ticket; ARGV[4] 'chosen' when the caller chose its
-- token (WithToken), so that it may come back: holding the key with other
-- metadata, or after it left.
--
-- Returns {code, n, grants, hints}: code 1 when the caller holds the lock
-- now (it was free, handed to it, or its own earlier attempt took it), n
-- its fence; 0 when it must wait (a ticket is queued, or kept, unless it
-- is a try), n the ms until the holder that keeps it out expires (-1
-- unknown); 2 the same, but what it waits for is free and the waiters
-- queued ahead wait for something else; 3 when the key's semaphore has n
-- places, not the caller's; 4 when its ticket is gone (expired, or it
-- left). grants and hints are the news for the caller's client's other
-- waiters (see grant.lua's news).
if not redis.setresp then return redis.error_reply('PADLOCK_UNSUPPORTED_SERVER') end
--@grant
local w = parse(ARGV[1])
local life = tonumber(ARGV[2])
local K, Q = KEYS[1], KEYS[2]
local P = prefix(Q)
local ticket = P .. 't:' .. w.tok
local t = now()
local chosen = ARGV[4] == 'chosen'

-- held returns the caller's fence if it holds the lock now (renewing it
-- for its ttl, or a minimum it holds with or asks for if longer), else
-- nil. The same token is the same holder: its value is set anew, with
-- this call's metadata (only a chosen token can hold with other metadata).
local function kept()
  return math.max(holdFor(P, w, t), keptFor(P .. 'mins', w.tok))
end
local function held()
  if w.k == 'x' or w.k == 'm' then
    local vs = {}
    for i = 1, #KEYS, 2 do
      vs[i] = redis.call('GET', KEYS[i])
      if not vs[i] or tokenOf(vs[i]) ~= w.tok then return nil end
    end
    local ms = string.format('%d', kept())
    for i = 1, #KEYS, 2 do moveHold(KEYS[i], vs[i], w.v, ms) end -- taken when it was
    if w.f == 1 then return heldFence(P .. 'fence', w.tok, ms) end
    return 0
  end
  local H = holders(K, P, w.k)
  local v = w.v
  local ok, exp = pcall(redis.call, 'ZSCORE', H, v)
  if not ok then return nil end -- a string holds it: not this kind's holders (see free)
  if not exp or tonumber(exp) <= t then
    v = nil
    if chosen then v = member(H, w.tok, t) end
  end
  if not v then return nil end
  if v ~= w.v then redis.call('ZREM', H, v) end
  redis.call('ZADD', H, t + kept(), w.v)
  settle(K, P, w.k, t)
  return tonumber(redis.call('HGET', P .. 'fences', w.tok) or '0')
end

-- reply is {code, n} and the news, leaving out the caller's own.
local function reply(code, n, mine)
  local out = {code, n, {}, {}}
  for which = 1, 2 do
    local from, to = mine[which], out[which + 2]
    for i = 1, #from, 2 do
      if from[i] ~= w.tok then
        to[#to + 1] = from[i]
        to[#to + 1] = from[i + 1]
      end
    end
  end
  return out
end

local function limitError()
  return {3, tonumber(redis.call('GET', P .. 'limit'))}
end
-- (A holder's n is the stored one: a token chosen again with another n is
-- refused, not taken for the holder.)
if w.k == 'n' and not limitOK(P, w) then return limitError() end
local fence = held()
if fence then
  redis.call('DEL', ticket)
  for i = 2, #KEYS, 2 do redis.call('ZREM', KEYS[i], ticket) end
  return {1, fence, {}, {}}
end
-- A try (life 0) has no ticket, and reads none.
local tk = life > 0 and redis.call('GET', ticket)
-- A new wait under a chosen token may find an earlier wait's ticket: the
-- mark of one that left, or the ticket of one whose process died. It
-- starts afresh as itself (its kind, ttl, fencing, client and value), in
-- the place that one had, if any.
if tk and chosen and ARGV[3] == 'new' then
  redis.call('SET', ticket, ARGV[1], 'KEEPTTL')
  if tk == '-' then tk = false end
end
if tk == '-' or (ARGV[3] == 'keep' and not tk) then return {4, 0} end

-- Serve those queued first: a holder may have expired.
local mine = news()
for i = 1, #KEYS, 2 do grant(KEYS[i], KEYS[i + 1], t, w.c, mine) end
for i = 1, #mine[1], 2 do
  if mine[1][i] == w.tok then return reply(1, mine[1][i + 1], mine) end
end
if w.k == 'n' and not limitOK(P, w) then return limitError() end -- set by a grant just now

-- Free, and nobody queued: take it.
local open = true -- what it waits for is free: only the queue ahead keeps it out
if w.k == 'm' then
  for i = 1, #KEYS, 2 do
    if redis.call('EXISTS', KEYS[i]) == 1 then open = false end
  end
else
  open = free(K, P, w, t)
end
local take = open
for i = 1, #KEYS, 2 do
  if redis.call('EXISTS', KEYS[i + 1]) == 1 then take = false end
end
if take and w.k == 'm' then
  for i = 1, #KEYS, 2 do redis.call('SET', KEYS[i], w.v, 'PX', string.format('%d', w.ttl)) end
  return reply(1, 0, mine)
elseif take then
  return reply(1, admit(K, P, w, t), mine)
end

-- Wait: until when does what keeps it out last? The holder; or, when the
-- key is free but the head of its queue waits for something else (another
-- key), that head's ticket.
local ms = -1
if w.k == 'n' then
  ms = expiresIn(K, t, 'n')
else
  for i = 1, #KEYS, 2 do
    local p = redis.call('PTTL', KEYS[i])
    if p >= 0 and (ms < 0 or p < ms) then ms = p end
  end
end
if ms < 0 then
  local head = redis.call('ZRANGE', Q, 0, 0)[1]
  if head and head ~= ticket then ms = math.max(redis.call('PTTL', head), 0) end
end
if life > 0 then
  if not tk or not redis.call('ZSCORE', Q, ticket) then -- new, or lost by a queue: at the tail
    local s = arrival(t)
    for i = 2, #KEYS, 2 do redis.call('ZADD', KEYS[i], 'NX', s, ticket) end
  end
  if tk then
    redis.call('PEXPIRE', ticket, life)
  else
    redis.call('SET', ticket, ARGV[1], 'PX', life)
  end
  for i = 2, #KEYS, 2 do redis.call('PEXPIRE', KEYS[i], QUEUE_LIFE) end
  if w.k == 'n' and redis.call('PTTL', P .. 'limit') < QUEUE_LIFE then
    redis.call('SET', P .. 'limit', w.l, 'PX', QUEUE_LIFE)
  end
end
if open then return reply(2, ms, mine) end
return reply(0, ms, mine)
