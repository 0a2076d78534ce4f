package padlock

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/redis/go-redis/v9"
)

// The clients a Client makes of Cluster nodes no slot map lists are one per
// address and at most maxUnlisted, closed by close; a connection past that,
// or after close, has a client of its own, closed with it. (Nothing here
// dials: a go-redis connection dials at its first command.)
func TestUnlistedNodesAreBounded(t *testing.T) {
	var u unlistedNodes
	opt := &redis.ClusterOptions{}
	addr := func(i int) string { return fmt.Sprintf("127.0.0.1:%d", 1+i) }
	kept := u.conn(opt, addr(0))
	again := u.conn(opt, addr(0))
	if kept.own != nil || again.own != nil || len(u.nodes) != 1 {
		t.Fatalf("one client kept for one address: own %v %v, %d kept", kept.own, again.own, len(u.nodes))
	}
	for i := 1; i < maxUnlisted; i++ {
		_ = u.conn(opt, addr(i)).Close()
	}
	past := u.conn(opt, addr(maxUnlisted))
	if past.own == nil || len(u.nodes) != maxUnlisted {
		t.Fatalf("past %d addresses a client of its own: own %v, %d kept", maxUnlisted, past.own, len(u.nodes))
	}
	_ = past.Close()
	if err := past.own.Ping(context.Background()).Err(); !errors.Is(err, redis.ErrClosed) {
		t.Errorf("a connection's own client is closed with it: %v", err)
	}
	_ = again.Close()
	u.close()
	if err := kept.Ping(context.Background()).Err(); !errors.Is(err, redis.ErrClosed) {
		t.Errorf("close closes the clients kept: %v", err)
	}
	if after := u.conn(opt, addr(0)); after.own == nil || u.nodes != nil {
		t.Errorf("after close a client of its own: own %v, %d kept", after.own, len(u.nodes))
	} else {
		_ = after.Close()
	}
}
