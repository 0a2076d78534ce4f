package padlockrueidis

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/padlock-go/padlock/driver"
	"github.com/redis/rueidis"
)

// rueidisDriver is a driver.Driver on a rueidis.Client.
type rueidisDriver struct {
	c      rueidis.Client
	kind   driver.Kind
	gate   *gate         // whether the client sends padlock's commands to a primary (see probe.go)
	proto  *atomic.Int32 // the RESP version of the client's connections, once HELLO told (shared with Nodes' Drivers)
	shares *shares       // the connections its pub/sub and tracking share (shared with Nodes' Drivers)
}

// Driver returns a driver.Driver that sends padlock's commands through c,
// for padlock.NewDriver and for the conformance suite (driver/drivertest).
// New and NewRedlock are what most programs call.
//
// Driver does not contact Redis. It fails, matching padlock.ErrInvalid,
// for a nil c, and, matching padlock.ErrUnsupported, for a client whose
// Mode is none of standalone, cluster and sentinel. A client that sends
// padlock's commands to a replica (ReplicaOnly, or a SendToReplicas that
// takes them) is found out by the first call that reaches Redis (see
// New): that call, and every later one, fails with padlock.ErrInvalid.
func Driver(c rueidis.Client) (driver.Driver, error) {
	d, err := newDriver(c)
	if err != nil {
		return nil, err
	}
	return d, nil
}

func newDriver(c rueidis.Client) (*rueidisDriver, error) {
	if isNil(c) {
		return nil, errNilClient
	}
	kind, err := kindOf(c.Mode())
	if err != nil {
		return nil, err
	}
	return &rueidisDriver{c: c, kind: kind, gate: &gate{shared: &verdict{}}, proto: new(atomic.Int32), shares: &shares{m: map[string][]*conn{}}}, nil
}

func kindOf(m rueidis.ClientMode) (driver.Kind, error) {
	switch m {
	case rueidis.ClientModeStandalone:
		return driver.Single, nil
	case rueidis.ClientModeCluster:
		return driver.Cluster, nil
	case rueidis.ClientModeSentinel:
		return driver.Sentinel, nil
	}
	return 0, fmt.Errorf("%w: padlockrueidis: a rueidis client in mode %q: padlock runs on a standalone, cluster or sentinel client", errUnsupported, m)
}

// Kind reports the kind of deployment, from the client's Mode.
func (d *rueidisDriver) Kind() driver.Kind { return d.kind }

// Protocol reports the RESP version of the client's connections, as the
// reply to the HELLO of New's probe showed it (a map in RESP3): 2 with
// ClientOption.AlwaysRESP2, else 3. It makes the Driver a
// driver.Protocoler, for padlock.Check's HELLO.
func (d *rueidisDriver) Protocol() int {
	if v := d.proto.Load(); v != 0 {
		return int(v)
	}
	return 3 // no HELLO answered (Redis 6.0 wants a version): rueidis's default
}

// Do sends args to the node that owns key and returns its reply as a
// plain value.
func (d *rueidisDriver) Do(ctx context.Context, key string, args ...any) (any, error) {
	if err := d.gate.pass(ctx, d); err != nil {
		return nil, err
	}
	cmd, err := d.build(d.c, key, args)
	if err != nil {
		return nil, err
	}
	return d.reply(d.c.Do(ctx, cmd))
}

// Batch sends cmds with one DoMulti: rueidis groups them by node, one
// pipeline per node, sent at once.
func (d *rueidisDriver) Batch(ctx context.Context, cmds []driver.Cmd) {
	if len(cmds) == 0 {
		return
	}
	if err := d.gate.pass(ctx, d); err != nil {
		failAll(cmds, err)
		return
	}
	multi := make([]rueidis.Completed, 0, len(cmds))
	index := make([]int, 0, len(cmds)) // multi[j] is cmds[index[j]]
	for i := range cmds {
		cmd, err := d.build(d.c, cmds[i].Key, cmds[i].Args)
		if err != nil {
			cmds[i].Reply, cmds[i].Err = nil, err
			continue
		}
		multi = append(multi, cmd)
		index = append(index, i)
	}
	if len(multi) == 0 {
		return
	}
	for j, r := range d.c.DoMulti(ctx, multi...) {
		c := &cmds[index[j]]
		c.Reply, c.Err = d.reply(r)
	}
}

func failAll(cmds []driver.Cmd, err error) {
	for i := range cmds {
		cmds[i].Reply, cmds[i].Err = nil, err
	}
}

// build makes args a command of b's client, routed to key's slot: on a
// Cluster a command without a key goes to the master of slot 0 (rueidis
// would send it to any node, a replica too).
func (d *rueidisDriver) build(b rueidis.CommandClient, key string, args []any) (rueidis.Completed, error) {
	if len(args) == 0 {
		return rueidis.Completed{}, fmt.Errorf("%w: padlockrueidis: a command without a name", errInvalid)
	}
	name, err := arg(args[0])
	if err != nil {
		return rueidis.Completed{}, err
	}
	if name == "" || strings.HasSuffix(strings.ToUpper(name), "SUBSCRIBE") {
		// rueidis panics on these: padlock subscribes through PubSub.
		return rueidis.Completed{}, fmt.Errorf("%w: padlockrueidis: command %q through Do", errInvalid, name)
	}
	cmd := b.B().Arbitrary(name)
	for _, a := range args[1:] {
		s, err := arg(a)
		if err != nil {
			return rueidis.Completed{}, err
		}
		cmd = cmd.Args(s)
	}
	built := cmd.Build()
	if key != "" || d.kind == driver.Cluster {
		built = built.SetSlot(key)
	}
	return built, nil
}

// arg is one of the seam's argument types as rueidis takes it.
func arg(a any) (string, error) {
	switch v := a.(type) {
	case string:
		return v, nil
	case []byte:
		return string(v), nil
	case int:
		return strconv.Itoa(v), nil
	case int64:
		return strconv.FormatInt(v, 10), nil
	}
	return "", fmt.Errorf("%w: padlockrueidis: an argument of type %T", errInvalid, a)
}

// reply is r as the seam has it: a plain value, or an error classified.
func (d *rueidisDriver) reply(r rueidis.RedisResult) (any, error) {
	m, err := r.ToMessage()
	if err != nil {
		return nil, d.classify(err)
	}
	v, err := m.ToAny()
	if err != nil {
		return nil, d.classify(err)
	}
	return plain(v), nil
}

// plain replaces, inside arrays and maps, the error replies rueidis keeps
// as *rueidis.RedisError with driver.ServerError.
func plain(v any) any {
	switch x := v.(type) {
	case []any:
		for i := range x {
			x[i] = plain(x[i])
		}
	case map[string]any:
		for k := range x {
			x[k] = plain(x[k])
		}
	case *rueidis.RedisError:
		return driver.ServerError(x.Error())
	}
	return v
}

// classify maps rueidis's errors to the seam's: a nil reply is
// driver.ErrNil, an error reply a driver.ServerError, and ErrClosing of a
// client that is closed wraps driver.ErrClosed.
func (d *rueidisDriver) classify(err error) error {
	if rueidis.IsRedisNil(err) {
		return driver.ErrNil
	}
	if re, ok := rueidis.IsRedisErr(err); ok {
		return driver.ServerError(re.Error())
	}
	if errors.Is(err, rueidis.ErrClosing) && d.closed() {
		return fmt.Errorf("%w: %w", driver.ErrClosed, err)
	}
	return err
}

// closed reports whether d's client is closed. rueidis answers ErrClosing
// also for a connection it closed itself (a node a Cluster's topology no
// longer lists, a Sentinel's old primary) while the client goes on: a
// PING tells them apart, without a round trip when the client is closed.
func (d *rueidisDriver) closed() bool {
	ctx, cancel := context.WithTimeout(context.Background(), closedProbeTimeout)
	defer cancel()
	ping := d.c.B().Ping().Build()
	if d.kind == driver.Cluster {
		ping = ping.SetSlot("")
	}
	return errors.Is(d.c.Do(ctx, ping).Error(), rueidis.ErrClosing)
}

// Nodes returns a Driver of each primary: rueidis's Nodes, less those that
// answer ROLE as a replica.
func (d *rueidisDriver) Nodes(ctx context.Context) ([]driver.Node, error) {
	if err := d.gate.pass(ctx, d); err != nil {
		return nil, err
	}
	all := d.c.Nodes()
	nodes := make([]driver.Node, 0, len(all))
	if len(all) == 1 && d.kind != driver.Cluster {
		for addr, c := range all {
			nodes = append(nodes, driver.Node{Addr: addr, Driver: d.nodeDriver(c)})
		}
		return nodes, nil
	}
	roles := make(map[string]error, len(all))
	var mu sync.Mutex
	var wg sync.WaitGroup
	for addr, c := range all {
		wg.Go(func() {
			err := d.primary(ctx, c)
			mu.Lock()
			roles[addr] = err
			mu.Unlock()
		})
	}
	wg.Wait()
	for addr, err := range roles {
		switch {
		case err == nil:
			nodes = append(nodes, driver.Node{Addr: addr, Driver: d.nodeDriver(all[addr])})
		case !errors.Is(err, errReplica):
			return nil, fmt.Errorf("padlockrueidis: ROLE of %s: %w", addr, err)
		}
	}
	return nodes, nil
}

// nodeDriver is a Driver of c, one node of d's client: a primary, so no
// probe.
func (d *rueidisDriver) nodeDriver(c rueidis.Client) *rueidisDriver {
	g := &gate{shared: &verdict{}}
	g.decided.Store(true)
	return &rueidisDriver{c: c, kind: driver.Single, gate: g, proto: d.proto, shares: d.shares}
}
