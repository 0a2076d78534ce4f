package padlockweb

import (
	_ "embed"
	"fmt"
	"html/template"
	"strconv"
	"strings"
	"time"

	"github.com/padlock-go/padlock"
)

// page.html is the page: its table, rendered by html/template, and the
// script that refreshes it from the JSON. The script formats the JSON's
// values as rowOf does, so that a refresh changes only what changed.
//
//go:embed page.html
var pageHTML string

var pageTemplate = template.Must(template.New("page").Parse(pageHTML))

// pageData is what page.html renders.
type pageData struct {
	Match     string // the glob shown
	Count     string // "1 lock", "3 locks"
	Truncated int    // WithMaxLocks when there were more, else 0
	Rows      []row
	Error     string    // why the locks could not be listed, or ""
	HereCount string    // this process's holds and waits, in words
	Here      []hereRow // and each
	CSRF      string    // the break form's token; "" without WithBreak
	Nonce     string    // the Content-Security-Policy nonce of the page's script and style
}

// A row is one lock as the page's table shows it: its cells' text.
type row struct {
	Key, Kind, Holders, HeldFor, TTL, Fence, Waiting string
	Metadata                                         string // each holder's, one a line
}

// none is shown for a value that is not there (no fence, not known).
const none = "\u2013"

// rowOf is the row of l. page.html's script computes the same from l's
// JSON: a change here is a change there.
func rowOf(l padlock.LockInfo) row {
	r := row{Key: l.Key, Kind: l.Kind, Holders: "1", HeldFor: duration(l.HeldFor), TTL: duration(l.TTL),
		Fence: none, Waiting: strconv.Itoa(l.Waiting), Metadata: orNone(l.Metadata)}
	if l.Fence > 0 {
		r.Fence = strconv.FormatInt(l.Fence, 10)
	}
	if l.Waiting > 0 {
		r.Waiting += " (oldest " + duration(l.OldestWait) + ")"
	}
	if l.Kind == "semaphore" || l.Kind == "shared" {
		r.Holders = strconv.Itoa(len(l.Holders))
		if l.Limit > 0 {
			r.Holders += " of " + strconv.Itoa(l.Limit)
		}
		var held time.Duration
		meta := make([]string, len(l.Holders))
		for i, h := range l.Holders {
			held = max(held, h.HeldFor)
			meta[i] = orNone(h.Metadata)
		}
		r.HeldFor, r.Metadata, r.TTL = duration(held), strings.Join(meta, "\n"), none
		if len(l.Holders) > 0 {
			r.TTL = duration(l.Holders[0].TTL) // the soonest to expire
		}
	}
	return r
}

// duration is d as the page shows it: tenths of a second under a minute
// ("4.9s"), then minutes and seconds ("12m3s"), then hours and minutes
// ("26h5m"); "no expiry" when negative, none when 0 (not known).
func duration(d time.Duration) string {
	ms := d.Milliseconds() // as in the JSON
	s := ms / 1000
	switch {
	case ms < 0:
		return "no expiry"
	case ms == 0:
		return none
	case s < 60:
		return fmt.Sprintf("%d.%ds", s, ms/100%10)
	case s < 3600:
		return fmt.Sprintf("%dm%ds", s/60, s%60)
	}
	return fmt.Sprintf("%dh%dm", s/3600, s%3600/60)
}

// orNone is a holder's metadata, or says there is none.
func orNone(metadata string) string {
	if metadata == "" {
		return "(no metadata)"
	}
	return metadata
}

// count is n locks, in words.
func count(n int) string {
	if n == 1 {
		return "1 lock"
	}
	return strconv.Itoa(n) + " locks"
}
