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
	v := newVerb("leader", "padlock leader [-redis URL] [-timeout D] [-json] [-watch] KEY",
		"Shows who leads KEY (its value, term and ttl), or, with -watch, every change\n"+
			"until interrupted: one line (or JSON object) per state.",
		"  0      done, whether or not someone leads KEY; with -watch, interrupted\n"+exitUsageHelp+exitRedisHelp, stdout, stderr)
	rf := addRedisFlags(v.fset)
	asJSON := v.fset.Bool("json", false, "print JSON objects")
	watch := v.fset.Bool("watch", false, "follow changes until interrupted")
	key, c, code, ok := v.keyAndConn(args, rf)
	if !ok {
		return code
	}
	locks, done, code := v.client(c)
	if locks == nil {
		return code
	}
	defer done()
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
	// Reach Redis once first, so that an unreachable one is an exit status.
	lctx, cancel := c.call(ctx)
	info, err := locks.Leader(lctx, key)
	cancel()
	if err != nil && !errors.Is(err, padlock.ErrNoLeader) {
		return v.fail("read who leads "+key, c, err)
	}
	if !*watch {
		show(info)
		return 0
	}
	ctx, stop := signal.NotifyContext(ctx, syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	for info := range locks.Observe(ctx, key) {
		show(info)
	}
	return 0
}

// leadExits are the exit statuses of 'padlock lead', for its -h.
const leadExits = "  N      the command's own status (128+N if signal N killed it)\n" +
	exitUsageHelp + exitRedisHelp +
	"  126    the command could not be started\n" +
	"  127    the command was not found\n" +
	"  128+N  signal N came before the command ran\n"

// leadCmd is 'padlock lead': it runs COMMAND while leading KEY, campaigns
// again when the leadership is lost, and on SIGTERM or SIGINT stops the
// command, resigns and exits with the command's status.
func leadCmd(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	v := newVerb("lead", "padlock lead [flags] KEY -- COMMAND [ARGS...]",
		"Runs COMMAND while this process leads KEY; when the leadership is lost it\n"+
			"terminates COMMAND and campaigns again. SIGTERM or SIGINT stops COMMAND,\n"+
			"resigns (the next candidate leads at once) and exits with its status.\n"+
			"The command sees PADLOCK_KEY and PADLOCK_TERM.", leadExits, stdout, stderr)
	rf := addRedisFlags(v.fset)
	ttl := v.fset.Duration("ttl", 10*time.Second, "leadership TTL; renewed every ttl/3")
	value := v.fset.String("value", "", "what 'padlock leader' shows for this leader\n(default \"host=HOSTNAME pid=PID\" of this process)")
	grace := v.fset.Duration("grace", 5*time.Second, "when the leadership is lost: time between SIGTERM and SIGKILL")
	if code, ok := v.parse(args); !ok {
		return code
	}
	key, command, code, ok := v.keyAndCommand()
	switch {
	case !ok:
		return code
	case *ttl < time.Millisecond:
		return v.usageError("-ttl %v is under 1ms", *ttl)
	case *grace < 0:
		return v.usageError("-grace %v cannot be negative", *grace)
	}
	c, err := rf.conn()
	if err != nil {
		return v.usageError("%v", err)
	}
	if !isSet(v.fset, "value") {
		*value = defaultMetadata()
	}
	locks, done, code := v.client(c, padlock.WithLogger(slog.New(slog.NewTextHandler(stderr, nil))))
	if locks == nil {
		return code
	}
	defer done()
	// Reach Redis once first, so that a wrong URL is an exit status; once
	// it has answered, Lead campaigns through outages.
	rctx, cancel := c.call(ctx)
	_, err = locks.Leader(rctx, key)
	cancel()
	if err != nil && !errors.Is(err, padlock.ErrNoLeader) {
		return v.fail("reach Redis to lead "+key, c, err)
	}

	last, got, err := leadUntilSignal(ctx, locks, key, *ttl, *value, func(lead context.Context, term int64) (int, error) {
		return runLeading(lead, key, term, command, *grace, stdout, stderr)
	})
	switch {
	case errors.Is(err, padlock.ErrInvalid):
		return v.usageError("%s", cause(err))
	case errors.Is(err, errCannotStart):
		return last
	case got != nil:
		if last >= 0 {
			return last
		}
		return 128 + int(got.(syscall.Signal))
	case err != nil && !errors.Is(err, errExited):
		return v.fail("lead "+key, c, err)
	}
	return last
}

// leadUntilSignal leads key with run until SIGTERM, SIGINT or SIGHUP (got)
// or ctx ends, and returns run's last exit status (-1 if none tells how
// the process ends) and Lead's error.
func leadUntilSignal(ctx context.Context, locks *padlock.Client, key string, ttl time.Duration, value string,
	run func(lead context.Context, term int64) (int, error)) (last int, got os.Signal, err error) {
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP)
	defer signal.Stop(sigs)
	lctx, stopLead := context.WithCancel(ctx)
	defer stopLead()
	sigDone := make(chan struct{})
	go func() {
		defer close(sigDone)
		select {
		case got = <-sigs:
			stopLead()
		case <-lctx.Done():
		}
	}()
	last = -1
	err = locks.Lead(lctx, key, ttl, value, func(lead context.Context) error {
		code, err := run(lead, padlock.LeadershipFromContext(lead).Term())
		last = code
		if err == nil && lctx.Err() == nil {
			last = -1 // stopped for the lost leadership: it says nothing of how padlock ends
		}
		return err
	})
	stopLead()
	<-sigDone
	return last, got, err
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
	if why := context.Cause(lead); !errors.Is(why, context.Canceled) {
		fmt.Fprintf(stderr, "padlock lead: leadership of %s lost (%s); terminating the command\n", key, cause(why))
	}
	group(syscall.SIGTERM)
	kill := time.AfterFunc(grace, func() { group(syscall.SIGKILL) })
	defer kill.Stop()
	<-exited
	return status(cmd.ProcessState), nil
}
