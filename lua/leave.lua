-- leave.lua: the waiter with token ARGV[1] and value ARGV[2] gives up: it
-- leaves the queue (see handoff.lua), and passes on a lock that was handed
-- or reserved to it, as a release would; ARGV[3] is the grace of a
-- reservation. Returns 1 if it passed the lock on, else 0.
local reserved = redis.call('ZREM', KEYS[2], '>' .. ARGV[1])
unqueue(ARGV[1])
local v = redis.call('GET', KEYS[1])
if v == ARGV[2] or (reserved == 1 and not v) then
  pass(now(), ARGV[3])
  return 1
end
return 0
