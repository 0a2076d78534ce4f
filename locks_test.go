package padlock_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/padlock-go/padlock"
	"github.com/padlock-go/padlock/internal/redistest"
)

// want is what a test that took a lock expects Locks to say of it.
type want struct {
	kind     string
	holders  int // holders of a semaphore or shared hold
	limit    int
	fenced   bool
	waiting  int
	min      bool
	token    string // the holder's, for a lock or leader
	metadata string
}

// fleet takes n locks of every kind (and of none: keys padlock did not
// write, ten for each lock) on c's Redis, through rdb for the others, and
// returns what Locks should report of each lock, by key. Its holds last a
// minute; they end with the test. Waiters wait in a second Client, w.
func fleet(t *testing.T, c, w *padlock.Client, rdb redis.UniversalClient, n int) map[string]want {
	t.Helper()
	ctx := t.Context()
	wants := map[string]want{}
	var mu sync.Mutex
	add := func(key string, x want) {
		mu.Lock()
		defer mu.Unlock()
		wants[key] = x
	}
	take := func(i int) error {
		meta := fmt.Sprintf("host-%d pid %d", i, i*7)
		switch i % 8 {
		case 0, 1: // a plain lock, with metadata
			key := fmt.Sprintf("lock:plain:%d", i)
			l, err := c.TryAcquire(ctx, key, time.Minute, padlock.WithMetadata(meta))
			if err != nil {
				return err
			}
			add(key, want{kind: "lock", token: l.Token(), metadata: meta})
		case 2: // fenced
			key := fmt.Sprintf("lock:fenced:%d", i)
			l, err := c.TryAcquire(ctx, key, time.Minute, padlock.WithFencing())
			if err != nil {
				return err
			}
			add(key, want{kind: "lock", token: l.Token(), fenced: true})
		case 3: // with a minimum
			key := fmt.Sprintf("lock:min:%d", i)
			l, err := c.TryAcquire(ctx, key, time.Minute, padlock.WithMinHold(time.Minute))
			if err != nil {
				return err
			}
			add(key, want{kind: "lock", token: l.Token(), min: true})
		case 4: // a semaphore of 3, two places taken
			key := fmt.Sprintf("lock:sem:%d", i)
			for range 2 {
				if _, err := c.TryAcquire(ctx, key, time.Minute, padlock.WithLimit(3)); err != nil {
					return err
				}
			}
			add(key, want{kind: "semaphore", holders: 2, limit: 3})
		case 5: // a shared hold of two readers
			key := fmt.Sprintf("lock:shared:%d", i)
			for range 2 {
				if _, err := c.TryAcquire(ctx, key, time.Minute, padlock.WithShared()); err != nil {
					return err
				}
			}
			add(key, want{kind: "shared", holders: 2})
		case 6: // a multi-key lock: each key, with the one token
			keys := []string{fmt.Sprintf("lock:{many:%d}:a", i), fmt.Sprintf("lock:{many:%d}:b", i)}
			l, err := c.TryAcquireMany(ctx, keys, time.Minute)
			if err != nil {
				return err
			}
			for _, k := range keys {
				add(k, want{kind: "lock", token: l.Token()})
			}
		case 7: // a chosen token, fenced (a side key tells it is padlock's)
			key := fmt.Sprintf("lock:chosen:%d", i)
			tok := fmt.Sprintf("job-%d", i)
			if _, err := c.TryAcquire(ctx, key, time.Minute, padlock.WithToken(tok), padlock.WithFencing()); err != nil {
				return err
			}
			add(key, want{kind: "lock", token: tok, fenced: true})
		}
		return nil
	}
	errs := make(chan error, n)
	slots := make(chan struct{}, 32)
	var wg sync.WaitGroup
	for i := range n {
		slots <- struct{}{}
		wg.Add(1)
		go func() {
			defer func() { <-slots; wg.Done() }()
			errs <- take(i)
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}

	// A few leaders and locks waited for: each has goroutines of its own.
	few := max(n/100, 2)
	for i := range few {
		key := fmt.Sprintf("lock:leader:%d", i)
		ld, err := c.Campaign(ctx, key, time.Minute, "leader "+key)
		require.NoError(t, err)
		t.Cleanup(func() { _ = ld.Resign(context.Background()) })
		add(key, want{kind: "leader", fenced: true, metadata: "leader " + key})

		key = fmt.Sprintf("lock:waited:%d", i)
		l, err := c.TryAcquire(ctx, key, time.Minute)
		require.NoError(t, err)
		wctx, cancel := context.WithCancel(ctx)
		done := make(chan struct{})
		go func() {
			defer close(done)
			_, _ = w.Acquire(wctx, key, time.Minute)
		}()
		t.Cleanup(func() { cancel(); <-done })
		add(key, want{kind: "lock", token: l.Token(), waiting: 1})
	}
	for i := range few {
		key := fmt.Sprintf("lock:waited:%d", i)
		require.Eventually(t, func() bool {
			info, err := c.Inspect(ctx, key)
			return err == nil && info.Waiting == 1
		}, 10*time.Second, 10*time.Millisecond, "the waiter of %s", key)
	}

	// Ten keys padlock did not write for each lock: strings with and
	// without a ttl (one whose value begins with a token), hashes, a
	// sorted set with future scores, a list, and keys named like side
	// keys.
	others := 10 * n
	pipe := rdb.Pipeline()
	future := float64(time.Now().Add(time.Hour).UnixMilli())
	for i := range others {
		key := fmt.Sprintf("other:%d", i)
		switch i % 6 {
		case 0: // a session: a token in padlock's form, with a ttl
			pipe.Set(ctx, key, fmt.Sprintf("0b4a4d5e-9c8e-4b52-8f34-%012d user=%d", i, i), time.Hour)
		case 1:
			pipe.Set(ctx, key, "x", 0)
		case 2:
			pipe.HSet(ctx, key, "f", "v")
		case 3:
			pipe.ZAdd(ctx, key, redis.Z{Score: future, Member: "m"})
		case 4:
			pipe.RPush(ctx, key, "a")
		case 5:
			pipe.Set(ctx, fmt.Sprintf("%s:{%s}:fence", key, key), 7, 0)
		}
		if pipe.Len() >= 1000 {
			_, err := pipe.Exec(ctx)
			require.NoError(t, err)
		}
	}
	_, err := pipe.Exec(ctx)
	require.NoError(t, err)
	return wants
}

// checkListed asserts that Locks(match) on c reports exactly the locks
// of wants, each once, as they were taken.
func checkListed(t *testing.T, c *padlock.Client, match string, wants map[string]want) {
	t.Helper()
	seen := map[string]int{}
	for info, err := range c.Locks(t.Context(), match) {
		require.NoError(t, err)
		seen[info.Key]++
		w, ok := wants[info.Key]
		if !assert.True(t, ok, "listed, but not a lock the test took: %+v", info) {
			continue
		}
		assert.True(t, info.Held, info.Key)
		assert.Equal(t, w.kind, info.Kind, info.Key)
		assert.Len(t, info.Holders, w.holders, info.Key)
		assert.Equal(t, w.limit, info.Limit, info.Key)
		assert.Equal(t, w.waiting, info.Waiting, info.Key)
		assert.Equal(t, w.fenced, info.Fence > 0, "fence of %s: %d", info.Key, info.Fence)
		assert.Equal(t, w.min, info.MinHold > 0, "minimum of %s: %v", info.Key, info.MinHold)
		if w.token != "" {
			assert.Equal(t, w.token, info.Token, info.Key)
		}
		assert.Equal(t, w.metadata, info.Metadata, info.Key)
		assert.True(t, info.TTL > 0 && info.TTL <= time.Minute, "ttl of %s: %v", info.Key, info.TTL) // taking 10,000 under -race takes a while
		if w.waiting > 0 {
			assert.True(t, info.OldestWait >= 0 && info.OldestWait < time.Minute, "oldest wait of %s: %v", info.Key, info.OldestWait)
		}
	}
	var missing []string
	for k := range wants {
		if seen[k] == 0 {
			missing = append(missing, k)
		}
	}
	slices.Sort(missing)
	assert.Empty(t, missing, "locks not listed")
	for k, n := range seen {
		assert.Equal(t, 1, n, "%s listed %d times", k, n)
	}
}

// locksSize is how many locks the listing tests take: 10,000 (among
// 100,000 other keys) in the long mode, 400 otherwise.
// parallelUnlessLong runs t in parallel, but in the long mode, where its
// fleet is 10,000 locks among 100,000 keys, alone: beside the package's
// timing tests it slowed their round trips past their bounds.
func parallelUnlessLong(t *testing.T) {
	if !longRun() {
		t.Parallel()
	}
}

func locksSize() int {
	if longRun() {
		return 10000
	}
	return 400
}

func TestLocksListsEveryLockOnce(t *testing.T) {
	parallelUnlessLong(t)
	srv := redistest.Start(t)
	rdb := srv.Client()
	c, w := padlock.New(rdb), padlock.New(srv.Client())
	t.Cleanup(func() { _ = w.Close(); _ = c.Close() })
	wants := fleet(t, c, w, rdb, locksSize())
	checkListed(t, c, "*", wants)

	// A glob: the fenced locks alone.
	fenced := map[string]want{}
	for k, x := range wants {
		if x.kind == "lock" && x.fenced && k[:len("lock:fenced:")] == "lock:fenced:" {
			fenced[k] = x
		}
	}
	checkListed(t, c, "lock:fenced:*", fenced)
}

func TestLocksListsEveryLockOnceOnACluster(t *testing.T) {
	longOnly(t) // three servers
	parallelUnlessLong(t)
	nodes := redistest.StartClusterN(t, 3)
	newCC := func() *redis.ClusterClient {
		cc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: []string{nodes[0].Addr()}})
		t.Cleanup(func() { _ = cc.Close() })
		return cc
	}
	cc := newCC()
	c, w := padlock.New(cc), padlock.New(newCC())
	t.Cleanup(func() { _ = w.Close(); _ = c.Close() })
	wants := fleet(t, c, w, cc, locksSize())
	checkListed(t, c, "*", wants)
}

// The README's least ACL rule lists the locks; a user kept to ~lock:*
// listing "*" skips the keys it may not read.
func TestLocksUnderTheLeastACLUser(t *testing.T) {
	parallelUnlessLong(t)
	srv := redistest.Start(t)
	admin := srv.Client()
	args := []any{"ACL", "SETUSER", "padlock-app", "reset", "on", ">pw"}
	for _, r := range readmeACL(t) {
		args = append(args, r)
	}
	require.NoError(t, admin.Do(t.Context(), args...).Err())
	user := func() *redis.Client {
		rdb := redis.NewClient(&redis.Options{Addr: srv.Addr(), Username: "padlock-app", Password: "pw"})
		t.Cleanup(func() { _ = rdb.Close() })
		return rdb
	}
	c, w := padlock.New(user()), padlock.New(user())
	t.Cleanup(func() { _ = w.Close(); _ = c.Close() })
	wants := fleet(t, c, w, admin, locksSize())
	checkListed(t, c, "*", wants)
	checkListed(t, c, "lock:*", wants)

	// Without SCAN, the listing says so, and Check names it.
	require.NoError(t, admin.Do(t.Context(), "ACL", "SETUSER", "padlock-app", "-scan").Err())
	var err error
	for _, e := range c.Locks(t.Context(), "lock:*") {
		err = e
	}
	require.Error(t, err)
	assert.ErrorContains(t, err, "scan")
	r, err := c.Check(t.Context(), "lock:check")
	require.NoError(t, err)
	var named bool
	for _, f := range r.Findings {
		named = named || f.Topic == "acl" && f.Fix == "add +scan to the user's rule (the README's minimal ACL rule has it)"
	}
	assert.True(t, named, "Check's findings: %+v", r.Findings)
}

func TestLocksOnARedlock(t *testing.T) {
	t.Parallel()
	var clients []redis.UniversalClient
	for range 3 {
		clients = append(clients, redistest.Start(t).Client())
	}
	c := padlock.NewRedlock(clients)
	t.Cleanup(func() { _ = c.Close() })
	ctx := t.Context()
	l, err := c.TryAcquire(ctx, "lock:r", time.Minute, padlock.WithMetadata("on three"))
	require.NoError(t, err)
	// A minority: a key held by another token on one node alone.
	require.NoError(t, clients[2].Set(ctx, "lock:minority", "0b4a4d5e-9c8e-4b52-8f34-5b1f6c1d9a01", time.Minute).Err())
	var got []padlock.LockInfo
	for info, err := range c.Locks(ctx, "lock:*") {
		require.NoError(t, err)
		got = append(got, info)
	}
	require.Len(t, got, 1, "%+v", got)
	assert.Equal(t, "lock:r", got[0].Key)
	assert.Equal(t, l.Token(), got[0].Token)
	assert.Equal(t, "on three", got[0].Metadata)
}

func TestLocksBadInput(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	c := padlock.New(srv.Client())
	ctx := t.Context()
	_, err := c.TryAcquire(ctx, "ops:1", time.Minute)
	require.NoError(t, err)
	for _, match := range []string{"ops:[", "", "ops:\\"} {
		n := 0
		for _, err := range c.Locks(ctx, match) {
			n++
			assert.ErrorIs(t, err, padlock.ErrInvalid, match)
		}
		assert.Equal(t, 1, n, match)
	}
	var nilClient *padlock.Client
	for _, err := range nilClient.Locks(ctx, "*") {
		assert.ErrorIs(t, err, padlock.ErrInvalid)
	}
	require.NoError(t, c.Close())
	for _, err := range c.Locks(ctx, "*") {
		assert.ErrorIs(t, err, padlock.ErrClosed)
	}
}

// Breaking out of the loop stops the listing; a context that ends stops
// it with the context's error.
func TestLocksStops(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	c := padlock.New(srv.Client())
	t.Cleanup(func() { _ = c.Close() })
	ctx := t.Context()
	for i := range 30 {
		_, err := c.TryAcquire(ctx, fmt.Sprintf("lock:%d", i), time.Minute)
		require.NoError(t, err)
	}
	n := 0
	for _, err := range c.Locks(ctx, "*") {
		require.NoError(t, err)
		n++
		if n == 3 {
			break
		}
	}
	assert.Equal(t, 3, n)

	ended, cancel := context.WithCancel(ctx)
	cancel()
	var last error
	for _, err := range c.Locks(ended, "*") {
		last = err
	}
	assert.True(t, errors.Is(last, context.Canceled), "%v", last)
}

// A lock that changes while it is listed is reported as it was at one
// moment: holders that take, extend and release short and long locks on
// the same keys never show a short lock's holder with a long lock's ttl.
func TestLocksReportsEachLockFromOneMoment(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	c, lister := padlock.New(srv.Client()), padlock.New(srv.Client())
	t.Cleanup(func() { _ = c.Close(); _ = lister.Close() })
	ctx, stop := context.WithCancel(t.Context())
	var wg sync.WaitGroup
	ttls := map[string]time.Duration{"short": 200 * time.Millisecond, "long": time.Minute}
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			name := [...]string{"short", "long"}[g%2]
			for i := 0; ctx.Err() == nil; i++ {
				key := fmt.Sprintf("lock:churn:%d", i%4)
				l, err := c.TryAcquire(ctx, key, ttls[name], padlock.WithMetadata(name))
				if err != nil {
					continue
				}
				_ = l.Extend(ctx, ttls[name])
				_ = l.Release(ctx)
			}
		}()
	}
	seen := 0
	for range 200 {
		for info, err := range lister.Locks(t.Context(), "lock:churn:*") {
			require.NoError(t, err)
			seen++
			ttl, ok := ttls[info.Metadata]
			require.True(t, ok, "%+v", info)
			assert.LessOrEqual(t, info.TTL, ttl, "%s: a %s lock with ttl %v", info.Key, info.Metadata, info.TTL)
			assert.Equal(t, "lock", info.Kind)
		}
	}
	stop()
	wg.Wait()
	assert.Positive(t, seen, "the listings saw locks")
	t.Logf("%d locks seen in 200 listings", seen)
}
