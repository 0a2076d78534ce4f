package padlock

import (
	"context"
	"errors"
	"fmt"
	"iter"
	"path"
	"strings"

	"github.com/padlock-go/padlock/driver"
)

// scanCount is the COUNT of Locks' SCANs: about how many keys each page
// of a node's keyspace has, and so how many keys one script reads.
const scanCount = 1000

// Locks returns an iterator over every lock held in Redis whose key
// matches the glob match ("*" for all, "lock:*", "job:[0-9]*"), each once,
// described as Inspect describes it: on one server, on every master of a
// Cluster, and, for a Redlock Client, on every node (a key is reported
// once, held by the token a quorum of the nodes hold it with, with the
// least ttl among them; a key no token holds on a quorum is left out).
//
// It reads each node's keys with SCAN, a page of about 1,000 keys at a
// time, and each page's locks in one more round trip per node: one script
// (inspect.lua) on the page's keys, during which Redis answers no other
// client. It changes nothing. The side keys of a lock (its fencing
// counter, queue, waiters' tickets, minimums...) are not reported on their
// own: what they say is in their lock's LockInfo. The keys of one
// multi-key lock are reported one by one, with the same Token. A key is
// known to be a lock padlock wrote by its value (a token and the hold's
// span, see LockInfo.HeldFor; the shared holds' marker) or, for a
// semaphore, by the limit stored beside it: a value another version of
// padlock or another library wrote is not listed.
// Every value of a LockInfo comes from one moment (one script), though
// different pages are read at different moments: a lock taken while the
// listing runs may or may not be in it, and one released is reported as
// it was or not at all.
//
// The glob is Redis's (SCAN's MATCH, where * also matches '/'); one that
// Go's path.Match rejects (like "ops:[") is ErrInvalid. The iterator
// yields one error and stops: ErrInvalid, ErrClosed once Close was called,
// or a wrapped Redis error (ctx's, if it ended). Keys the Client's Redis
// user may not read (an ACL user limited to ~lock:*, listing "*") are
// skipped; a user that may not run SCAN gets Redis's refusal (the README's
// least ACL rule has +scan; Check says when it is missing). It blocks for
// the whole listing, one node after another; stop early by breaking out
// of the loop.
func (c *Client) Locks(ctx context.Context, match string) iter.Seq2[LockInfo, error] {
	return func(yield func(LockInfo, error) bool) {
		if err := c.checkLocks(ctx, match); err != nil {
			yield(LockInfo{}, err)
			return
		}
		if c.nodes != nil {
			c.redlockLocks(ctx, match, yield)
			return
		}
		nodes, err := c.d.Nodes(ctx)
		if err != nil {
			yield(LockInfo{}, fmt.Errorf("padlock: list the locks %q: the nodes: %w", match, reword(err)))
			return
		}
		for _, n := range nodes {
			err := scanNode(ctx, n.Driver, match, func(keys []string) bool {
				for _, info := range inspectAll(ctx, n.Driver, keys) {
					if info.err != nil {
						return yield(LockInfo{}, info.err)
					}
					if info.lock() && !yield(info.LockInfo, nil) {
						return false
					}
				}
				return true
			})
			if err != nil {
				if err != errStopped {
					yield(LockInfo{}, fmt.Errorf("padlock: list the locks %q on %s: %w", match, n.Addr, err))
				}
				return
			}
		}
	}
}

// checkLocks checks Locks' arguments.
func (c *Client) checkLocks(ctx context.Context, match string) error {
	switch {
	case c == nil:
		return errNilClient
	case c.refused != nil:
		return c.refused
	case ctx == nil:
		return fmt.Errorf("%w: nil context", ErrInvalid)
	case match == "":
		return fmt.Errorf("%w: an empty glob matches no key (\"*\" matches every one)", ErrInvalid)
	}
	if _, err := path.Match(match, ""); err != nil {
		return fmt.Errorf("%w: the glob %q: %w", ErrInvalid, match, err)
	}
	return c.open("list the locks", match)
}

// errStopped is scanNode's error when its page func stopped it.
var errStopped = errors.New("stopped")

// scanNode runs SCAN on d, one node, with match, and calls page with the
// keys of each page that are not side keys, until the cursor comes back
// to 0, page returns false (errStopped), or an error.
func scanNode(ctx context.Context, d driver.Driver, match string, page func(keys []string) bool) error {
	cursor := "0"
	for {
		reply, err := asSlice(d.Do(ctx, "", "scan", cursor, "match", match, "count", scanCount))
		if err != nil {
			return reword(err)
		}
		if len(reply) != 2 {
			return fmt.Errorf("padlock: unexpected SCAN reply %v", reply)
		}
		cursor, _ = reply[0].(string)
		names, _ := reply[1].([]any)
		keys := make([]string, 0, len(names))
		for _, n := range names {
			if k, ok := n.(string); ok && !isSideKey(k) {
				keys = append(keys, k)
			}
		}
		if len(keys) > 0 && !page(keys) {
			return errStopped
		}
		if cursor == "0" || cursor == "" {
			return nil
		}
	}
}

// A listed is one key's LockInfo as Locks read it, or the error that
// stops the listing.
type listed struct {
	LockInfo
	err   error
	found bool // the key could be read (not refused, not moved away)
}

// lock reports whether l is a lock padlock wrote that is held.
func (l listed) lock() bool { return l.found && l.Held }

// inspectAll inspects keys on d, one node, with one script (inspect.lua's
// 'page' mode), which reads each key atomically, and the page as a whole
// too. A key whose read is refused (ACL) or moved away (a Cluster slot
// migrating) is not found; another error is returned in the result of its
// key, and ends the list there.
func inspectAll(ctx context.Context, d driver.Driver, keys []string) []listed {
	args := make([]any, 0, 1+2*len(keys))
	args = append(args, "page")
	for _, k := range keys {
		prefix := ""
		if queueable(k) {
			prefix = sideKey(k, "")
		}
		args = append(args, k, prefix)
	}
	reply, err := asSlice(inspectScript.Run(ctx, d, nil, args...))
	if err == nil && len(reply) != len(keys) {
		err = fmt.Errorf("padlock: unexpected reply of %d results for %d keys", len(reply), len(keys))
	}
	if err != nil {
		return []listed{{err: fmt.Errorf("padlock: inspect %d keys: %w", len(keys), reword(err))}}
	}
	out := make([]listed, 0, len(keys))
	for i, r := range reply {
		switch r := r.(type) {
		case []any:
			info, err := readInspect(keys[i], r)
			if err != nil {
				return append(out, listed{err: err})
			}
			out = append(out, listed{LockInfo: info, found: true})
		case string: // the error the key's read raised
			if err := errors.New(r); !isPermissionError(r) && !moving(err) {
				return append(out, listed{err: opError("inspect", keys[i], err)})
			}
			out = append(out, listed{})
		default: // nil or false: not a lock padlock wrote
			out = append(out, listed{})
		}
	}
	return out
}

// redlockLocks is Locks on a Redlock Client: the keys of every node, each
// inspected on every node and reported as a quorum holds it.
func (c *Client) redlockLocks(ctx context.Context, match string, yield func(LockInfo, error) bool) {
	var keys []string
	seen := map[string]bool{}
	for i, d := range c.nodes {
		err := scanNode(ctx, d, match, func(page []string) bool {
			for _, k := range page {
				if !seen[k] {
					seen[k] = true
					keys = append(keys, k)
				}
			}
			return true
		})
		if err != nil {
			yield(LockInfo{}, fmt.Errorf("padlock: list the locks %q on node %d: %w", match, i, err))
			return
		}
	}
	for len(keys) > 0 {
		page := keys[:min(len(keys), scanCount)]
		keys = keys[len(page):]
		each := make([][]listed, len(c.nodes))
		for i, d := range c.nodes {
			each[i] = inspectAll(ctx, d, page)
		}
		for j := range page {
			var infos []listed
			for i := range c.nodes {
				if j < len(each[i]) {
					if err := each[i][j].err; err != nil {
						yield(LockInfo{}, err)
						return
					}
					infos = append(infos, each[i][j])
				}
			}
			if info, ok := c.quorumInfo(infos); ok && !yield(info, nil) {
				return
			}
		}
	}
}

// quorumInfo is the lock that infos, one key's on each node that answered,
// show held by one token on a quorum of the nodes: with the least ttl and
// minimum among them, and the most of the rest.
func (c *Client) quorumInfo(infos []listed) (LockInfo, bool) {
	byToken := map[string][]LockInfo{}
	for _, l := range infos {
		if l.lock() && l.Token != "" {
			byToken[l.Token] = append(byToken[l.Token], l.LockInfo)
		}
	}
	for _, held := range byToken {
		if len(held) < c.quorum() {
			continue
		}
		info := held[0]
		for _, h := range held[1:] {
			info.TTL, info.MinHold = min(info.TTL, h.TTL), min(info.MinHold, h.MinHold)
			info.Fence, info.Waiting, info.OldestWait = max(info.Fence, h.Fence), max(info.Waiting, h.Waiting), max(info.OldestWait, h.OldestWait)
		}
		return info, true
	}
	return LockInfo{}, false
}

// isSideKey reports whether k is named as a side key of a lock (see
// sideKey): its fencing counter, queue, a waiter's ticket, and the rest
// of sideNames. A key with a hash tag that ends in ":fence" (say) is taken
// for the side key of the key before it, if that has the hash tag.
func isSideKey(k string) bool {
	if i := strings.Index(k, ":{"); i >= 0 {
		base := k[:i]
		if rest, ok := strings.CutPrefix(k[i:], ":{"+base+"}:"); ok && !strings.ContainsAny(base, "{}") {
			return isSideName(rest)
		}
	}
	for i := strings.IndexByte(k, ':'); i >= 0; {
		if hasHashTag(k[:i]) && isSideName(k[i+1:]) {
			return true
		}
		j := strings.IndexByte(k[i+1:], ':')
		if j < 0 {
			break
		}
		i += 1 + j
	}
	return false
}

// isSideName reports whether name is the name of a side key (see
// sideKey): one of sideNames, a ticket's, or one of Check's.
func isSideName(name string) bool {
	if strings.HasPrefix(name, "t:") {
		return true
	}
	switch name {
	case "check", "check-z", "check-h":
		return true
	}
	for _, n := range sideNames {
		if name == n {
			return true
		}
	}
	return false
}

// moving reports whether err says that a key is not on the node asked (a
// Cluster slot that moved, or is moving, away).
func moving(err error) bool {
	for _, p := range [...]string{"MOVED", "ASK", "TRYAGAIN"} {
		if driver.HasPrefix(err, p) {
			return true
		}
	}
	return strings.Contains(err.Error(), "non local key")
}
