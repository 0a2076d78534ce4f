package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/padlock-go/padlock"
)

// leaderJSON is one line of 'padlock leader -json'.
type leaderJSON struct {
	Key    string `json:"key"`
	Leader bool   `json:"leader"`
	Value  string `json:"value,omitempty"`
	Term   int64  `json:"term"`
	TTLMs  int64  `json:"ttl_ms"`
}

// leaderCmd is 'padlock leader'. It exits 0 whether or not someone leads,
// 69 if Redis cannot answer.
func leaderCmd(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fset := newFlags("leader", "padlock leader [-redis URL] [-json] [-watch] KEY",
		"Shows who leads KEY (its value, term and ttl), or, with -watch, every change\n"+
			"until interrupted: one line (or JSON object) per state.", stderr)
	redisURL := redisFlag(fset)
	asJSON := fset.Bool("json", false, "print JSON objects")
	watch := fset.Bool("watch", false, "follow changes until interrupted")
	if code, ok := parseFlags(fset, args); !ok {
		return code
	}
	if fset.NArg() != 1 {
		fset.Usage()
		return exitUsage
	}
	locks, done, code := client(*redisURL, "leader", stderr)
	if locks == nil {
		return code
	}
	defer done()
	key := fset.Arg(0)
	show := func(info padlock.LeaderInfo) {
		if *asJSON {
			_ = json.NewEncoder(stdout).Encode(leaderJSON{Key: key, Leader: info.Term != 0, Value: info.Value, Term: info.Term, TTLMs: info.TTL.Milliseconds()})
			return
		}
		if info.Term == 0 {
			fmt.Fprintf(stdout, "%s: no leader\n", key)
			return
		}
		fmt.Fprintf(stdout, "%s: %s (term %d, %v left)\n", key, orNone(info.Value), info.Term, info.TTL.Round(time.Millisecond))
	}
	if !*watch {
		info, err := locks.Leader(ctx, key)
		if err != nil && !errors.Is(err, padlock.ErrNoLeader) {
			code, _ := failure("leader", key, err, stderr)
			return code
		}
		show(info)
		return 0
	}
	// Reach Redis once first, so that an unreachable one is an exit status.
	if _, err := locks.Leader(ctx, key); err != nil && !errors.Is(err, padlock.ErrNoLeader) {
		code, _ := failure("leader", key, err, stderr)
		return code
	}
	ctx, stop := signal.NotifyContext(ctx, syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	for info := range locks.Observe(ctx, key) {
		show(info)
	}
	return 0
}

// leadCmd is 'padlock lead': it runs COMMAND while leading KEY, campaigns
// again when the leadership is lost, and on SIGTERM or SIGINT stops the
// command, resigns and exits with the command's status.
func leadCmd(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fset := newFlags("lead", "padlock lead [flags] KEY -- COMMAND [ARGS...]",
		"Runs COMMAND while this process leads KEY; when the leadership is lost it\n"+
			"terminates COMMAND and campaigns again. SIGTERM or SIGINT stops COMMAND,\n"+
			"resigns (the next candidate leads at once) and exits with its status.\n"+
			"The command sees PADLOCK_KEY and PADLOCK_TERM.", stderr)
	redisURL := redisFlag(fset)
	ttl := fset.Duration("ttl", 10*time.Second, "leadership TTL; renewed every ttl/3")
	value := fset.String("value", defaultMetadata(), "what 'padlock leader' shows for this leader")
	grace := fset.Duration("grace", 5*time.Second, "when the leadership is lost: time between SIGTERM and SIGKILL")
	if code, ok := parseFlags(fset, args); !ok {
		return code
	}
	key, command, ok := keyAndCommand(fset, "lead", stderr)
	switch {
	case !ok:
		return exitUsage
	case *grace < 0:
		fmt.Fprintln(stderr, "padlock lead: -grace cannot be negative")
		return exitUsage
	}
	rdb, err := dial(*redisURL)
	if err != nil {
		fmt.Fprintf(stderr, "padlock lead: %v\n", err)
		return exitUsage
	}
	defer rdb.Close()
	locks := padlock.New(rdb, padlock.WithLogger(slog.New(slog.NewTextHandler(stderr, nil))))
	defer locks.Close()

	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP)
	defer signal.Stop(sigs)
	lctx, stopLead := context.WithCancel(ctx)
	defer stopLead()
	var got os.Signal // the signal that ended it, once one did
	sigDone := make(chan struct{})
	go func() {
		defer close(sigDone)
		select {
		case got = <-sigs:
			stopLead()
		case <-lctx.Done():
		}
	}()

	last := -1 // the command's last exit status
	err = locks.Lead(lctx, key, *ttl, *value, func(lead context.Context) error {
		term := padlock.LeadershipFromContext(lead).Term()
		code, err := runLeading(lead, key, term, command, *grace, stdout, stderr)
		last = code
		if err == nil && lctx.Err() == nil {
			last = -1 // stopped for the lost leadership: it says nothing of how padlock ends
		}
		return err
	})
	stopLead()
	<-sigDone
	switch {
	case errors.Is(err, padlock.ErrInvalid):
		fmt.Fprintf(stderr, "padlock lead: %v\n", err)
		return exitUsage
	case errors.Is(err, errCannotStart):
		return last
	case got != nil:
		if last >= 0 {
			return last
		}
		return 128 + int(got.(syscall.Signal))
	case err != nil && !errors.Is(err, errExited):
		fmt.Fprintf(stderr, "padlock: lead %s: %v\n", key, err)
		return exitUnavailable
	}
	return last
}

var (
	errExited      = errors.New("the command exited")
	errCannotStart = errors.New("the command could not be started")
)

// runLeading runs command while lead lasts. When lead ends (a signal, or
// the leadership was lost), it sends SIGTERM to the command's process
// group, then SIGKILL after grace. It returns the command's exit status,
// and errExited when the command exited by itself (Lead then resigns and
// returns), nil when it was stopped because lead ended (Lead campaigns
// again, or returns after a signal).
func runLeading(lead context.Context, key string, term int64, command []string, grace time.Duration, stdout, stderr io.Writer) (int, error) {
	cmd, exited, code := startCommand(command, []string{"PADLOCK_KEY=" + key, fmt.Sprintf("PADLOCK_TERM=%d", term)}, stdout, stderr)
	if cmd == nil {
		return code, errCannotStart
	}
	group := func(sig syscall.Signal) { signalGroup(cmd, sig) }
	select {
	case <-exited:
		return status(cmd.ProcessState), errExited
	case <-lead.Done():
	}
	if cause := context.Cause(lead); !errors.Is(cause, context.Canceled) {
		fmt.Fprintf(stderr, "padlock: leadership of %s lost (%v); terminating the command\n", key, cause)
	}
	group(syscall.SIGTERM)
	kill := time.AfterFunc(grace, func() { group(syscall.SIGKILL) })
	defer kill.Stop()
	<-exited
	return status(cmd.ProcessState), nil
}
