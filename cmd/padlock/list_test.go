package main

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/padlock-go/padlock"
)

// listed is a line of 'padlock list -json'.
type listed struct {
	Key      string `json:"key"`
	Kind     string `json:"kind"`
	Token    string `json:"token"`
	Metadata string `json:"metadata"`
	HeldMs   int64  `json:"held_ms"`
	Fence    int64  `json:"fence"`
	Limit    int    `json:"limit"`
	Waiting  int    `json:"waiting"`
	Holders  []struct {
		Token    string `json:"token"`
		Metadata string `json:"metadata"`
		HeldMs   int64  `json:"held_ms"`
	} `json:"holders"`
}

// held is how long l has been held: by its longest holder, for a
// semaphore or shared hold.
func (l listed) held() int64 {
	ms := l.HeldMs
	for _, h := range l.Holders {
		ms = max(ms, h.HeldMs)
	}
	return ms
}

// waitInLine starts an Acquire of key on c that waits until the test
// ends, and returns once Redis counts it among key's waiters.
func waitInLine(t *testing.T, c *padlock.Client, key string) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		if l, err := c.Acquire(ctx, key, time.Minute); err == nil {
			_ = l.Release(context.Background())
		}
	}()
	t.Cleanup(func() {
		cancel()
		<-done
	})
	require.Eventually(t, func() bool {
		info, err := c.Inspect(t.Context(), key)
		return err == nil && info.Waiting == 1
	}, 10*time.Second, 10*time.Millisecond, "the Acquire of %s waits in Redis", key)
}

// padlock list shows the locks another Client holds, longest held first,
// as a table and as JSON lines in the same order; a hostile metadata is
// escaped and cut; -match picks the keys.
func TestList(t *testing.T) {
	t.Parallel()
	s := startRedis(t)
	ctx := t.Context()
	old, err := s.c.TryAcquire(ctx, "lock:b", time.Minute, padlock.WithFencing(), padlock.WithMetadata("host=web-1 pid=7"))
	require.NoError(t, err)
	time.Sleep(20 * time.Millisecond) // lock:b is held longer than the others, by the server's clock
	const hostile = "\x1b[2J\x1b[Hrm -rf / \u202e" + "xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx"
	young, err := s.c.TryAcquire(ctx, "lock:a", time.Minute, padlock.WithMetadata(hostile))
	require.NoError(t, err)
	// lock:a is held longer than the semaphore: taken in the same ms, the
	// two would be ordered by when the listing read each of them.
	time.Sleep(20 * time.Millisecond)
	var sem []*padlock.Lock
	for _, who := range []string{"host=a", "host=b"} {
		l, err := s.c.TryAcquire(ctx, "sem:exports", time.Minute, padlock.WithLimit(3), padlock.WithMetadata(who))
		require.NoError(t, err)
		sem = append(sem, l)
	}
	// More locks, taken in the reverse of their keys' order, so that the
	// order of SCAN is unlikely to be the one wanted; a few ms apart, so
	// that two listings order them alike.
	for i := 6; i > 0; i-- {
		_, err := s.c.TryAcquire(ctx, fmt.Sprintf("many:%d", i), time.Minute, padlock.WithMetadata(fmt.Sprintf("host=m%d", i)))
		require.NoError(t, err)
		time.Sleep(5 * time.Millisecond)
	}
	waitInLine(t, s.c, "lock:b")
	require.NoError(t, s.raw.Set(ctx, "not-a-lock", "some value", 0).Err())

	r := padlockRun(t, s.url, "list", "-json")
	require.Equal(t, 0, r.code, r.stderr)
	var got []listed
	for _, line := range strings.Split(strings.TrimSuffix(r.stdout, "\n"), "\n") {
		var l listed
		require.NoError(t, json.Unmarshal([]byte(line), &l), "one object a line: %q", line)
		got = append(got, l)
	}
	require.Len(t, got, 9, r.stdout)
	byKey := map[string]listed{}
	var keys []string
	for _, l := range got {
		byKey[l.Key] = l
		keys = append(keys, l.Key)
	}
	assert.True(t, slices.IsSortedFunc(got, func(a, b listed) int {
		if a.held() != b.held() {
			return int(b.held() - a.held())
		}
		return strings.Compare(a.Key, b.Key)
	}), "longest held first, then by key: %v", got)
	if b, a := byKey["lock:b"], byKey["lock:a"]; b.HeldMs > 0 || a.HeldMs > 0 {
		assert.Equal(t, []string{"lock:b", "lock:a"}, keys[:2], "lock:b has been held longest")
	}
	b := byKey["lock:b"]
	assert.Equal(t, listed{Key: "lock:b", Kind: "lock", Token: old.Token(), Metadata: "host=web-1 pid=7", HeldMs: b.HeldMs, Fence: 1, Waiting: 1}, b)
	assert.Equal(t, hostile, byKey["lock:a"].Metadata, "JSON has the metadata as it is")
	e := byKey["sem:exports"]
	assert.Equal(t, "semaphore", e.Kind)
	assert.Equal(t, 3, e.Limit)
	require.Len(t, e.Holders, 2)

	r = padlockRun(t, s.url, "list")
	require.Equal(t, 0, r.code, r.stderr)
	assert.NotContains(t, r.stdout, "\x1b", "no control character reaches the terminal")
	assert.NotContains(t, r.stdout, "\u202e")
	lines := strings.Split(strings.TrimSuffix(r.stdout, "\n"), "\n")
	require.Len(t, lines, 10, r.stdout)
	assert.Regexp(t, `^KEY +KIND +HOLDERS +HELD FOR\* +TTL +FENCE +WAITERS +METADATA$`, lines[0])
	var rows [][]string
	for _, l := range lines[1:] {
		rows = append(rows, strings.Split(l, "  ")) // cells are 2 spaces apart at least
		assert.Equal(t, strings.Index(lines[0], "METADATA"), strings.Index(l, map[string]string{
			"lock:b": "host=web-1", "lock:a": `"\x1b`, "sem:exports": "host=", "many:": "host="}[strings.TrimRight(strings.Fields(l)[0], "0123456789")]), "columns line up: %q", l)
	}
	// The same locks as -json; the order of two locks taken within a
	// millisecond may differ between two listings (whole ms of held-for).
	var tableKeys []string
	for _, row := range rows {
		tableKeys = append(tableKeys, row[0])
	}
	assert.ElementsMatch(t, keys, tableKeys, "the same locks as -json")
	cells := func(key string) []string {
		for _, l := range lines[1:] {
			if strings.Fields(l)[0] == key {
				var c []string
				for _, f := range strings.Split(l, "  ") {
					if f = strings.TrimSpace(f); f != "" {
						c = append(c, f)
					}
				}
				return c
			}
		}
		t.Fatalf("no row of %s: %s", key, r.stdout)
		return nil
	}
	row := cells("lock:b")
	require.Len(t, row, 8, "%q", row)
	assert.Equal(t, []string{"lock:b", "lock", old.Token()[:8]}, row[:3])
	assert.Regexp(t, `^(-|\d+(ms|\.\ds))$`, row[3], "held for")
	assert.Regexp(t, `^(\d+\.\ds|1m00s)$`, row[4], "ttl: a minute or just under")
	assert.Equal(t, "1", row[5], "fence")
	assert.Regexp(t, `^1( \(\d+(ms|\.\ds)\))?$`, row[6], "one waiter, and how long it has waited")
	assert.Equal(t, "host=web-1 pid=7", row[7])
	row = cells("lock:a")
	assert.Equal(t, "-", row[5], "no fence")
	assert.Equal(t, `"\x1b[2J\x1b[Hrm -rf / \u202exxxxxxxx...`, row[len(row)-1], "escaped, and cut to 40 characters")
	assert.Equal(t, young.Token()[:8], row[2])
	row = cells("sem:exports")
	assert.Equal(t, []string{"sem:exports", "semaphore 2/3"}, row[:2])
	assert.ElementsMatch(t, []string{sem[0].Token()[:8], sem[1].Token()[:8]}, strings.Split(row[2], ","))
	assert.Contains(t, []string{"host=a; host=b", "host=b; host=a"}, row[len(row)-1])

	r = padlockRun(t, s.url, "list", "-match", "sem:*")
	require.Equal(t, 0, r.code, r.stderr)
	assert.Equal(t, 2, strings.Count(r.stdout, "\n"), r.stdout)
	assert.Contains(t, r.stdout, "\nsem:exports  semaphore 2/3  ")
	r = padlockRun(t, s.url, "list", "-match", "nothing:*")
	require.Equal(t, 0, r.code, r.stderr)
	assert.Equal(t, "no held lock matches \"nothing:*\"\n", r.stdout)
	r = padlockRun(t, s.url, "list", "-json", "-match", "nothing:*")
	require.Equal(t, 0, r.code, r.stderr)
	assert.Empty(t, r.stdout)
	require.NoError(t, young.Release(ctx))
	r = padlockRun(t, s.url, "list", "-match", "lock:*")
	require.Equal(t, 0, r.code, r.stderr)
	assert.NotContains(t, r.stdout, "lock:a", "a released lock is not listed")
}

// A malformed glob is a usage error, said in one line; so are an argument
// and a bad flag. A Redis that does not answer is 69, in one line.
func TestListBadUse(t *testing.T) {
	t.Parallel()
	s := startRedis(t)
	for _, tt := range []struct {
		args []string
		want string
	}{
		{[]string{"list", "-match", "ops:["}, `padlock list: -match "ops:[": syntax error in pattern`},
		{[]string{"list", "-json", "-match", "ops:["}, `padlock list: -match "ops:[": syntax error in pattern`},
		{[]string{"list", "-match", ""}, `padlock list: -match "": an empty glob matches no key ("*" matches every one)`},
		{[]string{"list", "lock:*"}, `padlock list: unexpected "lock:*": list takes no arguments (-match GLOB picks the keys)`},
		{[]string{"list", "-nope"}, `padlock list: flag provided but not defined: -nope`},
	} {
		r := padlockRun(t, s.url, tt.args...)
		assert.Equal(t, exitUsage, r.code, "%v: %s", tt.args, r.stderr)
		assert.Equal(t, tt.want+"\nsee padlock "+tt.args[0]+" -h\n", r.stderr, tt.args)
		assert.Empty(t, r.stdout, tt.args)
	}

	down := deadURL(t)
	for _, args := range [][]string{{"list"}, {"list", "-json"}, {"list", "-match", "lock:*"}} {
		r := padlockRun(t, down, args...)
		assert.Equal(t, exitUnavailable, r.code, "%v: %s", args, r.stderr)
		assert.Equal(t, 1, strings.Count(r.stderr, "\n"), "one line: %q", r.stderr)
		assert.True(t, strings.HasPrefix(r.stderr, `padlock list: cannot list the locks "`), r.stderr)
		assert.NotContains(t, r.stderr, "padlock: ", "padlock's prefix said once, in the verb's words")
		assert.Empty(t, r.stdout)
	}
}

// printable leaves what a terminal prints as it is and quotes the rest;
// clip cuts to a number of characters.
func TestPrintable(t *testing.T) {
	t.Parallel()
	tests := []struct{ in, want string }{
		{"host=web-1 pid=7", "host=web-1 pid=7"},
		{"héllo wörld ✓", "héllo wörld ✓"},
		{"", ""},
		{"a\x1b[2Jb", `"a\x1b[2Jb"`},
		{"two\nlines", `"two\nlines"`},
		{"tab\there", `"tab\there"`},
		{"bell\a", `"bell\a"`},
		{"\u202eevil", `"\u202eevil"`},
		{"bad \xff utf-8", `"bad \xff utf-8"`},
		{"del\x7f", `"del\x7f"`},
		{"csi\u009b2J", `"csi\u009b2J"`},
	}
	for _, tt := range tests {
		assert.Equal(t, tt.want, printable(tt.in), "%q", tt.in)
	}
	assert.Equal(t, "abc", clip("abc", 3, "..."))
	assert.Equal(t, "a...", clip("abcde", 4, "..."))
	assert.Equal(t, "ééé", clip("éééé", 3, ""))
}

// sortLocks puts the longest held first, or the most waited for; ties go
// by key. A semaphore is as old as its oldest holder.
func TestSortLocks(t *testing.T) {
	t.Parallel()
	infos := []padlock.LockInfo{
		{Key: "c", HeldFor: time.Second},
		{Key: "b", HeldFor: time.Second, Waiting: 1, OldestWait: time.Second},
		{Key: "a", HeldFor: time.Minute},
		{Key: "sem", Kind: "semaphore", Holders: []padlock.HolderInfo{{HeldFor: time.Second}, {HeldFor: time.Hour}}},
		{Key: "d", Waiting: 1, OldestWait: time.Minute},
		{Key: "e"},
		{Key: "f", Waiting: 2, OldestWait: time.Millisecond},
	}
	keys := func() []string {
		var k []string
		for _, i := range infos {
			k = append(k, i.Key)
		}
		return k
	}
	sortLocks(infos, byHeldFor)
	assert.Equal(t, []string{"sem", "a", "b", "c", "d", "e", "f"}, keys())
	sortLocks(infos, byWaiters)
	assert.Equal(t, []string{"f", "d", "b", "sem", "a", "c", "e"}, keys())
}

func TestShortDuration(t *testing.T) {
	t.Parallel()
	for d, want := range map[time.Duration]string{
		0:                                 "0ms",
		850 * time.Millisecond:            "850ms",
		12345 * time.Millisecond:          "12.3s",
		59999 * time.Millisecond:          "59.9s",
		3*time.Minute + 5*time.Second:     "3m05s",
		time.Hour + 12*time.Minute + 59e9: "1h12m",
		50 * time.Hour:                    "2d02h",
	} {
		assert.Equal(t, want, shortDuration(d), "%v", d)
	}
}
