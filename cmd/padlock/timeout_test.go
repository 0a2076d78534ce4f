package main

import (
	"net"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// stallingURL is the URL of a loopback listener of the test's own that
// accepts connections and reads what comes, like a Redis that hangs:
// with late 0 it never answers; otherwise it answers each read with an
// error, late after it came. It stops when the test ends.
func stallingURL(t *testing.T, late time.Duration) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	var (
		wg     sync.WaitGroup
		mu     sync.Mutex
		conns  []net.Conn
		closed bool
	)
	stop := make(chan struct{})
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			if closed {
				conn.Close()
			} else {
				conns = append(conns, conn)
			}
			mu.Unlock()
			wg.Add(1)
			go func() {
				defer wg.Done()
				stall(conn, late, stop)
			}()
		}
	}()
	t.Cleanup(func() {
		close(stop)
		ln.Close()
		mu.Lock()
		closed = true
		for _, c := range conns {
			c.Close()
		}
		mu.Unlock()
		wg.Wait()
	})
	return "redis://" + ln.Addr().String()
}

// stall reads from conn until it closes, and answers each read with an
// error after late; never if late is 0.
func stall(conn net.Conn, late time.Duration, stop <-chan struct{}) {
	buf := make([]byte, 4096)
	for {
		if _, err := conn.Read(buf); err != nil {
			return
		}
		if late == 0 {
			continue
		}
		select {
		case <-time.After(late):
		case <-stop:
			return
		}
		if _, err := conn.Write([]byte("-ERR late\r\n")); err != nil {
			return
		}
	}
}

// The verbs that talk to Redis, with what they need besides the key.
var redisVerbs = [][]string{
	{"run", "lock:x", "--", "true"},
	{"acquire", "lock:x"},
	{"extend", "-ttl", "1m", "-token", "t", "lock:x"},
	{"release", "-token", "t", "lock:x"},
	{"break", "lock:x"},
	{"lead", "lock:x", "--", "true"},
	{"leader", "lock:x"},
	{"inspect", "lock:x"},
	{"list"},
	{"doctor"},
	{"demo", "-redis", "URL"},
}

// withURL is args with the word URL replaced by url.
func withURL(args []string, url string) []string {
	out := make([]string, len(args))
	for i, a := range args {
		out[i] = strings.ReplaceAll(a, "URL", url)
	}
	return out
}

// -timeout bounds every round trip of every verb that talks to Redis: a
// Redis that never answers, or answers 3s late, gets 300ms, and the verb
// exits 69 long before the answer would come, saying in one line what
// it waited for.
func TestTimeoutBoundsEveryVerb(t *testing.T) {
	t.Parallel()
	servers := map[string]string{"silent": stallingURL(t, 0), "late": stallingURL(t, 3*time.Second)}
	for name, url := range servers {
		for _, args := range redisVerbs {
			t.Run(name+"/"+args[0], func(t *testing.T) {
				t.Parallel()
				args := append([]string{args[0], "-timeout", "300ms"}, withURL(args[1:], url)...)
				r := padlockRun(t, url, args...)
				assert.Equal(t, exitUnavailable, r.code, r.stderr)
				assert.Less(t, r.took, 2500*time.Millisecond, "bounded by -timeout, not by the server's answer")
				assert.Equal(t, 1, strings.Count(r.stderr, "\n"), "one line: %q", r.stderr)
				assert.True(t, strings.HasPrefix(r.stderr, "padlock "+args[0]+": cannot "), r.stderr)
				assert.Contains(t, r.stderr, "within -timeout 300ms")
			})
		}
	}
}

// -wait bounds the wait for the lock while connecting too: against a
// Redis that never answers, or answers 3s late, 'padlock run -wait 500ms'
// exits 69 after about 500ms, before the default -timeout of 3s, and runs
// nothing. (go-redis alone, ignoring the deadline, took 9s.)
func TestWaitBoundsConnecting(t *testing.T) {
	t.Parallel()
	for name, late := range map[string]time.Duration{"silent": 0, "late": 3 * time.Second} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			url := stallingURL(t, late)
			marker := filepath.Join(t.TempDir(), "ran")
			for _, args := range [][]string{
				{"run", "-wait", "500ms", "lock:x", "--", "touch", marker},
				{"acquire", "-wait", "500ms", "lock:x"},
			} {
				r := padlockRun(t, url, args...)
				assert.Equal(t, exitUnavailable, r.code, r.stderr)
				assert.Less(t, r.took, 2500*time.Millisecond, "%v: bounded by -wait", args)
				assert.Contains(t, r.stderr, "within -wait 500ms", args)
				assert.Empty(t, r.stdout)
			}
			assert.NoFileExists(t, marker, "the command ran without the lock")
		})
	}
}

// PADLOCK_TIMEOUT sets the bound when -timeout is not given; -timeout
// wins over it; either one that is not a duration of at least 1ms is a
// usage error that names it.
func TestTimeoutFromTheEnvironment(t *testing.T) {
	t.Parallel()
	url := stallingURL(t, 0)
	run := func(env string, args ...string) result {
		t.Helper()
		cmd := padlockCmd(t, url, args...)
		cmd.Env = append(cmd.Env, "PADLOCK_TIMEOUT="+env)
		return finish(t, cmd)
	}
	r := run("300ms", "inspect", "lock:x")
	assert.Equal(t, exitUnavailable, r.code, r.stderr)
	assert.Contains(t, r.stderr, "within -timeout 300ms")
	assert.Less(t, r.took, 2500*time.Millisecond)

	r = run("1h", "inspect", "-timeout", "300ms", "lock:x")
	assert.Equal(t, exitUnavailable, r.code, r.stderr)
	assert.Contains(t, r.stderr, "within -timeout 300ms", "the flag wins")

	r = run("soon", "inspect", "lock:x")
	assert.Equal(t, exitUsage, r.code)
	assert.Equal(t, "padlock inspect: PADLOCK_TIMEOUT=\"soon\" is not a duration (like 5s or 500ms)\nsee padlock inspect -h\n", r.stderr)
	r = run("soon", "inspect", "-timeout", "300ms", "lock:x")
	assert.Equal(t, exitUnavailable, r.code, "the flag wins: %s", r.stderr)

	r = run("", "inspect", "-timeout", "0s", "lock:x")
	assert.Equal(t, exitUsage, r.code)
	assert.Contains(t, r.stderr, "-timeout 0s is under 1ms")
}
