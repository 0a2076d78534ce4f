package padlock

import (
	"context"
	"embed"
	"fmt"
	"strconv"
	"strings"
	"sync/atomic"

	"github.com/padlock-go/padlock/driver"
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

// Load loads s into the server that r sends key's commands to, and learns
// its digest: SCRIPT LOAD, to key's master alone on a Cluster (the others
// answer NOSCRIPT once, and get EVAL).
func (s *luaScript) Load(ctx context.Context, r doer, key string) error {
	v, err := r.Do(ctx, key, "script", "load", s.src)
	if err != nil {
		return err
	}
	sha, ok := v.(string)
	if !ok {
		return fmt.Errorf("padlock: SCRIPT LOAD replied %v", v)
	}
	s.sha.CompareAndSwap(nil, any(sha))
	return nil
}

// known returns s's digest, learning it with SCRIPT LOAD on r (for key) if
// it is not known yet, or nil if the load failed (the caller sends EVAL).
func (s *luaScript) known(ctx context.Context, r doer, key string) any {
	if sha := s.digest(); sha != nil {
		return sha
	}
	if s.Load(ctx, r, key) != nil {
		return nil
	}
	return s.digest()
}

// Run runs s on r with keys and args, as evalsha does, and returns the
// script's reply.
func (s *luaScript) Run(ctx context.Context, r doer, keys []string, args ...any) (any, error) {
	cmd := make([]any, 0, 3+len(keys)+len(args))
	cmd = append(cmd, "evalsha", s.digest(), numKeysArg(len(keys)))
	for _, k := range keys {
		cmd = append(cmd, k)
	}
	return evalsha(ctx, r, s, append(cmd, args...))
}

// command is s as a command: ["evalsha", digest, numkeys, keys...,
// args...], or "eval" and s's source in place of the first two with eval
// or if its digest is not known (the caller learns it before: see known).
func (s *luaScript) command(keys []string, args []any, eval bool) []any {
	cmd := make([]any, 0, 3+len(keys)+len(args))
	if sha := s.digest(); sha != nil && !eval {
		cmd = append(cmd, "evalsha", sha)
	} else {
		cmd = append(cmd, "eval", s.src)
	}
	cmd = append(cmd, numKeysArg(len(keys)))
	for _, k := range keys {
		cmd = append(cmd, k)
	}
	return append(cmd, args...)
}

// batched is s as a command of a Batch, on keys with args (see command).
func (s *luaScript) batched(keys []string, args []any, eval bool) driver.Cmd {
	return driver.Cmd{Key: keys[0], Args: s.command(keys, args, eval)}
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

// numKeysArg is n as a command argument.
func numKeysArg(n int) any {
	if n < len(numKeys) {
		return numKeys[n]
	}
	return strconv.Itoa(n)
}

// doer is what padlock sends commands and scripts through: a Driver, or
// one pinned connection (see Lock.onWriter).
type doer interface {
	Do(ctx context.Context, key string, args ...any) (any, error)
}

// evalsha runs s as a command built as ["evalsha", digest, numkeys,
// keys..., args...] (the acquire script's boxed once per Lock, see
// newLock; Run's per call); digest may be nil, if it was not known when
// the caller built them: it is learned then (SCRIPT LOAD), or the command
// goes as EVAL if that fails. On NOSCRIPT (a new or flushed server) it sends the
// same as EVAL with the script's source, which also loads it.
func evalsha(ctx context.Context, r doer, s *luaScript, args []any) (any, error) {
	key := "" // a script with no key may go to any primary
	if args[2] != numKeys[0] {
		key, _ = args[3].(string)
	}
	if args[1] == nil {
		sha := s.known(ctx, r, key)
		args = append([]any{"evalsha", sha}, args[2:]...)
		if sha == nil {
			args[0], args[1] = "eval", s.src
			return r.Do(ctx, key, args...)
		}
	}
	reply, err := r.Do(ctx, key, args...)
	if isNoScript(err) {
		eval := make([]any, len(args))
		copy(eval, args)
		eval[0], eval[1] = "eval", s.src
		reply, err = r.Do(ctx, key, eval...)
	}
	return reply, err
}

// isNoScript reports whether err is Redis's NOSCRIPT: the server does not
// have the script. (It asks only of an error: finding an error reply in
// an error allocates.)
func isNoScript(err error) bool {
	return err != nil && driver.HasPrefix(err, "NOSCRIPT")
}

// Replies, as package driver gives them.

// asInt64 is an integer reply (or one in a string), or err.
func asInt64(reply any, err error) (int64, error) {
	if err != nil {
		return 0, err
	}
	switch v := reply.(type) {
	case int64:
		return v, nil
	case string:
		return strconv.ParseInt(v, 10, 64)
	}
	return 0, fmt.Errorf("padlock: unexpected reply %v, not an integer", reply)
}

// asSlice is an array reply, or err.
func asSlice(reply any, err error) ([]any, error) {
	if err != nil {
		return nil, err
	}
	if v, ok := reply.([]any); ok {
		return v, nil
	}
	return nil, fmt.Errorf("padlock: unexpected reply %v, not an array", reply)
}

// noScripts returns the indices of cmds, a Batch's, that the server
// answered NOSCRIPT.
func noScripts(cmds []driver.Cmd) []int {
	var idx []int
	for i := range cmds {
		if isNoScript(cmds[i].Err) {
			idx = append(idx, i)
		}
	}
	return idx
}

// batchSome sends cmds[i], for each i of idx, in one Batch on d, and puts
// their replies back in cmds.
func batchSome(ctx context.Context, d driver.Driver, cmds []driver.Cmd, idx []int) {
	some := make([]driver.Cmd, len(idx))
	for j, i := range idx {
		some[j] = driver.Cmd{Key: cmds[i].Key, Args: cmds[i].Args}
	}
	d.Batch(ctx, some)
	for j, i := range idx {
		cmds[i] = some[j]
	}
}
