package padlock

import (
	"context"
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

	//go:embed wait.lua
	waitSrc    string
	waitScript = redis.NewScript(waitSrc)

	//go:embed leave.lua
	leaveSrc    string
	leaveScript = redis.NewScript(leaveSrc)

	//go:embed acquire_many.lua
	acquireManySrc    string
	acquireManyScript = redis.NewScript(acquireManySrc)

	//go:embed release_many.lua
	releaseManySrc    string
	releaseManyScript = redis.NewScript(releaseManySrc)

	//go:embed extend_many.lua
	extendManySrc    string
	extendManyScript = redis.NewScript(extendManySrc)

	//go:embed pttl_many.lua
	pttlManySrc    string
	pttlManyScript = redis.NewScript(pttlManySrc)

	//go:embed inspect.lua
	inspectSrc    string
	inspectScript = redis.NewScript(inspectSrc)
)

// The digests of the hot scripts and the key counts, boxed once as command
// arguments (see evalsha).
var (
	acquireSHA any = acquireScript.Hash()
	releaseSHA any = releaseScript.Hash()
	numKeys        = [...]any{"0", "1", "2", "3"}
)

// doer sends a command: a client, or one connection.
type doer interface {
	Do(ctx context.Context, args ...any) *redis.Cmd
}

// evalsha runs a command built as ["evalsha", digest, numkeys, keys...,
// args...], with its arguments boxed once by the caller rather than on
// every call. On NOSCRIPT (a new or flushed server) it sends the same as
// EVAL with src, which also loads the script.
func evalsha(ctx context.Context, rdb doer, src string, args []any) *redis.Cmd {
	cmd := rdb.Do(ctx, args...)
	if redis.HasErrorPrefix(cmd.Err(), "NOSCRIPT") {
		eval := make([]any, len(args))
		copy(eval, args)
		eval[0], eval[1] = "eval", src
		cmd = rdb.Do(ctx, eval...)
	}
	return cmd
}
