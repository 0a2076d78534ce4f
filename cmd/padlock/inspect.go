package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/padlock-go/padlock"
)

// inspectJSON is the -json output of 'padlock inspect'.
type inspectJSON struct {
	Key      string       `json:"key"`
	Held     bool         `json:"held"`
	Kind     string       `json:"kind,omitempty"`
	Token    string       `json:"token,omitempty"`
	Metadata string       `json:"metadata,omitempty"`
	TTLMs    int64        `json:"ttl_ms"`
	Fence    int64        `json:"fence"`
	Holders  []holderJSON `json:"holders,omitempty"`
	Waiting  int          `json:"waiting"`
}

// holderJSON is one holder of a semaphore or shared hold.
type holderJSON struct {
	Token    string `json:"token"`
	Metadata string `json:"metadata,omitempty"`
	TTLMs    int64  `json:"ttl_ms"`
	Fence    int64  `json:"fence,omitempty"`
}

// inspectCmd is 'padlock inspect'. It exits 0 whether or not the lock is
// held, 69 if Redis cannot answer.
func inspectCmd(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fset := newFlags("inspect", "padlock inspect [-redis URL] [-json] KEY",
		"Shows who holds the lock KEY (every holder of a semaphore or shared hold), how long they have left, its fencing counter, and how many clients wait.", stderr)
	redisURL := redisFlag(fset)
	asJSON := fset.Bool("json", false, "print one JSON object")
	if code, ok := parseFlags(fset, args); !ok {
		return code
	}
	if fset.NArg() != 1 {
		fset.Usage()
		return exitUsage
	}
	locks, done, code := client(*redisURL, "inspect", stderr)
	if locks == nil {
		return code
	}
	defer done()

	info, err := locks.Inspect(ctx, fset.Arg(0))
	switch {
	case errors.Is(err, padlock.ErrInvalid):
		fmt.Fprintf(stderr, "padlock inspect: %v\n", err)
		return exitUsage
	case err != nil:
		fmt.Fprintf(stderr, "padlock: cannot inspect %s: %v\n", fset.Arg(0), err)
		return exitUnavailable
	}

	if *asJSON {
		out := inspectJSON{Key: info.Key, Held: info.Held, Kind: info.Kind, Token: info.Token, Metadata: info.Metadata,
			TTLMs: info.TTL.Milliseconds(), Fence: info.Fence, Waiting: info.Waiting}
		for _, h := range info.Holders {
			out.Holders = append(out.Holders, holderJSON{Token: h.Token, Metadata: h.Metadata, TTLMs: h.TTL.Milliseconds(), Fence: h.Fence})
		}
		if err := json.NewEncoder(stdout).Encode(out); err != nil {
			fmt.Fprintf(stderr, "padlock inspect: %v\n", err)
			return 1
		}
		return 0
	}
	if !info.Held {
		fmt.Fprintf(stdout, "%s: not held (fence counter %d)\n", info.Key, info.Fence)
		return 0
	}
	ttl := "no expiry"
	if info.TTL >= 0 {
		ttl = info.TTL.Round(time.Millisecond).String()
	}
	if info.Kind != "lock" {
		fmt.Fprintf(stdout, "%s: %s, %d holders\n", info.Key, map[string]string{"semaphore": "semaphore", "shared": "shared hold"}[info.Kind], len(info.Holders))
		for _, h := range info.Holders {
			fmt.Fprintf(stdout, "  holder:   %s\n    token:  %s\n    ttl:    %s\n", orNone(h.Metadata), h.Token, h.TTL.Round(time.Millisecond))
			if h.Fence > 0 {
				fmt.Fprintf(stdout, "    fence:  %d\n", h.Fence)
			}
		}
		fmt.Fprintf(stdout, "  fence:    %d\n  waiting:  %d\n", info.Fence, info.Waiting)
		return 0
	}
	fmt.Fprintf(stdout, "%s: held\n  holder:   %s\n  token:    %s\n  ttl:      %s\n  fence:    %d\n  waiting:  %d\n",
		info.Key, orNone(info.Metadata), info.Token, ttl, info.Fence, info.Waiting)
	return 0
}

func orNone(s string) string {
	if s == "" {
		return "(no metadata)"
	}
	return s
}
