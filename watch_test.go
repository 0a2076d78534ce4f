package padlock_test

import (
	"context"
	"fmt"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/padlock-go/padlock"
	"github.com/padlock-go/padlock/internal/redistest"
)

// freeBound is how soon a waiter holds a key that something other than
// padlock freed, in these tests: the watch serves it within milliseconds
// (bench's free scenario measures it), the ticket renewal only after
// seconds (a minute-long wait's ticket is renewed every 2.5s).
const freeBound = time.Second

// frees are the ways a key is freed behind padlock's back, each by an
// admin client of the server.
var frees = []struct {
	name string
	free func(ctx context.Context, admin *redis.Client, key string) error
}{
	{"DEL", func(ctx context.Context, admin *redis.Client, key string) error { return admin.Del(ctx, key).Err() }},
	{"UNLINK", func(ctx context.Context, admin *redis.Client, key string) error { return admin.Unlink(ctx, key).Err() }},
	{"FLUSHALL", func(ctx context.Context, admin *redis.Client, _ string) error { return admin.FlushAll(ctx).Err() }},
	{"another library's release", func(ctx context.Context, admin *redis.Client, key string) error {
		return admin.Eval(ctx, `return redis.call("del", KEYS[1])`, []string{key}).Err()
	}},
	{"an expiry set by hand", func(ctx context.Context, admin *redis.Client, key string) error {
		return admin.PExpire(ctx, key, time.Millisecond).Err()
	}},
	{"another library's overwrite", func(ctx context.Context, admin *redis.Client, key string) error {
		return admin.Set(ctx, key, "another library's token", time.Millisecond).Err()
	}},
	{"an eviction", func(ctx context.Context, admin *redis.Client, _ string) error {
		// Redis evicts as the limit comes down: every key with a ttl
		// (the lock, the waiter's queue), whose ttl is the shortest
		// first, as memory runs short.
		_, err := admin.Pipelined(ctx, func(p redis.Pipeliner) error {
			p.ConfigSet(ctx, "maxmemory-policy", "volatile-ttl")
			p.ConfigSet(ctx, "maxmemory", "1")
			p.ConfigSet(ctx, "maxmemory", "0")
			p.ConfigSet(ctx, "maxmemory-policy", "noeviction")
			return nil
		})
		return err
	}},
}

// servedAfterFree has rdb's Client wait for key, which another Client
// holds for a minute, frees it with free, and checks that the waiter
// holds it soon after.
func servedAfterFree(t *testing.T, admin, rdb *redis.Client, key string, free func(context.Context, *redis.Client, string) error) {
	t.Helper()
	ctx := t.Context()
	holderClient := padlock.New(admin)
	t.Cleanup(func() { _ = holderClient.Close() })
	_, err := holderClient.TryAcquire(ctx, key, time.Minute)
	require.NoError(t, err)
	c := padlock.New(rdb, neverPoll)
	t.Cleanup(func() { _ = c.Close() })
	got := acquireLater(ctx, c, key, time.Minute)
	waitForOn(t, holderClient, key, 1)
	time.Sleep(50 * time.Millisecond) // the watch has read the key
	freed := time.Now()
	require.NoError(t, free(ctx, admin, key))
	heldWithin(t, got, freed, freeBound, "the key was freed")
}

// heldWithin waits for got, an Acquire that what (a free) is to serve,
// for bound after freed, and releases its Lock.
func heldWithin(t *testing.T, got <-chan waited, freed time.Time, bound time.Duration, what string) {
	t.Helper()
	select {
	case w := <-got:
		t.Logf("served %v after %s", time.Since(freed), what)
		require.NoError(t, w.err)
		require.NoError(t, w.l.Release(context.Background()))
	case <-time.After(bound):
		t.Fatalf("the waiter was not served within %v of %s", bound, what)
	}
}

// ownServer starts a server of the test's own, and returns a client of
// it to change keys behind padlock's back, a Client on it to hold, and
// one on a go-redis client of its own to wait (it never polls on a
// backoff).
func ownServer(t *testing.T) (admin *redis.Client, holder, waiter *padlock.Client) {
	t.Helper()
	srv := redistest.Start(t)
	admin = srv.Client()
	holder = padlock.New(admin)
	t.Cleanup(func() { _ = holder.Close() })
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr()})
	waiter = padlock.New(rdb, neverPoll)
	t.Cleanup(func() { _ = waiter.Close(); _ = rdb.Close() })
	return admin, holder, waiter
}

// trackedReads are the reads that the watch and the ticket renewal have
// made on the server of admin.
func trackedReads(t *testing.T, admin *redis.Client) int64 {
	return redistest.Calls(t, admin, "mget") + redistest.Calls(t, admin, "pttl") + redistest.Calls(t, admin, "exists")
}

// A key freed by anything but padlock is held by its waiter at once, on
// every server of the matrix: through CLIENT TRACKING as the default
// user and as the README's user with the optional permissions, by the
// Client's poll as the README's user without them.
func TestAWaiterIsServedWhateverFreesTheKey(t *testing.T) {
	for _, bin := range redistest.Servers(t) {
		t.Run(strings.TrimPrefix(bin[strings.LastIndexByte(bin, '/')+1:], "redis-server-"), func(t *testing.T) {
			t.Parallel()
			s := startMatrixServer(t, bin)
			users := []struct {
				name  string
				polls bool // the user may not track: its Client polls
				rdb   func(t *testing.T) *redis.Client
			}{
				{"default user", false, func(t *testing.T) *redis.Client {
					rdb := redis.NewClient(&redis.Options{Addr: s.srv.Addr()})
					t.Cleanup(func() { _ = rdb.Close() })
					return rdb
				}},
				{"README's user", true, func(t *testing.T) *redis.Client {
					return s.user(t, "least", s.minimalACL(t))
				}},
				{"README's user with tracking", false, func(t *testing.T) *redis.Client {
					return s.user(t, "tracking", append(s.minimalACL(t), s.trackingACL(t)...))
				}},
			}
			for _, u := range users {
				for _, f := range frees {
					t.Run(u.name+"/"+f.name, func(t *testing.T) {
						servedAfterFree(t, s.admin, u.rdb(t), "lock:free:"+f.name, f.free)
					})
				}
				t.Run(u.name+"/Check", func(t *testing.T) {
					c := padlock.New(u.rdb(t))
					defer c.Close()
					r, err := c.Check(t.Context(), "lock:free:check")
					require.NoError(t, err)
					i := slices.IndexFunc(r.Findings, func(f padlock.Finding) bool { return f.Topic == "waiting" })
					if !u.polls {
						require.Equal(t, -1, i, "no finding on waiting: %v", r.Findings)
						return
					}
					require.GreaterOrEqual(t, i, 0, "Check says that the Client polls: %v", r.Findings)
					require.Contains(t, r.Findings[i].Fix, "+client|tracking", "and which permission would give it the fast path")
				})
			}
		})
	}
}

// trackingACL is the README's optional rule for the fast path, less
// what the server does not know.
func (s *matrixServer) trackingACL(t *testing.T) []string {
	t.Helper()
	readme, err := os.ReadFile("README.md")
	require.NoError(t, err)
	m := regexp.MustCompile(`(?m)^ACL SETUSER padlock-app (\+client\|tracking.*)$`).FindSubmatch(readme)
	require.NotNil(t, m, "the README gives the tracking rule")
	return slices.DeleteFunc(strings.Fields(string(m[1])), func(r string) bool {
		return !s.hasChannelACLs() && strings.HasPrefix(r, "&")
	})
}

// On a Cluster, a waiter whose key's slot moves to another master while
// it waits is watched there: its Client reads the key on the new master
// only when it changes (no poll), and a DEL there serves it at once.
func TestAWaiterIsServedAfterADELOnAClusterWhoseSlotMoved(t *testing.T) {
	t.Parallel() // starts servers of its own; mostly waits
	nodes, cc := startCluster(t)
	ctx := t.Context()
	holder := padlock.New(cc)
	defer holder.Close()
	waiter := padlock.New(cc, neverPoll)
	defer waiter.Close()
	const key = "lock:{moving-waiter}"
	_, err := holder.TryAcquire(ctx, key, time.Minute)
	require.NoError(t, err)
	got := acquireLater(ctx, waiter, key, time.Minute)
	waitForOn(t, holder, key, 1)

	to, _ := moveSlot(t, nodes, cc, key)
	time.Sleep(1500 * time.Millisecond) // the watch learns the new master (a MOVED) and tracks the key there
	before := trackedReads(t, to.Client())
	time.Sleep(time.Second)
	idle := trackedReads(t, to.Client()) - before
	t.Logf("reads of the key on its new master in 1s of waiting: %d", idle)
	require.LessOrEqual(t, idle, int64(1), "the key is tracked on its new master, not polled") // a ticket renewal's look may fall in the second

	freed := time.Now()
	require.NoError(t, to.Client().Del(ctx, key).Err())
	heldWithin(t, got, freed, freeBound, "the DEL")
}

// trackingConns are the ids of the connections of the server of admin
// that take part in CLIENT TRACKING: those with it on (flag t), and any
// they redirect to.
func trackingConns(t *testing.T, admin *redis.Client) []string {
	t.Helper()
	list, err := admin.ClientList(t.Context()).Result()
	require.NoError(t, err)
	var ids []string
	for _, line := range strings.Split(list, "\n") {
		var id string
		on := false
		for _, f := range strings.Fields(line) {
			k, v, _ := strings.Cut(f, "=")
			switch {
			case k == "id":
				id = v
			case k == "flags" && strings.Contains(v, "t"):
				on = true
			case k == "redir" && v != "-1" && v != "0":
				ids = append(ids, v)
			}
		}
		if on {
			ids = append(ids, id)
		}
	}
	return ids
}

// A waiter's tracking connections cut (killed, as a proxy that drops
// them would): a key freed at that moment still serves its waiter, by
// the poll or the ticket renewal, and once tracking is back a DEL serves
// the next waiter at once, with no polling meanwhile.
func TestAWaiterIsServedWhenItsTrackingConnectionIsCut(t *testing.T) {
	t.Parallel() // a server of its own; mostly waits
	admin, holder, waiter := ownServer(t)
	ctx := t.Context()

	_, err := holder.TryAcquire(ctx, "lock:cut:1", time.Minute)
	require.NoError(t, err)
	got := acquireLater(ctx, waiter, "lock:cut:1", time.Minute)
	waitForOn(t, holder, "lock:cut:1", 1)
	require.Eventually(t, func() bool { return len(trackingConns(t, admin)) > 0 }, 5*time.Second, 10*time.Millisecond, "the waiter's Client tracks the key")
	for _, id := range trackingConns(t, admin) {
		require.NoError(t, admin.Do(ctx, "CLIENT", "KILL", "ID", id).Err())
	}
	freed := time.Now()
	require.NoError(t, admin.Del(ctx, "lock:cut:1").Err())
	heldWithin(t, got, freed, servedBound, "the DEL, its tracking cut")

	_, err = holder.TryAcquire(ctx, "lock:cut:2", time.Minute)
	require.NoError(t, err)
	got = acquireLater(ctx, waiter, "lock:cut:2", time.Minute)
	waitForOn(t, holder, "lock:cut:2", 1)
	require.Eventually(t, func() bool { return len(trackingConns(t, admin)) > 0 }, 5*time.Second, 10*time.Millisecond, "tracking is back")
	time.Sleep(200 * time.Millisecond) // the key is read on it
	before := trackedReads(t, admin)
	time.Sleep(time.Second)
	idle := trackedReads(t, admin) - before
	require.LessOrEqual(t, idle, int64(1), "tracked again, not polled") // a ticket renewal's look may fall in the second
	freed = time.Now()
	require.NoError(t, admin.Del(ctx, "lock:cut:2").Err())
	heldWithin(t, got, freed, freeBound, "the DEL, tracking back")
}

// A waiter for several keys is watched on all of them: read once while
// nothing changes, and served once a DEL frees the last of its keys.
func TestAMultiKeyWaiterIsWatchedOnEveryKey(t *testing.T) {
	t.Parallel() // a server of its own; mostly waits
	admin, holder, waiter := ownServer(t)
	ctx := t.Context()
	keys := []string{"{many}:a", "{many}:b", "{many}:c"}
	for _, k := range keys {
		_, err := holder.TryAcquire(ctx, k, time.Minute)
		require.NoError(t, err)
	}
	got := make(chan waited, 1)
	go func() {
		l, err := waiter.AcquireMany(ctx, keys, time.Minute)
		got <- waited{l, err}
	}()
	waitForOn(t, holder, keys[0], 1)
	// Another waiter of the Client, whose key changes 20 times: 20 passes
	// of the watch, each of which reads that key once, and must not read
	// the multi-key waiter's keys again.
	_, err := holder.TryAcquire(ctx, "{many}:other", time.Minute)
	require.NoError(t, err)
	other := acquireLater(ctx, waiter, "{many}:other", time.Minute)
	waitForOn(t, holder, "{many}:other", 1)
	time.Sleep(200 * time.Millisecond) // the watch reads the keys
	before := trackedReads(t, admin)
	for range 20 {
		require.NoError(t, admin.PExpire(ctx, "{many}:other", time.Minute).Err())
		time.Sleep(50 * time.Millisecond)
	}
	reads := trackedReads(t, admin) - before
	t.Logf("reads in 1s of waiting, 20 changes of the other key: %d", reads)
	require.LessOrEqual(t, reads, int64(20+2), "the multi-key waiter's keys are read once, not on every pass") // a ticket renewal's look may fall in the window
	require.NoError(t, admin.Del(ctx, "{many}:other").Err())
	w := <-other
	require.NoError(t, w.err)
	require.NoError(t, w.l.Release(ctx))
	freed := time.Now()
	require.NoError(t, admin.Del(ctx, keys...).Err())
	heldWithin(t, got, freed, freeBound, "the DEL")
}

// A waiter behind a Lock of its own Client is not watched: that Lock's
// renewals would invalidate the key, and the Client would read it again
// at each (rueidislock's storm, in small); its release serves the waiter.
func TestAWaiterBehindItsOwnClientIsNotWatched(t *testing.T) {
	t.Parallel() // a server of its own; mostly waits
	srv := redistest.Start(t)
	admin := srv.Client()
	ctx := t.Context()
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr()})
	defer rdb.Close()
	c := padlock.New(rdb, neverPoll)
	defer c.Close()
	l, err := c.TryAcquire(ctx, "lock:own", 300*time.Millisecond)
	require.NoError(t, err)
	kctx, stop := l.KeepAlive(ctx)
	defer stop()
	got := acquireLater(ctx, c, "lock:own", time.Minute)
	waitForOn(t, c, "lock:own", 1)
	time.Sleep(time.Second) // ten renewals, and more than pendingMax
	require.NoError(t, kctx.Err(), "the lease is kept")
	require.Empty(t, trackingConns(t, admin), "no tracking connection: nothing to watch")
	stop()
	require.NoError(t, l.Release(ctx))
	w := <-got
	require.NoError(t, w.err)
	require.NoError(t, w.l.Release(ctx))
}

// A Redis user that may not track is asked once a minute, not at every
// wait: a second wait soon after the first asks nothing.
func TestARefusedTrackingIsNotAskedAgainAtEveryWait(t *testing.T) {
	t.Parallel() // a server of its own; mostly waits
	s := startMatrixServer(t, redistest.Servers(t)[0])
	ctx := t.Context()
	holder := padlock.New(s.admin)
	defer holder.Close()
	waiter := padlock.New(s.user(t, "least", s.minimalACL(t)), neverPoll)
	defer waiter.Close()
	refusals := func() int64 { // ACL LOG counts the NOPERMs of CLIENT TRACKING
		entries, err := s.admin.Do(ctx, "ACL", "LOG").Slice()
		require.NoError(t, err)
		var n int64
		for _, e := range entries {
			fields, _ := e.(map[any]any)
			if fields == nil {
				kv, _ := e.([]any)
				fields = map[any]any{}
				for i := 0; i+1 < len(kv); i += 2 {
					fields[kv[i]] = kv[i+1]
				}
			}
			if fields["username"] == "least" && strings.HasPrefix(fmt.Sprint(fields["object"]), "client") {
				count, _ := fields["count"].(int64)
				n += count
			}
		}
		return n
	}
	wait := func(key string) {
		_, err := holder.TryAcquire(ctx, key, time.Minute)
		require.NoError(t, err)
		got := acquireLater(ctx, waiter, key, time.Minute)
		waitForOn(t, holder, key, 1)
		time.Sleep(200 * time.Millisecond) // the watch tries to track, and polls
		require.NoError(t, s.admin.Del(ctx, key).Err())
		w := <-got
		require.NoError(t, w.err)
		require.NoError(t, w.l.Release(ctx))
	}
	wait("lock:refused:1")
	require.Equal(t, int64(1), refusals(), "the watch asked to track, once")
	time.Sleep(3 * time.Second) // the watch ends (its linger is 2s)
	wait("lock:refused:2")
	require.Equal(t, int64(1), refusals(), "and not again at the next wait")
}

// One Client waits for a lock and for a semaphore place at once: a DEL of
// either key serves its waiter (the watch reads a lock's key by PTTL and
// a semaphore's by EXISTS, in one round trip).
func TestWaitersOfLocksAndSemaphoresAreWatchedTogether(t *testing.T) {
	t.Parallel() // a server of its own; mostly waits
	admin, holder, waiter := ownServer(t)
	ctx := t.Context()
	for i := range 3 { // the watch's order of the two varies: several rounds
		lockKey, semKey := fmt.Sprintf("lock:mixed:%d", i), fmt.Sprintf("sem:mixed:%d", i)
		_, err := holder.TryAcquire(ctx, lockKey, time.Minute)
		require.NoError(t, err)
		_, err = holder.TryAcquire(ctx, semKey, time.Minute, padlock.WithLimit(1))
		require.NoError(t, err)
		gotLock := acquireLater(ctx, waiter, lockKey, time.Minute)
		gotSem := acquireLater(ctx, waiter, semKey, time.Minute, padlock.WithLimit(1))
		waitForOn(t, holder, lockKey, 1)
		waitForOn(t, holder, semKey, 1)
		time.Sleep(100 * time.Millisecond) // the watch reads both keys
		freed := time.Now()
		require.NoError(t, admin.Del(ctx, lockKey).Err())
		heldWithin(t, gotLock, freed, freeBound, "the DEL of the lock's key")
		freed = time.Now()
		require.NoError(t, admin.Del(ctx, semKey).Err())
		heldWithin(t, gotSem, freed, freeBound, "the DEL of the semaphore's key")
	}
}
