//go:build go1.26

package main

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A program in Go's strict FIPS 140 mode (GODEBUG=fips140=only, which
// refuses SHA-1) imports padlock and runs it: the demo's whole story
// (waiting, fencing, keep-alive, release), and a waiting run against a real
// redis-server, with a holder that releases while it waits. Before padlock
// stopped hashing its scripts itself, the process panicked before main.
func TestTheCommandRunsInFIPSOnlyMode(t *testing.T) {
	t.Parallel()
	env := func(url string) []string {
		return append(os.Environ(), "GODEBUG=fips140=only", "PADLOCK_REDIS_URL="+url, "REDIS_URL=")
	}
	s := startRedis(t)

	demo := padlockCmd(t, "", "demo")
	demo.Env = env("")
	out, err := demo.CombinedOutput()
	require.NoError(t, err, "padlock demo under fips140=only:\n%s", out)

	held, err := s.c.TryAcquire(t.Context(), "lock:fips", time.Minute)
	require.NoError(t, err)
	go func() {
		time.Sleep(300 * time.Millisecond)
		_ = held.Release(context.Background())
	}()
	run := padlockCmd(t, s.url, "run", "-wait", "10s", "-fence", "lock:fips", "--", "sh", "-c", `test "$PADLOCK_FENCE" = 1`)
	run.Env = env(s.url)
	out, err = run.CombinedOutput()
	require.NoError(t, err, "padlock run under fips140=only:\n%s", out)
	assert.False(t, s.exists(t, "lock:fips"), "released after the command")
}
