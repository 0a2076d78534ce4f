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
	releaseScript      = grantScript("release")
	extendScript       = script("extend")
	pttlScript         = script("pttl")
	waitScript         = grantScript("wait")
	leaveScript        = grantScript("leave")
	acquireManyScript  = script("acquire_many")
	releaseManyScript  = script("release_many")
	extendManyScript   = script("extend_many")
	pttlManyScript     = script("pttl_many")
	inspectScript      = script("inspect")
	checkCleanupScript = script("check_cleanup")
	countReleaseScript = grantScript("count_release")
	countExtendScript  = grantScript("count_extend")
	countPTTLScript    = script("count_pttl")
	resumeScript       = grantScript("resume")
	breakScript        = grantScript("break")
	proclaimScript     = script("proclaim")
)

//go:embed lua/*.lua
var luaFiles embed.FS

// A luaScript is a script and its source, for sending as EVAL.
type luaScript struct {
	*redis.Script
	src string
}

// script is lua/<name>.lua, after lua/token.lua, which every script
// shares.
func script(name string) luaScript {
	src := source("token") + source(name)
	return luaScript{redis.NewScript(src), src}
}

// grantScript is a script that uses lua/grant.lua, inserted at its line
// "--@grant".
func grantScript(name string) luaScript {
	before, after, ok := strings.Cut(source(name), "--@grant\n")
	if !ok {
		panic("lua/" + name + ".lua has no --@grant line") // embedded at build time: a test runs it
	}
	src := source("token") + before + fmt.Sprintf("local QUEUE_LIFE = %d\n", queueLife.Milliseconds()) + source("grant") + after
	// A script may also read a key as inspect.lua does, as a function.
	src = strings.Replace(src, "--@inspect\n", "local function inspect()\n"+source("inspect")+"end\n", 1)
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
