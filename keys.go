package padlock

import (
	"context"
	"time"
)

// The keys of a lock, l.keys: [0] the lock itself; [1] its queue of
// waiting clients (when the key can have side keys, see sideKey); [2] the
// fencing counter (when fenced). Each script takes a prefix of them, or
// handKeys. The side keys' names are slices of one string, l.side: the
// queue, the fencing counter and the waiters' details (see handoff.go).

// handoffGrace is how long a release reserves the lock for the first
// queued waiter, which it names in its notification: long enough for the
// notification and one attempt. If the waiter is gone, the others take the
// lock after it.
const handoffGrace = 100 * time.Millisecond

var graceArg any = handoffGrace.Milliseconds()

// queueTTL is how long a key's queue of waiters lives after its last
// attempt, at the least: waiters poll more often than that.
const queueTTL = time.Minute

// queued reports whether l's waiters queue in Redis (its key has a queue).
func (l *Lock) queued() bool { return l.keys[1] != "" }

// fenced reports whether l was taken WithFencing (it has a fence key).
func (l *Lock) fenced() bool { return l.keys[2] != "" }

// tryKeys are the acquire script's keys: the lock, and the fence counter
// at KEYS[3] when fenced.
func (l *Lock) tryKeys() []string {
	if l.fenced() {
		return l.keys[:3]
	}
	return l.keys[:1]
}

// sideKeys returns the names of key's queue and fencing counter, and all
// its side keys as one string: the queue, the fencing counter, the
// waiters' details and the tokens that took the lock (see handoff.go).
func sideKeys(key string) (side, queue, fence string) {
	p := ":" // the prefix of every side key (see sideKey), after key
	if !hasHashTag(key) {
		p = ":{" + key + "}:"
	}
	// One allocation, for a lock that may be taken and released at once.
	side = key + p + "queue" + key + p + "fence" + key + p + "waiters" + key + p + "took"
	n := len(key) + len(p)
	return side, side[:n+len("queue")], side[n+len("queue") : 2*n+len("queuefence")]
}

// sideName returns side key number i (0 the queue, 1 the fencing counter,
// 2 the waiters' details, 3 the tokens that took the lock) from l.side.
func (l *Lock) sideName(i int) string {
	p := (len(l.side) - len("queuefencewaiterstook")) / 4
	ends := [...]int{0, p + len("queue"), 2*p + len("queuefence"), 3*p + len("queuefencewaiters"), len(l.side)}
	return l.side[ends[i]:ends[i+1]]
}

// acquireOn runs one acquire attempt of l on r, and returns the reply of
// acquire.lua (or acquire_many.lua, of the same form).
func (l *Lock) acquireOn(ctx context.Context, r doer) (int64, error) {
	if m := l.multi(); m != nil {
		return acquireManyScript.Run(ctx, r, m, l.args[:]...).Int64()
	}
	return evalsha(ctx, r, acquireScript, l.acqCmd).Int64()
}

// releaseOn deletes l on r if it is still ours, and reports 1 if it was,
// else 0. A multi-key lock with some keys no longer ours has the others
// deleted, and reports 0.
func (l *Lock) releaseOn(ctx context.Context, r doer) (int64, error) {
	if k := l.counted(); k != nil {
		return countReleaseScript.Run(ctx, r, k.keys[:5], l.value, graceArg, k.limit).Int64()
	}
	m := l.multi()
	if m == nil {
		if l.queued() {
			return l.releaseHanding(ctx, r)
		}
		return evalsha(ctx, r, releaseScript, []any{"evalsha", releaseSHA, numKeys[1], l.key, l.args[0], graceArg}).Int64()
	}
	n, err := releaseManyScript.Run(ctx, r, m, l.args[0]).Int64()
	if n < int64(len(m)) {
		return 0, err
	}
	return 1, err
}

// extendCall is the script and keys that extend l.
func (l *Lock) extendCall() (luaScript, []string) {
	if k := l.counted(); k != nil {
		return countExtendScript, k.keys[:5]
	}
	if m := l.multi(); m != nil {
		return extendManyScript, m
	}
	return extendScript, l.keys[:1]
}

// pttlCall is the script and keys that read l's remaining ttl.
func (l *Lock) pttlCall() (luaScript, []string) {
	if k := l.counted(); k != nil {
		return countPTTLScript, k.keys[:5]
	}
	if m := l.multi(); m != nil {
		return pttlManyScript, m
	}
	return pttlScript, l.keys[:1]
}

// sideNames are the names (see sideKey) of every side key any kind of lock
// writes.
var sideNames = []string{"fence", "queue", "waiters", "took", "shared", "seen", "fences"}

// allSideKeys returns every side key that any kind of lock on key may
// have written: the fencing counter first, then the queue.
func allSideKeys(key string) []string {
	keys := make([]string, len(sideNames))
	for i, name := range sideNames {
		keys[i] = sideKey(key, name)
	}
	return keys
}
