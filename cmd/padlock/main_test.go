package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/padlock-go/padlock"
	"github.com/padlock-go/padlock/internal/redistest"
)

// bin is the padlock binary built for these tests.
var bin string

func TestMain(m *testing.M) {
	redistest.Parallel(4)
	dir, err := os.MkdirTemp("", "padlock-cmd-test")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	bin = filepath.Join(dir, "padlock")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "go build: %v\n%s", err, out)
		os.Exit(1)
	}
	code := 0
	func() {
		defer os.RemoveAll(dir)
		code = m.Run()
	}()
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintln(os.Stderr, "goleak:", err)
			code = 1
		}
	}
	os.Exit(code)
}

// result is how a padlock process ended.
type result struct {
	code           int
	stdout, stderr string
	took           time.Duration
}

// padlockCmd prepares the binary with args, talking to the Redis at url
// (through PADLOCK_REDIS_URL, as a cron job would).
func padlockCmd(t *testing.T, url string, args ...string) *exec.Cmd {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	t.Cleanup(cancel)
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Env = append(os.Environ(), "PADLOCK_REDIS_URL="+url, "REDIS_URL=")
	return cmd
}

// padlockRun runs the binary to the end.
func padlockRun(t *testing.T, url string, args ...string) result {
	t.Helper()
	return finish(t, padlockCmd(t, url, args...))
}

// finish runs cmd, a padlock process, to the end.
func finish(t *testing.T, cmd *exec.Cmd) result {
	t.Helper()
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	start := time.Now()
	err := cmd.Run()
	r := result{stdout: stdout.String(), stderr: stderr.String(), took: time.Since(start)}
	var exit *exec.ExitError
	switch {
	case errors.As(err, &exit):
		r.code = exit.ExitCode()
	case err != nil:
		t.Fatalf("padlock %v: %v", cmd.Args[1:], err)
	}
	return r
}

type server struct {
	url string
	raw *redis.Client
	c   *padlock.Client
}

func startRedis(t *testing.T) server {
	srv := redistest.Start(t)
	raw := srv.Client()
	return server{url: "redis://" + srv.Addr(), raw: raw, c: padlock.New(raw)}
}

// deadURL is the URL of a loopback port where no Redis answers (see
// redistest.DeadAddr).
func deadURL(t *testing.T) string { return "redis://" + redistest.DeadAddr(t) }

func (s server) exists(t *testing.T, key string) bool {
	n, err := s.raw.Exists(context.Background(), key).Result()
	require.NoError(t, err)
	return n == 1
}

func TestRunExitsWithTheCommandsStatus(t *testing.T) {
	t.Parallel()
	s := startRedis(t)
	for _, code := range []int{0, 1, 7, 255} {
		r := padlockRun(t, s.url, "run", "lock:job", "--", "sh", "-c", "exit "+strconv.Itoa(code))
		assert.Equal(t, code, r.code, r.stderr)
		assert.False(t, s.exists(t, "lock:job"), "released after the command exited")
	}
	r := padlockRun(t, s.url, "run", "lock:job", "--", "sh", "-c", "kill -KILL $$")
	assert.Equal(t, 128+9, r.code, "killed by signal 9")
}

func TestRunSeesItsEnvironment(t *testing.T) {
	t.Parallel()
	s := startRedis(t)
	r := padlockRun(t, s.url, "run", "-fence", "-metadata", "cron@web-1", "lock:env", "--",
		"sh", "-c", `echo "$PADLOCK_KEY|$PADLOCK_TOKEN|$PADLOCK_FENCE"; redis-cli -u "$PADLOCK_REDIS_URL" GET lock:env`)
	require.Equal(t, 0, r.code, r.stderr)
	lines := strings.Split(strings.TrimSpace(r.stdout), "\n")
	require.Len(t, lines, 2, r.stdout)
	parts := strings.Split(lines[0], "|")
	require.Len(t, parts, 3)
	assert.Equal(t, "lock:env", parts[0])
	_, err := uuid.Parse(parts[1])
	require.NoError(t, err, "PADLOCK_TOKEN is the lock's token")
	assert.Equal(t, "1", parts[2], "PADLOCK_FENCE")
	assert.Equal(t, parts[1]+" ~30000 cron@web-1", lines[1], "the lock is held while the command runs, with its span and metadata")

	// Without -fence there is no PADLOCK_FENCE; the default metadata names host and pid.
	r = padlockRun(t, s.url, "run", "lock:env", "--", "sh", "-c",
		`echo "${PADLOCK_FENCE-unset}"; redis-cli -u "$PADLOCK_REDIS_URL" GET lock:env`)
	require.Equal(t, 0, r.code, r.stderr)
	host, _ := os.Hostname()
	assert.Contains(t, r.stdout, "unset\n")
	assert.Contains(t, r.stdout, " host="+host+" pid=")
}

func TestRunConflict(t *testing.T) {
	t.Parallel()
	s := startRedis(t)
	ctx := t.Context()
	held, err := s.c.TryAcquire(ctx, "lock:backup", time.Minute, padlock.WithMetadata("host=other pid=1"))
	require.NoError(t, err)
	marker := filepath.Join(t.TempDir(), "ran")

	r := padlockRun(t, s.url, "run", "lock:backup", "--", "touch", marker)
	assert.Equal(t, 75, r.code)
	assert.Contains(t, r.stderr, "lock:backup is held elsewhere by host=other pid=1")
	assert.NoFileExists(t, marker, "the command ran without the lock")

	r = padlockRun(t, s.url, "run", "-conflict-exit", "0", "lock:backup", "--", "touch", marker)
	assert.Equal(t, 0, r.code)
	assert.NoFileExists(t, marker)
	require.NoError(t, held.Release(ctx))
}

func TestRunWaits(t *testing.T) {
	t.Parallel()
	s := startRedis(t)
	ctx := t.Context()
	held, err := s.c.TryAcquire(ctx, "lock:wait", time.Minute)
	require.NoError(t, err)

	r := padlockRun(t, s.url, "run", "-wait", "200ms", "lock:wait", "--", "true")
	assert.Equal(t, 75, r.code, "gave up after -wait")

	time.AfterFunc(300*time.Millisecond, func() { _ = held.Release(context.Background()) })
	r = padlockRun(t, s.url, "run", "-wait", "10s", "lock:wait", "--", "sh", "-c", "echo ran")
	assert.Equal(t, 0, r.code, r.stderr)
	assert.Equal(t, "ran\n", r.stdout)
}

// The lock is stolen while the command runs and the command ignores
// SIGTERM: padlock kills it within ttl + grace and says why.
func TestRunKillsTheCommandWhenTheLockIsLost(t *testing.T) {
	t.Parallel()
	s := startRedis(t)
	ctx := t.Context()
	pidFile := filepath.Join(t.TempDir(), "pid")
	const ttl, grace = time.Second, 500 * time.Millisecond
	cmd := padlockCmd(t, s.url, "run", "-ttl", ttl.String(), "-grace", grace.String(), "lock:lost", "--",
		"sh", "-c", `trap "" TERM; echo $$ > `+pidFile+`; echo started; sleep 60; echo survived`)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	stdout, err := cmd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	line, err := bufio.NewReader(stdout).ReadString('\n')
	require.NoError(t, err)
	require.Equal(t, "started\n", line)

	require.NoError(t, s.raw.Set(ctx, "lock:lost", "thief", time.Minute).Err())
	stolen := time.Now()
	rest, _ := io.ReadAll(stdout)
	err = cmd.Wait()
	took := time.Since(stolen)

	var exit *exec.ExitError
	require.ErrorAs(t, err, &exit)
	assert.Equal(t, 79, exit.ExitCode())
	assert.Contains(t, stderr.String(), "padlock run: lock lock:lost lost while the command ran (")
	assert.NotContains(t, stderr.String(), "ran (padlock: ", "the cause without padlock's prefix again")
	assert.Contains(t, stderr.String(), `level=WARN msg="padlock: lock lost" key=lock:lost`, "logged through slog")
	assert.NotContains(t, string(rest), "survived")
	if took > ttl+grace+time.Second {
		t.Errorf("the command outlived the stolen lock by %v (ttl %v + grace %v)", took, ttl, grace)
	}
	assert.GreaterOrEqual(t, took, grace, "SIGTERM was ignored, so only SIGKILL after -grace ended it")
	pid, err := os.ReadFile(pidFile)
	require.NoError(t, err)
	n, err := strconv.Atoi(strings.TrimSpace(string(pid)))
	require.NoError(t, err)
	assert.ErrorIs(t, syscall.Kill(n, 0), syscall.ESRCH, "the command is gone")
	assert.Equal(t, "thief", getKey(t, s, "lock:lost"), "the new holder's lock is untouched")
}

func getKey(t *testing.T, s server, key string) string {
	v, err := s.raw.Get(context.Background(), key).Result()
	require.NoError(t, err)
	return v
}

func TestRunForwardsSignals(t *testing.T) {
	t.Parallel()
	s := startRedis(t)
	for _, sig := range []syscall.Signal{syscall.SIGTERM, syscall.SIGINT} {
		t.Run(sig.String(), func(t *testing.T) {
			cmd := padlockCmd(t, s.url, "run", "lock:sig", "--", "sh", "-c",
				`trap 'echo got signal; exit 3' TERM INT; echo ready; while :; do sleep 0.05; done`)
			stdout, err := cmd.StdoutPipe()
			require.NoError(t, err)
			require.NoError(t, cmd.Start())
			rd := bufio.NewReader(stdout)
			line, err := rd.ReadString('\n')
			require.NoError(t, err)
			require.Equal(t, "ready\n", line)

			require.NoError(t, cmd.Process.Signal(sig))
			rest, _ := io.ReadAll(rd)
			err = cmd.Wait()
			var exit *exec.ExitError
			require.ErrorAs(t, err, &exit)
			assert.Equal(t, 3, exit.ExitCode(), "padlock exits with the command's status")
			assert.Equal(t, "got signal\n", string(rest))
			assert.False(t, s.exists(t, "lock:sig"), "released after the command exited")
		})
	}
}

func TestRunWithRedisUnreachable(t *testing.T) {
	t.Parallel()
	url := deadURL(t)
	marker := filepath.Join(t.TempDir(), "ran")

	r := padlockRun(t, url, "run", "lock:x", "--", "touch", marker)
	assert.Equal(t, 69, r.code)
	assert.Equal(t, 1, strings.Count(r.stderr, "\n"), "one line: %q", r.stderr)
	assert.Contains(t, r.stderr, "padlock run: cannot take the lock lock:x: ")
	assert.NoFileExists(t, marker, "the command ran without the lock")

	r = padlockRun(t, url, "inspect", "lock:x")
	assert.Equal(t, 69, r.code)
}

func TestRunWithACLUser(t *testing.T) {
	t.Parallel()
	s := startRedis(t)
	require.NoError(t, s.raw.Do(t.Context(), "ACL", "SETUSER", "cron", "on", ">s3cret", "~lock:*", "+@all").Err())
	host := strings.TrimPrefix(s.url, "redis://")
	r := padlockRun(t, "redis://cron:s3cret@"+host, "run", "lock:acl", "--", "true")
	assert.Equal(t, 0, r.code, r.stderr)
	r = padlockRun(t, "redis://cron:wrong@"+host, "run", "lock:acl", "--", "true")
	assert.Equal(t, 69, r.code)
	assert.NotContains(t, r.stderr, "wrong", "the password is not printed")
}

func TestInspect(t *testing.T) {
	t.Parallel()
	s := startRedis(t)
	ctx := t.Context()
	r := padlockRun(t, s.url, "inspect", "lock:report")
	require.Equal(t, 0, r.code, r.stderr)
	assert.Equal(t, "lock:report: not held (fence counter 0)\n", r.stdout)

	l, err := s.c.TryAcquire(ctx, "lock:report", time.Minute, padlock.WithFencing(), padlock.WithMetadata("host=web-2 pid=77"))
	require.NoError(t, err)
	r = padlockRun(t, s.url, "inspect", "lock:report")
	require.Equal(t, 0, r.code, r.stderr)
	assert.Contains(t, r.stdout, "lock:report: held\n")
	assert.Contains(t, r.stdout, "holder:   host=web-2 pid=77\n")
	assert.Contains(t, r.stdout, "token:    "+l.Token()+"\n")
	assert.Contains(t, r.stdout, "fence:    1\n")

	r = padlockRun(t, s.url, "inspect", "-json", "lock:report")
	require.Equal(t, 0, r.code, r.stderr)
	var got map[string]any
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &got))
	assert.Equal(t, true, got["held"])
	assert.Equal(t, "host=web-2 pid=77", got["metadata"])
	assert.Equal(t, l.Token(), got["token"])
	assert.Equal(t, float64(1), got["fence"])
	ttl := got["ttl_ms"].(float64)
	assert.True(t, ttl > 50000 && ttl <= 60000, "ttl_ms %v", ttl)

	require.NoError(t, l.Release(ctx))
	r = padlockRun(t, s.url, "inspect", "-json", "lock:report")
	require.Equal(t, 0, r.code, r.stderr)
	assert.JSONEq(t, `{"key":"lock:report","held":false,"ttl_ms":0,"held_ms":0,"fence":1,"waiting":0,"oldest_wait_ms":0}`, r.stdout)
}

// padlock run -limit N runs a command under one of N places of a
// semaphore, and inspect shows every holder.
func TestRunUnderASemaphore(t *testing.T) {
	t.Parallel()
	s := startRedis(t)
	ctx := t.Context()
	other, err := s.c.TryAcquire(ctx, "lock:exports", time.Minute, padlock.WithLimit(2), padlock.WithMetadata("host=a pid=1"))
	require.NoError(t, err)

	// One place left: the command runs in it, and sees the semaphore full.
	r := padlockRun(t, s.url, "run", "-limit", "2", "-metadata", "host=b pid=2", "lock:exports", "--",
		"sh", "-c", `test "$PADLOCK_KEY" = lock:exports && exit 3`)
	assert.Equal(t, 3, r.code, r.stderr)
	full, err := s.c.TryAcquire(ctx, "lock:exports", time.Minute, padlock.WithLimit(2), padlock.WithMetadata("host=c pid=3"))
	require.NoError(t, err, "the command's place was released")

	r = padlockRun(t, s.url, "run", "-limit", "2", "lock:exports", "--", "true")
	assert.Equal(t, 75, r.code, "both places taken")
	assert.Contains(t, r.stderr, "lock:exports is held elsewhere by 2 holders (host=a pid=1; host=c pid=3)")

	r = padlockRun(t, s.url, "inspect", "lock:exports")
	require.Equal(t, 0, r.code, r.stderr)
	assert.Contains(t, r.stdout, "lock:exports: semaphore, 2 holders\n")
	assert.Contains(t, r.stdout, "holder:   host=a pid=1\n    token:  "+other.Token()+"\n")
	assert.Contains(t, r.stdout, "holder:   host=c pid=3\n    token:  "+full.Token()+"\n")
	r = padlockRun(t, s.url, "inspect", "-json", "lock:exports")
	require.Equal(t, 0, r.code, r.stderr)
	var got struct {
		Kind    string
		Holders []struct{ Token, Metadata string }
	}
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &got))
	assert.Equal(t, "semaphore", got.Kind)
	assert.Len(t, got.Holders, 2)

	r = padlockRun(t, s.url, "run", "-limit", "-1", "lock:exports", "--", "true")
	assert.Equal(t, 64, r.code)
	require.NoError(t, other.Release(ctx))
	require.NoError(t, full.Release(ctx))
}

// checkDemo checks the demo's claims in its output.
func checkDemo(t *testing.T, r result) {
	t.Helper()
	require.Equal(t, 0, r.code, "stdout:\n%s\nstderr:\n%s", r.stdout, r.stderr)
	out := r.stdout
	assert.Equal(t, 1, strings.Count(out, "got the lock, running the report"), out)
	assert.Equal(t, 4, strings.Count(out, "held elsewhere, skipping"), out)
	assert.Contains(t, out, "=> exactly one instance ran the report (1 ran, 4 skipped)")
	assert.Contains(t, out, "worker B: tries at once: padlock: lock not acquired")
	assert.Contains(t, out, "worker B: tries again: acquired")
	assert.Contains(t, out, "=> KeepAlive held the lock past its TTL")
	assert.Contains(t, out, "padlock: lock lost")
	assert.Contains(t, out, "worker B: writes with fence 2: accepted")
	assert.Contains(t, out, "worker A: writes with fence 1: rejected as stale")
	assert.NotContains(t, out, "UNEXPECTED")
	assert.Contains(t, out, "Every case behaved as promised.")
}

func TestDemoNeedsNoRedis(t *testing.T) {
	t.Parallel()
	// An address where nothing listens: the demo must not need it.
	r := padlockRun(t, "redis://127.0.0.1:1", "demo")
	checkDemo(t, r)
	assert.Contains(t, r.stdout, "embedded Redis")
}

func TestDemoOnRealRedis(t *testing.T) {
	t.Parallel()
	s := startRedis(t)
	r := padlockRun(t, "", "demo", "-redis", s.url)
	checkDemo(t, r)
	keys, err := s.raw.Keys(t.Context(), "*").Result()
	require.NoError(t, err)
	assert.Empty(t, keys, "the demo cleaned up after itself")
}

// 'go run ./cmd/padlock demo', as the README says, from a fresh clone.
func TestDemoThroughGoRun(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("builds the command again")
	}
	cmd := exec.CommandContext(t.Context(), "go", "run", ".", "demo")
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	require.NoError(t, cmd.Run(), stderr.String())
	checkDemo(t, result{stdout: stdout.String(), stderr: stderr.String()})
}

// rediss:// URLs work (here with a self-signed certificate, so skip_verify).
func TestRunOverTLS(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t, redistest.WithTLS())
	url := "rediss://" + srv.TLSAddr() + "?skip_verify=true"
	r := padlockRun(t, url, "run", "lock:tls", "--", "sh", "-c", "echo ran")
	require.Equal(t, 0, r.code, r.stderr)
	assert.Equal(t, "ran\n", r.stdout)
	r = padlockRun(t, url, "inspect", "lock:tls")
	require.Equal(t, 0, r.code, r.stderr)
	assert.Contains(t, r.stdout, "not held")
	r = padlockRun(t, "redis://"+srv.TLSAddr(), "run", "lock:tls", "--", "true")
	assert.Equal(t, 69, r.code, "plain text to a TLS port fails, and nothing runs")
}

// padlock doctor: 0 with no danger, 1 with one (text, most severe first,
// and JSON), 69 when Redis cannot be reached, 64 on usage errors; it
// leaves no key behind.
func TestDoctor(t *testing.T) {
	t.Parallel()
	s := startRedis(t)
	ctx := t.Context()
	r := padlockRun(t, s.url, "doctor")
	require.Equal(t, 0, r.code, r.stderr)
	assert.Contains(t, r.stdout, "lock cycle: inspect acquire extend ttl wait fence release inspect\n")
	assert.Contains(t, r.stdout, "WARNING persistence")
	assert.NotContains(t, r.stdout, "DANGER")
	assert.Contains(t, r.stdout, "no danger found\n")
	keys, err := s.raw.Keys(ctx, "*").Result()
	require.NoError(t, err)
	assert.Empty(t, keys, "doctor left keys behind")

	require.NoError(t, s.raw.ConfigSet(ctx, "maxmemory", "100mb").Err())
	require.NoError(t, s.raw.ConfigSet(ctx, "maxmemory-policy", "volatile-lru").Err())
	r = padlockRun(t, s.url, "doctor", "-key", "lock:other")
	require.Equal(t, 1, r.code, r.stderr)
	lines := strings.Split(strings.TrimSpace(r.stdout), "\n")
	first := slices.IndexFunc(lines, func(l string) bool { return strings.HasPrefix(l, "DANGER") })
	require.GreaterOrEqual(t, first, 0, r.stdout)
	assert.Contains(t, lines[first], "DANGER  eviction")
	assert.Contains(t, lines[first], "volatile-lru")
	assert.Less(t, first, slices.IndexFunc(lines, func(l string) bool { return strings.HasPrefix(l, "WARNING") }), "most severe first")
	assert.Equal(t, "not safe for locks: fix the DANGER findings", lines[len(lines)-1])

	r = padlockRun(t, s.url, "doctor", "-json")
	require.Equal(t, 1, r.code, r.stderr)
	var got struct {
		Key   string `json:"key"`
		Safe  bool   `json:"safe"`
		Nodes []struct {
			Addr            string `json:"addr"`
			MaxMemoryPolicy string `json:"maxmemory_policy"`
		} `json:"nodes"`
		Cycle []struct {
			Name string `json:"name"`
			OK   bool   `json:"ok"`
		} `json:"cycle"`
		Findings []struct {
			Severity string `json:"severity"`
			Topic    string `json:"topic"`
			Fix      string `json:"fix"`
		} `json:"findings"`
	}
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &got), r.stdout)
	assert.Equal(t, "lock:padlock-doctor", got.Key)
	assert.False(t, got.Safe)
	require.Len(t, got.Nodes, 1)
	assert.Equal(t, strings.TrimPrefix(s.url, "redis://"), got.Nodes[0].Addr)
	assert.Equal(t, "volatile-lru", got.Nodes[0].MaxMemoryPolicy)
	assert.Len(t, got.Cycle, 8)
	for _, st := range got.Cycle {
		assert.True(t, st.OK, st.Name)
	}
	require.NotEmpty(t, got.Findings)
	assert.Equal(t, "danger", got.Findings[0].Severity)
	assert.Equal(t, "eviction", got.Findings[0].Topic)
	assert.Contains(t, got.Findings[0].Fix, "noeviction")

	down := deadURL(t)
	for _, args := range [][]string{{"doctor"}, {"doctor", "-json"}} {
		r = padlockRun(t, down, args...)
		assert.Equal(t, 69, r.code, args)
		assert.Contains(t, r.stderr, "cannot check")
		assert.Empty(t, r.stdout)
	}

	for _, args := range [][]string{{"doctor", "extra"}, {"doctor", "-nope"}, {"doctor", "-key", ""}, {"doctor", "-redis", "http://x"}} {
		r = padlockRun(t, s.url, args...)
		assert.Equal(t, 64, r.code, "%v: %s", args, r.stderr)
	}
}

// -max-hold caps the lease: renewing stops 1s after the lock was taken,
// the lock expires at its ttl, and the command is ended as for a lost
// lock, with the lost-lock status; stderr says the cap was reached.
func TestRunMaxHold(t *testing.T) {
	t.Parallel()
	s := startRedis(t)
	r := padlockRun(t, s.url, "run", "-ttl", "300ms", "-max-hold", "1s", "-grace", "100ms", "lock:capped", "--", "sleep", "5")
	assert.Equal(t, exitLost, r.code, r.stderr)
	assert.Contains(t, r.stderr, "-max-hold")
	assert.Less(t, r.took, 4500*time.Millisecond, "ended after about 1s + ttl, not the command's 5s") // a loaded CI run took 3.2s
	assert.GreaterOrEqual(t, r.took, time.Second)
	r = padlockRun(t, s.url, "run", "-max-hold", "-1s", "lock:capped", "--", "true")
	assert.Equal(t, exitUsage, r.code)
}

// -min-hold gives "at most once per interval": 5 processes each run the
// command every 100ms for 3s, and it runs again and again, never twice
// within a second (less the commands' own start, which a loaded machine
// makes uneven). With padlock acquire, a release under the minimum leaves
// the lock held.
func TestRunMinHold(t *testing.T) {
	t.Parallel()
	s := startRedis(t)
	out := filepath.Join(t.TempDir(), "runs")
	end := time.Now().Add(3 * time.Second)
	var wg sync.WaitGroup
	for range 5 {
		wg.Go(func() {
			for time.Now().Before(end) {
				r := padlockRun(t, s.url, "run", "-min-hold", "1s", "lock:once", "--", "sh", "-c", "date +%s%N >> "+out)
				if r.code != 0 && r.code != exitConflict {
					t.Errorf("padlock run: %d: %s", r.code, r.stderr)
					return
				}
				time.Sleep(100 * time.Millisecond)
			}
		})
	}
	wg.Wait()
	b, err := os.ReadFile(out)
	require.NoError(t, err)
	var runs []int64
	for _, f := range strings.Fields(string(b)) {
		ns, err := strconv.ParseInt(f, 10, 64)
		require.NoError(t, err)
		runs = append(runs, ns)
	}
	slices.Sort(runs)
	assert.GreaterOrEqual(t, len(runs), 2, "it runs again after the interval")
	for i := 1; i < len(runs); i++ {
		assert.GreaterOrEqual(t, time.Duration(runs[i]-runs[i-1]), 800*time.Millisecond, "run %d of %d came too soon", i+1, len(runs))
	}

	r := padlockRun(t, s.url, "acquire", "-min-hold", "1m", "lock:kept")
	require.Equal(t, 0, r.code, r.stderr)
	token := strings.Trim(strings.TrimPrefix(strings.Split(r.stdout, "\n")[1], "export PADLOCK_TOKEN="), "'")
	r = padlockRun(t, s.url, "release", "-token", token, "lock:kept")
	require.Equal(t, 0, r.code, r.stderr)
	r = padlockRun(t, s.url, "inspect", "lock:kept")
	require.Equal(t, 0, r.code, r.stderr)
	assert.Contains(t, r.stdout, token, "held by its token until the minimum")
	r = padlockRun(t, s.url, "run", "-min-hold", "-1s", "lock:once", "--", "true")
	assert.Equal(t, exitUsage, r.code)
}
