package padlock

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// LockInfo describes a lock as Redis holds it at one moment, for operators
// and tools. It is a snapshot: the lock may change right after.
type LockInfo struct {
	Key  string
	Held bool // whether the key is held (by a lock, or by any holder of a semaphore or shared hold)
	// Kind is "lock", "leader" (a lock Campaign took), "semaphore" or
	// "shared" (shared holders hold it); "" when not held.
	Kind     string
	Token    string        // the holder's token, for a lock or leader ("" otherwise)
	Metadata string        // what the holder stored with WithMetadata (a leader's value), for a lock or leader
	TTL      time.Duration // time left; negative if held with no expiry, 0 if not held
	Fence    int64         // the key's fencing counter: the last fence handed out, 0 if none
	// HeldFor is how long the holder of a lock or leader has held it (its
	// acquire, by the server's clock: an Extend or a renewal does not
	// start it again, a new holder does), or the longest of the Holders'
	// of a semaphore or shared hold; 0 if not known (a value another
	// version of padlock wrote).
	HeldFor time.Duration
	MinHold time.Duration // how long the holder's WithMinHold still keeps a lock or leader held, 0 if not
	Holders []HolderInfo  // every holder of a semaphore or shared hold, soonest to expire first
	Limit   int           // a semaphore's number of places (WithLimit), 0 for other kinds
	Waiting int           // clients waiting in Redis for the key (see Acquire)
	// OldestWait is how long the client that waits longest has waited in
	// Redis's queue (by the server's clock), 0 when none waits.
	OldestWait time.Duration
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
		keys = append(keys, sideKey(key, "fence"), sideKey(key, "shared"), sideKey(key, "queue"), sideKey(key, "fences"),
			sideKey(key, "limit"), sideKey(key, "mins"))
	}
	return keys
}

// readInspect reads inspect.lua's reply for key.
func readInspect(key string, reply []any) (LockInfo, error) {
	info := LockInfo{Key: key}
	if len(reply) != 10 {
		return info, fmt.Errorf("padlock: inspect %q: unexpected reply %v", key, reply)
	}
	now, _ := reply[4].(int64)
	holders, _ := reply[3].([]any)
	info.Holders = parseHolders(holders, now)
	info.MinHold = max(msUntil(reply[9], now), 0)
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
		info.HeldFor = heldFor(v, int64(info.TTL/time.Millisecond))
		if strings.HasPrefix(info.Token, leaderToken) {
			info.Kind = "leader"
		}
	}
	if !info.Held {
		info.Kind, info.TTL, info.MinHold = "", 0, 0
	}
	if info.Kind == "semaphore" {
		info.Limit, _ = strconv.Atoi(fmt.Sprint(reply[7]))
	}
	for _, h := range info.Holders {
		info.HeldFor = max(info.HeldFor, h.HeldFor)
	}
	if s, ok := reply[2].(string); ok {
		info.Fence, _ = strconv.ParseInt(s, 10, 64)
	}
	if n, ok := reply[5].(int64); ok {
		info.Waiting = int(n)
	}
	if info.Waiting > 0 {
		info.OldestWait = max(-msUntil(reply[8], now), 0)
	}
	return info, nil
}

// msUntil is how long from now (server ms) until the moment v (server ms,
// a number as a string, possibly with a fraction; false for none) is:
// negative for a moment past, 0 for none.
func msUntil(v any, now int64) time.Duration {
	s, ok := v.(string)
	if !ok {
		return 0
	}
	at, err := strconv.ParseFloat(s, 64)
	if err != nil {
		return 0
	}
	return time.Duration(at-float64(now)) * time.Millisecond
}

// splitValue splits a lock's value into its token and metadata (see
// parseValue).
func splitValue(v string) (token, metadata string) {
	token, _, metadata = parseValue(v)
	return token, metadata
}

// parseValue splits a lock's value into its token, its span and its
// metadata. A value is the token (which has no space, see WithToken), a
// space, '~' and the span, and, with metadata, a space and the metadata.
// The span is how long after the hold was taken the key was last set to
// expire (ms), so the hold was taken span - PTTL ms ago; the scripts keep
// it so (see lua/hold.lua). A value without one (another version's, or
// not padlock's) has span -1, and its metadata is what follows the first
// space.
func parseValue(v string) (token string, span int64, metadata string) {
	token, rest, _ := strings.Cut(v, " ")
	if f, after, _ := strings.Cut(rest, " "); len(f) > 1 && f[0] == '~' {
		if n, err := strconv.ParseInt(f[1:], 10, 64); err == nil && n >= 0 && f[1] != '+' {
			return token, n, after
		}
	}
	return token, -1, rest
}

// heldFor is how long the hold whose value is v, with pttl ms left, has
// been held, or 0 if its value has no span.
func heldFor(v string, pttl int64) time.Duration {
	_, span, _ := parseValue(v)
	if span < 0 || pttl < 0 {
		return 0
	}
	return time.Duration(max(span-pttl, 0)) * time.Millisecond
}

// lockJSON is a LockInfo as JSON: the shape of 'padlock inspect -json',
// 'padlock list -json' and the web page's, durations in whole ms.
type lockJSON struct {
	Key          string       `json:"key"`
	Held         bool         `json:"held"`
	Kind         string       `json:"kind,omitempty"`
	Token        string       `json:"token,omitempty"`
	Metadata     string       `json:"metadata,omitempty"`
	TTLMs        int64        `json:"ttl_ms"`
	HeldMs       int64        `json:"held_ms"`
	Fence        int64        `json:"fence"`
	MinHoldMs    int64        `json:"min_hold_ms,omitempty"`
	Holders      []holderJSON `json:"holders,omitempty"`
	Limit        int          `json:"limit,omitempty"`
	Waiting      int          `json:"waiting"`
	OldestWaitMs int64        `json:"oldest_wait_ms"`
}

// holderJSON is a HolderInfo as JSON.
type holderJSON struct {
	Token     string `json:"token"`
	Metadata  string `json:"metadata,omitempty"`
	TTLMs     int64  `json:"ttl_ms"`
	HeldMs    int64  `json:"held_ms"`
	Fence     int64  `json:"fence,omitempty"`
	MinHoldMs int64  `json:"min_hold_ms,omitempty"`
}

// MarshalJSON writes i as one JSON object, in the shape 'padlock inspect
// -json' prints: "key", "held", "kind", "token", "metadata", "ttl_ms",
// "held_ms", "fence", "min_hold_ms", "holders" (each with "token",
// "metadata", "ttl_ms", "held_ms", "fence", "min_hold_ms"), "limit",
// "waiting" and "oldest_wait_ms", durations in whole milliseconds. It
// does not fail.
func (i LockInfo) MarshalJSON() ([]byte, error) {
	out := lockJSON{Key: i.Key, Held: i.Held, Kind: i.Kind, Token: i.Token, Metadata: i.Metadata,
		TTLMs: i.TTL.Milliseconds(), HeldMs: i.HeldFor.Milliseconds(), Fence: i.Fence, MinHoldMs: i.MinHold.Milliseconds(),
		Limit: i.Limit, Waiting: i.Waiting, OldestWaitMs: i.OldestWait.Milliseconds()}
	for _, h := range i.Holders {
		out.Holders = append(out.Holders, holderJSON{Token: h.Token, Metadata: h.Metadata, TTLMs: h.TTL.Milliseconds(),
			HeldMs: h.HeldFor.Milliseconds(), Fence: h.Fence, MinHoldMs: h.MinHold.Milliseconds()})
	}
	return json.Marshal(out)
}
