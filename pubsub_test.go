package padlock_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/padlock-go/padlock"
	"github.com/padlock-go/padlock/internal/faultproxy"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A pub/sub connection that goes silent while it stays open (a NAT that
// forgot it) is found dead by its PING and replaced: Redis sees a new
// subscriber connection, and a grant to the Client's waiters is announced
// at once, not found at the next renewal of the waiter's ticket (2.5s
// after it queued).
func TestAHalfOpenSubscriptionIsReplaced(t *testing.T) {
	t.Parallel() // mostly waits
	e := newReal(t, nil)
	p, err := faultproxy.Start(e.srv.Addr())
	require.NoError(t, err)
	t.Cleanup(p.Close)
	// Pooled connections idle for 50ms are not reused, so that frozen ones
	// hold up only the subscription.
	rdb := redis.NewClient(&redis.Options{Addr: p.Addr(), ConnMaxIdleTime: 50 * time.Millisecond})
	c := padlock.New(rdb)
	padlock.SetPubSubQuiet(c, 200*time.Millisecond)
	t.Cleanup(func() { _ = c.Close(); _ = rdb.Close() })

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
	// A PING after 200ms, no answer 200ms later: replaced.
	require.Eventually(t, func() bool {
		now := subscribers(e)
		return len(now) == 1 && now[0] != first[0]
	}, 5*time.Second, 10*time.Millisecond, "a new subscriber connection, the frozen one closed")

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
// subscribed to a channel (none if it cannot tell).
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
		if (f["sub"] != "" && f["sub"] != "0") || (f["ssub"] != "" && f["ssub"] != "0") {
			ids = append(ids, f["id"])
		}
	}
	return ids
}
