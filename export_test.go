package padlock

import (
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/padlock-go/padlock/driver"
)

// ReleaseScriptSHA is the digest of the release script as padlock sends it
// (with lua/token.lua and lua/grant.lua in it), for tests that watch for
// it: "" until padlock learned it from a server.
func ReleaseScriptSHA() string {
	sha, _ := releaseScript.digest().(string)
	return sha
}

// ACLCommands are the commands Check probes.
func ACLCommands() []string { return aclCommands }

// SetPubSubQuiet sets how long c's pub/sub connections may be silent
// before they are checked (see pubsubQuiet). Call it before c waits.
func SetPubSubQuiet(c *Client, d time.Duration) { c.notify.quiet = d }

// GoRedisDriver is the driver.Driver that New wraps rdb in, for tests that
// run padlock through NewDriver (the conformance suite on go-redis).
func GoRedisDriver(rdb redis.UniversalClient) driver.Driver { return newGoRedis(rdb) }

// PipelineDepth is how many scripts go to a node at once before the
// others wait to go together (see pipelineDepth).
const PipelineDepth = pipelineDepth

// PipelineWaiting is how many scripts wait in c's pipeline to go in a
// batch (on a driver without a Router).
func PipelineWaiting(c *Client) int {
	ln := &c.pipe.lane
	ln.mu.Lock()
	defer ln.mu.Unlock()
	return len(ln.next)
}

// HoldsListed is how many Locks c's list of holds keeps (see holdList),
// held or not yet dropped.
func HoldsListed(c *Client) int {
	n := 0
	c.holds.each(func(*Lock) { n++ })
	return n
}
