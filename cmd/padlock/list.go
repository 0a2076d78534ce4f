package main

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/padlock-go/padlock"
)

// listCmd is 'padlock list'. It exits 0 whether or not any lock matches,
// 64 on usage errors (a malformed -match among them), 69 when Redis cannot
// answer.
func listCmd(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	v := newVerb("list", "padlock list [-redis URL] [-timeout D] [-match GLOB] [-json]",
		"Lists every held lock whose key matches GLOB (Redis's glob, as SCAN's MATCH),\n"+
			"longest held first: its kind (a semaphore's holders/limit, a shared hold's\n"+
			"holders), its holders' tokens (the first 8 characters), how long it has been\n"+
			"held, how long it has left, its fencing counter, how many clients wait (and\n"+
			"the oldest one's wait) and its metadata. For a semaphore or shared hold,\n"+
			"held-for is its longest holder's and ttl its first holder to expire. Metadata\n"+
			"is cut to "+strconv.Itoa(metadataWidth)+" characters; a key, token or metadata with control\n"+
			"characters is printed quoted, escaped as in Go. -timeout bounds each request,\n"+
			"not the whole listing. 'padlock break KEY' ends a stuck lock.",
		"  0      done, whether or not any lock matches\n"+exitUsageHelp+exitRedisHelp, stdout, stderr)
	rf := addRedisFlags(v.fset)
	match := v.fset.String("match", "*", "list the locks whose key matches this glob (lock:*, job:[0-9]*)")
	asJSON := v.fset.Bool("json", false, "print one JSON object per lock, one a line (the shape of inspect -json)")
	if code, ok := v.parseFlags(args, " (-match GLOB picks the keys)"); !ok {
		return code
	}
	c, locks, done, code := v.connect(rf)
	if locks == nil {
		return code
	}
	defer done()
	infos, err := listLocks(ctx, locks, *match)
	if err != nil {
		return v.listFailed(*match, c, err)
	}
	sortLocks(infos, byHeldFor)
	if *asJSON {
		for _, info := range infos {
			b, err := json.Marshal(info)
			if err == nil {
				_, err = fmt.Fprintf(stdout, "%s\n", b)
			}
			if err != nil {
				fmt.Fprintf(stderr, "padlock list: %v\n", err)
				return 1
			}
		}
		return 0
	}
	if len(infos) == 0 {
		fmt.Fprintf(stdout, "no held lock matches %s\n", quoted(*match))
		return 0
	}
	if _, err := io.WriteString(stdout, strings.Join(tableLines(infos, byHeldFor), "\n")+"\n"); err != nil {
		fmt.Fprintf(stderr, "padlock list: %v\n", err)
		return 1
	}
	return 0
}

// listLocks reads every held lock whose key matches match, in one pass of
// Client.Locks. Each request to Redis is bounded by the Client's
// timeouts, not the pass as a whole.
func listLocks(ctx context.Context, locks *padlock.Client, match string) ([]padlock.LockInfo, error) {
	var infos []padlock.LockInfo
	for info, err := range locks.Locks(ctx, match) {
		if err != nil {
			return nil, err
		}
		infos = append(infos, info)
	}
	return infos, nil
}

// listFailed reports the failure of a listing of match, and returns the
// exit status: 64 for a malformed glob, 69 otherwise.
func (v *verb) listFailed(match string, c conn, err error) int {
	if errors.Is(err, padlock.ErrInvalid) {
		return v.usageError("-match %s: %s", quoted(match), cause(err))
	}
	what, err := listFailure(match, err)
	return v.fail(what, c, err)
}

// listFailure splits err, the failure of Client.Locks(match), into what
// failed (`list the locks "*" on ADDR`) and why (err without those words).
func listFailure(match string, err error) (string, error) {
	what := "list the locks " + quoted(match)
	if m := listPrefix.FindStringSubmatch(err.Error()); m != nil {
		what += m[1] // the node that failed
		err = reworded{msg: err.Error()[len(m[0]):], err: err}
	}
	return what, err
}

// listPrefix is how Client.Locks's errors begin: what failed, with the
// glob and the node, if one failed (its address, or a Redlock node's
// number).
var listPrefix = regexp.MustCompile(`^padlock: list the locks "(?:[^"\\]|\\.)*"( on (?:node \d+|\S+))?: `)

// reworded is err said in other words.
type reworded struct {
	msg string
	err error
}

func (r reworded) Error() string { return r.msg }
func (r reworded) Unwrap() error { return r.err }

// A sortKey is the order of a list of locks.
type sortKey int

const (
	byHeldFor sortKey = iota // longest held first
	byWaiters                // most waiters first, then the longest wait
)

// sortLocks sorts infos by by; ties (and byHeldFor) go by held-for,
// longest first, and then by key.
func sortLocks(infos []padlock.LockInfo, by sortKey) {
	slices.SortStableFunc(infos, func(a, b padlock.LockInfo) int {
		if by == byWaiters {
			if c := cmp.Compare(b.Waiting, a.Waiting); c != 0 {
				return c
			}
			if c := cmp.Compare(b.OldestWait, a.OldestWait); c != 0 {
				return c
			}
		}
		if c := cmp.Compare(heldFor(b), heldFor(a)); c != 0 {
			return c
		}
		return strings.Compare(a.Key, b.Key)
	})
}

// heldFor is how long info's lock has been held: for a semaphore or
// shared hold, by the holder that has held it longest; 0 if not known.
func heldFor(info padlock.LockInfo) time.Duration {
	d := info.HeldFor
	for _, h := range info.Holders {
		d = max(d, h.HeldFor)
	}
	return d
}

// The widths the table cuts its cells to.
const (
	metadataWidth = 40
	tokenWidth    = 8 // a token's first characters: enough to tell holders apart
	tokensShown   = 3 // a semaphore's or shared hold's tokens shown; "+N" for the rest
)

// tableHeader is the table's first row; the column a list is sorted by is
// marked with a '*'.
func tableHeader(by sortKey) []string {
	head := []string{"KEY", "KIND", "HOLDERS", "HELD FOR", "TTL", "FENCE", "WAITERS", "METADATA"}
	if by == byWaiters {
		head[6] += "*"
	} else {
		head[3] += "*"
	}
	return head
}

// tableRow is info as a row of the table. Everything that came from
// Redis is made printable.
func tableRow(info padlock.LockInfo) []string {
	kind, ttl, tokens, metadata := info.Kind, info.TTL, []string{info.Token}, info.Metadata
	switch info.Kind {
	case "semaphore", "shared":
		kind += " " + strconv.Itoa(len(info.Holders))
		if info.Kind == "semaphore" {
			kind += "/" + strconv.Itoa(info.Limit)
		}
		tokens, metadata = nil, ""
		var all []string
		for i, h := range info.Holders {
			if i == 0 || h.TTL < ttl {
				ttl = h.TTL
			}
			tokens = append(tokens, h.Token)
			if h.Metadata != "" {
				all = append(all, h.Metadata)
			}
		}
		metadata = strings.Join(all, "; ")
	}
	var short []string
	for i, t := range tokens {
		if i == tokensShown {
			short = append(short, "+"+strconv.Itoa(len(tokens)-i))
			break
		}
		short = append(short, clip(printable(strings.TrimPrefix(t, "leader/")), tokenWidth, ""))
	}
	waiters := strconv.Itoa(info.Waiting)
	if info.Waiting > 0 && info.OldestWait > 0 {
		waiters += " (" + shortDuration(info.OldestWait) + ")"
	}
	fence := "-"
	if info.Fence > 0 {
		fence = strconv.FormatInt(info.Fence, 10)
	}
	held := "-"
	if d := heldFor(info); d > 0 {
		held = shortDuration(d)
	}
	ttlCell := "no expiry"
	if ttl >= 0 {
		ttlCell = shortDuration(ttl)
	}
	return []string{printable(info.Key), kind, strings.Join(short, ","), held, ttlCell, fence, waiters,
		clip(printable(metadata), metadataWidth, "...")}
}

// tableLines are infos, in their order, as the lines of a table whose
// header marks the column by, with no white space at their ends.
func tableLines(infos []padlock.LockInfo, by sortKey) []string {
	var b strings.Builder
	tw := tabwriter.NewWriter(&b, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, strings.Join(tableHeader(by), "\t"))
	for _, info := range infos {
		fmt.Fprintln(tw, strings.Join(tableRow(info), "\t"))
	}
	_ = tw.Flush() // a strings.Builder does not fail
	lines := strings.Split(strings.TrimSuffix(b.String(), "\n"), "\n")
	for i, l := range lines {
		lines[i] = strings.TrimRight(l, " ")
	}
	return lines
}

// printable is s as it may be shown on a terminal: s itself if it is
// valid UTF-8 and every character prints (a space is the only white space
// that does), else s quoted and escaped as a Go string literal, so that a
// hostile key or metadata cannot move the cursor, clear the screen or
// reverse the text.
func printable(s string) string {
	if !utf8.ValidString(s) || strings.IndexFunc(s, func(r rune) bool { return !unicode.IsPrint(r) }) >= 0 {
		return strconv.Quote(s)
	}
	return s
}

// quoted is s in double quotes, escaped as a Go string literal.
func quoted(s string) string { return strconv.Quote(s) }

// clip cuts s, printable, to at most n characters, the last of them
// ellipsis if it was cut.
func clip(s string, n int, ellipsis string) string {
	if utf8.RuneCountInString(s) <= n {
		return s
	}
	r := []rune(s)
	return string(r[:n-utf8.RuneCountInString(ellipsis)]) + ellipsis
}

// shortDuration is d in at most two units, for a table: 850ms, 12.3s,
// 3m05s, 1h12m, 2d03h.
func shortDuration(d time.Duration) string {
	switch {
	case d < time.Second:
		return strconv.FormatInt(d.Milliseconds(), 10) + "ms"
	case d < time.Minute:
		return strconv.FormatFloat(d.Truncate(100*time.Millisecond).Seconds(), 'f', 1, 64) + "s"
	case d < time.Hour:
		return fmt.Sprintf("%dm%02ds", d/time.Minute, d%time.Minute/time.Second)
	case d < 24*time.Hour:
		return fmt.Sprintf("%dh%02dm", d/time.Hour, d%time.Hour/time.Minute)
	}
	return fmt.Sprintf("%dd%02dh", d/(24*time.Hour), d%(24*time.Hour)/time.Hour)
}
