-- handoff.lua: the direct hand-off, prepended to release.lua, wait.lua and
-- leave.lua (scripts.go also sets QUEUE_TTL, WAITER_LIFE and GONE_LIFE before it).
--
-- KEYS[1] the lock; KEYS[2] its queue: a sorted set of waiting tokens
-- scored by arrival (ms; shared holds from 4e15 on, after every exclusive
-- waiter, see count.lua), and at times a reservation, the member ">" ..
-- token scored by minus its deadline (see count_release.lua); KEYS[3] the
-- fencing counter; KEYS[4] each queued token's details:
-- "<registered until, ms> <ttl ms> <fenced 0|1> <client> <value>"; KEYS[5] the
-- tokens that took the lock in the last GONE_LIFE ms, scored by when: a
-- client's call that would queue one of them again (sent before it took
-- the lock, run after) is ignored.
--
-- A release gives the lock straight to the first waiter whose registration
-- is current: it sets the key to that waiter's value for its ttl (and
-- increments the counter for a fenced one), and announces "<token>
-- <fence>" to the waiter's client alone, on the channel named like the
-- queue with "to:<client>" for "queue". A waiter that stops waiting
-- passes on a lock handed to it (leave.lua). Registrations last WAITER_LIFE
-- ms unless renewed, so a crashed client's waiters are soon skipped.

local function now()
  local t = redis.call('TIME')
  return t[1] * 1000 + math.floor(t[2] / 1000)
end

local function announce(msg, channel)
  channel = channel or KEYS[1]
  if not pcall(redis.call, 'SPUBLISH', channel, msg) then
    pcall(redis.call, 'PUBLISH', channel, msg) -- refused (no channel permission): waiters find out on their timers
  end
end

-- register queues (or renews) the waiters given from ARGV[i] on, in groups
-- of token, ttl, fenced, client, value, in that order; not one that the lock is
-- already handed to (held is the key's value). t is the server's time.
local function register(i, t, held)
  if not ARGV[i] then return end
  -- New waiters queue after the last exclusive one, in the order given,
  -- even within a ms.
  local r = redis.call('ZREVRANGEBYSCORE', KEYS[2], '(4e15', '-inf', 'WITHSCORES', 'LIMIT', 0, 1)
  local last = tonumber(r[2] or '0')
  while ARGV[i] do
    local tok, value = ARGV[i], ARGV[i + 4]
    if value ~= held and not redis.call('ZSCORE', KEYS[5], tok) then
      local score = math.max(t, last + 0.01)
      if redis.call('ZADD', KEYS[2], 'NX', score, tok) == 1 then last = score end
      redis.call('HSET', KEYS[4], tok, string.format('%d', t + WAITER_LIFE) .. ' ' .. ARGV[i + 1] .. ' ' ..
        ARGV[i + 2] .. ' ' .. ARGV[i + 3] .. ' ' .. value)
    end
    i = i + 5
  end
  redis.call('PEXPIRE', KEYS[2], QUEUE_TTL)
  redis.call('PEXPIRE', KEYS[4], QUEUE_TTL)
end

-- unqueue takes token out of the queue and its details.
local function unqueue(tok)
  redis.call('ZREM', KEYS[2], tok, '>' .. tok)
  redis.call('HDEL', KEYS[4], tok)
end

-- took records that token took the lock at t: it never queues again.
local function took(tok, t)
  redis.call('ZADD', KEYS[5], t, tok)
  redis.call('PEXPIRE', KEYS[5], GONE_LIFE)
  if t % 8 == 0 then -- now and then (it is kept short all the same)
    redis.call('ZREMRANGEBYSCORE', KEYS[5], '-inf', t - GONE_LIFE)
  end
end

-- handTo finds who comes next for the free lock, dropping stale waiters
-- and lapsed reservations, and returns (the hand-off is announced unless
-- the waiter belongs to the client me, the caller's):
--   'handed', token, fence, ttl  the lock is now that waiter's;
--   'reserved', member, ms       reserved for another ms;
--   'bare', token                a waiter queued without details (by an
--                                older padlock), to be reserved for;
--   'readers'                    only shared holds wait;
--   nil                          nobody waits.
local function handTo(t, me)
  while true do
    local f = redis.call('ZRANGE', KEYS[2], 0, 0, 'WITHSCORES')
    if not f[1] then return nil end
    local score = tonumber(f[2])
    if score < 0 then
      if -score > t then return 'reserved', f[1], -score - t end
      redis.call('ZREM', KEYS[2], f[1])
    elseif score >= 4e15 then
      return 'readers'
    else
      local d = redis.call('HGET', KEYS[4], f[1])
      if not d then return 'bare', f[1] end
      local exp, ttl, fenced, client, value = string.match(d, '^(%d+) (%d+) (%d) (%S+) (.*)$')
      if exp and tonumber(exp) >= t then
        local fence = 0
        if fenced == '1' then fence = redis.call('INCR', KEYS[3]) end
        unqueue(f[1])
        took(f[1], t)
        redis.call('SET', KEYS[1], value, 'PX', ttl)
        if client ~= me then -- the caller's own client learns it from the reply
          announce(f[1] .. ' ' .. fence, string.sub(KEYS[2], 1, -6) .. 'to:' .. client)
        end
        return 'handed', f[1], fence, tonumber(ttl)
      end
      unqueue(f[1]) -- not renewed in time: its client is gone
    end
  end
end

-- pass is what follows when the holder of the lock leaves it: hand it to
-- the next waiter, or else delete it (and reserve it for the grace ARGV
-- names for a waiter queued without details, or wake the shared holds).
-- Returns {token, fence} when handed, else 1.
local function pass(t, grace, me)
  local kind, tok, fence = handTo(t, me)
  if kind == 'handed' then return {tok, fence} end
  redis.call('DEL', KEYS[1])
  if kind == 'readers' then
    announce('released')
  elseif kind == 'bare' then
    redis.call('ZREM', KEYS[2], tok)
    redis.call('ZADD', KEYS[2], -(t + tonumber(grace)), '>' .. tok)
    announce(tok)
  elseif kind == 'reserved' then
    announce(string.sub(tok, 2))
  end
  return 1
end

