// Package padlocktest tests code that uses padlock: it gives a test a
// padlock Client on a lock server of its own, in the test's process, and
// makes happen to a holder what a real deployment does to it.
//
// A test of a job that must skip when another instance holds its lock:
//
//	func TestReportSkipsWhenHeld(t *testing.T) {
//		locks, srv := padlocktest.New(t)
//		other := srv.Client() // another instance
//		l, err := other.TryAcquire(t.Context(), "lock:report", time.Minute)
//		...
//		err = runReport(t.Context(), locks) // your code: TryDo on "lock:report"
//		// expect it to have skipped
//	}
//
// The Server makes the faults: Expire (the lock's ttl ends now: its
// KeepAlive context ends with padlock.ErrLost at the next renewal),
// Steal (another holder takes it: Extend and Release return
// padlock.ErrNotHeld), Down and Up (an outage: calls fail with an error
// that is not padlock.ErrNotAcquired, and work again after Up),
// FastForward (time passes for every ttl) and Holder (what Inspect
// shows).
//
// New runs the server in the test's process (miniredis, kept in step with
// the clock), so a test needs nothing installed and runs in parallel with
// others: each has its own server, and sees none of the others' locks.
// NewRedis does the same on a real redis-server that it starts on a free
// loopback port, and skips the test when there is none on PATH (set
// PADLOCK_REDIS=required to fail instead). Every promise padlock makes
// holds on both: waiting, fencing, semaphores, shared holds, election,
// Resume and Break; Client.Check reports the in-process server as a test
// server.
//
// Everything a test makes is closed when the test ends (t.Cleanup): the
// Clients (ending their KeepAlives and waits; a lock the test forgot to
// release leaves no goroutine behind), the server, and the goroutine that
// keeps its clock.
package padlocktest

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/padlock-go/padlock"
	"github.com/padlock-go/padlock/internal/faultproxy"
	"github.com/padlock-go/padlock/internal/fipsoff"
	"github.com/padlock-go/padlock/internal/redistest"
)

// A Server is a lock server of a test's own, with the faults a real one
// has. Its methods fail the test (t.Fatal) if the server cannot do what
// they ask; call them from the test's goroutine.
type Server struct {
	t     testing.TB
	opts  []padlock.Option
	proxy *faultproxy.Proxy    // between the Clients and the server: Down and Up
	mr    *miniredis.Miniredis // the in-process server, nil for NewRedis
	admin *redis.Client        // to the server itself, past the proxy
	locks *padlock.Client      // on admin: Expire, Steal, Holder
}

// New returns a padlock Client made with opts on a lock server of its
// own, in the test's process, and that server. Both are closed when the
// test ends. The server's ttls run in real time (and FastForward moves
// them on).
func New(t testing.TB, opts ...padlock.Option) (*padlock.Client, *Server) {
	t.Helper()
	mr := miniredis.NewMiniRedis()
	var err error
	fipsoff.Run(func() { err = mr.StartAddr("127.0.0.1:0") })
	if err != nil {
		t.Fatalf("padlocktest: starting the in-process server: %v", err)
	}
	t.Cleanup(mr.Close)
	stop := keepInStep(mr)
	t.Cleanup(stop)
	s := start(t, mr.Addr(), opts)
	s.mr = mr
	return s.Client(), s
}

// NewRedis is New on a real redis-server, which it starts on a free
// loopback port (and stops when the test ends). It skips the test when no
// redis-server is on PATH, unless PADLOCK_REDIS=required, which fails it.
func NewRedis(t testing.TB, opts ...padlock.Option) (*padlock.Client, *Server) {
	t.Helper()
	srv := redistest.Start(t)
	s := start(t, srv.Addr(), opts)
	return s.Client(), s
}

// start puts a proxy in front of the server at addr, and the Server's own
// clients beside it.
func start(t testing.TB, addr string, opts []padlock.Option) *Server {
	t.Helper()
	proxy, err := faultproxy.Start(addr)
	if err != nil {
		t.Fatalf("padlocktest: %v", err)
	}
	t.Cleanup(proxy.Close)
	s := &Server{t: t, opts: opts, proxy: proxy}
	s.admin = redis.NewClient(&redis.Options{Addr: addr})
	s.locks = padlock.New(s.admin)
	t.Cleanup(func() {
		_ = s.locks.Close()
		_ = s.admin.Close()
	})
	return s
}

// keepInStep moves the in-process server's clock on with the real one, so
// that its ttls run out in real time, until stop is called.
func keepInStep(mr *miniredis.Miniredis) (stop func()) {
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		tick := time.NewTicker(5 * time.Millisecond)
		defer tick.Stop()
		last := time.Now()
		for {
			select {
			case <-done:
				return
			case now := <-tick.C:
				mr.FastForward(now.Sub(last))
				last = now
			}
		}
	})
	return func() {
		close(done)
		wg.Wait()
	}
}

// Client returns another padlock Client on the server, as another
// instance of the service would have: New's options, then opts. It is
// closed when the test ends.
func (s *Server) Client(opts ...padlock.Option) *padlock.Client {
	s.t.Helper()
	rdb := redis.NewClient(&redis.Options{Addr: s.proxy.Addr(), MaxRetries: 1})
	c := padlock.New(rdb, append(s.opts[:len(s.opts):len(s.opts)], opts...)...)
	s.t.Cleanup(func() {
		_ = c.Close()
		_ = rdb.Close()
	})
	return c
}

// Expire ends what holds key now, as its ttl running out would: the lock,
// or every holder of a semaphore or shared hold. A holder finds out at its
// next renewal (its KeepAlive context ends with padlock.ErrLost), Extend
// or Release (padlock.ErrNotHeld); the first waiter gets the key at once.
// Like padlock's Client.Break, it moves the key's fencing counter on, so
// the next holder's fence is higher than it would otherwise be. A key that
// nobody holds is left alone.
func (s *Server) Expire(key string) {
	s.t.Helper()
	if _, err := s.locks.Break(context.Background(), key); err != nil {
		s.t.Fatalf("padlocktest: Expire(%q): %v", key, err)
	}
}

// Steal ends what holds key now (as Expire) and has another holder take
// it, so the old holder's Extend and Release return padlock.ErrNotHeld,
// and another caller's TryAcquire padlock.ErrNotAcquired: the first
// waiter, if the key had any (Expire serves the queue), else a lock of
// the Server's own, for as long as the key had left (a minute at least).
// On a semaphore's key, the places the waiters did not take go to the
// Server too.
func (s *Server) Steal(key string) {
	s.t.Helper()
	ctx := context.Background()
	info, err := s.locks.Break(ctx, key)
	if err != nil {
		s.t.Fatalf("padlocktest: Steal(%q): %v", key, err)
	}
	ttl := max(info.TTL, time.Minute)
	opts := []padlock.Option{padlock.WithMetadata("padlocktest: stolen")}
	places := 1
	if info.Kind == "semaphore" {
		if places, err = s.admin.Get(ctx, sideKey(key, "limit")).Int(); err != nil {
			s.t.Fatalf("padlocktest: Steal(%q): the semaphore's places: %v", key, err)
		}
		opts = append(opts, padlock.WithLimit(places))
	}
	for range places {
		_, err := s.locks.TryAcquire(ctx, key, ttl, opts...)
		switch {
		case errors.Is(err, padlock.ErrNotAcquired):
			return // a waiter took it (or every place left)
		case err != nil:
			s.t.Fatalf("padlocktest: Steal(%q): %v", key, err)
		}
	}
}

// Down makes the server stop answering, as in an outage: every connection
// is cut and new ones are closed at once, so padlock's calls fail with a
// connection error (never padlock.ErrNotAcquired), a KeepAlive ends with
// padlock.ErrLost at the lock's local deadline, and an Acquire that waits
// returns the error of its next attempt (when its ticket lapses, within
// 5s, or when the holder would expire). What the server holds stays, as it
// would across a network outage.
func (s *Server) Down() { s.proxy.SetDown(true) }

// Up makes the server answer again after Down: padlock's calls work again
// (go-redis dials anew); a wait that has not ended carries on.
func (s *Server) Up() { s.proxy.SetDown(false) }

// FastForward lets d pass for every ttl on the server at once: a lock,
// a semaphore's or shared hold's holders, a minimum (WithMinHold) and a
// waiter's ticket that had less than d left are gone, the others have d
// less. Holders and waiters do not notice until they next look, as after
// a long pause of theirs.
func (s *Server) FastForward(d time.Duration) {
	s.t.Helper()
	if err := s.admin.Eval(context.Background(), fastForward, nil, d.Milliseconds()).Err(); err != nil {
		s.t.Fatalf("padlocktest: FastForward(%v): %v", d, err)
	}
}

// fastForward moves every expiry on the server ARGV[1] ms closer: the
// keys' ttls, the expiries (scores) of semaphores' and shared holds'
// holders, and the moments in the hashes of minimums. Queues (scored by
// arrival) are left as they are.
const fastForward = `
local d = tonumber(ARGV[1])
for _, k in ipairs(redis.call('KEYS', '*')) do
  local kind = redis.call('TYPE', k)['ok']
  if kind == 'zset' and not string.find(k, ':queue$') then
    local m = redis.call('ZRANGE', k, 0, -1, 'WITHSCORES')
    for i = 1, #m, 2 do redis.call('ZADD', k, tonumber(m[i + 1]) - d, m[i]) end
  elseif kind == 'hash' and string.find(k, ':mins$') then
    local m = redis.call('HGETALL', k)
    for i = 1, #m, 2 do redis.call('HSET', k, m[i], tonumber(m[i + 1]) - d) end
  end
  local ms = redis.call('PTTL', k)
  if ms > d then
    redis.call('PEXPIRE', k, ms - d)
  elseif ms >= 0 then
    redis.call('DEL', k)
  end
end
return 0
`

// Holder returns what holds key now, as padlock's Client.Inspect shows it
// (Held is false when nothing does), or the error Inspect returns.
func (s *Server) Holder(key string) (padlock.LockInfo, error) {
	return s.locks.Inspect(context.Background(), key)
}

// sideKey is the name padlock gives a side key of key (see the README's
// "Side keys").
func sideKey(key, name string) string {
	if open := strings.IndexByte(key, '{'); open >= 0 {
		if end := strings.IndexByte(key[open+1:], '}'); end > 0 {
			return key + ":" + name
		}
	}
	return fmt.Sprintf("%s:{%s}:%s", key, key, name)
}
