package padlockweb

import (
	"fmt"
	"time"
)

// An Option configures a Handler.
type Option interface {
	apply(*config)
}

// config holds every setting an Option can change; defaultConfig has the
// defaults.
type config struct {
	match    string        // WithMatch
	timeout  time.Duration // WithTimeout
	maxLocks int           // WithMaxLocks
	breaks   bool          // WithBreak
}

func defaultConfig() config {
	return config{match: "*", timeout: 5 * time.Second, maxLocks: 1000}
}

// check panics on a setting no Handler can run with (see Handler).
func (c config) check() {
	switch {
	case c.match == "":
		panic("padlockweb: WithMatch(\"\"): an empty glob matches no key (\"*\" matches every one)")
	case c.timeout <= 0:
		panic(fmt.Sprintf("padlockweb: WithTimeout(%v): the timeout must be positive", c.timeout))
	case c.maxLocks <= 0:
		panic(fmt.Sprintf("padlockweb: WithMaxLocks(%d): the number must be positive", c.maxLocks))
	}
}

type optionFunc func(*config)

func (f optionFunc) apply(c *config) { f(c) }

// WithMatch sets the glob (Redis's, as Client.Locks takes it) of the keys
// the page shows when its URL has no ?match= parameter; the default is "*",
// every lock. It is a default, not a restriction: a ?match= in the URL
// replaces it. A glob that Client.Locks rejects makes every request without
// ?match= a 400 that says why; an empty glob panics in Handler.
func WithMatch(glob string) Option {
	return optionFunc(func(c *config) { c.match = glob })
}

// WithTimeout bounds how long one request may spend reading the locks from
// Redis (the whole listing) or breaking one; the default is 5s. A request
// that runs out of it answers 503. A d of zero or less panics in Handler.
func WithTimeout(d time.Duration) Option {
	return optionFunc(func(c *config) { c.timeout = d })
}

// WithMaxLocks bounds how many locks one request lists: the first n that
// Redis's SCAN finds, sorted by key; the page then says that it shows only
// part of them (narrow the glob to see the rest), and the JSON answer has
// the header Padlock-Truncated: n. The default is 1,000. An n of zero or
// less panics in Handler.
func WithMaxLocks(n int) Option {
	return optionFunc(func(c *config) { c.maxLocks = n })
}

// WithBreak turns on the page's break action: a button on each lock that
// ends whatever holds it (Client.Break: its holders lose it, its fencing
// counter advances, its waiters are served). Without it the Handler is
// read-only: it shows no button and refuses every break (404).
//
// A break is a POST of a form that carries a token the Handler makes at
// random when it is created and writes into its page; a break without it,
// or with another, is refused (403) and changes nothing. So is a browser's
// cross-origin POST (its Origin or Sec-Fetch-Site header, as
// net/http.CrossOriginProtection checks them). Whoever can read the page
// can break locks: mount it behind the same access control as the rest of
// an operator's tools.
func WithBreak() Option {
	return optionFunc(func(c *config) { c.breaks = true })
}
