package padlockrueidis_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/redis/rueidis"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/padlock-go/padlock"
	"github.com/padlock-go/padlock/driver"
	"github.com/padlock-go/padlock/internal/redistest"
	"github.com/padlock-go/padlock/padlockrueidis"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m,
		// go-redis's clients of redistest dial in the background.
		goleak.IgnoreAnyFunction("github.com/redis/go-redis/v9/internal/pool.(*ConnPool).tryDial"),
		// rueidis closes the connections of nodes a Cluster's topology no
		// longer lists 5s after it finds out, and refreshes its slot map
		// after a delay, on goroutines that Close does not wait for.
		goleak.IgnoreAnyFunction("github.com/redis/rueidis.(*clusterClient)._refresh.func2"),
		goleak.IgnoreAnyFunction("github.com/redis/rueidis.(*clusterClient).redirectOrNew.func1"),
		goleak.IgnoreAnyFunction("github.com/redis/rueidis.(*call).DelayDo.func1"),
	)
}

// newClient returns a rueidis client of addrs with opt's other settings,
// closed when the test ends.
func newClient(t *testing.T, opt rueidis.ClientOption, addrs ...string) rueidis.Client {
	t.Helper()
	opt.InitAddress = addrs
	c, err := rueidis.NewClient(opt)
	require.NoError(t, err)
	t.Cleanup(c.Close)
	return c
}

// startReplica starts a replica of primary, which sends it its data at
// once (not after the 5s a diskless sync waits by default for others).
func startReplica(t *testing.T, primary *redistest.Server) *redistest.Server {
	t.Helper()
	syncAtOnce(t, primary)
	return redistest.StartReplica(t, primary)
}

// startClusterReplica is startReplica for a Cluster's master.
func startClusterReplica(t *testing.T, primary *redistest.Server) *redistest.Server {
	t.Helper()
	syncAtOnce(t, primary)
	return redistest.StartClusterReplica(t, primary)
}

func syncAtOnce(t *testing.T, primary *redistest.Server) {
	t.Helper()
	require.NoError(t, primary.Client().ConfigSet(context.Background(), "repl-diskless-sync-delay", "0").Err())
}

// newDriver returns the Driver of a rueidis client of addrs.
func newDriver(t *testing.T, opt rueidis.ClientOption, addrs ...string) (driver.Driver, rueidis.Client) {
	t.Helper()
	c := newClient(t, opt, addrs...)
	d, err := padlockrueidis.Driver(c)
	require.NoError(t, err)
	return d, c
}

func TestDriverReplies(t *testing.T) {
	s := redistest.Start(t)
	d, _ := newDriver(t, rueidis.ClientOption{}, s.Addr())
	ctx := context.Background()
	assert.Equal(t, driver.Single, d.Kind())

	tests := []struct {
		name string
		key  string
		args []any
		want any
	}{
		{"simple string", "replies:a", []any{"SET", "replies:a", []byte("v"), "PX", 60000}, "OK"},
		{"bulk string", "replies:a", []any{"GET", "replies:a"}, "v"},
		{"integer", "replies:n", []any{"INCRBY", "replies:n", int64(5)}, int64(5)},
		{"array with nil", "replies:a", []any{"EVAL", "return {1, 'x', false, {2}}", 1, "replies:a"}, []any{int64(1), "x", nil, []any{int64(2)}}},
		{"double", "", []any{"EVAL", "redis.setresp(3); return {double=1.5}", 0}, 1.5},
		{"boolean", "", []any{"EVAL", "redis.setresp(3); return true", 0}, true},
		{"map", "", []any{"EVAL", "redis.setresp(3); return {map={a=1}}", 0}, map[string]any{"a": int64(1)}},
		{"error inside an array", "", []any{"EVAL", "return {1, redis.error_reply('E inner')}", 0}, []any{int64(1), driver.ServerError("E inner")}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := d.Do(ctx, tt.key, tt.args...)
			require.NoError(t, err)
			assert.Equal(t, tt.want, got)
		})
	}
}

func TestDriverErrors(t *testing.T) {
	s := redistest.Start(t)
	d, _ := newDriver(t, rueidis.ClientOption{}, s.Addr())
	ctx := context.Background()

	v, err := d.Do(ctx, "errors:missing", "GET", "errors:missing")
	assert.Nil(t, v)
	assert.ErrorIs(t, err, driver.ErrNil)

	_, err = d.Do(ctx, "errors:a", "EVALSHA", "0123456789012345678901234567890123456789", 1, "errors:a")
	assert.True(t, driver.HasPrefix(err, "NOSCRIPT"), "%v", err)

	_, err = d.Do(ctx, "errors:a", "EVAL", "return redis.error_reply('PADLOCK_X y')", 1, "errors:a")
	e, ok := driver.Error(err)
	assert.True(t, ok)
	assert.Equal(t, driver.ServerError("PADLOCK_X y"), e)

	_, err = d.Do(ctx, "errors:a", "SET", "errors:a", nil)
	assert.ErrorIs(t, err, padlock.ErrInvalid, "nil is no argument")
	_, err = d.Do(ctx, "", "SUBSCRIBE", "x")
	assert.ErrorIs(t, err, padlock.ErrInvalid, "not through Do")

	expired, cancel := context.WithTimeout(ctx, -time.Second)
	defer cancel()
	_, err = d.Do(expired, "errors:a", "GET", "errors:a")
	assert.True(t, driver.IsTimeout(err), "%v", err)

	// A fresh client: a wire of c that the expired context kept from
	// dialling answers that dial's error even after Close.
	d, c := newDriver(t, rueidis.ClientOption{}, s.Addr())
	_, err = d.Do(ctx, "errors:a", "GET", "errors:a")
	require.ErrorIs(t, err, driver.ErrNil)
	c.Close()
	_, err = d.Do(ctx, "errors:a", "GET", "errors:a")
	assert.ErrorIs(t, err, driver.ErrClosed)
	assert.ErrorIs(t, err, rueidis.ErrClosing)
}

func TestDriverTimeoutOfAPausedServer(t *testing.T) {
	s := redistest.Start(t)
	d, _ := newDriver(t, rueidis.ClientOption{}, s.Addr())
	ctx := context.Background()
	_, err := d.Do(ctx, "paused:a", "PING")
	require.NoError(t, err)

	s.Pause()
	defer s.Resume()
	short, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
	defer cancel()
	_, err = d.Do(short, "paused:a", "GET", "paused:a")
	assert.True(t, driver.IsTimeout(err), "%v", err)
	assert.False(t, errors.Is(err, driver.ErrClosed))
}

func TestDriverBatch(t *testing.T) {
	s := redistest.Start(t)
	d, _ := newDriver(t, rueidis.ClientOption{}, s.Addr())
	cmds := []driver.Cmd{
		{Key: "batch:a", Args: []any{"SET", "batch:a", "1"}},
		{Key: "batch:a", Args: []any{"INCR", "batch:a"}},
		{Key: "batch:b", Args: []any{"GET", "batch:b"}},
		{Key: "batch:a", Args: []any{"EVAL", "return redis.error_reply('E no')", 1, "batch:a"}},
		{Key: "batch:a", Args: []any{"GET", "batch:a", 1.5}},
		{Key: "", Args: []any{"PING"}},
	}
	d.Batch(context.Background(), cmds)
	assert.Equal(t, "OK", cmds[0].Reply)
	assert.Equal(t, int64(2), cmds[1].Reply)
	assert.ErrorIs(t, cmds[2].Err, driver.ErrNil)
	assert.True(t, driver.HasPrefix(cmds[3].Err, "E"), "%v", cmds[3].Err)
	assert.ErrorIs(t, cmds[4].Err, padlock.ErrInvalid)
	assert.Equal(t, "PONG", cmds[5].Reply)
	for _, i := range []int{0, 1, 5} {
		assert.NoError(t, cmds[i].Err)
	}
}

func TestDriverRefusesANilClient(t *testing.T) {
	_, err := padlockrueidis.Driver(nil)
	assert.ErrorIs(t, err, padlock.ErrInvalid)
}

// Protocol is the RESP version the probe's HELLO answered in, for the
// Driver and its Nodes' alike.
func TestDriverProtocol(t *testing.T) {
	s := redistest.Start(t)
	ctx := context.Background()
	for _, tt := range []struct {
		opt  rueidis.ClientOption
		want int
	}{{rueidis.ClientOption{}, 3}, {rueidis.ClientOption{AlwaysRESP2: true, DisableCache: true}, 2}} {
		d, _ := newDriver(t, tt.opt, s.Addr())
		_, err := d.Do(ctx, "", "PING")
		require.NoError(t, err)
		assert.Equal(t, tt.want, d.(driver.Protocoler).Protocol())
		nodes, err := d.Nodes(ctx)
		require.NoError(t, err)
		require.Len(t, nodes, 1)
		assert.Equal(t, tt.want, nodes[0].Driver.(driver.Protocoler).Protocol())
	}
}
