package padlock_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/padlock-go/padlock"
	"github.com/padlock-go/padlock/internal/redistest"
)

// The compatibility matrix: every operation on every server binary listed
// in PADLOCK_SERVERS (or redis-server from PATH), as the default user, as a
// user limited to the "lock:" prefix with every command, and as a user with
// exactly the README's minimal rule.

// matrixServer is one server of the matrix, started for one test.
type matrixServer struct {
	srv     *redistest.Server
	admin   *redis.Client
	version [2]int // major, minor of the Redis protocol version it reports
	name    string
}

func startMatrixServer(t *testing.T, bin string) *matrixServer {
	t.Helper()
	srv := redistest.Start(t, redistest.WithBinary(bin))
	admin := srv.Client()
	info, err := admin.Info(t.Context(), "server").Result()
	require.NoError(t, err)
	m := regexp.MustCompile(`redis_version:(\d+)\.(\d+)`).FindStringSubmatch(info)
	require.NotNil(t, m, "redis_version in INFO server")
	major, _ := strconv.Atoi(m[1])
	minor, _ := strconv.Atoi(m[2])
	return &matrixServer{srv: srv, admin: admin, version: [2]int{major, minor}, name: filepath.Base(bin)}
}

// hasChannelACLs reports whether the server's ACLs cover pub/sub channels
// (Redis 6.2 and later).
func (s *matrixServer) hasChannelACLs() bool {
	return s.version[0] > 6 || s.version[0] == 6 && s.version[1] >= 2
}

// hasShardedPubSub reports whether the server has SPUBLISH and SSUBSCRIBE
// (Redis 7.0 and later).
func (s *matrixServer) hasShardedPubSub() bool { return s.version[0] >= 7 }

// readmeACL is the minimal ACL rule for a padlock user, exactly as the
// README gives it: the words after the password of its line
// "ACL SETUSER padlock-app on >CHANGE-ME ...".
func readmeACL(t *testing.T) []string {
	t.Helper()
	readme, err := os.ReadFile("README.md")
	require.NoError(t, err)
	m := regexp.MustCompile(`(?m)^ACL SETUSER padlock-app on >CHANGE-ME (.*)$`).FindSubmatch(readme)
	require.NotNil(t, m, "the README gives the ACL rule")
	return strings.Fields(string(m[1]))
}

// minimalACL is the README's minimal ACL rule for the server's version:
// the rule for Redis 7 and Valkey, less what the README says an older
// server does not know.
func (s *matrixServer) minimalACL(t *testing.T) []string {
	rule := readmeACL(t)
	return slices.DeleteFunc(rule, func(r string) bool {
		switch {
		case !s.hasChannelACLs() && (strings.HasPrefix(r, "&") || r == "resetchannels"):
			return true
		case !s.hasShardedPubSub() && (r == "+spublish" || r == "+ssubscribe" || r == "+sunsubscribe"):
			return true
		}
		return false
	})
}

// prefixACL admits the "lock:" keys and channels and every command.
func (s *matrixServer) prefixACL() []string {
	if s.hasChannelACLs() {
		return []string{"~lock:*", "resetchannels", "&lock:*", "+@all"}
	}
	return []string{"~lock:*", "+@all"}
}

// user creates an ACL user with rule and returns a client logged in as it.
func (s *matrixServer) user(t *testing.T, name string, rule []string) *redis.Client {
	t.Helper()
	args := []any{"ACL", "SETUSER", name, "reset", "on", ">pw-" + name}
	for _, r := range rule {
		args = append(args, r)
	}
	require.NoError(t, s.admin.Do(t.Context(), args...).Err(), "ACL SETUSER %v", rule)
	rdb := redis.NewClient(&redis.Options{Addr: s.srv.Addr(), Username: name, Password: "pw-" + name})
	t.Cleanup(func() { _ = rdb.Close() })
	return rdb
}

func TestCompatibilityMatrix(t *testing.T) {
	t.Parallel()
	for _, bin := range redistest.Servers(t) {
		t.Run(filepath.Base(bin), func(t *testing.T) {
			t.Parallel()
			s := startMatrixServer(t, bin)
			t.Logf("%s: Redis protocol version %d.%d", s.name, s.version[0], s.version[1])
			users := []struct {
				name string
				rdb  func(t *testing.T) *redis.Client
			}{
				{"default", func(*testing.T) *redis.Client { return s.srv.Client() }},
				{"prefix", func(t *testing.T) *redis.Client { return s.user(t, "prefix", s.prefixACL()) }},
				{"minimal", func(t *testing.T) *redis.Client { return s.user(t, "minimal", s.minimalACL(t)) }},
			}
			t.Run("users", func(t *testing.T) {
				for _, u := range users {
					t.Run(u.name, func(t *testing.T) {
						t.Parallel() // keys of their own
						everyOperation(t, s, func() *redis.Client { return u.rdb(t) })
					})
				}
			})
			t.Run("keys written", func(t *testing.T) { onlyKeysBeginningWithTheLock(t, s) })
		})
	}
}

// everyOperation runs every operation of padlock through clients that
// newRDB makes, checking each against what the server holds.
func everyOperation(t *testing.T, s *matrixServer, newRDB func() *redis.Client) {
	ctx := t.Context()
	a, b := padlock.New(newRDB()), padlock.New(newRDB())
	t.Cleanup(func() { _ = a.Close(); _ = b.Close() })
	key := "lock:" + t.Name()

	t.Run("try, conflict, extend, ttl, inspect, release", func(t *testing.T) {
		l, err := a.TryAcquire(ctx, key, 2*time.Second, padlock.WithMetadata("host=a"))
		require.NoError(t, err)
		assert.Equal(t, l.Token()+" host=a", unspanned(s.admin.Get(ctx, key).Val()))
		_, err = b.TryAcquire(ctx, key, time.Second)
		require.ErrorIs(t, err, padlock.ErrNotAcquired)
		require.NoError(t, l.Extend(ctx, 30*time.Second))
		assert.Greater(t, s.admin.PTTL(ctx, key).Val(), 20*time.Second, "extended in Redis")
		d, err := l.TTL(ctx)
		require.NoError(t, err)
		assert.Greater(t, d, 20*time.Second)
		info, err := b.Inspect(ctx, key)
		require.NoError(t, err)
		assert.Equal(t, padlock.LockInfo{Key: key, Held: true, Kind: "lock", Token: l.Token(), Metadata: "host=a", TTL: info.TTL, HeldFor: info.HeldFor}, info)
		require.NoError(t, l.Release(ctx))
		assert.Zero(t, s.admin.Exists(ctx, key).Val(), "released")
		require.ErrorIs(t, l.Release(ctx), padlock.ErrNotHeld)
	})

	t.Run("held for, and the listing", func(t *testing.T) {
		took := time.Now()
		l, err := a.TryAcquire(ctx, key+":list:a", 2*time.Second, padlock.WithMetadata("host=a"), padlock.WithFencing())
		require.NoError(t, err)
		_, err = a.TryAcquire(ctx, key+":list:n", 2*time.Second, padlock.WithLimit(2))
		require.NoError(t, err)
		_, err = a.TryAcquire(ctx, key+":list:s", 2*time.Second, padlock.WithShared())
		require.NoError(t, err)
		time.Sleep(100 * time.Millisecond)
		require.NoError(t, l.Extend(ctx, 30*time.Second))
		// A key outside lock:*, which the prefix user may not read: its
		// listing skips it, as the others do a value that is not a lock.
		require.NoError(t, s.admin.Set(ctx, "secret:"+key, "plain", time.Minute).Err())
		kinds := map[string]string{}
		for info, err := range b.Locks(ctx, "*") {
			require.NoError(t, err)
			if !strings.HasPrefix(info.Key, key+":list:") {
				continue // the other users' locks
			}
			kinds[info.Key] = info.Kind
			assert.True(t, info.HeldFor >= 95*time.Millisecond && info.HeldFor <= time.Since(took)+5*time.Millisecond, "%s held for %v", info.Key, info.HeldFor)
		}
		assert.Equal(t, map[string]string{key + ":list:a": "lock", key + ":list:n": "semaphore", key + ":list:s": "shared"}, kinds)
	})

	t.Run("a release under a minimum keeps the key until then", func(t *testing.T) {
		semaphore := []padlock.Option{padlock.WithLimit(1)}
		for i, kind := range []struct{ hold, wait []padlock.Option }{{nil, nil}, {semaphore, semaphore}, {[]padlock.Option{padlock.WithShared()}, nil}} {
			k := key + ":min" + strconv.Itoa(i)
			l, err := a.TryAcquire(ctx, k, 10*time.Second, append(kind.hold, padlock.WithMinHold(400*time.Millisecond))...)
			require.NoError(t, err)
			require.NoError(t, l.Release(ctx))
			info, err := b.Inspect(ctx, k)
			require.NoError(t, err)
			require.True(t, info.Held, "kept for its minimum")
			assert.LessOrEqual(t, info.TTL, 400*time.Millisecond)
			wctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			w, err := b.Acquire(wctx, k, time.Second, kind.wait...)
			cancel()
			require.NoError(t, err, "served at the minimum")
			require.NoError(t, w.Release(ctx))
		}
	})

	t.Run("a waiter in another client is woken by the release", func(t *testing.T) {
		k := key + ":wake"
		held, err := a.TryAcquire(ctx, k, 30*time.Second)
		require.NoError(t, err)
		got := make(chan error, 1)
		go func() {
			wctx, cancel := context.WithTimeout(ctx, 20*time.Second)
			defer cancel()
			l, err := b.Acquire(wctx, k, 30*time.Second, slow)
			if err == nil {
				err = l.Release(ctx)
			}
			got <- err
		}()
		require.Eventually(t, func() bool { return s.admin.Exists(ctx, k+":{"+k+"}:queue").Val() == 1 },
			5*time.Second, 5*time.Millisecond, "the waiter queued")
		time.Sleep(200 * time.Millisecond) // and subscribed
		released := time.Now()
		require.NoError(t, held.Release(ctx))
		select {
		case err := <-got:
			require.NoError(t, err)
			t.Logf("woken %v after the release", time.Since(released).Round(time.Millisecond))
		case <-time.After(10 * time.Second):
			t.Fatal("the waiter was not woken by the release")
		}
	})

	t.Run("a waiter is served after a plain DEL", func(t *testing.T) {
		// Redis is the truth: the renewal of its ticket (every 250ms for a
		// ttl of 500ms) looks at the key, as this user may.
		k := key + ":del"
		require.NoError(t, s.admin.Set(ctx, k, "by hand", 0).Err())
		got := acquireLater(ctx, b, k, 500*time.Millisecond)
		require.Eventually(t, func() bool { return s.admin.Exists(ctx, k+":{"+k+"}:queue").Val() == 1 },
			5*time.Second, 5*time.Millisecond, "the waiter queued")
		require.NoError(t, s.admin.Del(ctx, k).Err())
		select {
		case w := <-got:
			require.NoError(t, w.err)
			require.NoError(t, w.l.Release(ctx))
		case <-time.After(3 * time.Second):
			t.Fatal("the waiter was not served after the DEL")
		}
	})

	t.Run("waiters in one client", func(t *testing.T) {
		k := key + ":local"
		held, err := a.TryAcquire(ctx, k, 30*time.Second)
		require.NoError(t, err)
		var wg sync.WaitGroup
		defer wg.Wait() // the waiters end by their deadline, if nothing else
		var mu sync.Mutex
		var order []int
		for i := range 3 {
			wg.Go(func() {
				wctx, cancel := context.WithTimeout(ctx, 20*time.Second)
				defer cancel()
				l, err := b.Acquire(wctx, k, 30*time.Second, slow)
				if !assert.NoError(t, err, "waiter %d", i) {
					return
				}
				mu.Lock()
				order = append(order, i)
				mu.Unlock()
				assert.NoError(t, l.Release(ctx))
			})
			time.Sleep(50 * time.Millisecond) // arrive in order
		}
		time.Sleep(200 * time.Millisecond)
		require.NoError(t, held.Release(ctx))
		wg.Wait()
		assert.Equal(t, []int{0, 1, 2}, order, "served in order of arrival")
	})

	t.Run("fencing", func(t *testing.T) {
		k := key + ":fenced"
		for want := int64(1); want <= 3; want++ {
			l, err := a.TryAcquire(ctx, k, time.Second, padlock.WithFencing())
			require.NoError(t, err)
			assert.Equal(t, want, l.Fence())
			info, err := b.Inspect(ctx, k)
			require.NoError(t, err)
			assert.Equal(t, want, info.Fence)
			require.NoError(t, l.Release(ctx))
		}
		assert.Equal(t, "3", s.admin.Get(ctx, fenceKey(k)).Val())
	})

	t.Run("keep-alive", func(t *testing.T) {
		k := key + ":kept"
		l, err := a.TryAcquire(ctx, k, 300*time.Millisecond)
		require.NoError(t, err)
		kctx, stop := l.KeepAlive(ctx)
		time.Sleep(time.Second) // over three ttls
		require.NoError(t, kctx.Err(), "still held")
		assert.Equal(t, l.Token(), unspanned(s.admin.Get(ctx, k).Val()))
		stop()
		require.NoError(t, l.Release(ctx))
	})

	t.Run("multi-key", func(t *testing.T) {
		keys := []string{key + "{m}:a", key + "{m}:b"}
		l, err := a.TryAcquireMany(ctx, keys, 5*time.Second)
		require.NoError(t, err)
		_, err = b.TryAcquireMany(ctx, keys[1:], time.Second)
		require.ErrorIs(t, err, padlock.ErrNotAcquired)
		require.NoError(t, l.Extend(ctx, 10*time.Second))
		_, err = l.TTL(ctx)
		require.NoError(t, err)
		require.NoError(t, l.Release(ctx))
		assert.Zero(t, s.admin.Exists(ctx, keys...).Val())
	})

	t.Run("semaphore", func(t *testing.T) {
		k := key + ":sem"
		two := padlock.WithLimit(2)
		l1, err := a.TryAcquire(ctx, k, 5*time.Second, two, padlock.WithFencing())
		require.NoError(t, err)
		l2, err := b.TryAcquire(ctx, k, 5*time.Second, two, padlock.WithFencing())
		require.NoError(t, err)
		_, err = a.TryAcquire(ctx, k, time.Second, two)
		require.ErrorIs(t, err, padlock.ErrNotAcquired)
		require.NoError(t, l1.Extend(ctx, 10*time.Second))
		_, err = l2.TTL(ctx)
		require.NoError(t, err)
		info, err := a.Inspect(ctx, k)
		require.NoError(t, err)
		assert.Len(t, info.Holders, 2)
		woken := make(chan error, 1)
		go func() {
			l, err := b.Acquire(ctx, k, 5*time.Second, two)
			if err == nil {
				err = l.Release(ctx)
			}
			woken <- err
		}()
		time.Sleep(100 * time.Millisecond)
		require.NoError(t, l1.Release(ctx))
		require.NoError(t, <-woken)
		require.NoError(t, l2.Release(ctx))
		assert.Zero(t, s.admin.Exists(ctx, k).Val())
	})

	t.Run("shared", func(t *testing.T) {
		k := key + ":rw"
		r1, err := a.TryAcquire(ctx, k, 5*time.Second, padlock.WithShared())
		require.NoError(t, err)
		r2, err := b.TryAcquire(ctx, k, 5*time.Second, padlock.WithShared())
		require.NoError(t, err)
		_, err = a.TryAcquire(ctx, k, time.Second)
		require.ErrorIs(t, err, padlock.ErrNotAcquired)
		require.NoError(t, r1.Extend(ctx, 10*time.Second))
		got := make(chan error, 1)
		go func() {
			w, err := a.Acquire(ctx, k, 5*time.Second)
			if err == nil {
				err = w.Release(ctx)
			}
			got <- err
		}()
		time.Sleep(100 * time.Millisecond)
		require.NoError(t, r1.Release(ctx))
		require.NoError(t, r2.Release(ctx))
		require.NoError(t, <-got)
		assert.Zero(t, s.admin.Exists(ctx, k).Val())
	})

	t.Run("do", func(t *testing.T) {
		k := key + ":do"
		ran := false
		err := b.Do(ctx, k, time.Second, func(ctx context.Context) error {
			ran = padlock.LockFromContext(ctx).Key() == k
			return nil
		}, padlock.WithFencing())
		require.NoError(t, err)
		assert.True(t, ran)
		require.NoError(t, b.TryDo(ctx, k, time.Second, func(context.Context) error { return nil }))
		assert.Zero(t, s.admin.Exists(ctx, k).Val())
	})

	t.Run("token, resume, break", func(t *testing.T) {
		k := key + ":token"
		l, err := a.TryAcquire(ctx, k, 5*time.Second, padlock.WithToken("job-1"), padlock.WithFencing())
		require.NoError(t, err)
		again, err := b.TryAcquire(ctx, k, 5*time.Second, padlock.WithToken("job-1"), padlock.WithFencing())
		require.NoError(t, err)
		assert.Equal(t, l.Fence(), again.Fence())
		r, err := b.Resume(ctx, k, "job-1", padlock.WithFencing())
		require.NoError(t, err)
		assert.Equal(t, l.Fence(), r.Fence())
		require.NoError(t, r.Extend(ctx, 10*time.Second))
		info, err := b.Break(ctx, k)
		require.NoError(t, err)
		assert.Equal(t, "job-1", info.Token)
		require.ErrorIs(t, l.Release(ctx), padlock.ErrNotHeld)
		next, err := a.TryAcquire(ctx, k, time.Second, padlock.WithFencing())
		require.NoError(t, err)
		assert.Equal(t, l.Fence()+2, next.Fence(), "Break advanced the counter")
		require.NoError(t, next.Release(ctx))
	})

	t.Run("election", func(t *testing.T) {
		k := key + ":leader"
		states := b.Observe(ctx, k)
		assert.Equal(t, padlock.LeaderInfo{}, <-states)
		l, err := a.Campaign(ctx, k, 5*time.Second, "host-a")
		require.NoError(t, err)
		st := <-states
		assert.Equal(t, "host-a", st.Value)
		assert.Equal(t, l.Term(), st.Term)
		waiting := campaignLater(t, b, ctx, k, 5*time.Second, "host-b")
		require.Eventually(t, func() bool { return s.admin.Exists(ctx, k+":{"+k+"}:queue").Val() == 1 },
			5*time.Second, 5*time.Millisecond, "the candidate queued")
		require.NoError(t, l.Proclaim(ctx, "host-a2"))
		require.NoError(t, l.Resign(ctx))
		n := <-waiting
		for st = <-states; st.Value != "host-b"; st = <-states {
		}
		assert.Equal(t, n.Term(), st.Term)
		require.NoError(t, n.Resign(ctx))
	})
}

// onlyKeysBeginningWithTheLock runs a full cycle of every operation on the
// lock "lock:x" (and a multi-key lock on keys that begin with it) while
// watching keyspace notifications, and checks that every key written
// begins with "lock:x".
func onlyKeysBeginningWithTheLock(t *testing.T, s *matrixServer) {
	ctx := t.Context()
	// Start clean: earlier tests' keys expiring now would be noise.
	require.NoError(t, s.admin.FlushAll(ctx).Err())
	require.NoError(t, s.admin.ConfigSet(ctx, "notify-keyspace-events", "KA").Err())
	watch := s.srv.Client().PSubscribe(ctx, "__keyspace@0__:*")
	defer watch.Close()
	_, err := watch.Receive(ctx)
	require.NoError(t, err)
	var mu sync.Mutex
	written := map[string]bool{}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for msg := range watch.Channel() {
			mu.Lock()
			written[strings.TrimPrefix(msg.Channel, "__keyspace@0__:")] = true
			mu.Unlock()
		}
	}()

	const key = "lock:x"
	a, b := padlock.New(s.srv.Client()), padlock.New(s.srv.Client())
	defer a.Close()
	defer b.Close()
	l, err := a.TryAcquire(ctx, key, 10*time.Second, padlock.WithFencing(), padlock.WithMetadata("m"))
	require.NoError(t, err)
	require.NoError(t, l.Extend(ctx, 20*time.Second))
	_, err = l.TTL(ctx)
	require.NoError(t, err)
	_, err = b.Inspect(ctx, key)
	require.NoError(t, err)
	// A waiter in the other client queues in Redis, is handed the lock, and
	// keeps it alive.
	type result struct {
		l   *padlock.Lock
		err error
	}
	waited := make(chan result, 1)
	go func() {
		wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		w, err := b.Acquire(wctx, key, 300*time.Millisecond, padlock.WithFencing())
		waited <- result{w, err}
	}()
	require.Eventually(t, func() bool { return s.admin.Exists(ctx, key+":{"+key+"}:queue").Val() == 1 },
		5*time.Second, 5*time.Millisecond)
	require.NoError(t, l.Release(ctx))
	r := <-waited
	require.NoError(t, r.err)
	w := r.l
	_, stop := w.KeepAlive(ctx)
	time.Sleep(400 * time.Millisecond)
	stop()
	require.NoError(t, w.Release(ctx))
	// A holder, and a waiter in the other client that gives up (and leaves
	// the queue): a lock, a semaphore, and a shared hold with an exclusive
	// waiter.
	sem, rw := key+":sem", key+":rw"
	for _, tt := range []struct {
		key            string
		holder, waiter []padlock.Option
	}{
		{key, nil, nil},
		{sem, []padlock.Option{padlock.WithLimit(1), padlock.WithFencing()}, []padlock.Option{padlock.WithLimit(1)}},
		{rw, []padlock.Option{padlock.WithShared(), padlock.WithFencing()}, nil},
	} {
		h, err := a.TryAcquire(ctx, tt.key, time.Second, tt.holder...)
		require.NoError(t, err, tt.key)
		gctx, cancel := context.WithTimeout(ctx, 150*time.Millisecond)
		_, err = b.Acquire(gctx, tt.key, time.Second, tt.waiter...)
		cancel()
		require.ErrorIs(t, err, padlock.ErrNotAcquired, tt.key)
		require.NoError(t, h.Extend(ctx, 2*time.Second), tt.key)
		require.NoError(t, h.Release(ctx), tt.key)
	}
	mh, err := a.TryAcquire(ctx, key, time.Second, padlock.WithMinHold(time.Millisecond))
	require.NoError(t, err)
	require.NoError(t, mh.Release(ctx))
	m, err := a.TryAcquireMany(ctx, []string{key + "{m}:1", key + "{m}:2"}, time.Second)
	require.NoError(t, err)
	require.NoError(t, m.Extend(ctx, 2*time.Second))
	require.NoError(t, m.Release(ctx))
	require.NoError(t, a.Do(ctx, key, time.Second, func(context.Context) error { return nil }))

	// The notifications of the last writes arrive after the replies.
	require.NoError(t, s.admin.Set(ctx, "sentinel:end", "1", 0).Err())
	require.Eventually(t, func() bool {
		mu.Lock()
		defer mu.Unlock()
		return written["sentinel:end"]
	}, 5*time.Second, 5*time.Millisecond)
	_ = watch.Close()
	<-done
	mu.Lock()
	defer mu.Unlock()
	delete(written, "sentinel:end")
	var keys []string
	for k := range written {
		keys = append(keys, k)
		assert.True(t, strings.HasPrefix(k, key), "padlock wrote %q, which does not begin with %q", k, key)
	}
	slices.Sort(keys)
	t.Logf("keys written: %v", keys)
	for _, want := range []string{key, fenceKey(key), key + ":{" + key + "}:queue", key + ":{" + key + "}:mins", key + "{m}:1",
		sem, sem + ":{" + sem + "}:queue", sem + ":{" + sem + "}:limit", sem + ":{" + sem + "}:fences", fenceKey(sem),
		rw, rw + ":{" + rw + "}:shared", rw + ":{" + rw + "}:fences", rw + ":{" + rw + "}:queue"} {
		assert.True(t, written[want], "%s was written (the watch sees writes)", want)
	}
}

// A refusal for want of permission (NOPERM, or a script's command
// refused) says which permissions padlock needs, on every server.
func TestNoPermissionErrorSaysWhatToDo(t *testing.T) {
	t.Parallel()
	for _, bin := range redistest.Servers(t) {
		t.Run(filepath.Base(bin), func(t *testing.T) {
			t.Parallel()
			s := startMatrixServer(t, bin)
			tests := []struct {
				name string
				rule []string
			}{
				{"key not admitted", []string{"~other:*", "+@all"}},
				{"script's command not admitted", []string{"~lock:*", "+@all", "-set"}},
				{"script not admitted", []string{"~lock:*", "+@all", "-evalsha", "-eval"}},
			}
			for i, tt := range tests {
				t.Run(tt.name, func(t *testing.T) {
					c := padlock.New(s.user(t, "narrow"+strconv.Itoa(i), tt.rule))
					_, err := c.TryAcquire(t.Context(), "lock:a", time.Second)
					require.Error(t, err)
					t.Log(err)
					assert.Contains(t, err.Error(), `"Redis servers and ACL users" in padlock's README`)
					assert.Contains(t, err.Error(), `"lock:a"`)
					assertPlainFirstSentence(t, err)
					var rerr redis.Error
					assert.True(t, errors.As(err, &rerr), "the Redis error is wrapped: %v", err)
					assert.False(t, errors.Is(err, padlock.ErrNotAcquired))
					assert.Zero(t, s.admin.Exists(t.Context(), "lock:a").Val())
				})
			}
		})
	}
}

// A server older than Redis 6.0 gets one clear error, not a Lua error. No
// such server is in the matrix, so a loopback stand-in answers as Redis 5
// does: no HELLO, and padlock's scripts fail their version check (their
// Lua has no redis.setresp) with the reply the check returns.
func TestOldServerIsUnsupported(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	var wg sync.WaitGroup
	defer wg.Wait()
	defer ln.Close()
	wg.Go(func() {
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			wg.Go(func() { redis5StandIn(conn) })
		}
	})
	rdb := redis.NewClient(&redis.Options{Addr: ln.Addr().String(), MaxRetries: -1})
	defer rdb.Close()
	c := padlock.New(rdb)
	defer c.Close()
	ctx := t.Context()
	_, err = c.TryAcquire(ctx, "lock:old", time.Second)
	require.ErrorIs(t, err, padlock.ErrUnsupported)
	assert.Contains(t, err.Error(), "Redis 6.0 or later")
	_, err = c.Acquire(ctx, "lock:old", time.Second)
	require.ErrorIs(t, err, padlock.ErrUnsupported)
	_, err = c.TryAcquireMany(ctx, []string{"lock:{o}:1", "lock:{o}:2"}, time.Second)
	require.ErrorIs(t, err, padlock.ErrUnsupported)
}

// redis5StandIn answers RESP commands on conn as a Redis 5 would answer
// padlock until the connection closes: HELLO is unknown, and every script
// of padlock's fails its version check.
func redis5StandIn(conn net.Conn) {
	defer conn.Close()
	r := bufio.NewReader(conn)
	for {
		args, err := readCommand(r)
		if err != nil {
			return
		}
		reply := "-ERR unknown command '" + args[0] + "'\r\n"
		switch strings.ToUpper(args[0]) {
		case "PING":
			reply = "+PONG\r\n"
		case "EVALSHA", "EVAL":
			reply = "-PADLOCK_UNSUPPORTED_SERVER\r\n"
		}
		if _, err := conn.Write([]byte(reply)); err != nil {
			return
		}
	}
}

// readCommand reads one RESP array of bulk strings.
func readCommand(r *bufio.Reader) ([]string, error) {
	line, err := r.ReadString('\n')
	if err != nil {
		return nil, err
	}
	n, err := strconv.Atoi(strings.TrimSpace(strings.TrimPrefix(line, "*")))
	if err != nil || n < 1 {
		return nil, fmt.Errorf("bad array header %q", line)
	}
	args := make([]string, n)
	for i := range args {
		if line, err = r.ReadString('\n'); err != nil {
			return nil, err
		}
		size, err := strconv.Atoi(strings.TrimSpace(strings.TrimPrefix(line, "$")))
		if err != nil {
			return nil, err
		}
		buf := make([]byte, size+2)
		if _, err := io.ReadFull(r, buf); err != nil {
			return nil, err
		}
		args[i] = string(buf[:size])
	}
	return args, nil
}
