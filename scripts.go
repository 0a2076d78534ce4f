package padlock

import (
	"context"
	"embed"
	"fmt"
	"strings"
	"sync/atomic"

	"github.com/redis/go-redis/v9"
)

// The Lua scripts, one file each. They run as EVALSHA once their digest
// is known, and as EVAL before, or on NOSCRIPT (a fresh or flushed
// server), which also loads them.
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

// A luaScript is a Lua script and its digest, once known. padlock does not
// compute digests (SHA-1, which Go's FIPS 140-only mode refuses): the
// server does, in its reply to SCRIPT LOAD, once per script; the digest is
// the same on every server, so a server without the script answers
// NOSCRIPT, and gets it as EVAL.
type luaScript struct {
	src string
	sha atomic.Value // the digest, a string boxed once as a command argument; nil until SCRIPT LOAD told it
}

// digest returns s's digest, boxed, or nil if it is not known yet.
func (s *luaScript) digest() any { return s.sha.Load() }

// Load loads s into the server r sends to, and learns its digest. On a
// Cluster it loads s into key's master alone (go-redis's ScriptLoad asks
// every node, and fails if one does not answer): the others answer
// NOSCRIPT once, and get EVAL.
func (s *luaScript) Load(ctx context.Context, r redis.Scripter, key string) error {
	if cc, ok := r.(*redis.ClusterClient); ok {
		node, err := cc.MasterForKey(ctx, key)
		if err != nil {
			return err
		}
		r = node
	}
	sha, err := r.ScriptLoad(ctx, s.src).Result()
	if err != nil {
		return err
	}
	s.sha.CompareAndSwap(nil, any(sha))
	return nil
}

// known returns s's digest, learning it with SCRIPT LOAD on r (for key) if
// it is not known yet, or nil if the load failed (the caller sends EVAL).
func (s *luaScript) known(ctx context.Context, r redis.Scripter, key string) any {
	if sha := s.digest(); sha != nil {
		return sha
	}
	if s.Load(ctx, r, key) != nil {
		return nil
	}
	return s.digest()
}

// Run runs s on r with keys and args: EVALSHA, or EVAL when the digest is
// not known or the server answers NOSCRIPT.
func (s *luaScript) Run(ctx context.Context, r redis.Scripter, keys []string, args ...any) *redis.Cmd {
	key := ""
	if len(keys) > 0 {
		key = keys[0]
	}
	sha, _ := s.known(ctx, r, key).(string)
	if sha == "" {
		return r.Eval(ctx, s.src, keys, args...)
	}
	cmd := r.EvalSha(ctx, sha, keys, args...)
	if isNoScript(cmd.Err()) {
		return r.Eval(ctx, s.src, keys, args...)
	}
	return cmd
}

// EvalSha queues s on the pipeline p: as EVALSHA if its digest is known,
// else as EVAL (the caller learns it before: see known).
func (s *luaScript) EvalSha(ctx context.Context, p redis.Pipeliner, keys []string, args ...any) *redis.Cmd {
	if sha, ok := s.digest().(string); ok {
		return p.EvalSha(ctx, sha, keys, args...)
	}
	return p.Eval(ctx, s.src, keys, args...)
}

// script is lua/<name>.lua, after lua/token.lua, which every script
// shares.
func script(name string) *luaScript {
	return &luaScript{src: withHold(source("token") + source(name))}
}

// withHold puts lua/hold.lua at src's lines "--@hold".
func withHold(src string) string {
	return strings.ReplaceAll(src, "--@hold\n", source("hold"))
}

// grantScript is a script that uses lua/grant.lua, inserted at its line
// "--@grant".
func grantScript(name string) *luaScript {
	before, after, ok := strings.Cut(source(name), "--@grant\n")
	if !ok {
		panic("lua/" + name + ".lua has no --@grant line") // embedded at build time: a test runs it
	}
	src := source("token") + before + fmt.Sprintf("local QUEUE_LIFE = %d\n", queueLife.Milliseconds()) + source("grant") + after
	// A script may also read a key as inspect.lua does, as a function.
	src = strings.Replace(src, "--@inspect\n", "local function inspect()\n"+source("inspect")+"end\n", 1)
	return &luaScript{src: withHold(src)}
}

func source(name string) string {
	src, err := luaFiles.ReadFile("lua/" + name + ".lua")
	if err != nil {
		panic(err) // embedded at build time: cannot happen
	}
	return string(src)
}

// numKeys are the key counts, boxed once as command arguments (see
// evalsha).
var numKeys = [...]any{"0", "1", "2", "3", "4", "5"}

// doer is what padlock sends commands and scripts through: a client, or
// one connection (see Lock.writer).
type doer interface {
	redis.Scripter
	Do(ctx context.Context, args ...any) *redis.Cmd
}

// evalsha runs s as a command built as ["evalsha", digest, numkeys,
// keys..., args...], with its arguments boxed once by the caller rather
// than on every call; digest may be nil, if it was not known when the
// caller built them. On NOSCRIPT (a new or flushed server) it sends the
// same as EVAL with the script's source, which also loads it.
func evalsha(ctx context.Context, rdb doer, s *luaScript, args []any) *redis.Cmd {
	if args[1] == nil {
		key, _ := args[3].(string) // every caller has a key
		sha := s.known(ctx, rdb, key)
		args = append([]any{"evalsha", sha}, args[2:]...)
		if sha == nil {
			args[0], args[1] = "eval", s.src
			return rdb.Do(ctx, args...)
		}
	}
	cmd := rdb.Do(ctx, args...)
	if isNoScript(cmd.Err()) {
		eval := make([]any, len(args))
		copy(eval, args)
		eval[0], eval[1] = "eval", s.src
		cmd = rdb.Do(ctx, eval...)
	}
	return cmd
}

// isNoScript reports whether err is Redis's NOSCRIPT: the server does not
// have the script. (It asks only of an error: go-redis's HasErrorPrefix
// allocates, even for nil.)
func isNoScript(err error) bool {
	return err != nil && redis.HasErrorPrefix(err, "NOSCRIPT")
}
