package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/padlock-go/padlock"
	"github.com/padlock-go/padlock/internal/redistest"
)

// A tmuxPane is a tmux server of a test's own (its own socket), with one
// session whose one pane runs a padlock command as a person would, on a
// terminal of a fixed size.
type tmuxPane struct {
	t      *testing.T
	socket string
	dir    string // holds the files the pane's shell writes: before, after, code, stderr
}

// startTmux runs the padlock binary with args in a new tmux session of
// 100x30 characters, talking to the Redis at url. The pane's shell saves
// the terminal's settings (stty -g) in before and after, padlock's exit
// status in code (written last) and its stderr in stderr. The tmux server
// is killed when the test ends. Without tmux the test is skipped, or
// fails if PADLOCK_REDIS=required.
func startTmux(t *testing.T, url string, args ...string) *tmuxPane {
	t.Helper()
	if _, err := exec.LookPath("tmux"); err != nil {
		if redistest.Required() {
			t.Fatalf("PADLOCK_REDIS=required but tmux is not on PATH: %v", err)
		}
		t.Skip("tmux not on PATH; set PADLOCK_REDIS=required to fail instead")
	}
	p := &tmuxPane{t: t, socket: fmt.Sprintf("padlock-test-%d-%d", os.Getpid(), time.Now().UnixNano()), dir: t.TempDir()}
	words := append([]string{"env", "PADLOCK_REDIS_URL=" + url, "REDIS_URL=", "PADLOCK_TIMEOUT=", bin}, args...)
	for i, w := range words {
		words[i] = shellQuote(w)
	}
	// The shell goes on after a Ctrl-C, whose SIGINT it gets too.
	script := "trap : INT; cd " + shellQuote(p.dir) + " && stty -g > before; " + strings.Join(words, " ") +
		" 2> stderr; code=$?; stty -g > after; echo $code > code.tmp; mv code.tmp code; sleep 60"
	var socketPath string
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = exec.CommandContext(ctx, "tmux", "-L", p.socket, "kill-server").Run()
		if socketPath != "" {
			_ = os.Remove(socketPath) // kill-server leaves it
		}
	})
	p.tmux("-f", "/dev/null", "new-session", "-d", "-s", "padlock", "-x", "100", "-y", "30", "sh -c "+shellQuote(script))
	socketPath = strings.TrimSpace(p.tmux("display-message", "-p", "-t", "padlock", "#{socket_path}"))
	return p
}

// tmux runs a tmux command on the pane's server and returns its output.
func (p *tmuxPane) tmux(args ...string) string {
	p.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, "tmux", append([]string{"-L", p.socket}, args...)...)
	cmd.Env = append(os.Environ(), "TERM=xterm")
	out, err := cmd.CombinedOutput()
	require.NoError(p.t, err, "tmux %v: %s", args, out)
	return string(out)
}

// screen is what the pane shows.
func (p *tmuxPane) screen() string {
	p.t.Helper()
	return p.tmux("capture-pane", "-p", "-t", "padlock")
}

// press types keys into the pane, without Enter.
func (p *tmuxPane) press(keys string) {
	p.t.Helper()
	p.tmux("send-keys", "-t", "padlock", "-l", keys)
}

// shows waits up to within for the screen to satisfy ok, and fails the
// test with the screen if it does not.
func (p *tmuxPane) shows(within time.Duration, what string, ok func(screen string) bool) {
	p.t.Helper()
	deadline := time.Now().Add(within)
	for {
		s := p.screen()
		if ok(s) {
			return
		}
		if time.Now().After(deadline) {
			p.t.Fatalf("not within %v: %s; the screen:\n%s", within, what, s)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// exited waits up to within for padlock to exit, and returns its exit
// status and stderr.
func (p *tmuxPane) exited(within time.Duration) (int, string) {
	p.t.Helper()
	deadline := time.Now().Add(within)
	for {
		b, err := os.ReadFile(filepath.Join(p.dir, "code"))
		if err == nil {
			var code int
			_, err = fmt.Sscan(string(b), &code)
			require.NoError(p.t, err)
			stderr, err := os.ReadFile(filepath.Join(p.dir, "stderr"))
			require.NoError(p.t, err)
			return code, string(stderr)
		}
		if time.Now().After(deadline) {
			p.t.Fatalf("padlock did not exit within %v; the screen:\n%s", within, p.screen())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// file is the content of a file the pane's shell wrote.
func (p *tmuxPane) file(name string) string {
	p.t.Helper()
	b, err := os.ReadFile(filepath.Join(p.dir, name))
	require.NoError(p.t, err)
	return string(b)
}

// firstRow is the key of the table's first row on screen, after the
// header line (that begins with KEY).
func firstRow(screen string) string {
	lines := strings.Split(screen, "\n")
	for i, l := range lines {
		if strings.HasPrefix(l, "KEY ") && i+1 < len(lines) {
			if f := strings.Fields(lines[i+1]); len(f) > 0 {
				return f[0]
			}
		}
	}
	return ""
}

// padlock top in a terminal, driven as a person would: a lock another
// Client takes shows within 2s, and is gone within 2s of its release; h
// and w sort by held-for and by waiters, and say so; q, without Enter,
// ends it with the terminal's settings restored.
func TestTopInTmux(t *testing.T) {
	t.Parallel()
	s := startRedis(t)
	ctx := t.Context()
	// top:1 is held longest (and first by key), top:2 is waited for.
	for _, key := range []string{"top:1", "top:2"} {
		l, err := s.c.TryAcquire(ctx, key, time.Minute, padlock.WithMetadata("held by the test"))
		require.NoError(t, err)
		t.Cleanup(func() { _ = l.Release(context.Background()) })
		time.Sleep(20 * time.Millisecond)
	}
	waitInLine(t, s.c, "top:2")

	scans, started := redistest.Calls(t, s.raw, "scan"), time.Now()
	p := startTmux(t, s.url, "top", "-match", "top:*")
	p.shows(10*time.Second, "the first frame", func(screen string) bool {
		return strings.Contains(screen, "to end a stuck lock: padlock break KEY") && strings.Contains(screen, "top:2")
	})
	screen := p.screen()
	assert.Contains(t, screen, "sorted by held for | h: by held for  w: by waiters  q: quit\n")
	assert.Regexp(t, `(?m)^KEY +KIND +HOLDERS +HELD FOR\* +TTL +FENCE +WAITERS +METADATA$`, screen)
	assert.Equal(t, "top:1", firstRow(screen))

	l, err := s.c.TryAcquire(ctx, "top:new", time.Minute, padlock.WithMetadata("host=other pid=42"))
	require.NoError(t, err)
	p.shows(2*time.Second, "the lock taken", func(screen string) bool {
		return strings.Contains(screen, "top:new ") && strings.Contains(screen, "host=other pid=42")
	})

	p.press("w")
	p.shows(2*time.Second, "sorted by waiters", func(screen string) bool {
		return strings.Contains(screen, "sorted by waiters |") && strings.Contains(screen, " WAITERS* ") &&
			!strings.Contains(screen, "HELD FOR*") && firstRow(screen) == "top:2"
	})
	p.press("h")
	p.shows(2*time.Second, "sorted by held for", func(screen string) bool {
		return strings.Contains(screen, "sorted by held for |") && strings.Contains(screen, " HELD FOR* ") &&
			!strings.Contains(screen, "WAITERS*") && firstRow(screen) == "top:1"
	})

	require.NoError(t, l.Release(ctx))
	p.shows(2*time.Second, "the lock released gone", func(screen string) bool {
		return !strings.Contains(screen, "top:new") && strings.Contains(screen, "top:2")
	})

	// One listing a second (each one SCAN here: a few keys), and one at
	// the start: no more.
	listings, ran := redistest.Calls(t, s.raw, "scan")-scans, time.Since(started)
	assert.GreaterOrEqual(t, listings, int64(2), "refreshed")
	assert.LessOrEqual(t, listings, int64(ran/time.Second)+2, "listings in %v", ran)

	before := p.file("before")
	p.press("q")
	code, stderr := p.exited(5 * time.Second)
	assert.Equal(t, 0, code, stderr)
	assert.Empty(t, stderr)
	assert.Equal(t, before, p.file("after"), "the terminal's settings are restored")
	assert.Contains(t, p.screen(), "to end a stuck lock: padlock break KEY", "the last frame stays on screen")
}

// top refuses to run when stdout is not a terminal, and takes no
// arguments: usage errors, in one line, before it reads anything.
func TestTopBadUse(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		args []string
		want string
	}{
		{[]string{"top"}, `padlock top: stdout is not a terminal ('padlock list' prints the locks once)`},
		{[]string{"top", "-match", "ops:["}, `padlock top: stdout is not a terminal ('padlock list' prints the locks once)`},
		{[]string{"top", "lock:*"}, `padlock top: unexpected "lock:*": top takes no arguments (-match GLOB picks the keys)`},
		{[]string{"top", "-json"}, `padlock top: flag provided but not defined: -json`},
	} {
		r := padlockRun(t, deadURL(t), tt.args...)
		assert.Equal(t, exitUsage, r.code, "%v: %s", tt.args, r.stderr)
		assert.Equal(t, tt.want+"\nsee padlock top -h\n", r.stderr, tt.args)
		assert.Empty(t, r.stdout, tt.args)
	}
}

// In a terminal too, top exits 64 on a malformed glob and 69 when Redis
// does not answer, before it changes the terminal; a signal ends it with
// the terminal restored.
func TestTopExits(t *testing.T) {
	t.Parallel()
	p := startTmux(t, "redis://127.0.0.1:1", "top", "-match", "ops:[")
	code, stderr := p.exited(10 * time.Second)
	assert.Equal(t, exitUsage, code)
	assert.Equal(t, "padlock top: -match \"ops:[\": syntax error in pattern\nsee padlock top -h\n", stderr)

	p = startTmux(t, deadURL(t), "top")
	code, stderr = p.exited(10 * time.Second)
	assert.Equal(t, exitUnavailable, code)
	assert.True(t, strings.HasPrefix(stderr, `padlock top: cannot list the locks "*"`), stderr)
	assert.Equal(t, 1, strings.Count(stderr, "\n"), stderr)
	assert.Equal(t, p.file("before"), p.file("after"))

	s := startRedis(t)
	p = startTmux(t, s.url, "top")
	p.shows(10*time.Second, "the first frame", func(screen string) bool {
		return strings.Contains(screen, "to end a stuck lock: padlock break KEY")
	})
	before := p.file("before")
	p.tmux("send-keys", "-t", "padlock", "C-c")
	code, stderr = p.exited(5 * time.Second)
	assert.Equal(t, 0, code, stderr)
	assert.Equal(t, before, p.file("after"), "the terminal's settings are restored after SIGINT")
}
