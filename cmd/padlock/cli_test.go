package main

import (
	"os/exec"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The top -h names the environment padlock reads and every exit status.
func TestTopHelp(t *testing.T) {
	t.Parallel()
	for _, arg := range []string{"-h", "--help", "help"} {
		r := padlockRun(t, "", arg)
		require.Equal(t, 0, r.code, r.stderr)
		for _, want := range []string{"PADLOCK_REDIS_URL", "PADLOCK_TIMEOUT", "PADLOCK_TOKEN", "padlock version", "exit status:"} {
			assert.Contains(t, r.stdout, want, arg)
		}
		for _, code := range []string{"0", "1", "64", "69", "75", "79", "126", "127", "128+N"} {
			assert.Regexp(t, "\n  "+regexp.QuoteMeta(code)+" +[A-Za-z]", r.stdout, "exit status %s", code)
		}
	}
}

// Each verb's -h prints its flags and the exit statuses it can end with,
// on stdout, and exits 0; it shows no password of PADLOCK_REDIS_URL, no
// token of PADLOCK_TOKEN, and not its own pid as a default.
func TestVerbHelp(t *testing.T) {
	t.Parallel()
	common := []string{"0", "64", "69"}
	tests := []struct {
		verb  string
		exits []string
	}{
		{"run", []string{"N", "64", "69", "75", "79", "126", "127", "128+N"}},
		{"acquire", append(common, "75")},
		{"extend", append(common, "1")},
		{"release", append(common, "1")},
		{"break", common},
		{"lead", []string{"N", "64", "69", "126", "127", "128+N"}},
		{"leader", common},
		{"inspect", common},
		{"list", common},
		{"top", append(common, "1")},
		{"doctor", append(common, "1")},
		{"demo", append(common, "1")},
		{"version", []string{"0", "64"}},
	}
	for _, tt := range tests {
		t.Run(tt.verb, func(t *testing.T) {
			cmd := padlockCmd(t, "redis://cron:s3cret@127.0.0.1:1", tt.verb, "-h")
			cmd.Env = append(cmd.Env, "PADLOCK_TOKEN=tok-of-a-job")
			r := finish(t, cmd)
			require.Equal(t, 0, r.code, r.stderr)
			assert.Empty(t, r.stderr)
			assert.True(t, strings.HasPrefix(r.stdout, "usage: padlock "+tt.verb), r.stdout)
			_, exits, ok := strings.Cut(r.stdout, "\nexit status:\n")
			require.True(t, ok, "no exit statuses: %s", r.stdout)
			var got []string
			for _, line := range strings.Split(strings.TrimSpace(exits), "\n") {
				got = append(got, strings.Fields(line)[0])
			}
			assert.ElementsMatch(t, tt.exits, got, exits)
			if tt.verb != "version" {
				assert.Contains(t, r.stdout, "-timeout duration")
			}
			assert.NotContains(t, r.stdout, "s3cret")
			assert.NotContains(t, r.stdout, "tok-of-a-job")
			assert.NotContains(t, r.stdout, "pid="+strconv.Itoa(cmd.Process.Pid))
		})
	}
}

// padlock version prints the module version that Go stamped in the binary
// and the Go version that built it.
func TestVersion(t *testing.T) {
	t.Parallel()
	out, err := exec.Command("go", "version", "-m", bin).Output()
	require.NoError(t, err)
	mod := regexp.MustCompile(`(?m)^\s+mod\s+github.com/padlock-go/padlock\s+(\S+)`).FindSubmatch(out)
	require.NotNil(t, mod, "%s", out)
	want := "padlock " + string(mod[1]) + " " + runtime.Version() + " " + runtime.GOOS + "/" + runtime.GOARCH + "\n"
	for _, arg := range []string{"version", "-version", "--version"} {
		r := padlockRun(t, "", arg)
		assert.Equal(t, 0, r.code, r.stderr)
		assert.Equal(t, want, r.stdout, arg)
	}
}

// Every usage error is one line that names what is wrong, then where the
// help is; it exits 64 and touches nothing.
func TestUsageErrors(t *testing.T) {
	t.Parallel()
	s := startRedis(t)
	tests := []struct {
		args []string
		want string
	}{
		{[]string{"run", "", "--", "true"}, "padlock run: empty key"},
		{[]string{"acquire", ""}, "padlock acquire: empty key"},
		{[]string{"run", "-limit", "-1", "k", "--", "true"}, "padlock run: -limit -1 cannot be negative (0 takes an exclusive lock)"},
		{[]string{"acquire", "-wait", "-1s", "k"}, "padlock acquire: -wait -1s cannot be negative"},
		{[]string{"acquire", "-min-hold", "-1s", "k"}, "padlock acquire: -min-hold -1s cannot be negative"},
		{[]string{"run", "-grace", "-1s", "k", "--", "true"}, "padlock run: -grace -1s cannot be negative"},
		{[]string{"run", "-ttl", "0s", "k", "--", "true"}, "padlock run: -ttl 0s is under 1ms"},
		{[]string{"lead", "-ttl", "0s", "k", "--", "true"}, "padlock lead: -ttl 0s is under 1ms"},
		{[]string{"run", "-nope", "k", "--", "true"}, "padlock run: flag provided but not defined: -nope"},
		{[]string{"run", "k"}, "padlock run: missing COMMAND: padlock run [flags] k -- COMMAND [ARGS...]"},
		{[]string{"run"}, "padlock run: missing KEY -- COMMAND"},
		{[]string{"inspect"}, "padlock inspect: missing KEY"},
		{[]string{"inspect", "k", "-json"}, "padlock inspect: flags go before KEY: -json"},
		{[]string{"break", "k", "other"}, `padlock break: unexpected "other" after KEY`},
		{[]string{"acquire", "-limit", "2", "-shared", "k"}, "padlock acquire: -limit and -shared cannot go together"},
		{[]string{"acquire", "-token", "two words", "k"}, `padlock acquire: token "two words" contains white space`},
		{[]string{"extend", "-token", "t", "k"}, "padlock extend: -ttl is required"},
		{[]string{"release", "k"}, "padlock release: no token: pass -token or set PADLOCK_TOKEN"},
		{[]string{"doctor", "x"}, `padlock doctor: unexpected "x": doctor takes no arguments (-key KEY names its key)`},
		{[]string{"leader", "-timeout", "0s", "k"}, "padlock leader: -timeout 0s is under 1ms"},
		{[]string{"run", "-redis", "http://x", "k", "--", "true"}, "padlock run: bad Redis URL http://x: redis: invalid URL scheme: http"},
		{[]string{"inspect", "-redis", "redis://u:s3cret@host:xx/", "k"}, `padlock inspect: bad Redis URL redis://***@host:xx/: invalid port ":xx" after host`},
		{[]string{"version", "x"}, `padlock version: unexpected "x"`},
	}
	for _, tt := range tests {
		r := padlockRun(t, s.url, tt.args...)
		assert.Equal(t, exitUsage, r.code, "%v: %s", tt.args, r.stderr)
		assert.Equal(t, tt.want+"\nsee padlock "+tt.args[0]+" -h\n", r.stderr, tt.args)
		assert.Empty(t, r.stdout)
	}
	r := padlockRun(t, s.url, "frobnicate")
	assert.Equal(t, exitUsage, r.code)
	assert.Equal(t, "padlock: unknown command \"frobnicate\"\nsee padlock -h\n", r.stderr)
	r = padlockRun(t, s.url, "-redis", s.url, "inspect", "k")
	assert.Equal(t, exitUsage, r.code)
	assert.Equal(t, "padlock: flags go after the command (padlock COMMAND [flags]): -redis\nsee padlock -h\n", r.stderr)
	keys, err := s.raw.Keys(t.Context(), "*").Result()
	require.NoError(t, err)
	assert.Empty(t, keys, "bad use wrote nothing")
}

func TestRunBadUse(t *testing.T) {
	t.Parallel()
	s := startRedis(t)
	tests := []struct {
		name string
		args []string
		code int
	}{
		{"no command", []string{"run", "lock:x"}, 64},
		{"no key", []string{"run"}, 64},
		{"bad flag", []string{"run", "-nope", "lock:x", "--", "true"}, 64},
		{"bad ttl", []string{"run", "-ttl", "0s", "lock:x", "--", "true"}, 64},
		{"bad conflict status", []string{"run", "-conflict-exit", "300", "lock:x", "--", "true"}, 64},
		{"bad url", []string{"run", "-redis", "http://x", "lock:x", "--", "true"}, 64},
		{"unknown subcommand", []string{"frobnicate"}, 64},
		{"command not found", []string{"run", "lock:x", "--", "no-such-command-padlock"}, 127},
		{"not executable", []string{"run", "lock:x", "--", "/dev/null"}, 126},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := padlockRun(t, s.url, tt.args...)
			assert.Equal(t, tt.code, r.code, r.stderr)
			assert.NotEmpty(t, r.stderr)
			assert.False(t, s.exists(t, "lock:x"), "no lock left behind")
		})
	}
	r := padlockRun(t, s.url, "help")
	assert.Equal(t, 0, r.code)
	assert.Contains(t, r.stdout, "padlock run")
}

// The errors of Redis read as sentences: the verb, what it could not do,
// and why, without padlock's prefix twice or its operation's name; a key
// padlock did not write reads as one with no expiry.
func TestMessagesSayWhatFailed(t *testing.T) {
	t.Parallel()
	down := deadURL(t)
	for _, tt := range []struct{ args []string }{
		{[]string{"leader", "lead:x"}},
		{[]string{"inspect", "lock:x"}},
		{[]string{"break", "lock:x"}},
		{[]string{"release", "-token", "t", "lock:x"}},
	} {
		r := padlockRun(t, down, tt.args...)
		assert.Equal(t, exitUnavailable, r.code, r.stderr)
		assert.Equal(t, 1, strings.Count(r.stderr, "\n"), r.stderr)
		assert.NotContains(t, r.stderr, `"lock:x"`, "the key once, in the verb's words")
		assert.NotContains(t, r.stderr, `"lead:x"`)
		assert.NotContains(t, r.stderr, "padlock: padlock:")
	}
	r := padlockRun(t, down, "leader", "lead:x")
	assert.True(t, strings.HasPrefix(r.stderr, "padlock leader: cannot read who leads lead:x: "), r.stderr)

	s := startRedis(t)
	require.NoError(t, s.raw.Set(t.Context(), "plain", "someone", 0).Err())
	r = padlockRun(t, s.url, "run", "plain", "--", "true")
	assert.Equal(t, exitConflict, r.code)
	assert.Equal(t, "padlock run: plain is held elsewhere (no expiry)\n", r.stderr)
	r = padlockRun(t, s.url, "break", "plain")
	assert.Equal(t, 0, r.code, r.stderr)
	assert.Equal(t, "plain: broke the lock of (no metadata) (token someone, no expiry)\n", r.stdout)
}
