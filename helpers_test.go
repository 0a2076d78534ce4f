package padlock_test

import (
	"context"
	"os"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/padlock-go/padlock"
	"github.com/padlock-go/padlock/internal/fipsoff"
	"github.com/padlock-go/padlock/internal/redistest"
)

func TestMain(m *testing.M) {
	redis.SetLogger(quiet{}) // tests that stop Redis would fill the log with dial errors
	if mode := os.Getenv("PADLOCK_CHILD"); mode != "" {
		os.Exit(runChild(mode)) // a lock holder in a child process (child_test.go)
	}
	redistest.Parallel(10)
	// go-redis (before v9.8) redials a server that refused connections
	// from a goroutine of its own, which ends by itself within a second of
	// the client's Close; it is not padlock's.
	goleak.VerifyTestMain(m, goleak.IgnoreAnyFunction("github.com/redis/go-redis/v9/internal/pool.(*ConnPool).tryDial"))
}

// longRun reports whether the long test mode is on (PADLOCK_LONG=1, as in
// CI): full-length fault workloads and larger counts. The default run keeps
// every path, with shorter runs and smaller counts.
func longRun() bool { return os.Getenv("PADLOCK_LONG") != "" }

// longOnly skips t unless the long mode is on: it is one of the slow
// tests (clusters, replicas, Sentinel, slow nodes, workloads of seconds),
// which CI runs; the default run stays under a minute.
func longOnly(t *testing.T) {
	t.Helper()
	if !longRun() {
		t.Skip("slow: runs in the long mode (PADLOCK_LONG=1, as in CI)")
	}
}

// fenceKey, queueKey and ticketKey name the side keys of a key without
// braces, as the README documents them: they begin with the key, and their
// hash tag is the whole key.
func fenceKey(key string) string         { return key + ":{" + key + "}:fence" }
func queueKey(key string) string         { return key + ":{" + key + "}:queue" }
func ticketKey(key, token string) string { return key + ":{" + key + "}:t:" + token }

// quiet is a go-redis logger that drops everything.
type quiet struct{}

func (quiet) Printf(context.Context, string, ...any) {}

// env is one Redis a test runs against: miniredis in-process, or a real
// redis-server that the test started.
type env struct {
	rdb *redis.Client        // what padlock is given
	raw *redis.Client        // a second client, to look at and change Redis behind padlock's back
	mr  *miniredis.Miniredis // set on miniredis
	srv *redistest.Server    // set on real Redis
	n   *counter             // counts the commands rdb sends
	c   *padlock.Client      // New(rdb)
	ctx context.Context      // the test's context
	t   testing.TB           //
	key string               // a key of the test's own
}

func newMini(t testing.TB, opts ...padlock.Option) *env {
	t.Helper()
	var mr *miniredis.Miniredis
	fipsoff.Run(func() { mr = miniredis.RunT(t) })
	return newEnv(t, mr.Addr(), mr, nil, opts)
}

func newReal(t testing.TB, sopts []redistest.Option, opts ...padlock.Option) *env {
	t.Helper()
	srv := redistest.Start(t, sopts...)
	return newEnv(t, srv.Addr(), nil, srv, opts)
}

func newEnv(t testing.TB, addr string, mr *miniredis.Miniredis, srv *redistest.Server, opts []padlock.Option) *env {
	e := &env{mr: mr, srv: srv, n: &counter{}, t: t, ctx: t.Context()}
	e.rdb = redis.NewClient(&redis.Options{Addr: addr})
	e.raw = redis.NewClient(&redis.Options{Addr: addr})
	e.rdb.AddHook(e.n)
	e.c = padlock.New(e.rdb, opts...)
	t.Cleanup(func() {
		_ = e.c.Close() // ends keep-alives and abandons pending release retries
		_ = e.rdb.Close()
		_ = e.raw.Close()
	})
	e.key = "lock:" + t.Name()
	return e
}

// both runs f against miniredis and against a real redis-server.
func both(t *testing.T, f func(t *testing.T, e *env), opts ...padlock.Option) {
	t.Run("miniredis", func(t *testing.T) { f(t, newMini(t, opts...)) })
	t.Run("redis", func(t *testing.T) { f(t, newReal(t, nil, opts...)) })
}

// heldElsewhere returns another Client of e's Redis, closed when the test
// ends, and e.key, which it holds for a minute.
func (e *env) heldElsewhere(t *testing.T) (*padlock.Client, *padlock.Lock) {
	t.Helper()
	other := padlock.New(e.raw)
	t.Cleanup(func() { _ = other.Close() })
	holder, err := other.TryAcquire(e.ctx, e.key, time.Minute)
	require.NoError(t, err)
	return other, holder
}

// another returns another Client of e's Redis, closed when the test ends
// (a Client that waited keeps its watch a while: see goleak in TestMain).
func (e *env) another(t *testing.T) *padlock.Client {
	t.Helper()
	c := padlock.New(e.rdb)
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// get returns the value of key in Redis, or "" if there is none.
func (e *env) get(key string) string {
	v, err := e.raw.Get(context.Background(), key).Result()
	if err == redis.Nil {
		return ""
	}
	if err != nil {
		e.t.Fatalf("GET %s: %v", key, err)
	}
	return v
}

// pttl returns the PTTL of key, as Redis reports it.
func (e *env) pttl(key string) time.Duration {
	d, err := e.raw.PTTL(context.Background(), key).Result()
	if err != nil {
		e.t.Fatalf("PTTL %s: %v", key, err)
	}
	return d
}

// patientCtx returns t's context with a deadline minutes away. A Release
// on it waits up to that deadline (or its lock's), not its 2s default:
// on CI's loaded -race run, where a Cluster's or a Sentinel's servers share
// 2 cores with the other tests, one round trip once took longer.
func patientCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// waitDone waits for ctx to be done, failing the test after limit.
func waitDone(t testing.TB, ctx context.Context, limit time.Duration) {
	t.Helper()
	select {
	case <-ctx.Done():
	case <-time.After(limit):
		t.Fatalf("context not done after %v", limit)
	}
}

// padlockGoroutines counts the goroutines that run padlock's code or that
// padlock started: go-redis starts goroutines of its own (dials, pool
// maintenance), which a count of padlock's cost must leave out.
func padlockGoroutines() int { return len(padlockStacks()) }

// padlockStacks returns the stacks of the goroutines padlockGoroutines
// counts.
func padlockStacks() []string {
	buf := make([]byte, 1<<20)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			buf = buf[:n]
			break
		}
		buf = make([]byte, 2*len(buf))
	}
	var stacks []string
	for _, g := range strings.Split(string(buf), "\n\n") {
		if strings.Contains(g, "github.com/padlock-go/padlock.") {
			stacks = append(stacks, g)
		}
	}
	return stacks
}

// moreClients returns n Clients of their own on e's server, closed when
// the test ends.
func moreClients(t *testing.T, e *env, n int) []*padlock.Client {
	var cs []*padlock.Client
	for range n {
		rdb := redis.NewClient(&redis.Options{Addr: e.srv.Addr()})
		c := padlock.New(rdb)
		t.Cleanup(func() {
			_ = c.Close()
			_ = rdb.Close()
		})
		cs = append(cs, c)
	}
	return cs
}

// slow is a backoff far longer than a test waits for a release: only
// the release (its grant, or its announcement) can wake the waiter.
var slow = padlock.WithBackoff(padlock.ExponentialBackoff(time.Minute, time.Minute))

// neverPoll is a backoff so long that only a notification (or the
// holder's ttl) can wake a waiter within a test.
var neverPoll = padlock.WithBackoff(padlock.ExponentialBackoff(time.Hour, time.Hour))

// waitFor waits until n clients wait in Redis for e.key.
func waitFor(t *testing.T, e *env, n int) {
	t.Helper()
	waitForOn(t, e.c, e.key, n)
}

// waitForOn waits until n clients wait in Redis for key, as c sees it.
func waitForOn(t *testing.T, c *padlock.Client, key string, n int) {
	t.Helper()
	require.Eventually(t, func() bool {
		info, err := c.Inspect(t.Context(), key)
		return err == nil && info.Waiting == n
	}, 5*time.Second, 5*time.Millisecond, "%d waiters of %q queued", n, key)
}

// waited is what an Acquire in a goroutine returned.
type waited struct {
	l   *padlock.Lock
	err error
}

// acquireLater runs Acquire in a goroutine and returns its result.
func acquireLater(ctx context.Context, c *padlock.Client, key string, ttl time.Duration, opts ...padlock.Option) <-chan waited {
	ch := make(chan waited, 1)
	go func() {
		l, err := c.Acquire(ctx, key, ttl, opts...)
		ch <- waited{l, err}
	}()
	return ch
}

func isScript(cmd redis.Cmder) bool {
	return cmd.Name() == "evalsha" || cmd.Name() == "eval"
}

// unspanned is a lock's value v without its span (" ~ms" after the
// token; see LockInfo.HeldFor): the token, and a space and the metadata
// if any.
func unspanned(v string) string {
	tok, rest, _ := strings.Cut(v, " ")
	if f, after, _ := strings.Cut(rest, " "); strings.HasPrefix(f, "~") {
		rest = after
	}
	if rest == "" {
		return tok
	}
	return tok + " " + rest
}
