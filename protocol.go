package padlock

import (
	"strconv"
	"strings"
	"time"

	"github.com/padlock-go/padlock/driver"
)

// The script protocol: what Go sends the scripts of the one way to wait
// (lua/grant.lua and the scripts it is inserted into) and how it reads
// their replies and messages, in one place.

// Reply codes of wait.lua.
const (
	codeWait   = 0 // held: it waits
	codeHeld   = 1 // it holds the lock now (the reply's n: its fence)
	codeBehind = 2 // free, but waiters ahead of it wait for something else: it waits
	codeLimit  = 3 // the key's semaphore has another number of places (n)
	codeGone   = 4 // its ticket is gone: lapsed, or it left
)

// Kinds of lock, as the scripts name them (see Lock.kind).
const (
	kindLock   = "x" // exclusive
	kindShared = "s" // a shared hold
	kindPlace  = "n" // a place of a semaphore
	kindMulti  = "m" // every key of a multi-key lock
)

// Arguments of wait.lua and leave.lua.
const (
	waitNew    = "new"    // the first attempt of a wait: its ticket is queued
	waitKeep   = "keep"   // a later attempt: its ticket is kept (or it is gone)
	waitChosen = "chosen" // the token was chosen (WithToken)
	leavePass  = "pass"   // what was granted to a leaving waiter is passed on
	leaveKeep  = "keep"   // a chosen token keeps what it holds
)

// How a Client listens for its grants (a ticket says so to the scripts).
const (
	listenSharded = "s" // SPUBLISH where the server has it, else PUBLISH
	listenPlain   = "p" // PUBLISH only: a Client on a Cluster (see groupOn)
)

// Flags of release.lua and count_release.lua.
const (
	releaseFenced = "f" // taken with a fence: its record goes too
	releaseMin    = "m" // may be held for a minimum (WithMinHold)
	releaseUndo   = "u" // undo an acquire: free it at once, minimum or not
)

// A grant tells a waiter that the lock is its own: with fence, at a
// moment after base (zero: a message, counted from the waiter's ticket).
type grant struct {
	fence int64
	base  time.Time
}

// news is what a script tells its caller's Client for the Client's
// waiters (see lua/grant.lua's news): grants, and hints (the holder that
// keeps the waiter out expires in some ms: it looks then).
type news struct {
	grants []tokenN // the fence
	hints  []tokenN // the ms
}

// tokenN is a waiter's token and a number for it.
type tokenN struct {
	token string
	n     int64
}

// readNews reads the news in a script's reply, whose grants are at
// reply[at] and hints at reply[at+1]; none if the reply stops before.
func readNews(reply []any, at int) news {
	var nw news
	if len(reply) > at {
		nw.grants = pairs(reply[at])
	}
	if len(reply) > at+1 {
		nw.hints = pairs(reply[at+1])
	}
	return nw
}

// pairs reads an array of token, number pairs.
func pairs(v any) []tokenN {
	list, _ := v.([]any)
	ps := make([]tokenN, 0, len(list)/2)
	for i := 0; i+1 < len(list); i += 2 {
		tok, _ := list[i].(string)
		n, _ := list[i+1].(int64)
		ps = append(ps, tokenN{tok, n})
	}
	return ps
}

// parseMessage reads a message on a Client's channel: a grant
// "<token> <fence>" or a hint "<token> wait <ms>"; ok is false for
// anything else.
func parseMessage(msg string) (tok string, n int64, hint, ok bool) {
	tok, rest, ok := strings.Cut(msg, " ")
	if !ok {
		return "", 0, false, false
	}
	rest, hint = strings.CutPrefix(rest, "wait ")
	n, err := strconv.ParseInt(rest, 10, 64)
	return tok, n, hint, err == nil
}

// kind is the lock's kind as the scripts name it.
func (l *Lock) kind() string {
	switch {
	case l.multi() != nil:
		return kindMulti
	case l.counted() == nil:
		return kindLock
	case l.counted().shared:
		return kindShared
	}
	return kindPlace
}

// ticket is l's ticket as lua/grant.lua's parse reads it, and what a
// grant gives it when its turn comes: the line "kind ttl min fenced client
// listen limit toklen n len1 .. lenn" (ttl and min in ms, fenced 0 or 1,
// listen how the client hears messages, limit a semaphore's places, n the
// lengths that follow: a multi-key lock's keys and queues), then the
// token, those strings, and the value.
func (l *Lock) ticket() string {
	var b strings.Builder
	limit := 0
	if k := l.counted(); k != nil {
		limit = k.limit
	}
	var keys []string
	if l.multi() != nil {
		keys = l.queueKeys()
	}
	b.WriteString(l.kind())
	for _, n := range []int64{l.ttl.Milliseconds(), l.minHold().Milliseconds(), int64(b2i(l.fenced()))} {
		b.WriteByte(' ')
		b.WriteString(strconv.FormatInt(n, 10))
	}
	b.WriteByte(' ')
	b.WriteString(l.c.notify.id)
	b.WriteByte(' ')
	if l.c.kind == driver.Cluster {
		b.WriteString(listenPlain)
	} else {
		b.WriteString(listenSharded)
	}
	for _, n := range []int{limit, len(l.tok()), len(keys)} {
		b.WriteByte(' ')
		b.WriteString(strconv.Itoa(n))
	}
	for _, k := range keys {
		b.WriteByte(' ')
		b.WriteString(strconv.Itoa(len(k)))
	}
	b.WriteByte('\n')
	b.WriteString(l.tok())
	for _, k := range keys {
		b.WriteString(k)
	}
	b.WriteString(l.value)
	return b.String()
}

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}
