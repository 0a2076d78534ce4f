package padlockrueidis

import (
	"context"
	"errors"
	"fmt"
	"net"
	"reflect"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/padlock-go/padlock"
	"github.com/padlock-go/padlock/driver"
	"github.com/redis/rueidis"
)

// probeTimeout bounds New's look at where the client sends padlock's
// commands; closedProbeTimeout the PING that tells a closed client from a
// connection rueidis closed itself.
const (
	probeTimeout       = 5 * time.Second
	closedProbeTimeout = time.Second
)

var (
	errInvalid     = padlock.ErrInvalid
	errUnsupported = padlock.ErrUnsupported
	errNilClient   = fmt.Errorf("%w: padlockrueidis was given a nil rueidis.Client", errInvalid)

	// errReplica is a node that answers as a replica.
	errReplica = errors.New("padlockrueidis: a replica")

	// errToReplica is what every call returns on a client that sends
	// padlock's commands to a replica among its nodes (see toReplica).
	errToReplica = fmt.Errorf("%w: padlockrueidis: the rueidis client sends padlock's commands to a replica "+
		"(ClientOption.ReplicaOnly, or a SendToReplicas that returns true for them: padlock's commands are "+
		"writes, IsReadOnly false): a replica cannot take a lock, and its WAIT is refused; "+
		"send them to the primary (SendToReplicas: func(cmd rueidis.Completed) bool { return cmd.IsReadOnly() } is fine)", errInvalid)
)

// A gate lets a Driver's calls through once the client is known to send
// them to a primary. A client rueidis built does not tell its options, so
// the gate asks the node that padlock's commands go to (HELLO, or ROLE
// where HELLO has no role), through the client, as a command built as
// padlock builds its own. On a Cluster that is the master of slot 0.
//
// A node that cannot be reached leaves the question open: the next call
// asks again. A node that answers neither (an ACL that allows neither
// command, on Redis 6.0) is taken for a primary.
type gate struct {
	decided atomic.Bool
	mu      sync.Mutex // held while asking
	shared  *verdict   // the refusal, shared by the nodes of one Redlock
}

// A verdict is the refusal of a group of Drivers: one Client's, or one
// Redlock's, whose nodes all refuse when any does.
type verdict struct {
	err atomic.Pointer[error]
}

func (v *verdict) refuse(err error) { v.err.CompareAndSwap(nil, &err) }

func (v *verdict) refused() error {
	if p := v.err.Load(); p != nil {
		return *p
	}
	return nil
}

// pass returns nil once d's client is known to send to a primary, the
// refusal if it sends to a replica, or the error that kept it from asking.
func (g *gate) pass(ctx context.Context, d *rueidisDriver) error {
	if err := g.shared.refused(); err != nil {
		return err
	}
	if g.decided.Load() {
		return nil
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if err := g.shared.refused(); err != nil || g.decided.Load() {
		return err
	}
	cmd := func(args ...string) rueidis.Completed {
		c := d.c.B().Arbitrary(args...).Build()
		if d.kind == driver.Cluster {
			c = c.SetSlot("")
		}
		return c
	}
	err := role(ctx, d, cmd)
	switch {
	case errors.Is(err, errReplica):
		err = d.toReplica(ctx, cmd)
		g.shared.refuse(err)
		return err
	case errors.Is(err, errInvalid): // a Sentinel
		g.shared.refuse(err)
		return err
	case err != nil:
		return fmt.Errorf("padlockrueidis: where the client sends commands: %w", err)
	}
	g.decided.Store(true)
	return nil
}

// toReplica is the refusal of d, whose client sends padlock's commands,
// made by cmd, to a replica: a client of one address, a replica's, is
// told to point at the primary (named, if the replica's ROLE says it);
// a client with replicas among its nodes sends the commands there by its
// options (errToReplica).
func (d *rueidisDriver) toReplica(ctx context.Context, cmd func(args ...string) rueidis.Completed) error {
	nodes := d.c.Nodes()
	if d.kind != driver.Single || len(nodes) != 1 {
		return errToReplica
	}
	addr, primary := "", "the primary"
	for a := range nodes {
		addr = a
	}
	if r, err := d.reply(d.c.Do(ctx, cmd("ROLE"))); err == nil {
		if a, ok := r.([]any); ok && len(a) >= 3 {
			primary = fmt.Sprintf("the primary, %s", net.JoinHostPort(fmt.Sprint(a[1]), fmt.Sprint(a[2])))
		}
	}
	return fmt.Errorf("%w: padlockrueidis: the client's address, %s, is a read-only replica, which cannot take a lock: "+
		"point the client at %s (ClientOption.InitAddress)", errInvalid, addr, primary)
}

// primary reports whether c is a primary: nil if it is, errReplica if it
// is a replica, or the error that kept it from knowing.
func (d *rueidisDriver) primary(ctx context.Context, c rueidis.Client) error {
	return role(ctx, d.nodeDriver(c), func(args ...string) rueidis.Completed { return c.B().Arbitrary(args...).Build() })
}

// role asks, with commands made by cmd, whether the node d sends them to
// is a primary: nil if so (or if it answers neither HELLO nor ROLE), or
// errReplica, or the error of a node that did not answer.
func role(ctx context.Context, d *rueidisDriver, cmd func(args ...string) rueidis.Completed) error {
	hello, err := d.reply(d.c.Do(ctx, cmd("HELLO")))
	if r, ok := helloRole(hello); err == nil && ok {
		if _, isMap := hello.(map[string]any); isMap {
			d.proto.Store(3)
		} else {
			d.proto.Store(2)
		}
		return isReplica(r)
	}
	if _, reply := driver.Error(err); err != nil && !reply {
		return err
	}
	roleReply, err := d.reply(d.c.Do(ctx, cmd("ROLE")))
	if _, reply := driver.Error(err); err != nil && !reply {
		return err
	}
	if a, ok := roleReply.([]any); ok && len(a) > 0 {
		if r, ok := a[0].(string); ok {
			return isReplica(r)
		}
	}
	return nil // neither HELLO (Redis 6.0 wants a version) nor ROLE (an ACL): taken for a primary
}

func isReplica(role string) error {
	switch strings.ToLower(role) {
	case "master", "primary":
		return nil
	case "sentinel":
		return fmt.Errorf("%w: padlockrueidis: the rueidis client talks to a Sentinel, not to a data node: "+
			"set ClientOption.Sentinel.MasterSet for a client of the primary it watches", errInvalid)
	}
	return errReplica
}

// helloRole is the "role" of HELLO's reply: a map in RESP3, a flat list of
// names and values in RESP2.
func helloRole(v any) (string, bool) {
	switch x := v.(type) {
	case map[string]any:
		r, ok := x["role"].(string)
		return r, ok
	case []any:
		for i := 0; i+1 < len(x); i += 2 {
			if k, _ := x[i].(string); k == "role" {
				r, ok := x[i+1].(string)
				return r, ok
			}
		}
	}
	return "", false
}

// isNil reports whether c is nil or a nil pointer in an interface.
func isNil(c rueidis.Client) bool {
	if c == nil {
		return true
	}
	v := reflect.ValueOf(c)
	return v.Kind() == reflect.Pointer && v.IsNil()
}
