package padlockweb

import (
	"context"
	"crypto/subtle"
	"errors"
	"net/http"
	"net/url"

	"github.com/padlock-go/padlock"
)

// maxForm bounds the body of a break: a key, a glob and a token.
const maxForm = 64 << 10

// breakLock serves a POST of "break": the form's key is broken if its csrf
// field is the Handler's token and no browser said the POST came from
// another origin. It answers 404 without WithBreak, 405 to another method,
// 403 to a refused POST, 400 to a form without a key, 503 when Redis fails;
// after the break, 303 back to the page, or to a request that accepts JSON,
// 200 and the LockInfo of what was broken.
func (h *handler) breakLock(w http.ResponseWriter, r *http.Request) {
	switch {
	case h.csrf == "":
		h.fail(w, r, http.StatusNotFound, "padlockweb: breaking locks is off (padlockweb.WithBreak turns it on)")
		return
	case r.Method != http.MethodPost:
		w.Header().Set("Allow", "POST")
		h.fail(w, r, http.StatusMethodNotAllowed, "padlockweb: a break is a POST")
		return
	}
	if err := h.origins.Check(r); err != nil {
		h.fail(w, r, http.StatusForbidden, "padlockweb: refused a break from another origin")
		return
	}
	r.Body = http.MaxBytesReader(w, r.Body, maxForm)
	if err := r.ParseForm(); err != nil {
		h.fail(w, r, http.StatusBadRequest, "padlockweb: a break's form: "+err.Error())
		return
	}
	if subtle.ConstantTimeCompare([]byte(r.PostForm.Get("csrf")), []byte(h.csrf)) != 1 {
		h.fail(w, r, http.StatusForbidden, "padlockweb: the break's form token is missing or wrong (reload the page)")
		return
	}
	key := r.PostForm.Get("key")
	if key == "" {
		h.fail(w, r, http.StatusBadRequest, "padlockweb: a break names the key it breaks")
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), h.cfg.timeout)
	defer cancel()
	info, err := h.c.Break(ctx, key)
	if err != nil {
		status := http.StatusServiceUnavailable
		if errors.Is(err, padlock.ErrInvalid) {
			status = http.StatusBadRequest
		}
		h.fail(w, r, status, "padlockweb: "+err.Error())
		return
	}
	if wantsJSON(r) {
		writeJSON(w, http.StatusOK, info)
		return
	}
	// Back to the page, the directory of "break", relative: the Handler
	// does not know the path it is mounted at (http.StripPrefix hides it);
	// with the form's glob, unless it is the default.
	back := "./"
	if match := r.PostForm.Get("match"); match != "" && match != h.cfg.match {
		back += "?" + url.Values{"match": {match}}.Encode()
	}
	w.Header().Set("Location", back)
	w.WriteHeader(http.StatusSeeOther)
}
