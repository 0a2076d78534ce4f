package padlock

import (
	"context"
	"embed"
	"fmt"
	"strings"

	"github.com/redis/go-redis/v9"
)

// The Lua scripts, one file each. They run as EVALSHA; on NOSCRIPT (a
// fresh or flushed server) go-redis falls back to EVAL, which also loads
// the script.
var (
	acquireScript      = script("acquire")
	releaseScript      = handoffScript("release")
	extendScript       = script("extend")
	pttlScript         = script("pttl")
	waitScript         = handoffScript("wait")
	leaveScript        = handoffScript("leave")
	acquireManyScript  = script("acquire_many")
	releaseManyScript  = script("release_many")
	extendManyScript   = script("extend_many")
	pttlManyScript     = script("pttl_many")
	inspectScript      = script("inspect")
	checkCleanupScript = script("check_cleanup")
	countScript        = script("count")
	countReleaseScript = script("count_release")
	countExtendScript  = script("count_extend")
	countPTTLScript    = script("count_pttl")
)

//go:embed lua/*.lua
var luaFiles embed.FS

// A luaScript is a script and its source, for sending as EVAL.
type luaScript struct {
	*redis.Script
	src string
}

func script(name string) luaScript {
	src := source(name)
	return luaScript{redis.NewScript(src), src}
}

// handoffScript is a script that hands the lock to the next waiter: it
// uses lua/handoff.lua, and the constants that file uses, inserted at its
// line "--@handoff" (or before it, without one).
func handoffScript(name string) luaScript {
	lib := fmt.Sprintf("local QUEUE_TTL, WAITER_LIFE, GONE_LIFE = %d, %d, %d\n",
		queueTTL.Milliseconds(), waiterLife.Milliseconds(), goneLife.Milliseconds()) + source("handoff")
	src := source(name)
	if before, after, ok := strings.Cut(src, "--@handoff\n"); ok {
		src = before + lib + after
	} else {
		src = lib + src
	}
	return luaScript{redis.NewScript(src), src}
}

func source(name string) string {
	src, err := luaFiles.ReadFile("lua/" + name + ".lua")
	if err != nil {
		panic(err) // embedded at build time: cannot happen
	}
	return string(src)
}

// The digests of the hot scripts and the key counts, boxed once as command
// arguments (see evalsha).
var (
	acquireSHA any = acquireScript.Hash()
	releaseSHA any = releaseScript.Hash()
	numKeys        = [...]any{"0", "1", "2", "3", "4", "5"}
)

// doer is what padlock sends commands and scripts through: a client, or
// one connection (see Lock.writer).
type doer interface {
	redis.Scripter
	Do(ctx context.Context, args ...any) *redis.Cmd
}

// evalsha runs a command built as ["evalsha", digest, numkeys, keys...,
// args...], with its arguments boxed once by the caller rather than on
// every call. On NOSCRIPT (a new or flushed server) it sends the same as
// EVAL with the script's source, which also loads it.
func evalsha(ctx context.Context, rdb doer, s luaScript, args []any) *redis.Cmd {
	cmd := rdb.Do(ctx, args...)
	if redis.HasErrorPrefix(cmd.Err(), "NOSCRIPT") {
		eval := make([]any, len(args))
		copy(eval, args)
		eval[0], eval[1] = "eval", s.src
		cmd = rdb.Do(ctx, eval...)
	}
	return cmd
}
