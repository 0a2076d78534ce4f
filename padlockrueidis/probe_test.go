package padlockrueidis_test

import (
	"context"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/redis/rueidis"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/padlock-go/padlock"
	"github.com/padlock-go/padlock/driver"
	"github.com/padlock-go/padlock/internal/redistest"
	"github.com/padlock-go/padlock/padlockrueidis"
)

// assertRefused checks that every call of d fails with ErrInvalid, naming
// the setting that sends padlock's commands to a replica.
func assertRefused(t *testing.T, d driver.Driver) {
	t.Helper()
	assertRefusedFor(t, d, "ReplicaOnly", "SendToReplicas")
}

// assertAtAReplica checks that every call of d, a client of a replica's
// address alone, fails with ErrInvalid, saying so and naming no setting
// the client does not have; primary, if not "", is the address it names.
func assertAtAReplica(t *testing.T, d driver.Driver, replica, primary string) {
	t.Helper()
	assertRefusedFor(t, d, "the client's address, "+replica+", is a read-only replica", "point the client at the primary"+primary)
	_, err := d.Do(context.Background(), "refused", "SET", "refused", "v")
	assert.NotContains(t, err.Error(), "ReplicaOnly")
	assert.NotContains(t, err.Error(), "SendToReplicas")
}

// assertRefusedFor checks that every call of d fails with ErrInvalid, the
// first saying each of says.
func assertRefusedFor(t *testing.T, d driver.Driver, says ...string) {
	t.Helper()
	ctx := context.Background()
	_, err := d.Do(ctx, "refused", "SET", "refused", "v")
	assert.ErrorIs(t, err, padlock.ErrInvalid)
	for _, s := range says {
		assert.ErrorContains(t, err, s)
	}
	cmds := []driver.Cmd{{Key: "refused", Args: []any{"GET", "refused"}}}
	d.Batch(ctx, cmds)
	assert.ErrorIs(t, cmds[0].Err, padlock.ErrInvalid)
	_, err = d.PubSub(ctx, "refused")
	assert.ErrorIs(t, err, padlock.ErrInvalid)
	_, err = d.Pin(ctx, "refused")
	assert.ErrorIs(t, err, padlock.ErrInvalid)
	_, err = d.Nodes(ctx)
	assert.ErrorIs(t, err, padlock.ErrInvalid)
}

// assertAccepted checks that d writes, and waits for replicas, on the
// primary.
func assertAccepted(t *testing.T, d driver.Driver, replicas int64) {
	t.Helper()
	ctx := context.Background()
	v, err := d.Do(ctx, "accepted", "SET", "accepted", "v")
	require.NoError(t, err)
	assert.Equal(t, "OK", v)
	conn, err := d.Pin(ctx, "accepted")
	require.NoError(t, err)
	defer conn.Close()
	_, err = conn.Do(ctx, "SET", "accepted", "w")
	require.NoError(t, err)
	v, err = conn.Do(ctx, "WAIT", replicas, 5000)
	require.NoError(t, err)
	assert.Equal(t, replicas, v)
}

func TestRefusesCommandsToReplicas(t *testing.T) {
	primary := redistest.Start(t)
	replica := startReplica(t, primary)
	always := func(rueidis.Completed) bool { return true }
	reads := func(cmd rueidis.Completed) bool { return cmd.IsReadOnly() }
	standalone := func(to func(rueidis.Completed) bool) rueidis.ClientOption {
		return rueidis.ClientOption{SendToReplicas: to, Standalone: rueidis.StandaloneOption{ReplicaAddress: []string{replica.Addr()}}}
	}
	tests := []struct {
		name    string
		opt     rueidis.ClientOption
		addr    string
		refused bool
	}{
		{"SendToReplicas of every command", standalone(always), primary.Addr(), true},
		{"SendToReplicas of reads", standalone(reads), primary.Addr(), false},
		{"a client of the primary", rueidis.ClientOption{}, primary.Addr(), false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d, _ := newDriver(t, tt.opt, tt.addr)
			if tt.refused {
				assertRefused(t, d)
			} else {
				assertAccepted(t, d, 1)
			}
		})
	}
	t.Run("a client of a replica", func(t *testing.T) {
		d, _ := newDriver(t, rueidis.ClientOption{}, replica.Addr())
		assertAtAReplica(t, d, replica.Addr(), ", "+primary.Addr())
	})
}

func TestRefusesAReplicaOnlySentinelClient(t *testing.T) {
	t.Parallel() // mostly waits, on servers of its own
	primary := redistest.Start(t)
	startReplica(t, primary)
	sentinel := redistest.StartSentinel(t, primary, "refused")
	opt := rueidis.ClientOption{ReplicaOnly: true, Sentinel: rueidis.SentinelOption{MasterSet: "refused"}}
	var c rueidis.Client
	eventually(t, func() bool { // until the Sentinel has found the replica
		var err error
		opt.InitAddress = []string{sentinel.Addr()}
		c, err = rueidis.NewClient(opt)
		return err == nil
	})
	t.Cleanup(c.Close)
	d, err := padlockrueidis.Driver(c)
	require.NoError(t, err)
	assert.Equal(t, driver.Sentinel, d.Kind())
	assertRefused(t, d)

	sd, _ := newDriver(t, rueidis.ClientOption{Sentinel: rueidis.SentinelOption{MasterSet: "refused"}}, sentinel.Addr())
	assertAccepted(t, sd, 1)
}

// With the README's least ACL rule the probe reads HELLO's role.
func TestProbeWithTheLeastACL(t *testing.T) {
	primary := redistest.Start(t)
	replica := startReplica(t, primary)
	rule := leastACL(t)
	ctx := context.Background()
	for _, s := range []*redistest.Server{primary, replica} {
		require.NoError(t, s.Client().Do(ctx, append([]any{"ACL", "SETUSER", "padlock-app", "on", ">secret"}, rule...)...).Err())
	}
	// rueidis's client-side cache needs CLIENT TRACKING, which the rule
	// leaves out.
	opt := rueidis.ClientOption{Username: "padlock-app", Password: "secret", DisableCache: true}

	d, _ := newDriver(t, opt, replica.Addr())
	assertAtAReplica(t, d, replica.Addr(), "") // the rule has no ROLE: the primary goes unnamed
	d, _ = newDriver(t, opt, primary.Addr())
	_, err := d.Do(ctx, "lock:acl", "SET", "lock:acl", "v")
	require.NoError(t, err)
}

// leastACL is the rule of the README's "Redis servers and ACL users".
func leastACL(t *testing.T) []any {
	t.Helper()
	readme, err := os.ReadFile("../README.md")
	require.NoError(t, err)
	m := regexp.MustCompile(`(?m)^ACL SETUSER padlock-app on >CHANGE-ME (.*)$`).FindSubmatch(readme)
	require.NotNil(t, m)
	var rule []any
	for _, r := range strings.Fields(string(m[1])) {
		rule = append(rule, r)
	}
	return rule
}

// A client whose node does not answer is not refused: the next call asks
// again.
func TestProbeOfAPausedServer(t *testing.T) {
	s := redistest.Start(t)
	d, _ := newDriver(t, rueidis.ClientOption{}, s.Addr())
	ctx := context.Background()
	s.Pause()
	short, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
	defer cancel()
	_, err := d.Do(short, "paused", "SET", "paused", "v")
	require.Error(t, err)
	assert.NotErrorIs(t, err, padlock.ErrInvalid)
	assert.True(t, driver.IsTimeout(err), "%v", err)
	s.Resume()
	_, err = d.Do(ctx, "paused", "SET", "paused", "v")
	assert.NoError(t, err)
}
