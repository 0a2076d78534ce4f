-- leave.lua: a waiter gives up (see grant.lua). KEYS as in wait.lua;
-- ARGV[1] its ticket (see grant.lua's parse), ARGV[2] how long Redis
-- remembers that it left (ms), ARGV[3] 'keep' or 'pass'. Its ticket
-- becomes '-' (so that no call queues it again) and it leaves every
-- queue. With 'pass', what was granted to it meanwhile is passed on at
-- once, as an undone acquire would, minimum or not; with 'keep', a chosen
-- token that may have held the key before it waited keeps it, for its
-- holders to release. Returns {1 if it passed something on, else 0,
-- grants, hints}, the news for the client's waiters as in release.lua.
--@grant
local w = parse(ARGV[1])
local K, Q = KEYS[1], KEYS[2]
local P = prefix(Q)
if moving(P) then return redis.error_reply(tryAgain) end
local t = now()
local ticket = P .. 't:' .. w.tok
redis.call('SET', ticket, '-', 'PX', ARGV[2])
for i = 2, #KEYS, 2 do redis.call('ZREM', KEYS[i], ticket) end
local passed, mine = 0, news()
if ARGV[3] == 'keep' then
  -- keep what the token holds
elseif w.k == 'x' or w.k == 'm' then
  for i = 1, #KEYS, 2 do
    if redis.call('GET', KEYS[i]) == w.v then
      redis.call('DEL', KEYS[i])
      if w.f == 1 then redis.call('HDEL', P .. 'fences', w.tok) end
      redis.call('HDEL', P .. 'mins', w.tok)
      passed = 1
    end
  end
else
  if redis.call('ZREM', holders(K, P, w.k), w.v) == 1 then
    redis.call('HDEL', P .. 'fences', w.tok)
    redis.call('HDEL', P .. 'mins', w.tok)
    settle(K, P, w.k, t)
    passed = 1
  end
end
for i = 1, #KEYS, 2 do
  serve(KEYS[i], KEYS[i + 1], t, w.c, mine)
end
return {passed, mine[1], mine[2]}
