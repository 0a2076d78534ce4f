package padlock

import (
	"context"
	"fmt"
	"time"

	"github.com/padlock-go/padlock/driver"
)

// WithReplicas makes every acquire and extend of the lock wait, with WAIT,
// until at least n replicas of the key's primary have it, for up to
// timeout. If fewer acknowledge in time, the lock is released and the call
// fails with an error matching ErrNotReplicated. It narrows the window in
// which a failover loses a lock (replication is still asynchronous: a
// replica that acknowledged can still lag behind a later write).
// KeepAlive's renewals wait too; a renewal that misses its replicas counts
// as a failed renewal (retried until the lock's local deadline).
//
// On go-redis it needs a *redis.Client (or failover client) or a
// *redis.ClusterClient; on other clients the calls fail with ErrInvalid.
// n < 1 turns it off; timeout under 1ms is ErrInvalid. A write and its
// WAIT go over one connection to the key's primary (a Driver's Pin); on a
// Cluster, a MOVED or ASK is followed, as the client follows it, to the
// node it names, also one that no slot map lists yet (a master just
// added, while the first slot migrates to it): on go-redis, the Client
// makes a client of such a node from the ClusterClient's Options (not its
// OnNewNode hooks, nor options newer than go-redis v9.0 such as a
// credentials provider: set those in ClusterOptions.NewClient), and keeps
// up to eight such until Close.
func WithReplicas(n int, timeout time.Duration) Option {
	return optionFunc(func(o *options) {
		o.replicas, o.replicaTimeout = n, timeout
	})
}

// checkReplicas validates the WithReplicas settings.
func (o options) checkReplicas() error {
	if o.replicas > 0 && o.replicaTimeout < time.Millisecond {
		return fmt.Errorf("%w: WithReplicas timeout %v is under 1ms", ErrInvalid, o.replicaTimeout)
	}
	return nil
}

// onWriter runs write on the Client's Driver or, with WithReplicas, on one
// connection to l's primary (see driver.Driver's Pin), which it returns
// (nil without WithReplicas) open for the WAIT after the write, for the
// caller to close. On a Cluster, a node that answers MOVED or ASK ran
// nothing: the connection follows it to the node that the answer names,
// and the WAIT goes there.
func (l *Lock) onWriter(ctx context.Context, write func(r doer) error) (driver.Conn, error) {
	if l.replicaCount() == 0 {
		return nil, write(l.c.pipe)
	}
	conn, err := l.c.d.Pin(ctx, l.key)
	if err != nil {
		return nil, err
	}
	if err := write(pinnedDoer{conn}); err != nil {
		_ = conn.Close()
		return nil, err
	}
	return conn, nil
}

// pinnedDoer sends padlock's commands and scripts over one connection.
type pinnedDoer struct{ conn driver.Conn }

func (p pinnedDoer) Do(ctx context.Context, _ string, args ...any) (any, error) {
	return p.conn.Do(ctx, args...)
}

// replicated waits for l's replicas after a write on conn. On failure the
// error says how many acknowledged.
func (l *Lock) replicated(ctx context.Context, conn driver.Conn) error {
	n, err := asInt64(conn.Do(ctx, "wait", l.replicaCount(), l.x.replicaTimeout.Milliseconds()))
	switch {
	case err != nil:
		return fmt.Errorf("%w: %q: WAIT: %w", ErrNotReplicated, l.key, err)
	case n < int64(l.replicaCount()):
		return fmt.Errorf("%w: %q: %d of %d replicas acknowledged within %v", ErrNotReplicated, l.key, n, l.replicaCount(), l.x.replicaTimeout)
	}
	return nil
}
