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
    end
    if keep > 0 then
      redis.call('PEXPIRE', KEYS[i], keep)
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
if not ARGV[5] then
  local queued = false
  for i = 2, #KEYS, 2 do
    if redis.call('EXISTS', KEYS[i]) == 1 then queued = true end
  end
  if not queued then return ours end
end
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
