package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/padlock-go/padlock"
)

// topRefresh is how often 'padlock top' reads the locks again.
const topRefresh = time.Second

// The terminal controls top writes: home the cursor and clear the screen
// (once, at the start), clear the rest of a line, and clear the screen
// below the cursor.
const (
	clearScreen = "\x1b[H\x1b[2J"
	home        = "\x1b[H"
	clearLine   = "\x1b[K"
	clearBelow  = "\x1b[J"
)

// topCmd is 'padlock top'. It exits 0 when q is pressed or a signal
// (SIGINT, SIGTERM, SIGHUP) ends it, 64 on usage errors (stdout not a
// terminal among them), 69 when Redis cannot answer its first listing, 1
// when the terminal cannot be written to.
func topCmd(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	v := newVerb("top", "padlock top [-redis URL] [-timeout D] [-match GLOB]",
		"Shows the held locks whose key matches GLOB, as 'padlock list' does, read again\n"+
			"every second, until q is pressed (or Ctrl-C). h sorts by how long they have been\n"+
			"held (longest first), w by how many clients wait (most first); the footer says\n"+
			"which, and that 'padlock break KEY' ends a stuck lock. Keys act at once, without\n"+
			"Enter, on Linux; elsewhere each needs Enter. The terminal's settings are restored\n"+
			"when top ends. stdout must be a terminal: top refuses to run otherwise ('padlock\n"+
			"list' prints the locks once). When Redis stops answering, top says so and shows\n"+
			"the last listing until it answers again.",
		"  0      q pressed, or SIGINT, SIGTERM or SIGHUP received\n"+
			"  1      the terminal could not be written to\n"+
			"  64     usage error (stdout not a terminal among them): nothing was done\n"+
			"  69     Redis could not be reached, or answered with an error, at the start\n", stdout, stderr)
	rf := addRedisFlags(v.fset)
	match := v.fset.String("match", "*", "show the locks whose key matches this glob (lock:*, job:[0-9]*)")
	if code, ok := v.parseFlags(args, " (-match GLOB picks the keys)"); !ok {
		return code
	}
	term, ok := stdout.(*os.File)
	if !ok || !isTerminal(term) {
		return v.usageError("stdout is not a terminal ('padlock list' prints the locks once)")
	}
	c, locks, done, code := v.connect(rf)
	if locks == nil {
		return code
	}
	defer done()
	ctx, stop := signal.NotifyContext(ctx, syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP)
	defer stop()

	// The first listing comes before the terminal changes, so that a
	// malformed glob or a Redis that does not answer is an exit status.
	view := &topView{url: redact(c.url), match: *match, at: time.Now()}
	var err error
	view.infos, err = listLocks(ctx, locks, *match)
	switch {
	case err != nil && ctx.Err() != nil:
		return 0
	case err != nil:
		return v.listFailed(*match, c, err)
	}
	restore, err := cbreak(os.Stdin)
	view.lineMode = err != nil
	if restore != nil {
		defer restore()
	}
	if err := runTop(ctx, term, locks, view); err != nil {
		if restore != nil {
			restore() // before the message, so that it reads as written
		}
		fmt.Fprintf(stderr, "\npadlock top: %v\n", err)
		return 1
	}
	return 0
}

// A topPass is what one listing found, and when.
type topPass struct {
	infos []padlock.LockInfo
	err   error
	at    time.Time
}

// runTop draws view on term, reads the locks again every topRefresh (one
// Client.Locks pass at a time), and acts on the keys read from stdin,
// until q or ctx ends. It returns an error only if term cannot be written
// to.
func runTop(ctx context.Context, term *os.File, locks *padlock.Client, view *topView) error {
	ctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	defer wg.Wait()
	defer cancel()
	keys := make(chan byte)
	if view.lineMode {
		// A read that waits for a line cannot be stopped: the process
		// exits soon after top returns, and the read with it.
		go readKeys(ctx, os.Stdin, false, keys)
	} else {
		wg.Go(func() { readKeys(ctx, os.Stdin, true, keys) })
	}
	passes := make(chan topPass, 1)
	listing, started := false, time.Time{}
	tick := time.NewTicker(topRefresh)
	defer tick.Stop()

	if _, err := io.WriteString(term, clearScreen); err != nil {
		return err
	}
	for redraw := true; ; {
		if ctx.Err() != nil {
			_, _ = io.WriteString(term, "\n") // below the last frame; the terminal may be gone
			return nil
		}
		if redraw {
			if err := view.draw(term); err != nil {
				return err
			}
		}
		redraw = true
		select {
		case <-ctx.Done():
		case k, ok := <-keys:
			switch {
			case !ok:
				keys = nil // stdin ended: only a signal ends top now
			case k == 'q' || k == 'Q':
				cancel()
			case k == 'h':
				view.by = byHeldFor
			case k == 'w':
				view.by = byWaiters
			}
		case p := <-passes:
			listing, view.waiting = false, time.Time{}
			view.update(p)
		case now := <-tick.C:
			if listing {
				view.waiting = started // a refresh is late: say so
				break
			}
			listing, started = true, now
			wg.Go(func() {
				infos, err := listLocks(ctx, locks, view.match)
				passes <- topPass{infos: infos, err: err, at: time.Now()}
			})
			redraw = false // nothing new to show yet
		}
	}
}

// readKeys sends the bytes read from in on keys until ctx ends or in
// does. If polled, in is a terminal in cbreak mode, whose reads return
// nothing (io.EOF) after a while without a key, and readKeys stops when
// ctx ends; else it stops at in's end or failure, or at the first key
// read after ctx ended. It closes keys when in ends.
func readKeys(ctx context.Context, in *os.File, polled bool, keys chan<- byte) {
	buf := make([]byte, 64)
	for ctx.Err() == nil {
		n, err := in.Read(buf)
		for _, b := range buf[:n] {
			select {
			case keys <- b:
			case <-ctx.Done():
				return
			}
		}
		switch {
		case err == nil, polled && errors.Is(err, io.EOF), errors.Is(err, syscall.EINTR):
		default:
			close(keys)
			return
		}
	}
}

// topView is what top shows: the last listing, sorted, and what failed
// since.
type topView struct {
	url, match string
	infos      []padlock.LockInfo
	at         time.Time // when infos were read
	err        error     // why the last listing failed, nil if it did not
	waiting    time.Time // when the listing under way began, if it is late
	by         sortKey
	lineMode   bool // keys need Enter
}

// update takes p's locks, or, if p failed, keeps the last ones and says
// why.
func (t *topView) update(p topPass) {
	t.err = p.err
	if p.err == nil {
		t.infos, t.at = p.infos, p.at
	}
}

// draw writes the view over what the terminal shows, from its top left
// corner, cut to its size.
func (t *topView) draw(term *os.File) error {
	cols, rows := termSize(term)
	lines := t.lines(rows)
	var b strings.Builder
	b.WriteString(home)
	for i, l := range lines {
		if cols > 0 {
			l = clip(l, cols, "")
		}
		b.WriteString(l + clearLine)
		if i < len(lines)-1 {
			b.WriteString("\n")
		}
	}
	b.WriteString(clearBelow)
	_, err := io.WriteString(term, b.String())
	return err
}

// lines are the view's lines for a terminal of rows lines (0: not
// known): a title, what failed if anything did, the table (as many locks
// as fit, then how many more), and the footer: the order, the keys, and
// how to end a stuck lock.
func (t *topView) lines(rows int) []string {
	sortLocks(t.infos, t.by)
	title := fmt.Sprintf("padlock top: %s, %d held %s matching %s at %s",
		t.url, len(t.infos), plural(len(t.infos), "lock", "locks"), quoted(t.match), t.at.Format(time.TimeOnly))
	status := ""
	switch {
	case !t.waiting.IsZero():
		status = "waiting for Redis to answer the listing begun at " + t.waiting.Format(time.TimeOnly)
	case t.err != nil:
		what, err := listFailure(t.match, t.err)
		status = "cannot " + printable(what+": "+cause(err)) + " (shown: the last listing)"
	}
	table := tableLines(t.infos, t.by)
	if len(t.infos) == 0 {
		table = append(table, "(none)")
	}
	sortedBy := "held for"
	if t.by == byWaiters {
		sortedBy = "waiters"
	}
	keys := "sorted by " + sortedBy + " | h: by held for  w: by waiters  q: quit"
	if t.lineMode {
		keys += " (each then Enter)"
	}
	footer := []string{"", keys, "to end a stuck lock: padlock break KEY"}

	// the title, the status, the table, the footer
	if fit := rows - 2 - len(footer); rows > 0 && len(table) > fit {
		shown := max(fit-1, 1)
		table = append(table[:shown], "... "+strconv.Itoa(len(table)-shown)+" more ('padlock list' shows them all)")
	}
	return append(append([]string{title, status}, table...), footer...)
}

// plural is one if n is 1, else many.
func plural(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}
