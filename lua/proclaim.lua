-- proclaim.lua: make ARGV[2] the metadata of the lock KEYS[1] (the value
-- its leader publishes, see election.go), keeping its ttl and span (see
-- hold.lua), if the token
-- ARGV[1] still holds it, and announce it on the channel ARGV[3] with the
-- message ARGV[4]. Returns 1, or 0 if the token does not hold it.
local v = redis.call('GET', KEYS[1])
if not v or tokenOf(v) ~= ARGV[1] then return 0 end
local value = ARGV[1] .. (string.match(v, '^%S+( ~%d+) ') or string.match(v, '^%S+( ~%d+)$') or '') -- its span, kept
if ARGV[2] ~= '' then value = value .. ' ' .. ARGV[2] end
redis.call('SET', KEYS[1], value, 'KEEPTTL')
pcall(redis.call, 'PUBLISH', ARGV[3], ARGV[4])
return 1
