package padlockweb

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"mime"
	"net/http"
	"path"
	"slices"
	"strconv"
	"strings"

	"github.com/padlock-go/padlock"
)

// Handler returns an http.Handler of the page of c's locks: every lock held
// in c's deployment (Client.Locks) whose key matches the glob of the URL's
// ?match= parameter, else WithMatch's, else "*"; and, in a table of their
// own, the holds and waits of c itself, this process's (Client.Local), whose
// key matches.
//
// It serves, under the path it is mounted at (which ends in a slash):
//
//   - GET (and HEAD) of the path itself: the page, rendered on the server,
//     that names every lock, its kind, holders, how long it has been held,
//     its time left, fencing counter, waiters and metadata, and refreshes
//     itself every second without a reload (a few lines of script, fetching
//     the JSON; without script the page is simply not refreshed). With the
//     header Accept: application/json, the same URL answers a JSON array of
//     the locks, each in the shape of padlock.LockInfo's MarshalJSON (the
//     objects of `padlock list -json`), sorted by key; tokens included.
//   - GET of "here": this process's holds and waits whose key matches, as a
//     JSON array, longest first, each {"key", "keys" (a multi-key lock's),
//     "kind", "waiting", "token", "metadata", "fence", "for_ms" (how long
//     held, or waited), "ttl_ms" (to a hold's local deadline; 0 for a
//     wait)}: what the page's script refreshes its second table from. It
//     makes no round trip.
//   - POST of "break", only WithBreak (see there).
//
// Each request of the page or its JSON reads Redis once, within
// WithTimeout. A glob that Locks rejects answers 400; a Redis that fails or
// does not answer in time, or a Client that is closed, answers 503: the
// page still, saying why in place of the count of the fleet's locks, with
// this process's table (its script tries again every second), or, to a
// request that accepts JSON, {"error": "..."}. Every value from Redis
// is escaped in the page, and the page's script writes them as text.
//
// Handler panics if c is nil or an option is out of range (an empty
// WithMatch, a WithTimeout or WithMaxLocks of zero or less): a program's
// mistake, found when it starts. It starts no goroutine.
func Handler(c *padlock.Client, opts ...Option) http.Handler {
	if c == nil {
		panic("padlockweb: Handler of a nil Client")
	}
	cfg := defaultConfig()
	for _, o := range opts {
		if o != nil {
			o.apply(&cfg)
		}
	}
	cfg.check()
	h := &handler{c: c, cfg: cfg}
	if cfg.breaks {
		h.csrf = rand.Text()
		h.origins = http.NewCrossOriginProtection()
	}
	return h
}

// handler is what Handler returns.
type handler struct {
	c       *padlock.Client
	cfg     config
	csrf    string                      // the break form's token; "" without WithBreak
	origins *http.CrossOriginProtection // refuses a browser's cross-origin break; nil without WithBreak
}

// ServeHTTP serves the page, its JSON, or a break, by the last element of
// the URL's path: "" or "break".
func (h *handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	switch _, file := path.Split(r.URL.Path); file {
	case "":
		h.index(w, r)
	case "break":
		h.breakLock(w, r)
	case "here":
		h.serveHere(w, r)
	default:
		http.NotFound(w, r)
	}
}

// index serves the page of the locks, or their JSON.
func (h *handler) index(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		w.Header().Set("Allow", "GET, HEAD")
		h.fail(w, r, http.StatusMethodNotAllowed, "padlockweb: the page takes GET")
		return
	}
	w.Header().Set("Vary", "Accept")
	w.Header().Set("Cache-Control", "no-store")
	match := h.match(r)
	locks, truncated, err := h.list(r.Context(), match)
	switch {
	case errors.Is(err, padlock.ErrInvalid):
		h.fail(w, r, http.StatusBadRequest, "padlockweb: "+err.Error())
		return
	case err != nil && wantsJSON(r):
		h.fail(w, r, http.StatusServiceUnavailable, "padlockweb: "+err.Error())
		return
	case err != nil:
		// The page still, with what this process holds (no round trip),
		// and its script to try again.
		h.page(w, http.StatusServiceUnavailable, match, pageData{Error: "padlockweb: " + err.Error()})
		return
	}
	if truncated {
		w.Header().Set("Padlock-Truncated", strconv.Itoa(h.cfg.maxLocks))
	}
	if wantsJSON(r) {
		writeJSON(w, http.StatusOK, locks)
		return
	}
	data := pageData{Count: count(len(locks))}
	if truncated {
		data.Truncated = h.cfg.maxLocks
	}
	for _, l := range locks {
		data.Rows = append(data.Rows, rowOf(l))
	}
	h.page(w, http.StatusOK, match, data)
}

// match is the glob the request asks for: its ?match=, else WithMatch's.
func (h *handler) match(r *http.Request) string {
	if m := r.URL.Query().Get("match"); m != "" {
		return m
	}
	return h.cfg.match
}

// list reads the locks that match, at most WithMaxLocks of them (truncated
// if there were more), sorted by key.
func (h *handler) list(ctx context.Context, match string) (locks []padlock.LockInfo, truncated bool, err error) {
	ctx, cancel := context.WithTimeout(ctx, h.cfg.timeout)
	defer cancel()
	locks = []padlock.LockInfo{} // [] in JSON, not null
	for info, err := range h.c.Locks(ctx, match) {
		if err != nil {
			return nil, false, err
		}
		if len(locks) == h.cfg.maxLocks {
			truncated = true
			break
		}
		locks = append(locks, info)
	}
	slices.SortFunc(locks, func(a, b padlock.LockInfo) int { return strings.Compare(a.Key, b.Key) })
	return locks, truncated, nil
}

// page writes the HTML page of data (the fleet's locks, or the error that
// kept them from being listed) and this process's holds, with status,
// rendered in full before anything is written, so that a failure is a 500
// rather than half a page.
func (h *handler) page(w http.ResponseWriter, status int, match string, data pageData) {
	data.Match, data.Nonce, data.CSRF = match, rand.Text(), h.csrf
	here := h.here(match)
	data.HereCount = count(len(here))
	data.Here = hereRows(here)
	var buf bytes.Buffer
	if err := pageTemplate.Execute(&buf, data); err != nil {
		http.Error(w, "padlockweb: render the page: "+err.Error(), http.StatusInternalServerError)
		return
	}
	hd := w.Header()
	hd.Set("Content-Type", "text/html; charset=utf-8")
	hd.Set("Content-Security-Policy", "default-src 'none'; script-src 'nonce-"+data.Nonce+"'; style-src 'nonce-"+data.Nonce+"'; "+
		"connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'")
	hd.Set("X-Content-Type-Options", "nosniff")
	hd.Set("Referrer-Policy", "no-referrer")
	w.WriteHeader(status)
	_, _ = w.Write(buf.Bytes())
}

// fail answers status with msg, one line: as JSON to a request that
// accepts it, else as text.
func (h *handler) fail(w http.ResponseWriter, r *http.Request, status int, msg string) {
	if wantsJSON(r) {
		writeJSON(w, status, map[string]string{"error": msg})
		return
	}
	http.Error(w, msg, status)
}

// writeJSON answers status with v as JSON.
func writeJSON(w http.ResponseWriter, status int, v any) {
	body, err := json.Marshal(v)
	if err != nil {
		http.Error(w, "padlockweb: "+err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(status)
	_, _ = w.Write(append(body, '\n'))
}

// wantsJSON reports whether r's Accept header asks for application/json
// before (or without) text/html.
func wantsJSON(r *http.Request) bool {
	for _, accept := range r.Header.Values("Accept") {
		for _, part := range strings.Split(accept, ",") {
			mt, params, err := mime.ParseMediaType(strings.TrimSpace(part))
			if err != nil || refused(params["q"]) {
				continue
			}
			switch mt {
			case "application/json":
				return true
			case "text/html":
				return false
			}
		}
	}
	return false
}

// refused reports whether q, the q parameter of a media range, refuses it
// (is 0).
func refused(q string) bool {
	f, err := strconv.ParseFloat(q, 64)
	return err == nil && f == 0
}
