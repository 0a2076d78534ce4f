// Package driver is what padlock needs from a Redis client, for the writers
// of adapters: a package that wraps a client (rueidis, valkey-go, redigo...)
// in a Driver, and hands it to padlock.NewDriver. Users of padlock do not
// need it: padlock.New takes a go-redis client, and the adapter modules
// (padlockrueidis, padlockvalkey) take theirs.
//
// A Driver runs commands and scripts on the node that owns their key, in
// batches of one round trip per node, opens pub/sub connections, pins one
// connection for a write followed by WAIT, and says what kind of deployment
// it talks to. Replies are plain Go values (see Do); errors are the client's
// own, with the server's error replies as ServerError (see Error) so that
// padlock classifies them the same way on every driver.
//
// The package drivertest is the conformance suite: an adapter whose tests
// run drivertest.Run against real servers keeps every promise padlock makes.
package driver

import (
	"context"
	"errors"
	"strings"
	"time"
)

// Kind is the kind of deployment a Driver talks to.
type Kind int

const (
	// Single is one server, perhaps with replicas the client does not
	// send padlock's commands to.
	Single Kind = iota + 1
	// Cluster is a Redis Cluster: each key is on the master that owns its
	// slot, and a node answers MOVED or ASK for a key it does not serve.
	Cluster
	// Sentinel is a primary that Sentinel watches: after a failover the
	// client sends to the new primary. padlock checks, once a second, that
	// its pub/sub connections follow it.
	Sentinel
)

// A Driver is a Redis client as padlock uses it. Its methods are called from
// many goroutines at once. padlock never closes it: its owner does, after
// padlock's Client.Close.
type Driver interface {
	// Kind reports what kind of deployment the Driver talks to. It is
	// called once, by padlock.NewDriver. A client padlock cannot keep its
	// promises on (one that sends commands to replicas, or that moves
	// keys between shards as a go-redis Ring does) is refused by the
	// adapter's constructor, not here.
	Kind() Kind

	// Do sends one command, args[0] its name (as "EVALSHA"), to the node
	// that owns key (key is the command's first key, or "" for a command
	// with none, which may go to any primary), and returns its reply:
	// int64 for an integer, string for a simple or bulk string, []any for
	// an array (its elements the same), map[string]any for a map (RESP3),
	// float64 for a double, bool for a boolean, and nil with ErrNil for a
	// nil reply. An error reply is an error that Error finds. Arguments are
	// strings, []byte, int or int64, never nil. On a Cluster, Do follows MOVED and ASK as the client
	// does for its own commands. A script padlock sends as EVALSHA may
	// answer NOSCRIPT: padlock sends EVAL then.
	Do(ctx context.Context, key string, args ...any) (any, error)

	// Batch sends cmds, each to the node that owns its Key, in one round
	// trip per node (a pipeline; not a transaction), and sets each one's
	// Reply and Err as Do would. It returns when every reply is in, or ctx
	// has ended (those not in then get ctx's error). A command whose node
	// cannot be reached gets the error; the others are still sent.
	Batch(ctx context.Context, cmds []Cmd)

	// PubSub opens a pub/sub connection to the node that owns key ("" for
	// any node; on a Cluster, a node whose plain channels every node
	// hears), subscribed to nothing yet. The caller closes it.
	PubSub(ctx context.Context, key string) (PubSub, error)

	// Pin returns one connection to the primary that owns key, for a write
	// and the WAIT after it, which must go to the same connection. On a
	// Cluster, the connection's Do follows MOVED and ASK itself (to any
	// node the answer names, also one no slot map lists yet: a master just
	// added, while the first slot migrates to it), and Do after it goes to
	// the node it last followed to. WAIT blocks for up to its timeout:
	// the connection waits that long for its reply. The caller closes it.
	Pin(ctx context.Context, key string) (Conn, error)

	// Nodes returns a Driver of each primary (a Cluster's masters, or the
	// one server), for the checks padlock.Check makes on every node, with
	// its address. Their Kind is Single. The caller does not close them.
	Nodes(ctx context.Context) ([]Node, error)
}

// A Node is one primary of a Driver.
type Node struct {
	Addr   string // host:port, as the client dials it
	Driver Driver // a Driver of this node alone
}

// A Cmd is one command of a Batch: its key (as Do's), its arguments, and,
// once Batch returns, its reply and error.
type Cmd struct {
	Key   string
	Args  []any
	Reply any
	Err   error
}

// A Conn is one connection, from Driver.Pin.
type Conn interface {
	// Do is Driver.Do on this connection.
	Do(ctx context.Context, args ...any) (any, error)
	// Close gives the connection back. It is called once.
	Close() error
}

// A PubSub is one pub/sub connection, from Driver.PubSub. Its methods are
// called from two goroutines at most: one Receives, the other subscribes,
// pings and closes.
type PubSub interface {
	// Subscribe subscribes channels, with SSUBSCRIBE if sharded (a server
	// without it answers an error that reads "unknown command"). It returns
	// once the command is sent; the confirmations come as Subscriptions.
	Subscribe(ctx context.Context, sharded bool, channels ...string) error

	// Receive waits up to timeout for what the connection delivers next: a
	// *Message, a *Subscription (a confirmation of Subscribe), or a
	// *Pong. A Message may be of a channel this PubSub did not subscribe,
	// before its first confirmation too: a driver may reuse a connection
	// that another PubSub subscribed and left (padlock takes every message
	// as a hint). When nothing comes in time it returns an error for which
	// IsTimeout reports true, and the connection is as good as before;
	// so it is after an error reply (a ServerError: a subscription the
	// server refused). After any other error padlock takes the connection
	// for dead: it closes it and opens another (Driver.PubSub), subscribed
	// to the same channels, and takes what it may have missed as lost.
	Receive(ctx context.Context, timeout time.Duration) (any, error)

	// Ping sends PING on the connection; the answer comes as a *Pong.
	Ping(ctx context.Context) error

	// Close closes the connection (or leaves it to the driver, which
	// no longer delivers its messages here); a Receive in progress returns
	// an error.
	Close() error
}

// A Message is a message received on a channel.
type Message struct {
	Channel string
	Payload string
}

// A Subscription is the server's confirmation of a subscribe.
type Subscription struct {
	Channel string
}

// A Pong is the answer to PubSub.Ping.
type Pong struct{}

// Optional interfaces: a Driver, or a PubSub, may implement these too.
// padlock checks for them where it needs them, as database/sql does
// for driver.Pinger, and does without them.

// A Protocoler is a Driver that reports the RESP version its connections
// speak, 2 or 3. padlock.Check probes HELLO with it, so that the probe
// leaves the connection's protocol as it was; without it, Check takes 3.
type Protocoler interface {
	Protocol() int
}

// A Router is a Driver of several nodes (a Cluster) that says which one a
// key's commands go to. padlock pipelines the scripts of many goroutines:
// those that come while several are in flight to a node wait, and go
// together in the next Batch. With a Router it counts what is in flight
// to each node apart, so that a call to a node with little in flight is
// sent at once, whatever waits for the others; without one, it counts
// every node's together. Route returns the node's name (its address), or
// "" when it does not know; it is called before each script, and must
// not wait on the network longer than Do would.
type Router interface {
	Route(ctx context.Context, key string) string
}

// A Tracker is a Driver that hears Redis's invalidations (CLIENT TRACKING,
// the server side of client-side caching): padlock wakes a waiter when
// something other than padlock frees its key (an operator's DEL, an
// eviction, a FLUSHALL) as soon as Redis says the key changed. Without it
// a Client reads the keys it waits for every 100ms.
type Tracker interface {
	// Track opens a connection of its own to the primary that owns key,
	// with tracking on (not BCAST, not OPTIN). A key read on it by MGET or
	// EXISTS (Tracking.Batch) is registered: the first change to it calls
	// invalidated with it, after which it is registered no more until read
	// again. invalidated(nil) means every key (a FLUSHALL). invalidated is
	// called from one goroutine at a time, and must not block. Track
	// returns an error when the server or the Redis user refuses tracking
	// (padlock then reads the keys every 100ms, and Check says why).
	Track(ctx context.Context, key string, invalidated func(keys []string)) (Tracking, error)
}

// A Tracking is one connection from Tracker.Track.
type Tracking interface {
	// Batch sends cmds on the connection, in one round trip, and sets each
	// one's Reply and Err as Driver.Batch does. A key of another node
	// answers MOVED: nothing follows it.
	Batch(ctx context.Context, cmds []Cmd)
	// Done is closed once the connection is lost (an invalidation may have
	// been missed) or closed.
	Done() <-chan struct{}
	// Close closes the connection. It is called once.
	Close()
}

// An Unsubscriber is a PubSub that can unsubscribe. padlock unsubscribes
// nothing while it waits (it closes a connection no waiter needs);
// padlock.Check unsubscribes what it subscribed, to probe that the Redis
// user may run UNSUBSCRIBE and SUNSUBSCRIBE. Without it, Check does not
// probe them.
type Unsubscriber interface {
	// Unsubscribe unsubscribes channels, with SUNSUBSCRIBE if sharded,
	// and returns once the server confirmed it (nil), answered an error
	// reply, or ctx ended. It is called while no Receive is in progress,
	// and reads what comes before the confirmation.
	Unsubscribe(ctx context.Context, sharded bool, channels ...string) error
}

// A ServerError is an error reply from the server, such as
// "NOSCRIPT No matching script. Please use EVAL." Adapters return error
// replies as a ServerError, or as an error that wraps one.
type ServerError string

func (e ServerError) Error() string { return string(e) }

// ErrNil is the error of a nil reply (Do's reply is nil).
var ErrNil = errors.New("driver: nil reply")

// ErrClosed is what a closed client's calls return, or wrap: padlock stops
// retrying then.
var ErrClosed = errors.New("driver: client closed")

// Error returns the server's error reply in err, and whether there is one.
func Error(err error) (ServerError, bool) {
	var e ServerError
	ok := errors.As(err, &e)
	return e, ok
}

// HasPrefix reports whether err is an error reply whose first word is
// prefix, as "NOSCRIPT", "MOVED", "ASK", "READONLY", "NOPERM", "LOADING".
func HasPrefix(err error, prefix string) bool {
	e, ok := Error(err)
	return ok && strings.HasPrefix(string(e), prefix) &&
		(len(e) == len(prefix) || e[len(prefix)] == ' ')
}

// IsTimeout reports whether err is a timeout: a net.Error whose Timeout
// reports true, or context.DeadlineExceeded.
func IsTimeout(err error) bool {
	var t interface{ Timeout() bool }
	return errors.Is(err, context.DeadlineExceeded) || errors.As(err, &t) && t.Timeout()
}
