-- inspect.lua: what Redis holds for the lock KEYS[1] now, read atomically:
-- its value (false if none), its PTTL, and the fencing counter KEYS[2]
-- (false if none, or if the key cannot be fenced and KEYS[2] is absent).
local fence = false
if KEYS[2] then fence = redis.call('GET', KEYS[2]) end
return {redis.call('GET', KEYS[1]), redis.call('PTTL', KEYS[1]), fence}
