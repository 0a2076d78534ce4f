-- check_cleanup.lua: Client.Check's cleanup of its key KEYS[1], its
-- fencing counter KEYS[2], its queue KEYS[3] and its other side keys
-- KEYS[4..]. It deletes them only if nobody else used the key meanwhile:
-- the key is free or holds one of Check's own values ARGV[2..], nobody
-- waits, and the counter is absent or at the last fence Check was given,
-- ARGV[1]. Returns 1 if it deleted them, 0 if it left them alone.
local kind = redis.call('TYPE', KEYS[1])['ok']
if kind ~= 'none' and kind ~= 'string' then return 0 end
local v = redis.call('GET', KEYS[1])
local ours = not v
for i = 2, #ARGV do
  if v == ARGV[i] then ours = true end
end
local fence = redis.call('GET', KEYS[2])
if not ours or (fence and fence ~= ARGV[1]) or redis.call('ZCARD', KEYS[3]) > 0 then
  return 0
end
redis.call('DEL', unpack(KEYS))
return 1
