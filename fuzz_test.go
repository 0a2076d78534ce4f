package padlock_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/padlock-go/padlock"
	"github.com/padlock-go/padlock/internal/fipsoff"
)

// FuzzLockCycle takes and releases a lock under any key and metadata:
// keys with braces (hash tags or not), binary bytes, long keys. Whatever the
// input, padlock either refuses it with ErrInvalid and writes nothing, or
// keeps every promise: the key holds the token and metadata verbatim, a
// second attempt is refused, Inspect reads back what was written, fences
// count up, and Release leaves nothing behind but the fence counter.
func FuzzLockCycle(f *testing.F) {
	for _, seed := range []struct {
		key, meta string
		fenced    bool
	}{
		{"lock:report:daily", "", false},
		{"lock:{order}:42", "host=web-1 pid=42", true},
		{"a}b", "x", true},
		{"a{}b", "", true},
		{"{}", " ", false},
		{"\x00\xff binary \r\n key", "\x00meta\x00", true},
		{strings.Repeat("k", 4096), strings.Repeat("m", 4096), true},
		{"", "empty key", false},
		{"é{ü}", "ünïcode", true},
	} {
		f.Add(seed.key, seed.meta, seed.fenced)
	}
	mr := miniredis.NewMiniRedis()
	var err error
	fipsoff.Run(func() { err = mr.Start() })
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(mr.Close)
	rdb := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	f.Cleanup(func() { _ = rdb.Close() })
	c := padlock.New(rdb)
	ctx := context.Background()

	f.Fuzz(func(t *testing.T, key, meta string, fenced bool) {
		mr.FlushAll()
		opts := []padlock.Option{padlock.WithMetadata(meta)}
		if fenced {
			opts = append(opts, padlock.WithFencing())
		}
		l, err := c.TryAcquire(ctx, key, time.Minute, opts...)
		if errors.Is(err, padlock.ErrInvalid) {
			if n := len(mr.Keys()); n != 0 {
				t.Fatalf("refused %q but wrote %d keys", key, n)
			}
			if key != "" && (!fenced || sideKeysFit(key)) {
				t.Fatalf("refused a valid key %q: %v", key, err)
			}
			return
		}
		if err != nil {
			t.Fatalf("TryAcquire(%q): %v", key, err)
		}
		want := l.Token() + " ~60000" // its span: a minute's ttl
		if meta != "" {
			want += " " + meta
		}
		if got, _ := mr.Get(key); got != want {
			t.Fatalf("key %q holds %q, want %q", key, got, want)
		}
		if l.Metadata() != meta || l.Key() != key {
			t.Fatalf("Lock reads back key %q metadata %q", l.Key(), l.Metadata())
		}
		if _, err := c.TryAcquire(ctx, key, time.Minute); !errors.Is(err, padlock.ErrNotAcquired) {
			t.Fatalf("second TryAcquire(%q): %v, want ErrNotAcquired", key, err)
		}
		info, err := c.Inspect(ctx, key)
		if err != nil || !info.Held || info.Token != l.Token() || info.Metadata != meta {
			t.Fatalf("Inspect(%q) = %+v, %v", key, info, err)
		}
		if fenced && (l.Fence() != 1 || info.Fence != 1) {
			t.Fatalf("fence %d, inspected %d, want 1", l.Fence(), info.Fence)
		}
		if err := l.Extend(ctx, time.Minute); err != nil {
			t.Fatalf("Extend(%q): %v", key, err)
		}
		if err := l.Release(ctx); err != nil {
			t.Fatalf("Release(%q): %v", key, err)
		}
		if mr.Exists(key) {
			t.Fatalf("%q still held after Release", key)
		}
		for _, k := range mr.Keys() {
			if !strings.HasSuffix(k, ":fence") {
				t.Fatalf("Release left %q behind", k)
			}
		}
	})
}

// sideKeysFit reports whether key can have side keys that begin with it
// and share its slot, as the README says: it has a hash tag (a non-empty
// part between its first '{' and the first '}' after it), or no brace.
func sideKeysFit(key string) bool {
	if open := strings.IndexByte(key, '{'); open >= 0 {
		if close := strings.IndexByte(key[open+1:], '}'); close > 0 {
			return true
		}
	}
	return !strings.ContainsAny(key, "{}")
}
