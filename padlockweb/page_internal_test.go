package padlockweb

import (
	"net/http/httptest"
	"path"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/padlock-go/padlock"
	"github.com/padlock-go/padlock/internal/redistest"
)

func TestDuration(t *testing.T) {
	t.Parallel()
	tests := []struct {
		d    time.Duration
		want string
	}{
		{-time.Millisecond, "no expiry"},
		{0, none},
		{999 * time.Microsecond, none}, // 0 in the JSON's whole milliseconds
		{time.Millisecond, "0.0s"},
		{4999 * time.Millisecond, "4.9s"},
		{59999 * time.Millisecond, "59.9s"},
		{time.Minute, "1m0s"},
		{12*time.Minute + 3*time.Second + 900*time.Millisecond, "12m3s"},
		{26*time.Hour + 5*time.Minute + 59*time.Second, "26h5m"},
	}
	for _, tt := range tests {
		assert.Equal(t, tt.want, duration(tt.d), "%v", tt.d)
	}
}

func TestRowOf(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		info padlock.LockInfo
		want row
	}{
		{"lock", padlock.LockInfo{Key: "k", Held: true, Kind: "lock", Metadata: "m", TTL: 5 * time.Second, HeldFor: 2 * time.Second, Fence: 7, Waiting: 2, OldestWait: 1500 * time.Millisecond},
			row{Key: "k", Kind: "lock", Holders: "1", HeldFor: "2.0s", TTL: "5.0s", Fence: "7", Waiting: "2 (oldest 1.5s)", Metadata: "m"}},
		{"no metadata, no expiry", padlock.LockInfo{Key: "k", Held: true, Kind: "lock", TTL: -time.Millisecond},
			row{Key: "k", Kind: "lock", Holders: "1", HeldFor: none, TTL: "no expiry", Fence: none, Waiting: "0", Metadata: "(no metadata)"}},
		{"semaphore", padlock.LockInfo{Key: "s", Held: true, Kind: "semaphore", Limit: 3, TTL: time.Minute, Holders: []padlock.HolderInfo{
			{Metadata: "a", TTL: 10 * time.Second, HeldFor: time.Second}, {TTL: 20 * time.Second, HeldFor: 3 * time.Second}}},
			row{Key: "s", Kind: "semaphore", Holders: "2 of 3", HeldFor: "3.0s", TTL: "10.0s", Fence: none, Waiting: "0", Metadata: "a\n(no metadata)"}},
		{"shared", padlock.LockInfo{Key: "r", Held: true, Kind: "shared", TTL: time.Minute, Holders: []padlock.HolderInfo{{Metadata: "x", TTL: 90 * time.Second}}},
			row{Key: "r", Kind: "shared", Holders: "1", HeldFor: none, TTL: "1m30s", Fence: none, Waiting: "0", Metadata: "x"}},
	}
	for _, tt := range tests {
		assert.Equal(t, tt.want, rowOf(tt.info), tt.name)
	}
}

func TestWantsJSON(t *testing.T) {
	t.Parallel()
	tests := []struct {
		accept []string
		want   bool
	}{
		{nil, false},
		{[]string{"*/*"}, false},
		{[]string{"application/json"}, true},
		{[]string{"Application/JSON"}, true},
		{[]string{"text/plain, application/json;q=0.5"}, true},
		{[]string{"text/html,application/xhtml+xml,application/xml;q=0.9,*/*;q=0.8"}, false},
		{[]string{"text/html, application/json"}, false},
		{[]string{"application/json;q=0, text/html"}, false},
		{[]string{"application/json;q=0.0"}, false},
		{[]string{"text/csv", "application/json"}, true},
	}
	for _, tt := range tests {
		r := httptest.NewRequest("GET", "/", nil)
		for _, a := range tt.accept {
			r.Header.Add("Accept", a)
		}
		assert.Equal(t, tt.want, wantsJSON(r), "%q", tt.accept)
	}
}

// globMatch matches as Redis's SCAN MATCH does, on a real Redis: '*' and
// '?' take '/' too, classes, ranges, negation and escapes.
func TestGlobMatchIsRedis(t *testing.T) {
	t.Parallel()
	rdb := redistest.Start(t).Client()
	keys := []string{"jobs/42", "jobs:42", "jobs", "lock:a", "lock:b", "lock:z", "lock:-", "lock:^", "lock:]", "lock:*", "lock:?",
		"lock:[x]", "a/b/c", "", "x", "lock:ab", "LOCK:a", "lock:\\"}
	for _, k := range keys {
		require.NoError(t, rdb.Set(t.Context(), "k|"+k, "v", time.Minute).Err())
	}
	for _, p := range []string{"*", "jobs*", "jobs/*", "*/*", "j?bs/42", "lock:[a-b]", "lock:[b-a]", "lock:[^a-b]", "lock:[\\-a]",
		"lock:[\\]]", "lock:\\*", "lock:\\?", "lock:?", "lock:[*?]", "lock:[[]x]", "*:*", "lock:a*", "?", "", "lock:\\\\", "*42"} {
		_, err := path.Match(p, "")
		require.NoError(t, err, "a pattern Locks accepts")
		var redisKeys []string
		iter := rdb.Scan(t.Context(), 0, "k|"+p, 1000).Iterator()
		for iter.Next(t.Context()) {
			redisKeys = append(redisKeys, strings.TrimPrefix(iter.Val(), "k|"))
		}
		require.NoError(t, iter.Err())
		var ours []string
		for _, k := range keys {
			if globMatch(p, k) {
				ours = append(ours, k)
			}
		}
		assert.ElementsMatch(t, redisKeys, ours, "pattern %q", p)
	}
}
