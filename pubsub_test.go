package padlock_test

import (
	"context"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/padlock-go/padlock"
	"github.com/padlock-go/padlock/internal/faultproxy"
	"github.com/padlock-go/padlock/internal/redistest"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A clientKind is a kind of go-redis client a Client is given for one
// server: a plain one, or a Sentinel failover client whose master it is.
type clientKind struct {
	name     string
	sentinel bool
}

var (
	plainKind    = clientKind{name: "plain"}
	sentinelKind = clientKind{name: "sentinel", sentinel: true}
)

// connect returns a go-redis client of kind k for srv, closed when t ends;
// for a Sentinel, it starts one that monitors srv, and skips t outside the
// long mode. Connections to srv dial via instead, unless via is "" (a
// proxy in front of srv: Sentinel still names srv, as it would when the
// network between a client and its primary fails). Pooled connections
// idle for 50ms are not reused, so that ones a proxy froze hold up only
// the subscription.
func (k clientKind) connect(t *testing.T, srv *redistest.Server, via string) *redis.Client {
	t.Helper()
	if via == "" {
		via = srv.Addr()
	}
	const idle = 50 * time.Millisecond
	var rdb *redis.Client
	if !k.sentinel {
		rdb = redis.NewClient(&redis.Options{Addr: via, ConnMaxIdleTime: idle})
	} else {
		longOnly(t)
		sentinel := redistest.StartSentinel(t, srv, "padlock")
		dial := func(ctx context.Context, network, addr string) (net.Conn, error) {
			if addr == srv.Addr() {
				addr = via
			}
			var d net.Dialer
			return d.DialContext(ctx, network, addr)
		}
		rdb = redis.NewFailoverClient(&redis.FailoverOptions{MasterName: "padlock", SentinelAddrs: []string{sentinel.Addr()},
			Dialer: dial, ConnMaxIdleTime: idle})
	}
	t.Cleanup(func() { _ = rdb.Close() })
	return rdb
}

// A pub/sub connection that goes silent while it stays open (a NAT that
// forgot it) is found dead by its PING and replaced: Redis sees a new
// subscriber connection, and a grant to the Client's waiters is announced
// at once, not found at the next renewal of the waiter's ticket (2.5s
// after it queued). On a plain client, a PING after 200ms (the test's
// pubsubQuiet), no answer 200ms later: replaced. On a Sentinel failover
// client, whose reader wakes every second to check that it listens on the
// primary, with the default pubsubQuiet (5s, longer than that second): a
// PING after 5s, no answer 5s later, replaced within 12s.
func TestAHalfOpenSubscriptionIsReplaced(t *testing.T) {
	t.Parallel() // mostly waits
	tests := []struct {
		kind   clientKind
		quiet  time.Duration // 0: pubsubQuiet
		within time.Duration // from the freeze to the new connection
	}{
		{kind: plainKind, quiet: 200 * time.Millisecond, within: 5 * time.Second},
		{kind: sentinelKind, within: 12 * time.Second},
	}
	for _, tt := range tests {
		t.Run(tt.kind.name, func(t *testing.T) {
			t.Parallel() // mostly waits
			halfOpenIsReplaced(t, tt.kind, tt.quiet, tt.within)
		})
	}
}

// halfOpenIsReplaced is TestAHalfOpenSubscriptionIsReplaced on a
// go-redis client of kind k.
func halfOpenIsReplaced(t *testing.T, k clientKind, quiet, within time.Duration) {
	e := newReal(t, nil)
	p, err := faultproxy.Start(e.srv.Addr())
	require.NoError(t, err)
	t.Cleanup(p.Close)
	rdb := k.connect(t, e.srv, p.Addr())
	c := padlock.New(rdb)
	if quiet > 0 {
		padlock.SetPubSubQuiet(c, quiet)
	}
	t.Cleanup(func() { _ = c.Close() })

	// A waiter for another key keeps the subscription open throughout.
	other := e.key + ":other"
	held, err := e.c.TryAcquire(e.ctx, other, time.Minute)
	require.NoError(t, err)
	wctx, cancel := context.WithCancel(e.ctx)
	defer cancel()
	// A waiter sleeps once its observer hears WaitStart: it subscribed, and
	// looked once more (no call of it is in flight on a connection that
	// the freeze below would catch).
	asleep := make(chan string, 2)
	sleeping := padlock.WithObserver(&padlock.Observer{WaitStart: func(_ context.Context, key string) { asleep <- key }})
	otherGot := acquireLater(wctx, c, other, time.Minute, sleeping)
	require.Equal(t, other, <-asleep)
	var first []string
	require.Eventually(t, func() bool { first = subscribers(e); return len(first) == 1 }, 5*time.Second, 5*time.Millisecond,
		"the waiter's Client subscribed")

	p.FreezeOpen()
	frozen := time.Now()
	require.Eventually(t, func() bool {
		now := subscribers(e)
		return len(now) == 1 && now[0] != first[0]
	}, within, 10*time.Millisecond, "a new subscriber connection, the frozen one closed")
	t.Logf("replaced %v after the freeze", time.Since(frozen).Round(time.Millisecond))

	l, err := e.c.TryAcquire(e.ctx, e.key, time.Minute)
	require.NoError(t, err)
	got := acquireLater(e.ctx, c, e.key, time.Minute, sleeping)
	require.Equal(t, e.key, <-asleep, "queued, its channel subscribed")
	released := time.Now()
	require.NoError(t, l.Release(e.ctx))
	r := <-got
	require.NoError(t, r.err)
	assert.Less(t, time.Since(released), time.Second, "the grant was announced, not found by the ticket's renewal")
	require.NoError(t, r.l.Release(e.ctx))

	// The channel subscribed before the freeze was subscribed again.
	released = time.Now()
	require.NoError(t, held.Release(e.ctx))
	r = <-otherGot
	require.NoError(t, r.err)
	assert.Less(t, time.Since(released), time.Second, "the grant on the channel subscribed again was announced")
	require.NoError(t, r.l.Release(e.ctx))
}

// subscribers are the ids of the connections to e's server that are
// subscribed to a channel (none if it cannot tell), but a Sentinel's (it
// listens on its hello channel on the primary).
func subscribers(e *env) []string {
	list, err := e.raw.ClientList(e.ctx).Result()
	if err != nil {
		return nil
	}
	var ids []string
	for _, line := range strings.Split(strings.TrimSpace(list), "\n") {
		f := map[string]string{}
		for _, kv := range strings.Fields(line) {
			k, v, _ := strings.Cut(kv, "=")
			f[k] = v
		}
		if strings.HasPrefix(f["name"], "sentinel-") {
			continue
		}
		if (f["sub"] != "" && f["sub"] != "0") || (f["ssub"] != "" && f["ssub"] != "0") {
			ids = append(ids, f["id"])
		}
	}
	return ids
}

// 50 waiters of a Client sit idle, each on a key of its own; then 4 waits
// on 4 new keys begin, one at a time, each after the others sat idle for
// longer than a second (how often a failover client's reader wakes to
// check that it listens on the primary). A new key's subscription wakes no
// idle waiter: on a Sentinel failover client the 4 waits cost at most
// twice the scripts they cost on a plain client (there: each its wait.lua
// and one more look once subscribed, 8).
func TestANewSubscriptionWakesNoIdleWaiter(t *testing.T) {
	longOnly(t)  // a Sentinel, and seconds of idleness
	t.Parallel() // mostly waits
	scripts := map[string]int{}
	for _, k := range []clientKind{plainKind, sentinelKind} {
		if !t.Run(k.name, func(t *testing.T) { scripts[k.name] = newWaitScripts(t, k) }) {
			return
		}
	}
	t.Logf("scripts of 4 new waits beside 50 idle ones: %v", scripts)
	require.Positive(t, scripts["plain"])
	require.LessOrEqual(t, scripts["sentinel"], 2*scripts["plain"],
		"on the failover client, the new subscriptions woke idle waiters")
}

// newWaitScripts counts the scripts that a Client on a go-redis client of
// kind k sends while 4 waits on new keys begin beside 50 idle waiters (see
// TestANewSubscriptionWakesNoIdleWaiter).
func newWaitScripts(t *testing.T, k clientKind) int {
	srv := redistest.Start(t)
	rdb := k.connect(t, srv, "")
	n := &counter{}
	rdb.AddHook(n)
	c, holder := padlock.New(rdb), padlock.New(srv.Client())
	ctx, cancel := context.WithCancel(t.Context())
	var waits []<-chan waited
	t.Cleanup(func() {
		cancel()
		for _, w := range waits {
			<-w
		}
		_ = c.Close()
		_ = holder.Close()
	})
	asleep := make(chan string, 1)
	sleeping := padlock.WithObserver(&padlock.Observer{WaitStart: func(_ context.Context, key string) { asleep <- key }})
	wait := func(key string) {
		_, err := holder.TryAcquire(ctx, key, time.Minute)
		require.NoError(t, err)
		waits = append(waits, acquireLater(ctx, c, key, time.Minute, sleeping))
		require.Equal(t, key, <-asleep, "queued, its channel subscribed")
	}
	for i := range 50 {
		wait(fmt.Sprintf("lock:%s:idle:%d", t.Name(), i))
	}
	const idle = 1500 * time.Millisecond // longer than a failover client's probe
	n.reset()
	for i := range 4 {
		time.Sleep(idle)
		wait(fmt.Sprintf("lock:%s:new:%d", t.Name(), i))
	}
	time.Sleep(idle) // the last one's subscription confirmed, and what it woke done
	_, cmds := n.reset()
	scripts := 0
	for _, name := range cmds {
		if name == "evalsha" || name == "eval" {
			scripts++
		}
	}
	return scripts
}
