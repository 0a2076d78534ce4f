package padlock

import (
	_ "embed"

	"github.com/redis/go-redis/v9"
)

// The Lua scripts. Each runs as EVALSHA; on NOSCRIPT (a fresh or flushed
// server) go-redis falls back to EVAL, which also loads the script.
var (
	//go:embed acquire.lua
	acquireSrc    string
	acquireScript = redis.NewScript(acquireSrc)

	//go:embed release.lua
	releaseSrc    string
	releaseScript = redis.NewScript(releaseSrc)

	//go:embed extend.lua
	extendSrc    string
	extendScript = redis.NewScript(extendSrc)

	//go:embed pttl.lua
	pttlSrc    string
	pttlScript = redis.NewScript(pttlSrc)

	//go:embed inspect.lua
	inspectSrc    string
	inspectScript = redis.NewScript(inspectSrc)
)
