package main

import (
	"bufio"
	"encoding/json"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// leader is a running 'padlock lead' whose command says "leading TERM PID"
// when it starts, and exits 3 on SIGTERM.
type leader struct {
	cmd   *exec.Cmd
	lines chan string
}

func startLead(t *testing.T, url, key, value string) *leader {
	t.Helper()
	cmd := padlockCmd(t, url, "lead", "-ttl", "1s", "-value", value, key, "--", "sh", "-c",
		`trap 'exit 3' TERM; echo "leading $PADLOCK_TERM $$"; while :; do sleep 0.05; done`)
	stdout, err := cmd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	ld := &leader{cmd: cmd, lines: make(chan string, 16)}
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			ld.lines <- sc.Text()
		}
		close(ld.lines)
	}()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	return ld
}

// inLine waits until n processes wait in line for key.
func inLine(t *testing.T, s server, key string, n int) {
	t.Helper()
	require.Eventually(t, func() bool {
		info, err := s.c.Inspect(t.Context(), key)
		return err == nil && info.Waiting == n
	}, 10*time.Second, 10*time.Millisecond, "%d waiting for %q", n, key)
}

// leading waits up to limit for the command to start, and returns its term
// and pid; ok false if it did not.
func (l *leader) leading(limit time.Duration) (term int64, pid int, ok bool) {
	select {
	case line, open := <-l.lines:
		if !open {
			return 0, 0, false
		}
		f := strings.Fields(line)
		if len(f) != 3 || f[0] != "leading" {
			return 0, 0, false
		}
		term, _ = strconv.ParseInt(f[1], 10, 64)
		pid, _ = strconv.Atoi(f[2])
		return term, pid, true
	case <-time.After(limit):
		return 0, 0, false
	}
}

// Two hosts run 'padlock lead': one runs the command; when it is killed
// (SIGKILL, with its command), the other takes over within ttl + 1s; SIGTERM
// to a leader stops its command, resigns at once, and exits with the
// command's status.
func TestLead(t *testing.T) {
	s := startRedis(t)
	first := startLead(t, s.url, "lead:cron", "host-1")
	term1, pid1, ok := first.leading(5 * time.Second)
	require.True(t, ok, "the first leads")
	second := startLead(t, s.url, "lead:cron", "host-2")
	_, _, ok = second.leading(300 * time.Millisecond)
	require.False(t, ok, "one leader at a time")

	r := padlockRun(t, s.url, "leader", "lead:cron")
	require.Equal(t, 0, r.code, r.stderr)
	assert.Contains(t, r.stdout, "lead:cron: host-1 (term "+strconv.FormatInt(term1, 10)+", ")

	require.NoError(t, first.cmd.Process.Signal(syscall.SIGKILL))
	killed := time.Now()
	assert.Eventually(t, func() bool { return gone(pid1) }, time.Second, 10*time.Millisecond,
		"the command dies with its padlock")
	term2, pid2, ok := second.leading(3 * time.Second)
	require.True(t, ok, "the second takes over")
	assert.Less(t, time.Since(killed), 2*time.Second, "within ttl + 1s")
	assert.Greater(t, term2, term1)

	third := startLead(t, s.url, "lead:cron", "host-3")
	inLine(t, s, "lead:cron", 1)
	require.NoError(t, second.cmd.Process.Signal(syscall.SIGTERM))
	stopped := time.Now()
	_, _, ok = third.leading(3 * time.Second)
	require.True(t, ok, "the third takes over")
	assert.Less(t, time.Since(stopped), 500*time.Millisecond, "SIGTERM resigns at once")
	err := second.cmd.Wait()
	var exit *exec.ExitError
	require.ErrorAs(t, err, &exit)
	assert.Equal(t, 3, exit.ExitCode(), "the command's status")
	assert.True(t, gone(pid2), "its command is gone")

	// A signal while it waits to lead: 128 + the signal, nothing ran.
	fourth := startLead(t, s.url, "lead:cron", "host-4")
	inLine(t, s, "lead:cron", 1) // its signal handler is set by then
	require.NoError(t, fourth.cmd.Process.Signal(syscall.SIGINT))
	err = fourth.cmd.Wait()
	require.ErrorAs(t, err, &exit)
	assert.Equal(t, 128+int(syscall.SIGINT), exit.ExitCode())
}

func TestLeaderJSONAndWatch(t *testing.T) {
	t.Parallel()
	s := startRedis(t)
	r := padlockRun(t, s.url, "leader", "-json", "lead:none")
	require.Equal(t, 0, r.code, r.stderr)
	var got leaderJSON
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &got))
	assert.Equal(t, leaderJSON{Key: "lead:none"}, got)
	r = padlockRun(t, s.url, "leader", "lead:none")
	assert.Equal(t, "lead:none: no leader\n", r.stdout)

	watch := padlockCmd(t, s.url, "leader", "-watch", "-json", "lead:w")
	stdout, err := watch.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, watch.Start())
	dec := json.NewDecoder(stdout)
	var first leaderJSON
	require.NoError(t, dec.Decode(&first))
	assert.False(t, first.Leader)

	l, err := s.c.Campaign(t.Context(), "lead:w", 5*time.Second, "host-9")
	require.NoError(t, err)
	var next leaderJSON
	require.NoError(t, dec.Decode(&next))
	assert.Equal(t, "host-9", next.Value)
	assert.True(t, next.Leader)
	assert.Equal(t, l.Term(), next.Term)
	assert.Positive(t, next.TTLMs)
	require.NoError(t, l.Resign(t.Context()))
	require.NoError(t, dec.Decode(&next))
	assert.False(t, next.Leader)

	require.NoError(t, watch.Process.Signal(syscall.SIGINT))
	_, _ = io.ReadAll(stdout)
	require.NoError(t, watch.Wait(), "exits 0 when interrupted")

	for _, args := range [][]string{{"leader"}, {"lead", "k"}, {"lead", "-grace", "-1s", "k", "--", "true"}} {
		r := padlockRun(t, s.url, args...)
		assert.Equal(t, 64, r.code, "%v", args)
	}
	r = padlockRun(t, "redis://127.0.0.1:1", "leader", "k")
	assert.Equal(t, 69, r.code)
}

// gone reports whether the process pid has exited: it does not exist, or
// it is a zombie that its new parent has not reaped yet.
func gone(pid int) bool {
	stat, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return syscall.Kill(pid, 0) == syscall.ESRCH
	}
	// The state follows the command name in parentheses.
	s := string(stat)
	i := strings.LastIndexByte(s, ')')
	return i >= 0 && i+2 < len(s) && s[i+2] == 'Z'
}
