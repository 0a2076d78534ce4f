-- release.lua: release a lock whose waiters queue in Redis (see
-- grant.lua): KEYS the lock's key and its queue (for a multi-key lock, the
-- same for every key); ARGV[1] its value, ARGV[2] the releasing client,
-- ARGV[3] how long a ticket lives (ms), ARGV[4] flags: 'f' for a lock
-- taken with a fence (its record goes too: see hold.lua's recordFence),
-- 'm' for one that may be held for a minimum (see hold.lua: taken with
-- one, or by a chosen token), 'u' to undo an acquire (free the key even
-- before its minimum); then pairs of token and ticket (see grant.lua's
-- parse) of the client's waiters for the key that no call has queued
-- yet: they are queued first, unless they left meanwhile.
--
-- It deletes every key that still holds the value's token (the value up
-- to its first space) and serves the queues; a key held for its minimum
-- (see hold.lua) is set to expire when the minimum ends instead, and its
-- first waiter told when that is.
-- Returns 0 if no key was ours (it changes nothing); 1 if every key was
-- ours and nobody waits; else {1 or 0 (every key was ours, or not),
-- grants, hints}: the news for the client's waiters (see grant.lua's
-- news), with a hint for the first waiter left (tellHead) and for each
-- waiter it queued (tellCarried).
--
-- The common case, nobody waiting, comes before grant.lua's functions
-- (inserted at the marker), which would otherwise be built on every call.

-- Whether a queue is served: anyone waits, or the client's waiters are
-- to be queued. A Cluster node that is moving the keys' slot away answers
-- TRYAGAIN then (see grant.lua's moving), before it writes anything: it
-- would fail the script once it needs a key it lacks (a ticket, the key
-- just deleted), keeping what the script did before.
local queued = ARGV[5] ~= nil
for i = 2, #KEYS, 2 do
  if not queued and redis.call('EXISTS', KEYS[i]) == 1 then queued = true end
end
if queued then
  local ok, e = pcall(redis.call, 'EXISTS', string.sub(KEYS[2], 1, -6) .. 'absent')
  if type(e) == 'table' then e = e.err end
  if not ok and string.find(tostring(e), 'non local key', 1, true) then
    return redis.error_reply('TRYAGAIN padlock: the slot of the lock is moving to another node')
  end
end
local fenced, kept = false, false
if ARGV[4] ~= '' then fenced, kept = string.find(ARGV[4], 'f'), string.find(ARGV[4], 'm') and not string.find(ARGV[4], 'u') end
local n, all = 0, true
for i = 1, #KEYS, 2 do
  local v = redis.call('GET', KEYS[i])
  if sameToken(v, ARGV[1]) then
    local P, keep = (kept or fenced) and string.sub(KEYS[i + 1], 1, -6), 0
    if kept then
--@hold
      keep = keptFor(P .. 'mins', tokenOf(v))
      if keep > 0 then moveHold(KEYS[i], v, v, keep) end
    end
    if keep > 0 then
      if fenced then redis.call('PEXPIRE', P .. 'fences', keep) end
    else
      redis.call('DEL', KEYS[i])
      if fenced then redis.call('HDEL', P .. 'fences', tokenOf(v)) end
    end
    n = n + 1
  else
    all = false
  end
end
if n == 0 then return 0 end
local ours = all and 1 or 0
if not queued then return ours end
--@grant
local t = now()
local queued = carry(KEYS[2], t, 5, ARGV[3])
local mine, ms = news(), nil
for i = 1, #KEYS, 2 do
  local _, set = serve(KEYS[i], KEYS[i + 1], t, ARGV[2], mine)
  if i == 1 then ms = set end
end
tellCarried(KEYS[1], t, queued, mine, ms)
return {ours, mine[1], mine[2]}
