package main

import (
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/padlock-go/padlock"
)

// shell runs script in sh with the padlock binary as $PADLOCK, talking to
// the Redis at url, and returns its output and exit status.
func shell(t *testing.T, url, script string) (string, int) {
	t.Helper()
	cmd := exec.CommandContext(t.Context(), "sh", "-c", script)
	cmd.Env = append(os.Environ(), "PADLOCK="+bin, "PADLOCK_REDIS_URL="+url, "REDIS_URL=", "PADLOCK_TOKEN=")
	out, err := cmd.CombinedOutput()
	code := 0
	if exit, ok := err.(*exec.ExitError); ok {
		code = exit.ExitCode()
	} else {
		require.NoError(t, err)
	}
	return string(out), code
}

// A deployment lock across jobs of a pipeline: acquire in one command, eval
// its output, extend and release in later ones by the token.
func TestVerbsFullCycle(t *testing.T) {
	t.Parallel()
	s := startRedis(t)
	// Nothing exported beforehand: acquire's lines export the token.
	out, code := shell(t, s.url, `
set -e
unset PADLOCK_TOKEN PADLOCK_KEY PADLOCK_FENCE
eval "$($PADLOCK acquire -ttl 1m -fence -metadata "pipeline 42" deploy:prod)"
echo "key=$PADLOCK_KEY fence=$PADLOCK_FENCE"
redis-cli -u "$PADLOCK_REDIS_URL" GET deploy:prod
$PADLOCK extend -ttl 2h deploy:prod
redis-cli -u "$PADLOCK_REDIS_URL" TTL deploy:prod
set +e
$PADLOCK acquire deploy:prod >/dev/null 2>&1; echo "second acquire: $?"
$PADLOCK release deploy:prod; echo "release: $?"
$PADLOCK release deploy:prod 2>/dev/null; echo "release again: $?"
$PADLOCK extend -ttl 1m deploy:prod 2>/dev/null; echo "extend after: $?"
`)
	require.Equal(t, 0, code, out)
	lines := strings.Split(strings.TrimSpace(out), "\n")
	require.Len(t, lines, 7, out)
	assert.Equal(t, "key=deploy:prod fence=1", lines[0])
	assert.True(t, strings.HasSuffix(lines[1], " pipeline 42"), lines[1])
	assert.Equal(t, "7200", lines[2], "extended to 2h")
	assert.Equal(t, "second acquire: 75", lines[3])
	assert.Equal(t, "release: 0", lines[4])
	assert.Equal(t, "release again: 1", lines[5], "the token no longer holds it")
	assert.Equal(t, "extend after: 1", lines[6])
	assert.False(t, s.exists(t, "deploy:prod"))
}

// acquire's output is evaluable whatever the key and token hold: each
// value is single-quoted for sh.
func TestAcquireQuotesForTheShell(t *testing.T) {
	t.Parallel()
	s := startRedis(t)
	const key, token = `lock:it's "$(touch x)" $HOME`, `job'1;$(id)`
	r := padlockRun(t, s.url, "acquire", "-token", token, key)
	require.Equal(t, 0, r.code, r.stderr)
	cmd := exec.Command("sh", "-c", `eval "$1"; printf '%s\n%s\n' "$PADLOCK_KEY" "$PADLOCK_TOKEN"`, "sh", r.stdout)
	cmd.Dir = t.TempDir()
	out, err := cmd.Output()
	require.NoError(t, err)
	assert.Equal(t, key+"\n"+token+"\n", string(out))
	assert.NoFileExists(t, cmd.Dir+"/x", "nothing in the output ran")
	info, err := s.c.Inspect(t.Context(), key)
	require.NoError(t, err)
	assert.Equal(t, token, info.Token)

	// The same token takes it again (a job re-run); a semaphore and a
	// shared hold go the same way.
	r = padlockRun(t, s.url, "acquire", "-token", token, key)
	assert.Equal(t, 0, r.code, r.stderr)
	for _, flag := range []string{"-limit=2", "-shared"} {
		r = padlockRun(t, s.url, "acquire", flag, "lock:counted"+flag)
		require.Equal(t, 0, r.code, r.stderr)
		tok := strings.TrimSuffix(strings.TrimPrefix(strings.Split(r.stdout, "\n")[1], "export PADLOCK_TOKEN='"), "'")
		r = padlockRun(t, s.url, "release", "-token", tok, "lock:counted"+flag)
		assert.Equal(t, 0, r.code, r.stderr)
		assert.False(t, s.exists(t, "lock:counted"+flag))
	}
}

func TestAcquireWaits(t *testing.T) {
	t.Parallel()
	s := startRedis(t)
	held, err := s.c.TryAcquire(t.Context(), "lock:wait", time.Minute)
	require.NoError(t, err)
	time.AfterFunc(300*time.Millisecond, func() { _ = held.Release(t.Context()) })
	r := padlockRun(t, s.url, "acquire", "-wait", "10s", "lock:wait")
	require.Equal(t, 0, r.code, r.stderr)
	assert.Contains(t, r.stdout, "export PADLOCK_KEY='lock:wait'\n")
	r = padlockRun(t, s.url, "acquire", "-wait", "100ms", "lock:wait")
	assert.Equal(t, 75, r.code, "still held by the first acquire")
	assert.Empty(t, r.stdout)
}

// break ends a stuck lock, says what it broke, and advances the fence.
func TestBreakVerb(t *testing.T) {
	t.Parallel()
	s := startRedis(t)
	ctx := t.Context()
	stuck, err := s.c.TryAcquire(ctx, "lock:stuck", time.Hour, padlock.WithFencing(), padlock.WithMetadata("host=web-3 pid=77"))
	require.NoError(t, err)
	r := padlockRun(t, s.url, "break", "lock:stuck")
	require.Equal(t, 0, r.code, r.stderr)
	assert.Contains(t, r.stdout, "lock:stuck: broke the lock of host=web-3 pid=77 (token "+stuck.Token())
	assert.Contains(t, r.stdout, "fence counter: 1 -> 2")
	require.ErrorIs(t, stuck.Release(ctx), padlock.ErrNotHeld)

	r = padlockRun(t, s.url, "break", "lock:stuck")
	assert.Equal(t, 0, r.code, r.stderr)
	assert.Equal(t, "lock:stuck: nobody held it; nothing changed\n", r.stdout)
}

func TestVerbsBadUse(t *testing.T) {
	t.Parallel()
	s := startRedis(t)
	for _, args := range [][]string{
		{"acquire"},
		{"acquire", "-limit", "-1", "k"},
		{"acquire", "-token", "two words", "k"},
		{"acquire", "-limit", "2", "-shared", "k"},
		{"extend", "-token", "t", "k"},               // no -ttl
		{"extend", "-ttl", "1m", "k"},                // no token
		{"release", "k"},                             // no token
		{"release", "-token", "t"},                   // no key
		{"extend", "-ttl", "0s", "-token", "t", "k"}, // a ttl under 1ms
		{"break"},
	} {
		r := padlockRun(t, s.url, args...)
		assert.Equal(t, 64, r.code, "%v: %s", args, r.stderr)
	}
	_, err := s.raw.Get(t.Context(), "k").Result()
	assert.Error(t, err, "bad use wrote nothing")

	url := deadURL(t)
	for _, args := range [][]string{{"acquire", "k"}, {"release", "-token", "t", "k"}, {"extend", "-ttl", "1m", "-token", "t", "k"}, {"break", "k"}} {
		r := padlockRun(t, url, args...)
		assert.Equal(t, 69, r.code, fmt.Sprintf("%v: %s", args, r.stderr))
	}
}

// A command of 'padlock run' does not outlive a padlock that is killed
// (SIGKILL): its lock then expires, and another host may run the job.
func TestRunCommandDiesWithPadlock(t *testing.T) {
	t.Parallel()
	s := startRedis(t)
	cmd := padlockCmd(t, s.url, "run", "-ttl", "1s", "lock:orphan", "--", "sh", "-c", `echo $$; while :; do sleep 0.05; done`)
	stdout, err := cmd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	var pid int
	_, err = fmt.Fscan(stdout, &pid)
	require.NoError(t, err)
	require.NoError(t, cmd.Process.Kill())
	_ = cmd.Wait()
	assert.Eventually(t, func() bool { return gone(pid) }, time.Second, 10*time.Millisecond, "the command died with padlock")
}
