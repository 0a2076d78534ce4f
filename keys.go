package padlock

import "time"

// The keys of a lock, l.keys: [0] the lock itself; [1] its queue of
// waiting clients, which also holds the hand-off from a release to the
// first of them (when the key can have side keys, see sideKey); [2] the
// fencing counter (when fenced). Each script takes a prefix of them.

// handoffGrace is how long a release reserves the lock for the first
// queued waiter, which it names in its notification: long enough for the
// notification and one attempt. If the waiter is gone, the others take the
// lock after it.
const handoffGrace = 100 * time.Millisecond

var graceArg any = handoffGrace.Milliseconds()

// queueTTL is how long a key's queue of waiters lives after its last
// attempt, at the least: waiters poll more often than that.
const queueTTL = time.Minute

// tryKeys are the acquire script's keys: the lock, and the fence counter
// at KEYS[3] when fenced.
func (l *Lock) tryKeys() []string {
	if l.fenced {
		return l.keys[:3]
	}
	return l.keys[:1]
}

// waitKeys are the wait script's keys: the lock, its queue, and the fence
// counter when fenced.
func (l *Lock) waitKeys() []string {
	if l.fenced {
		return l.keys[:3]
	}
	return l.keys[:2]
}

// releaseKeys are the release script's keys: the lock, and its queue when
// it has one.
func (l *Lock) releaseKeys() []string {
	if l.queued {
		return l.keys[:2]
	}
	return l.keys[:1]
}
