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
	Key      string `json:"key"`
	Held     bool   `json:"held"`
	Token    string `json:"token,omitempty"`
	Metadata string `json:"metadata,omitempty"`
	TTLMs    int64  `json:"ttl_ms"`
	Fence    int64  `json:"fence"`
}

// inspectCmd is 'padlock inspect'. It exits 0 whether or not the lock is
// held, 69 if Redis cannot answer.
func inspectCmd(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fset := newFlags("inspect", "padlock inspect [-redis URL] [-json] KEY",
		"Shows who holds the lock KEY, how long it has left, and its fencing counter.", stderr)
	redisURL := redisFlag(fset)
	asJSON := fset.Bool("json", false, "print one JSON object")
	if code, ok := parseFlags(fset, args); !ok {
		return code
	}
	if fset.NArg() != 1 {
		fset.Usage()
		return exitUsage
	}
	rdb, err := dial(*redisURL)
	if err != nil {
		fmt.Fprintf(stderr, "padlock inspect: %v\n", err)
		return exitUsage
	}
	defer rdb.Close()

	info, err := padlock.New(rdb).Inspect(ctx, fset.Arg(0))
	switch {
	case errors.Is(err, padlock.ErrInvalid):
		fmt.Fprintf(stderr, "padlock inspect: %v\n", err)
		return exitUsage
	case err != nil:
		fmt.Fprintf(stderr, "padlock: cannot inspect %s: %v\n", fset.Arg(0), err)
		return exitUnavailable
	}

	if *asJSON {
		out := inspectJSON{Key: info.Key, Held: info.Held, Token: info.Token, Metadata: info.Metadata,
			TTLMs: info.TTL.Milliseconds(), Fence: info.Fence}
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
	fmt.Fprintf(stdout, "%s: held\n  holder:   %s\n  token:    %s\n  ttl:      %s\n  fence:    %d\n",
		info.Key, orNone(info.Metadata), info.Token, ttl, info.Fence)
	return 0
}

func orNone(s string) string {
	if s == "" {
		return "(no metadata)"
	}
	return s
}
