-- break.lua: end whatever holds the key KEYS[1], for Client.Break. KEYS
-- as inspect.lua's (the key, its fencing counter, shared holders, queue
-- and holders' fences); ARGV[1] the calling client.
--
-- If the key is held (a lock, or holders of a semaphore or shared hold),
-- it advances the fencing counter, if there is one, deletes the holders,
-- serves the queue and announces the release on the key's channel.
-- Returns {what inspect.lua would have returned just before, grants,
-- hints}, the news for the caller's waiters as in release.lua.
--@grant
--@inspect
local before = inspect()
local kind = before[7]
if kind ~= 'string' and kind ~= 'zset' then return {before} end
if (kind == 'zset' or before[1] == MARKER) and #before[4] == 0 then return {before} end -- no holder left
local K, F, Q = KEYS[1], KEYS[2], KEYS[4]
if Q and moving(prefix(Q)) then return redis.error_reply(tryAgain) end
if F and redis.call('EXISTS', F) == 1 then redis.call('INCR', F) end
redis.call('DEL', K)
if KEYS[3] then -- minimums too: broken holds are not kept (one DEL each: see grant.lua's moving)
  for _, k in ipairs({KEYS[3], KEYS[5], prefix(Q) .. 'mins'}) do redis.call('DEL', k) end
end
-- Waiters on the attempt path (Redlock, keys with a brace but no hash
-- tag) attempt when they hear this, sharded or plain (as release_many.lua).
pcall(redis.call, 'SPUBLISH', K, 'released')
pcall(redis.call, 'PUBLISH', K, 'released')
local mine = news()
if Q then serve(K, Q, now(), ARGV[1], mine) end
return {before, mine[1], mine[2]}
