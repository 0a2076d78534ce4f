-- token.lua: what every script shares (scripts.go puts it in front of
-- each). A value is a token, a space and metadata; the same token is the
-- same holder, whatever metadata it stores.

local function tokenOf(v) return string.match(v, '^%S+') end

-- sameToken reports whether v, a key's value (false: none), holds the
-- token of value.
local function sameToken(v, value)
  return v == value or (v and tokenOf(v) == tokenOf(value))
end
