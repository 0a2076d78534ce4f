package padlock

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// LockInfo describes a lock as Redis holds it at one moment, for operators
// and tools. It is a snapshot: the lock may change right after.
type LockInfo struct {
	Key      string
	Held     bool          // whether the key is held (by a lock, or by any holder of a semaphore or shared hold)
	Kind     string        // "lock", "semaphore" or "shared" (shared holders hold it); "" when not held
	Token    string        // the holder's token, for a lock ("" otherwise)
	Metadata string        // what the holder stored with WithMetadata, for a lock
	TTL      time.Duration // time left; negative if held with no expiry, 0 if not held
	Fence    int64         // the key's fencing counter: the last fence handed out, 0 if none
	Holders  []HolderInfo  // every holder of a semaphore or shared hold, soonest to expire first
	Waiting  int           // clients waiting in Redis for the key (see Acquire)
}

// Inspect reads the lock key, its holders, its fencing counter and how
// many clients wait for it from Redis, in one round trip, without
// changing anything. It blocks until Redis answers or ctx is done. A key
// that is not held is not an error: Held is false.
//
// It returns ErrInvalid for bad input and a wrapped Redis error if Redis
// cannot answer. A key holding a value that padlock did not write is read
// as padlock's are: Token up to its first space, Metadata after it.
func (c *Client) Inspect(ctx context.Context, key string) (LockInfo, error) {
	if _, err := c.check(ctx, key, time.Millisecond); err != nil {
		return LockInfo{Key: key}, err
	}
	return inspectOn(ctx, c.d, key)
}

// inspectOn is Inspect on the server r.
func inspectOn(ctx context.Context, r doer, key string) (LockInfo, error) {
	reply, err := asSlice(inspectScript.Run(ctx, r, inspectKeys(key)))
	if err != nil {
		return LockInfo{Key: key}, opError("inspect", key, err)
	}
	return readInspect(key, reply)
}

// inspectKeys are inspect.lua's keys for key.
func inspectKeys(key string) []string {
	keys := []string{key}
	if queueable(key) {
		keys = append(keys, sideKey(key, "fence"), sideKey(key, "shared"), sideKey(key, "queue"), sideKey(key, "fences"))
	}
	return keys
}

// readInspect reads inspect.lua's reply for key.
func readInspect(key string, reply []any) (LockInfo, error) {
	info := LockInfo{Key: key}
	if len(reply) != 7 {
		return info, fmt.Errorf("padlock: inspect %q: unexpected reply %v", key, reply)
	}
	now, _ := reply[4].(int64)
	holders, _ := reply[3].([]any)
	info.Holders = parseHolders(holders, now)
	if ms, ok := reply[1].(int64); ok && ms != -2 {
		info.Held = true
		info.TTL = time.Duration(ms) * time.Millisecond
	}
	switch v, _ := reply[0].(string); {
	case reply[6] == "zset":
		info.Kind = "semaphore"
		info.Held = len(info.Holders) > 0
	case v == sharedMarker:
		info.Kind = "shared"
	case info.Held:
		info.Kind = "lock"
		info.Token, info.Metadata = splitValue(v)
	}
	if !info.Held {
		info.Kind, info.TTL = "", 0
	}
	if s, ok := reply[2].(string); ok {
		info.Fence, _ = strconv.ParseInt(s, 10, 64)
	}
	if n, ok := reply[5].(int64); ok {
		info.Waiting = int(n)
	}
	return info, nil
}

// splitValue splits a lock's value into its token and metadata: a token
// has no space (see WithToken), and the metadata follows the first one.
func splitValue(v string) (token, metadata string) {
	token, metadata, _ = strings.Cut(v, " ")
	return token, metadata
}
