package main

import (
	"bufio"
	"bytes"
	"io"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/padlock-go/padlock/internal/redistest"
)

// -min-hold: an outage shorter than the minimum does not end the command.
// With Redis paused (SIGSTOP) for 700ms, over two ttls, `run -ttl 300ms
// -min-hold 2s` keeps its command running to its end, and exits with its
// status: Redis holds the key by its token until the minimum.
func TestRunMinHoldOutlivesAnOutage(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	cmd := padlockCmd(t, "redis://"+srv.Addr(), "run", "-ttl", "300ms", "-min-hold", "2s", "-grace", "100ms", "lock:outage", "--",
		"sh", "-c", "echo started; sleep 1.5")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	stdout, err := cmd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	line, err := bufio.NewReader(stdout).ReadString('\n')
	require.NoError(t, err)
	require.Equal(t, "started\n", line)
	srv.Pause()
	defer srv.Resume()
	time.Sleep(700 * time.Millisecond)
	srv.Resume()
	_, _ = io.ReadAll(stdout)
	require.NoError(t, cmd.Wait(), stderr.String())
}
