package padlock_test

import (
	"context"
	"math"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/padlock-go/padlock"
	"github.com/padlock-go/padlock/driver"
	"github.com/padlock-go/padlock/internal/redistest"
)

// A nil *Client, and a constructor given nothing to talk to, say which
// of them is nil, never "nil redis client" for a Client that is nil.
func TestANilClientSaysWhatIsNil(t *testing.T) {
	t.Parallel()
	e := newMini(t)
	ctx := e.ctx
	var nilClient *padlock.Client
	var typedNil *redis.Client
	tests := []struct {
		name string
		c    *padlock.Client
		says string
	}{
		{"nil *Client", nilClient, "a nil *padlock.Client (make one with padlock.New"},
		{"New(nil)", padlock.New(nil), "padlock.New was given a nil go-redis client"},
		{"New(typed nil)", padlock.New(typedNil), "padlock.New was given a nil go-redis client"},
		{"NewRedlock(nil)", padlock.NewRedlock(nil), "padlock.NewRedlock was given no go-redis clients"},
		{"NewRedlock with a nil client", padlock.NewRedlock([]redis.UniversalClient{e.rdb, nil}), "padlock.NewRedlock was given a nil go-redis client (at index 1)"},
		{"NewDriver(nil)", padlock.NewDriver(nil), "padlock.NewDriver was given a nil driver.Driver"},
		{"NewDriverRedlock(nil)", padlock.NewDriverRedlock(nil), "padlock.NewDriverRedlock was given no driver.Drivers"},
		{"NewDriverRedlock with a nil driver", padlock.NewDriverRedlock([]driver.Driver{nil}), "padlock.NewDriverRedlock was given a nil driver.Driver (at index 0)"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := tt.c
			fn := func(context.Context) error { return nil }
			calls := map[string]func() error{
				"TryAcquire": func() error { _, err := c.TryAcquire(ctx, e.key, time.Second); return err },
				"Acquire":    func() error { _, err := c.Acquire(ctx, e.key, time.Second); return err },
				"TryDo":      func() error { return c.TryDo(ctx, e.key, time.Second, fn) },
				"Do":         func() error { return c.Do(ctx, e.key, time.Second, fn) },
				"AcquireMany": func() error {
					_, err := c.AcquireMany(ctx, []string{e.key, e.key + ":2"}, time.Second)
					return err
				},
				"Campaign": func() error { _, err := c.Campaign(ctx, e.key, time.Second, "v"); return err },
				"Lead":     func() error { return c.Lead(ctx, e.key, time.Second, "v", fn) },
				"Leader":   func() error { _, err := c.Leader(ctx, e.key); return err },
				"Resume":   func() error { _, err := c.Resume(ctx, e.key, "token"); return err },
				"Inspect":  func() error { _, err := c.Inspect(ctx, e.key); return err },
				"Break":    func() error { _, err := c.Break(ctx, e.key); return err },
				"Check":    func() error { _, err := c.Check(ctx, e.key); return err },
			}
			for name, call := range calls {
				var err error
				require.NotPanics(t, func() { err = call() }, name)
				require.ErrorIs(t, err, padlock.ErrInvalid, name)
				assert.Contains(t, err.Error(), tt.says, name)
			}
			_, open := <-c.Observe(ctx, e.key)
			assert.False(t, open, "Observe's channel is closed")
			require.NotPanics(t, func() { require.NoError(t, c.Close()) })
			assert.False(t, e.mr.Exists(e.key))
		})
	}
}

// A ttl longer than padlock can pass to Redis (a time.Duration's largest
// whole number of milliseconds) is ErrInvalid, saying the limit, before
// any round trip: for an acquire, an Extend and WithMinHold. The limit
// itself is held.
func TestATTLRedisCannotHoldIsInvalid(t *testing.T) {
	t.Parallel()
	longest := time.Duration(math.MaxInt64/int64(time.Millisecond)) * time.Millisecond
	const limit = "2562047h47m16.854s (9223372036854ms)"
	both(t, func(t *testing.T, e *env) {
		ctx := e.ctx
		held, err := e.c.TryAcquire(ctx, e.key, longest)
		require.NoError(t, err, "the limit itself")
		assert.Greater(t, e.pttl(e.key), longest-time.Minute)
		overs := []time.Duration{math.MaxInt64, longest + 1}
		tests := map[string]func(d time.Duration) error{
			"TryAcquire": func(d time.Duration) error { _, err := e.c.TryAcquire(ctx, e.key+":free", d); return err },
			"Acquire":    func(d time.Duration) error { _, err := e.c.Acquire(ctx, e.key+":free", d); return err },
			"TryAcquire WithLimit": func(d time.Duration) error {
				_, err := e.c.TryAcquire(ctx, e.key+":free", d, padlock.WithLimit(2))
				return err
			},
			"TryAcquireMany": func(d time.Duration) error {
				_, err := e.c.TryAcquireMany(ctx, []string{e.key + ":free", e.key + ":free2"}, d)
				return err
			},
			"Campaign": func(d time.Duration) error { _, err := e.c.Campaign(ctx, e.key+":free", d, "v"); return err },
			"WithMinHold": func(d time.Duration) error {
				_, err := e.c.TryAcquire(ctx, e.key+":free", time.Second, padlock.WithMinHold(d))
				return err
			},
			"Extend": func(d time.Duration) error { return held.Extend(ctx, d) },
		}
		e.n.reset()
		for name, call := range tests {
			for _, d := range overs {
				err := call(d)
				require.ErrorIs(t, err, padlock.ErrInvalid, "%s(%v)", name, d)
				assert.Contains(t, err.Error(), limit, name)
				trips, cmds := e.n.reset()
				assert.Zero(t, trips, "%s(%v) made round trips: %v", name, d, cmds)
			}
		}
		assert.Empty(t, e.get(e.key+":free"))
		assert.Greater(t, e.pttl(e.key), longest-time.Minute, "Extend changed the held lock")
		require.NoError(t, held.Release(ctx))
	})
}

// sha and luaLine are what the first sentence of padlock's errors leaves
// to the wrapped Redis error: a script's digest, and a line of its Lua.
var (
	sha     = regexp.MustCompile(`[0-9a-f]{40}`)
	luaLine = regexp.MustCompile(`user_script`)
)

// assertPlainFirstSentence checks that the first sentence of err, up to
// its first ". ", names no script digest nor Lua line.
func assertPlainFirstSentence(t *testing.T, err error) {
	t.Helper()
	first, _, _ := strings.Cut(err.Error(), ". ")
	assert.False(t, sha.MatchString(first), "a script's digest in the first sentence: %v", err)
	assert.False(t, luaLine.MatchString(first), "a Lua line in the first sentence: %v", err)
}

// On a Redis whose memory is full (maxmemory with noeviction), every kind
// of acquire fails with ErrOutOfMemory, saying so and what to do in its
// first sentence, which names no script; Redis's error is still wrapped,
// and nothing is taken. A replica's address gets the same care (point
// padlock at the primary). On every server of the matrix; Check names
// both.
func TestOutOfMemoryAndAReplicaAreSaidInPadlocksWords(t *testing.T) {
	t.Parallel() // starts servers of its own; mostly waits
	for _, bin := range redistest.Servers(t) {
		t.Run(filepath.Base(bin), func(t *testing.T) {
			t.Parallel()
			primary := redistest.Start(t, redistest.WithBinary(bin))
			// The replica gets its data at once, not after the 5s a
			// diskless sync waits for others.
			require.NoError(t, primary.Client().ConfigSet(t.Context(), "repl-diskless-sync-delay", "0").Err())
			replica := redistest.StartReplica(t, primary, redistest.WithBinary(bin))
			t.Run("out of memory", func(t *testing.T) {
				full := redistest.Start(t, redistest.WithBinary(bin))
				c := padlock.New(full.Client())
				defer c.Close()
				held, err := c.TryAcquire(t.Context(), "lock:held", time.Minute)
				require.NoError(t, err)
				full.FillMemory(t)
				for name, err := range refusedAcquires(t, c) {
					require.ErrorIs(t, err, padlock.ErrOutOfMemory, name)
					assert.Contains(t, err.Error(), "Redis is out of memory", name)
					assert.Contains(t, err.Error(), "raise maxmemory or free memory", name)
					assertRedisErrorKept(t, err)
				}
				assert.Zero(t, full.Client().Exists(t.Context(), "lock:refused").Val(), "a refused acquire took the key")
				require.NoError(t, held.Extend(t.Context(), time.Minute), "PEXPIRE is no write Redis refuses when full")
				require.NoError(t, held.Release(t.Context()), "DEL is no write Redis refuses when full")

				r, err := c.Check(t.Context(), "lock:doctor")
				require.NoError(t, err)
				logReport(t, r)
				mem := findings(r, "memory")
				require.Len(t, mem, 1)
				assert.Equal(t, padlock.Danger, mem[0].Severity)
				assert.Contains(t, mem[0].Problem, "out of memory")
				assert.Contains(t, mem[0].Fix, "raise maxmemory")
				assertFindingsEndWithoutAPeriod(t, r)
			})
			t.Run("a replica", func(t *testing.T) {
				c := padlock.New(replica.Client())
				defer c.Close()
				for name, err := range refusedAcquires(t, c) {
					assert.Contains(t, err.Error(), "is a read-only replica: point padlock at the primary", name)
					assert.NotErrorIs(t, err, padlock.ErrOutOfMemory, name)
					assertRedisErrorKept(t, err)
				}
				r, err := c.Check(t.Context(), "lock:doctor")
				require.NoError(t, err)
				logReport(t, r)
				repl := findings(r, "replication")
				require.Len(t, repl, 1)
				assert.Equal(t, padlock.Danger, repl[0].Severity)
				assert.Contains(t, repl[0].Problem, "read-only replica")
				assert.Equal(t, "point padlock at the primary, "+primary.Addr(), repl[0].Fix)
				assert.Equal(t, primary.Addr(), r.Nodes[0].Primary)
				assertFindingsEndWithoutAPeriod(t, r)
			})
		})
	}
}

// refusedAcquires makes every kind of acquire of "lock:refused" on c,
// which Redis refuses, and returns their errors by name. Each is an
// error, not ErrNotAcquired, whose first sentence names no script.
func refusedAcquires(t *testing.T, c *padlock.Client) map[string]error {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
	defer cancel()
	const key = "lock:refused"
	errs := map[string]error{}
	_, errs["TryAcquire"] = c.TryAcquire(ctx, key, time.Minute)
	_, errs["TryAcquire WithFencing"] = c.TryAcquire(ctx, key, time.Minute, padlock.WithFencing())
	_, errs["TryAcquire WithLimit"] = c.TryAcquire(ctx, key, time.Minute, padlock.WithLimit(2))
	_, errs["Acquire"] = c.Acquire(ctx, key, time.Minute)
	_, errs["TryAcquireMany"] = c.TryAcquireMany(ctx, []string{key, key + ":2"}, time.Minute)
	for name, err := range errs {
		require.Error(t, err, name)
		assert.NotErrorIs(t, err, padlock.ErrNotAcquired, name)
		assertPlainFirstSentence(t, err)
		t.Logf("%s: %v", name, err)
	}
	return errs
}

// assertRedisErrorKept checks that err wraps Redis's own error, location
// in its script and all.
func assertRedisErrorKept(t *testing.T, err error) {
	t.Helper()
	var rerr redis.Error
	require.ErrorAs(t, err, &rerr)
	var serr driver.ServerError
	require.ErrorAs(t, err, &serr)
	assert.Equal(t, rerr.Error(), string(serr))
}

// assertFindingsEndWithoutAPeriod checks that no finding ends with a
// period (padlock doctor adds one) nor holds two in a row.
func assertFindingsEndWithoutAPeriod(t *testing.T, r padlock.Report) {
	t.Helper()
	for _, f := range r.Findings {
		for _, s := range []string{f.Problem, f.Fix} {
			assert.False(t, strings.HasSuffix(s, "."), "ends with a period: %q", s)
			assert.NotContains(t, s, "..")
		}
	}
}
