package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"time"
)

// inspectCmd is 'padlock inspect'. It exits 0 whether or not the lock is
// held, 69 if Redis cannot answer.
func inspectCmd(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	v := newVerb("inspect", "padlock inspect [-redis URL] [-timeout D] [-json] KEY",
		"Shows who holds the lock KEY (every holder of a semaphore or shared hold), how long\n"+
			"they have left, its fencing counter, and how many clients wait.",
		"  0      done, whether or not KEY is held\n"+exitUsageHelp+exitRedisHelp, stdout, stderr)
	rf := addRedisFlags(v.fset)
	asJSON := v.fset.Bool("json", false, "print one JSON object")
	key, c, code, ok := v.keyAndConn(args, rf)
	if !ok {
		return code
	}
	locks, done, code := v.client(c)
	if locks == nil {
		return code
	}
	defer done()
	ictx, cancel := c.call(ctx)
	defer cancel()
	info, err := locks.Inspect(ictx, key)
	if err != nil {
		return v.fail("read the lock "+key, c, err)
	}

	if *asJSON {
		if err := json.NewEncoder(stdout).Encode(info); err != nil {
			fmt.Fprintf(stderr, "padlock inspect: %v\n", err)
			return 1
		}
		return 0
	}
	if !info.Held {
		fmt.Fprintf(stdout, "%s: not held (fence counter %d)\n", info.Key, info.Fence)
		return 0
	}
	if info.Kind == "semaphore" || info.Kind == "shared" {
		fmt.Fprintf(stdout, "%s: %s, %d holders\n", info.Key, map[string]string{"semaphore": "semaphore", "shared": "shared hold"}[info.Kind], len(info.Holders))
		for _, h := range info.Holders {
			fmt.Fprintf(stdout, "  holder:   %s\n    token:  %s\n    ttl:    %s\n", orNone(h.Metadata), h.Token, ttlString(h.TTL))
			if h.Fence > 0 {
				fmt.Fprintf(stdout, "    fence:  %d\n", h.Fence)
			}
		}
		fmt.Fprintf(stdout, "  fence:    %d\n  waiting:  %d\n", info.Fence, info.Waiting)
		return 0
	}
	what := "held"
	if info.Kind == "leader" {
		what = "led"
	}
	fmt.Fprintf(stdout, "%s: %s\n  holder:   %s\n  token:    %s\n  ttl:      %s\n  fence:    %d\n  waiting:  %d\n",
		info.Key, what, orNone(info.Metadata), info.Token, ttlString(info.TTL), info.Fence, info.Waiting)
	return 0
}

// ttlString is a holder's time left, rounded to the millisecond; "no
// expiry" for a key that never expires (one that padlock did not write).
func ttlString(ttl time.Duration) string {
	if ttl < 0 {
		return "no expiry"
	}
	return ttl.Round(time.Millisecond).String()
}

// left is how long a holder has left ("1m0s left"), or "no expiry".
func left(ttl time.Duration) string {
	if ttl < 0 {
		return "no expiry"
	}
	return ttlString(ttl) + " left"
}

// orNone is a holder's metadata, or says there is none.
func orNone(s string) string {
	if s == "" {
		return "(no metadata)"
	}
	return s
}
