-- grant.lua: the one way to wait, shared by wait.lua, release.lua,
-- count_release.lua, count_extend.lua, leave.lua, break.lua and
-- resume.lua (scripts.go inserts it at their line "--@grant").
--
-- A key K has holders and a queue Q (a sorted set, by arrival in ms) of
-- tickets. A ticket is a key of its own, P .. 't:' .. token (P: the prefix
-- of K's side keys, Q without 'queue'), holding the waiter (see parse). It
-- expires unless its client renews it, so a dead waiter is skipped; '-'
-- is a waiter that left. Q's members are the tickets' key names.
--
-- Whatever frees capacity runs grant: from the head of the queue on, it
-- gives each live ticket what it waits for while that is free, sets what
-- it holds with its ttl (and fence), and tells its client. A call's news
-- for its own client's waiters comes back in its reply, as two arrays:
-- grants (token, fence pairs) and hints (token, ms pairs: the holder that
-- keeps that waiter out expires in ms, so that it looks then if nobody
-- releases). Other clients are told by a message on P .. 'to:' .. client:
-- "<token> <fence>" for a grant, "<token> wait <ms>" for a hint.

--@hold
local MARKER = 'padlock:shared'
-- QUEUE_LIFE (ms), set by scripts.go before this file: how long a queue
-- lives after the last call that renewed it; twice the longest ticket
-- life, so that no call shortens it.

-- announce publishes msg on channel (sharded where the server has it); a
-- refused channel (ACL) only delays the waiter to its next renewal.
local function announce(channel, msg)
  if not pcall(redis.call, 'SPUBLISH', channel, msg) then
    pcall(redis.call, 'PUBLISH', channel, msg)
  end
end

local function prefix(Q) return string.sub(Q, 1, -6) end

-- moving reports whether this node is moving the slot of the side keys
-- with prefix P to another (a Cluster resharding: the slot is MIGRATING
-- here). Such a node runs a script whose declared keys it has, but fails
-- it at the first command on a key of the slot that it lacks then (not
-- there yet, gone already, or just deleted by the script), keeping what
-- the script wrote before. A script that may need such a key answers
-- TRYAGAIN (see tryAgain) before it writes anything: it ran nothing, and
-- is sent again. (The importing node, asked, serves a command on one key
-- it lacks; one on several fails there too, so none is sent.)
local function moving(P)
  local ok, e = pcall(redis.call, 'EXISTS', P .. 'absent')
  if ok then return false end
  if type(e) == 'table' then e = e.err end
  return string.find(tostring(e), 'non local key', 1, true) ~= nil
end
local tryAgain = 'TRYAGAIN padlock: the slot of the lock is moving to another node'

-- arrival is the score of a ticket that arrives at t in the queues at
-- KEYS[2], KEYS[4], ...: after every ticket in them, even within a ms
-- (the queues' order is the order of arrival, the same in every queue).
local function arrival(t)
  local s = t
  for i = 2, #KEYS, 2 do
    local last = redis.call('ZRANGE', KEYS[i], -1, -1, 'WITHSCORES')[2]
    if last then s = math.max(s, tonumber(last) + 0.001) end
  end
  return s
end

-- parse reads a ticket: the line "kind ttl min fenced client listen
-- limit toklen n len1 .. lenn", then the token, n strings of those lengths
-- (for a multi-key lock, each key and its queue) and the value. kind is
-- 'x' exclusive, 's' shared, 'n' a place of a semaphore of limit places,
-- or 'm' every key of keys; min the hold's minimum (ms, 0 none: see
-- hold.lua); listen 'p' for a client that hears only plain messages (on a
-- Cluster), 's' for one that hears sharded ones where the server has them.
local function parse(d)
  local k, ttl, min, f, c, ps, l, toklen, n, lens, pos =
    string.match(d, '^(%S+) (%S+) (%S+) (%S+) (%S+) (%S+) (%S+) (%S+) (%S+)([^\n]*)\n()')
  local w = {k = k, ttl = tonumber(ttl), min = tonumber(min), f = tonumber(f), c = c, ps = ps, l = tonumber(l)}
  toklen = tonumber(toklen)
  w.tok = string.sub(d, pos, pos + toklen - 1)
  pos = pos + toklen
  if n ~= '0' then
    w.keys = {}
    for len in string.gmatch(lens, '%d+') do
      w.keys[#w.keys + 1] = string.sub(d, pos, pos + tonumber(len) - 1)
      pos = pos + tonumber(len)
    end
  end
  w.v = string.sub(d, pos)
  return w
end

-- who reads of a ticket only what tell needs: its kind, client, how the
-- client listens, and token.
local function who(d)
  local k, c, ps, toklen, pos = string.match(d, '^(%S+) %S+ %S+ %S+ (%S+) (%S+) %S+ (%S+)[^\n]*\n()')
  return {k = k, c = c, ps = ps, tok = string.sub(d, pos, pos + tonumber(toklen) - 1)}
end

-- holders is where the holders of a shared or semaphore key are.
local function holders(K, P, kind)
  if kind == 's' then return P .. 'shared' end
  return K
end

-- expire drops the expired holders of a shared or semaphore key.
local function expire(K, P, kind, t)
  local H = holders(K, P, kind)
  local gone = redis.call('ZRANGEBYSCORE', H, '-inf', t)
  if #gone > 0 then
    redis.call('ZREMRANGEBYSCORE', H, '-inf', t)
    for _, v in ipairs(gone) do redis.call('HDEL', P .. 'fences', tokenOf(v), tokenOf(v) .. ' since') end
  end
end

-- member is the value with which token holds a place in the holders H of
-- a shared or semaphore key (unexpired at t), or nil.
local function member(H, token, t)
  for _, v in ipairs(redis.call('ZRANGEBYSCORE', H, '(' .. t, '+inf')) do
    if tokenOf(v) == token then return v end
  end
  return nil
end

-- settle makes a shared or semaphore key's keys expire with its last
-- holder (and, for a semaphore, keeps its stored limit at least that long).
local function settle(K, P, kind, t)
  local H = holders(K, P, kind)
  local last = redis.call('ZRANGE', H, -1, -1, 'WITHSCORES')
  local ms = last[1] and (tonumber(last[2]) - t) or 0
  if ms <= 0 then
    if kind == 's' and redis.call('GET', K) == MARKER then redis.call('DEL', K) end
    redis.call('DEL', H)
    redis.call('DEL', P .. 'fences')
    if kind == 'n' and redis.call('EXISTS', P .. 'queue') == 0 then redis.call('DEL', P .. 'limit') end
    return
  end
  if kind == 's' then redis.call('SET', K, MARKER, 'PX', ms) end
  redis.call('PEXPIRE', H, ms)
  if redis.call('EXISTS', P .. 'fences') == 1 then redis.call('PEXPIRE', P .. 'fences', ms) end
  if kind == 'n' and redis.call('PTTL', P .. 'limit') < ms then redis.call('PEXPIRE', P .. 'limit', ms) end
end

-- free reports whether a ticket (or a caller) w of kind 'x', 's' or 'n'
-- could be admitted to K now.
-- A key held as the other type (a semaphore's sorted set, a lock's string:
-- a caller mixed the kinds on one key) is not free, and an error reading
-- it stops nothing but that.
local function free(K, P, w, t)
  if w.k == 'x' then return redis.call('EXISTS', K) == 0 end
  if w.k == 's' then
    local ok, v = pcall(redis.call, 'GET', K)
    return ok and (not v or v == MARKER)
  end
  if not pcall(expire, K, P, 'n', t) then return false end
  return redis.call('ZCARD', K) < w.l
end

-- limitOK reports whether a semaphore ticket (or caller) w asks for the
-- key's stored number of places, or none is stored.
local function limitOK(P, w)
  local n = redis.call('GET', P .. 'limit')
  return not n or tonumber(n) == w.l
end

-- holdFor is how long (ms) what w takes at t is held: its ttl, or its
-- minimum if longer, which it records.
local function holdFor(P, w, t)
  if w.min == 0 then return w.ttl end
  recordMin(P .. 'mins', w.tok, t, w.min)
  return math.max(w.ttl, w.min)
end

-- admit gives K to a ticket (or a caller) w of kind 'x', 's' or 'n', and
-- returns its fence (0 unfenced).
local function admit(K, P, w, t)
  local fence = 0
  if w.f == 1 then fence = redis.call('INCR', P .. 'fence') end
  local hold = holdFor(P, w, t)
  if w.k == 'x' then
    local ms = string.format('%d', hold)
    local v = w.v
    if hold ~= w.ttl then v = spanned(v, hold) end -- kept for a minimum
    redis.call('SET', K, v, 'PX', ms)
    if w.f == 1 then recordFence(P .. 'fence', w.tok, fence, ms) end
    return fence
  end
  local H = holders(K, P, w.k)
  redis.call('ZADD', H, t + hold, w.v)
  if w.k == 'n' then redis.call('SET', P .. 'limit', w.l, 'KEEPTTL') end
  -- When the holder came in, beside its fence (a token has no space).
  if w.f == 1 then
    redis.call('HSET', P .. 'fences', w.tok, fence, w.tok .. ' since', t)
  else
    redis.call('HSET', P .. 'fences', w.tok .. ' since', t)
  end
  settle(K, P, w.k, t)
  return fence
end

-- grantTo hands what the ticket named head waits for to it, if all of it
-- is free, and reports the fence, or nil if it must wait.
local function grantTo(K, Q, head, w, t)
  if w.k ~= 'm' then
    if not free(K, prefix(Q), w, t) then return nil end
    redis.call('ZREM', Q, head)
    return admit(K, prefix(Q), w, t)
  end
  -- Every key, and first in every key's queue.
  for i = 1, #w.keys, 2 do
    if redis.call('EXISTS', w.keys[i]) == 1 or redis.call('ZRANGE', w.keys[i + 1], 0, 0)[1] ~= head then return nil end
  end
  for i = 1, #w.keys, 2 do
    redis.call('SET', w.keys[i], w.v, 'PX', string.format('%d', w.ttl))
    redis.call('ZREM', w.keys[i + 1], head)
  end
  return 0
end

-- channel is the channel of the client of the ticket named head.
local function channel(head, w)
  return string.sub(head, 1, -#w.tok - 3) .. 'to:' .. w.c
end

-- news is a call's news for its own client (see above): {grants, hints}.
local function news() return {{}, {}} end

-- tell tells the waiter w (its ticket named head) of a grant (which 1)
-- or a hint (which 2) with n: its client me's in mine, the others' by
-- message (plain PUBLISH to a client that listens so: on a Cluster every
-- node hears a plain message).
local function tell(head, w, which, n, me, mine)
  if w.c == me then
    local list = mine[which]
    list[#list + 1] = w.tok
    list[#list + 1] = n
    return
  end
  local msg = w.tok .. ' ' .. n
  if which == 2 then msg = w.tok .. ' wait ' .. n end
  if w.ps == 'p' then
    pcall(redis.call, 'PUBLISH', channel(head, w), msg)
  else
    announce(channel(head, w), msg)
  end
end

-- expiresIn is in how many ms what holds K stops keeping out a waiter of
-- kind ('n': the first of a semaphore's holders), < 0 if nothing does.
local function expiresIn(K, t, kind)
  if kind ~= 'n' then return redis.call('PTTL', K) end
  local ok, first = pcall(redis.call, 'ZRANGE', K, 0, 0, 'WITHSCORES')
  if not ok then return redis.call('PTTL', K) end -- a lock holds it (see free)
  if first[1] then return tonumber(first[2]) - t end
  return -1
end

-- tellHead hints to the first waiter of K's queue Q when what keeps it
-- out expires, in ms. head, when not nil, is that waiter's ticket (false:
-- none), and ms, when not nil, K's ttl.
local function tellHead(K, Q, t, me, mine, head, ms)
  if head == nil then head = redis.call('ZRANGE', Q, 0, 0)[1] end
  if not head then return mine end
  local d = redis.call('GET', head)
  if not d or d == '-' then return mine end
  local w = who(d)
  if w.k == 'n' or ms == nil then ms = expiresIn(K, t, w.k) end
  if ms >= 0 then tell(head, w, 2, ms, me, mine) end
  return mine
end

-- grant serves K's queue Q from its head, while what the head waits for
-- is free, and tells each waiter served (the client me's in mine: see
-- news). It returns mine; after a grant of the whole key, also the next
-- ticket in the queue (false if none) and the ttl it set (for tellHead).
local function grant(K, Q, t, me, mine)
  while true do
    local q = redis.call('ZRANGE', Q, 0, 1)
    local head = q[1]
    if not head then return mine end
    local d = redis.call('GET', head)
    local w = d and d ~= '-' and parse(d)
    if not w then
      redis.call('ZREM', Q, head) -- its waiter is gone
    elseif w.k == 'n' and not limitOK(prefix(Q), w) then
      -- Another n than the key's: dropped, its waiter finds out (ErrInvalid).
      redis.call('ZREM', Q, head)
      redis.call('DEL', head)
    else
      local fence = grantTo(K, Q, head, w, t)
      if not fence then return mine end
      redis.call('DEL', head)
      tell(head, w, 1, fence, me, mine)
      if w.k ~= 's' and w.k ~= 'n' then return mine, q[2] or false, math.max(w.ttl, w.min) end
    end
  end
end

-- serve is what follows a release: grant, then tell the new head when
-- what keeps it out expires. It returns mine, and after a grant of the
-- whole key the ttl it set.
local function serve(K, Q, t, me, mine)
  local _, head, ms = grant(K, Q, t, me, mine)
  return tellHead(K, Q, t, me, mine, head, ms), ms
end

-- carry queues the waiters that a release carries, ARGV[from], ARGV[from
-- + 1], ... (pairs of token and ticket, in their order), at the tail of
-- the queue Q with tickets that live life ms, unless they left meanwhile.
-- It returns the tickets it queued.
local function carry(Q, t, from, life)
  local P, queued = prefix(Q), {}
  for i = from, #ARGV, 2 do
    local ticket = P .. 't:' .. ARGV[i]
    if redis.call('SET', ticket, ARGV[i + 1], 'PX', life, 'NX') then
      redis.call('ZADD', Q, 'NX', arrival(t), ticket)
      queued[#queued + 1] = ARGV[i + 1]
    end
  end
  if ARGV[from] then redis.call('PEXPIRE', Q, QUEUE_LIFE) end
  return queued
end

-- tellCarried hints to the client's waiters that a release queued (their
-- tickets) when what keeps them out of K expires, in mine: what an
-- attempt would have told them. ms, when not nil, is K's ttl, just set by
-- serve. It reads K once per kind of waiter ('n', or the others) at most.
local function tellCarried(K, t, queued, mine, ms)
  local known = {x = ms}
  for _, d in ipairs(queued) do
    local w = who(d)
    local kind = w.k == 'n' and 'n' or 'x'
    if known[kind] == nil then known[kind] = expiresIn(K, t, w.k) end
    if known[kind] >= 0 then
      local hints = mine[2]
      hints[#hints + 1] = w.tok
      hints[#hints + 1] = known[kind]
    end
  end
  return mine
end
