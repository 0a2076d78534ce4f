package main

import (
	"bufio"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"net/url"
	"os/exec"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/padlock-go/padlock"
)

// A served is a 'padlock serve' process, and the URL it printed.
type served struct {
	cmd    *exec.Cmd
	url    string
	stderr *strings.Builder
}

// startServe starts 'padlock serve -addr 127.0.0.1:0 args...' on the Redis
// at redisURL, and waits for the URL it prints.
func startServe(t *testing.T, redisURL string, args ...string) served {
	t.Helper()
	cmd := padlockCmd(t, redisURL, append([]string{"serve", "-addr", "127.0.0.1:0"}, args...)...)
	stdout, err := cmd.StdoutPipe()
	require.NoError(t, err)
	s := served{cmd: cmd, stderr: &strings.Builder{}}
	cmd.Stderr = s.stderr
	require.NoError(t, cmd.Start())
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	line, err := bufio.NewReader(stdout).ReadString('\n')
	require.NoError(t, err, "padlock serve printed no URL: %s", s.stderr)
	s.url = strings.TrimSpace(line)
	require.Regexp(t, `^http://127\.0\.0\.1:\d+/$`, s.url)
	go func() { _, _ = io.Copy(io.Discard, stdout) }()
	return s
}

// stop sends sig to the server and returns its exit status.
func (s served) stop(t *testing.T, sig syscall.Signal) int {
	t.Helper()
	require.NoError(t, s.cmd.Process.Signal(sig))
	err := s.cmd.Wait()
	var exit *exec.ExitError
	if errors.As(err, &exit) {
		return exit.ExitCode()
	}
	require.NoError(t, err)
	return 0
}

// fetch GETs url with the Accept header accept ("" for none).
func fetch(t *testing.T, url, accept string) (int, string) {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, url, nil)
	require.NoError(t, err)
	if accept != "" {
		req.Header.Set("Accept", accept)
	}
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return resp.StatusCode, string(body)
}

// padlock serve serves the page of the locks that match -match, read-only,
// until SIGTERM or SIGINT, and then exits 0.
func TestServe(t *testing.T) {
	t.Parallel()
	s := startRedis(t)
	ctx := t.Context()
	held, err := s.c.TryAcquire(ctx, "lock:served", time.Minute, padlock.WithMetadata("host=web-3 job=daily"))
	require.NoError(t, err)
	t.Cleanup(func() { _ = held.Release(ctx) })
	other, err := s.c.TryAcquire(ctx, "job:other", time.Minute)
	require.NoError(t, err)
	t.Cleanup(func() { _ = other.Release(ctx) })

	for _, sig := range []syscall.Signal{syscall.SIGTERM, syscall.SIGINT} {
		srv := startServe(t, s.url, "-match", "lock:*")
		code, body := fetch(t, srv.url, "")
		require.Equal(t, http.StatusOK, code, body)
		assert.Contains(t, body, `<td class="key">lock:served</td>`)
		assert.Contains(t, body, `<td class="meta">host=web-3 job=daily</td>`)
		assert.NotContains(t, body, "job:other", "-match")
		assert.NotContains(t, body, `action="break"`, "read-only without -break")
		code, body = fetch(t, srv.url+"?match=job:*", "application/json")
		require.Equal(t, http.StatusOK, code, body)
		var locks []struct{ Key string }
		require.NoError(t, json.Unmarshal([]byte(body), &locks), body)
		assert.Equal(t, []struct{ Key string }{{"job:other"}}, locks)
		resp, err := http.PostForm(srv.url+"break", url.Values{"key": {"lock:served"}})
		require.NoError(t, err)
		resp.Body.Close()
		assert.Equal(t, http.StatusNotFound, resp.StatusCode)

		assert.Equal(t, 0, srv.stop(t, sig), "%v: %s", sig, srv.stderr)
		assert.Contains(t, srv.stderr.String(), "padlock serve: the locks of "+s.url+" matching lock:* on "+srv.url)
	}
	assert.True(t, s.exists(t, "lock:served"))
}

// padlock serve -break offers a break button whose form breaks the lock.
func TestServeBreak(t *testing.T) {
	t.Parallel()
	s := startRedis(t)
	ctx := t.Context()
	stuck, err := s.c.TryAcquire(ctx, "lock:stuck", time.Hour, padlock.WithMetadata("pipeline 4711"))
	require.NoError(t, err)
	srv := startServe(t, s.url, "-break")
	code, body := fetch(t, srv.url, "")
	require.Equal(t, http.StatusOK, code, body)
	m := regexp.MustCompile(`<input type="hidden" name="csrf" value="([^"]+)"><input type="hidden" name="key" value="lock:stuck">`).FindStringSubmatch(body)
	require.NotNil(t, m, body)

	resp, err := http.PostForm(srv.url+"break", url.Values{"key": {"lock:stuck"}, "csrf": {"guess"}})
	require.NoError(t, err)
	resp.Body.Close()
	assert.Equal(t, http.StatusForbidden, resp.StatusCode)
	assert.True(t, s.exists(t, "lock:stuck"))

	resp, err = http.PostForm(srv.url+"break", url.Values{"key": {"lock:stuck"}, "csrf": {m[1]}})
	require.NoError(t, err)
	resp.Body.Close()
	assert.Equal(t, http.StatusOK, resp.StatusCode, "the redirect to the page, followed")
	assert.Equal(t, srv.url, resp.Request.URL.String())
	assert.False(t, s.exists(t, "lock:stuck"))
	require.ErrorIs(t, stuck.Release(ctx), padlock.ErrNotHeld)
	assert.Equal(t, 0, srv.stop(t, syscall.SIGTERM), srv.stderr)
}

// Bad flags are usage errors; a Redis that cannot be reached, or an
// address that cannot be listened on, is 69.
func TestServeFails(t *testing.T) {
	t.Parallel()
	s := startRedis(t)
	tests := []struct {
		args []string
		code int
		want string
	}{
		{[]string{"serve", "x"}, exitUsage, `padlock serve: unexpected "x": serve takes no arguments`},
		{[]string{"serve", "-match", ""}, exitUsage, `padlock serve: -match is empty: "*" matches every key`},
		{[]string{"serve", "-match", "ops:["}, exitUsage, `padlock serve: -match "ops:[": syntax error in pattern`},
		{[]string{"serve", "-addr", "127.0.0.1:99999"}, exitUnavailable, "padlock serve: listen tcp: address 99999: invalid port"},
	}
	for _, tt := range tests {
		r := padlockRun(t, s.url, tt.args...)
		assert.Equal(t, tt.code, r.code, "%v: %s", tt.args, r.stderr)
		assert.True(t, strings.HasPrefix(r.stderr, tt.want+"\n"), "%v: %s", tt.args, r.stderr)
		assert.Empty(t, r.stdout)
	}

	taken, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer taken.Close()
	r := padlockRun(t, s.url, "serve", "-addr", taken.Addr().String())
	assert.Equal(t, exitUnavailable, r.code, r.stderr)
	assert.Contains(t, r.stderr, "address already in use")

	r = padlockRun(t, deadURL(t), "serve", "-addr", "127.0.0.1:0")
	assert.Equal(t, exitUnavailable, r.code, r.stderr)
	assert.True(t, strings.HasPrefix(r.stderr, `padlock serve: cannot list the locks "*"`), r.stderr)
	assert.Empty(t, r.stdout)
}

// serve -h names its flags and exit statuses, as every verb's does.
func TestServeHelp(t *testing.T) {
	t.Parallel()
	r := padlockRun(t, "redis://cron:s3cret@127.0.0.1:1", "serve", "-h")
	require.Equal(t, 0, r.code, r.stderr)
	assert.True(t, strings.HasPrefix(r.stdout, "usage: padlock serve"), r.stdout)
	for _, want := range []string{"-addr string", "-match string", "-break", "-timeout duration", "\nexit status:\n  0 ", "\n  64 ", "\n  69 "} {
		assert.Contains(t, r.stdout, want)
	}
	assert.NotContains(t, r.stdout, "s3cret")
	r = padlockRun(t, "", "-h")
	assert.Contains(t, r.stdout, "\n  padlock serve ")
}
