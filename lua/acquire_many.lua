-- acquire_many.lua: take every lock KEYS[1..n] for the value ARGV[1], for
-- ARGV[2] milliseconds, or none of them. A key that holds the value's
-- token (up to its first space) is ours.
-- Returns 0 when all are ours (a retry that finds them ours succeeds), or
-- -2 - PTTL when some other holder has one: the longest PTTL among the
-- keys held by others (-1 means one is held with no expiry).
if not redis.setresp then return redis.error_reply('PADLOCK_UNSUPPORTED_SERVER') end
local longest, vs = nil, {}
for i = 1, #KEYS do
  local v = redis.call('GET', KEYS[i])
  vs[i] = v
  if v and not sameToken(v, ARGV[1]) then
    local pttl = redis.call('PTTL', KEYS[i])
    if pttl < 0 then return -1 end
    if not longest or pttl > longest then longest = pttl end
  end
end
if longest then return -2 - longest end
--@hold
for i = 1, #KEYS do
  if vs[i] then
    moveHold(KEYS[i], vs[i], ARGV[1], ARGV[2]) -- ours already: taken when it was
  else
    redis.call('SET', KEYS[i], ARGV[1], 'PX', ARGV[2])
  end
end
return 0
