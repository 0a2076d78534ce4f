package padlock

import (
	"context"
	"time"
)

// The keys of a lock, l.keys: [0] the lock itself; [1] its queue of
// waiting tickets, when its waiters queue in Redis (a key that can have
// side keys, on one Redis or a Cluster; see wait.go); [2] the fencing
// counter, when fenced; [3] the hash of the key's minimums (see mins).

// queued reports whether l's waiters queue in Redis (its key has a queue).
func (l *Lock) queued() bool { return l.keys[1] != "" }

// fenced reports whether l was taken WithFencing (it has a fence key).
func (l *Lock) fenced() bool { return l.keys[2] != "" }

// mins is the name of the hash of l's key's minimums (see WithMinHold),
// when l takes a minimum or has a chosen token (which may hold with one),
// else "". A script is given it only then: a key that does not exist
// makes a script on several keys fail (TRYAGAIN) while its slot migrates.
func (l *Lock) mins() string { return l.keys[3] }

// tryKeys are the acquire script's keys: the lock, then the hash of
// minimums (with mins) or its queue, and the fence counter when fenced.
func (l *Lock) tryKeys() []string {
	switch {
	case l.mins() == "" && l.fenced():
		return l.keys[:3]
	case l.mins() == "":
		return l.keys[:1]
	case l.fenced():
		return []string{l.key, l.mins(), l.keys[2]}
	}
	return []string{l.key, l.mins()}
}

// minHold is l's WithMinHold, or 0.
func (l *Lock) minHold() time.Duration {
	if l.x == nil {
		return 0
	}
	return l.x.minHold
}

// queueKeys are the keys of the scripts of the one way to wait (wait.lua,
// release.lua, leave.lua...): each key of the lock and its queue.
func (l *Lock) queueKeys() []string {
	m := l.multi()
	if m == nil {
		return l.keys[:2]
	}
	keys := make([]string, 0, 2*len(m))
	for _, k := range m {
		keys = append(keys, k, sideKey(k, "queue"))
	}
	return keys
}

// ticketKey is the name of the ticket of the waiter with token tok for
// the lock l (on its first key): a side key of it, in its slot.
func (l *Lock) ticketKey(tok string) string {
	if m := l.multi(); m != nil {
		return sideKey(m[0], "t:"+tok)
	}
	return sideKey(l.key, "t:"+tok)
}

// releaseOn deletes l on r if it is still ours, and reports 1 if it was,
// else 0 (a multi-key lock with some keys no longer ours has the others
// deleted, and reports 0). A lock whose waiters queue in Redis hands
// what it frees to them (see wait.go); on the attempt path, the release
// is announced on each key's channel. bg says the Client's background work
// releases it (see Client.observe).
func (l *Lock) releaseOn(ctx context.Context, r doer, bg, undo bool) (int64, error) {
	if l.queued() {
		return l.releaseQueued(ctx, r, bg, undo)
	}
	keys, args, want := l.multi(), []any{l.value}, 1
	switch {
	case keys != nil:
		want = len(keys)
	case l.mins() != "" && !undo:
		keys, args = []string{l.key, l.mins()}, []any{l.value, "min"}
	default:
		keys = l.keys[:1]
	}
	n, err := asInt64(releaseManyScript.Run(ctx, r, keys, args...))
	if err != nil || n < int64(want) {
		return 0, err
	}
	return 1, nil
}

// acquireOn runs one acquire attempt of l on r, and returns the reply of
// acquire.lua (or acquire_many.lua, of the same form).
func (l *Lock) acquireOn(ctx context.Context, r doer) (int64, error) {
	if m := l.multi(); m != nil {
		return asInt64(acquireManyScript.Run(ctx, r, m, l.args[:]...))
	}
	return asInt64(evalsha(ctx, r, acquireScript, l.acqCmd))
}

// extendCall is the script, keys and arguments that extend l for ttl.
func (l *Lock) extendCall(ttl int64) (*luaScript, []string, []any) {
	if k := l.counted(); k != nil {
		return countExtendScript, l.keys[:2], []any{l.value, ttl, l.kind()}
	}
	if m := l.multi(); m != nil {
		return extendManyScript, m, []any{l.value, ttl}
	}
	keys, args := l.keys[:1], []any{l.value, ttl}
	if l.fenced() {
		keys = []string{l.key, l.keys[2] + "s"} // and its fence's record
	}
	if l.mins() != "" {
		keys, args = append(keys[:len(keys):len(keys)], l.mins()), append(args, "min")
	}
	return extendScript, keys, args
}

// pttlCall is the script, keys and arguments that read l's remaining ttl.
func (l *Lock) pttlCall() (*luaScript, []string, []any) {
	if k := l.counted(); k != nil {
		return countPTTLScript, l.keys[:2], []any{l.value, l.kind()}
	}
	if m := l.multi(); m != nil {
		return pttlManyScript, m, []any{l.value}
	}
	return pttlScript, l.keys[:1], []any{l.value}
}

// sideNames are the names (see sideKey) of every side key any kind of lock
// writes, besides the waiters' tickets.
var sideNames = []string{"fence", "queue", "shared", "fences", "limit", "mins"}

// allSideKeys returns every side key that any kind of lock on key may
// have written, but tickets: the fencing counter first, then the queue.
func allSideKeys(key string) []string {
	keys := make([]string, len(sideNames))
	for i, name := range sideNames {
		keys[i] = sideKey(key, name)
	}
	return keys
}
