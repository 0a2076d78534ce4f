package padlockrueidis_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/redis/rueidis"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/padlock-go/padlock/driver"
	"github.com/padlock-go/padlock/internal/redistest"
)

// receive returns what ps delivers next, within 5s.
func receive(t *testing.T, ps driver.PubSub) any {
	t.Helper()
	v, err := ps.Receive(context.Background(), 5*time.Second)
	require.NoError(t, err)
	return v
}

func TestPubSubDelivers(t *testing.T) {
	s := redistest.Start(t)
	d, _ := newDriver(t, rueidis.ClientOption{}, s.Addr())
	ctx := context.Background()
	tests := []struct {
		name    string
		sharded bool
		publish string
	}{
		{"plain", false, "PUBLISH"},
		{"sharded", true, "SPUBLISH"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			key := "delivers:" + tt.name
			ps, err := d.PubSub(ctx, key)
			require.NoError(t, err)
			defer ps.Close()
			a, b := key+":{"+key+"}:a", key+":{"+key+"}:b"
			require.NoError(t, ps.Subscribe(ctx, tt.sharded, a, b))
			assert.Equal(t, &driver.Subscription{Channel: a}, receive(t, ps))
			assert.Equal(t, &driver.Subscription{Channel: b}, receive(t, ps))

			n, err := d.Do(ctx, a, tt.publish, a, "hello")
			require.NoError(t, err)
			assert.Equal(t, int64(1), n)
			assert.Equal(t, &driver.Message{Channel: a, Payload: "hello"}, receive(t, ps))

			require.NoError(t, ps.Ping(ctx))
			assert.Equal(t, &driver.Pong{}, receive(t, ps))

			_, err = ps.Receive(ctx, 50*time.Millisecond)
			assert.True(t, driver.IsTimeout(err), "%v", err)
			_, err = d.Do(ctx, b, tt.publish, b, "after a timeout")
			require.NoError(t, err)
			assert.Equal(t, &driver.Message{Channel: b, Payload: "after a timeout"}, receive(t, ps))
		})
	}
}

// A PING to a server that does not answer is no answer, not an error:
// the PONG comes when the server does.
func TestPubSubPingOfAPausedServer(t *testing.T) {
	s := redistest.Start(t)
	d, _ := newDriver(t, rueidis.ClientOption{}, s.Addr())
	ctx := context.Background()
	ps, err := d.PubSub(ctx, "paused")
	require.NoError(t, err)
	defer ps.Close()

	s.Pause()
	require.NoError(t, ps.Ping(ctx))
	_, err = ps.Receive(ctx, 200*time.Millisecond)
	assert.True(t, driver.IsTimeout(err), "%v", err)
	s.Resume()
	assert.Equal(t, &driver.Pong{}, receive(t, ps))
}

// After the connection breaks, Receive returns an error that is no
// timeout, and goes on returning it.
func TestPubSubEndsWithItsConnection(t *testing.T) {
	s := redistest.Start(t)
	d, _ := newDriver(t, rueidis.ClientOption{}, s.Addr())
	ctx := context.Background()
	ps, err := d.PubSub(ctx, "ends")
	require.NoError(t, err)
	defer ps.Close()
	require.NoError(t, ps.Subscribe(ctx, false, "ends:{ends}:a"))
	assert.IsType(t, &driver.Subscription{}, receive(t, ps))

	s.Stop()
	for range 2 {
		_, err = ps.Receive(ctx, 5*time.Second)
		require.Error(t, err)
		assert.False(t, driver.IsTimeout(err), "%v", err)
	}
}

func TestPubSubClose(t *testing.T) {
	s := redistest.Start(t)
	d, _ := newDriver(t, rueidis.ClientOption{}, s.Addr())
	ctx := context.Background()
	ps, err := d.PubSub(ctx, "close")
	require.NoError(t, err)
	got := make(chan error, 1)
	go func() {
		_, err := ps.Receive(ctx, time.Minute)
		got <- err
	}()
	time.Sleep(20 * time.Millisecond) // Receive is waiting, most likely
	require.NoError(t, ps.Close())
	select {
	case err := <-got:
		assert.Error(t, err)
		assert.False(t, driver.IsTimeout(err))
	case <-time.After(5 * time.Second):
		t.Fatal("Receive goes on after Close")
	}
	_, err = ps.Receive(ctx, time.Second)
	assert.Error(t, err)
}

// A server without sharded pub/sub answers SSUBSCRIBE with an error that
// reads "unknown command".
func TestPubSubShardedOnRedis60(t *testing.T) {
	bin := serverOf("redis-server-6.0")
	if bin == "" {
		t.Skip("no redis-server-6.0 in PADLOCK_SERVERS")
	}
	s := redistest.Start(t, redistest.WithBinary(bin))
	d, _ := newDriver(t, rueidis.ClientOption{}, s.Addr())
	ctx := context.Background()
	ps, err := d.PubSub(ctx, "old")
	require.NoError(t, err)
	defer ps.Close()
	err = ps.Subscribe(ctx, true, "old:{old}:a")
	require.Error(t, err)
	assert.Contains(t, strings.ToLower(err.Error()), "unknown command")
}

// serverOf returns the server binary of PADLOCK_SERVERS whose name begins
// with prefix, or "".
func serverOf(prefix string) string {
	for _, p := range strings.Split(os.Getenv("PADLOCK_SERVERS"), ":") {
		if strings.HasPrefix(filepath.Base(p), prefix) {
			return p
		}
	}
	return ""
}

func TestPubSubUnsubscribe(t *testing.T) {
	s := redistest.Start(t)
	d, _ := newDriver(t, rueidis.ClientOption{}, s.Addr())
	ctx := context.Background()
	for _, sharded := range []bool{false, true} {
		ps, err := d.PubSub(ctx, "unsub")
		require.NoError(t, err)
		u, ok := ps.(driver.Unsubscriber)
		require.True(t, ok, "a driver.Unsubscriber")
		a, b := "unsub:{unsub}:a", "unsub:{unsub}:b"
		require.NoError(t, ps.Subscribe(ctx, sharded, a, b))
		receive(t, ps)
		receive(t, ps)
		require.NoError(t, u.Unsubscribe(ctx, sharded, a, b))
		n, err := d.Do(ctx, a, map[bool]string{false: "PUBLISH", true: "SPUBLISH"}[sharded], a, "unheard")
		require.NoError(t, err)
		assert.Equal(t, int64(0), n)
		_, err = ps.Receive(ctx, 100*time.Millisecond)
		assert.True(t, driver.IsTimeout(err), "nothing, not the unsubscribe's confirmations: %v", err)
		require.NoError(t, ps.Ping(ctx))
		assert.Equal(t, &driver.Pong{}, receive(t, ps), "the connection goes on")
		require.NoError(t, ps.Close())
	}
}
