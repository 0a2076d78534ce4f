package padlockweb

import (
	"net/http"
	"path"
	"strconv"
	"strings"
	"time"
)

// hereJSON is a hold or wait of this process as the JSON of "here"
// carries it; page.html's script renders it as hereRowOf does.
type hereJSON struct {
	Key      string   `json:"key"`
	Keys     []string `json:"keys,omitempty"` // a multi-key lock's
	Kind     string   `json:"kind"`
	Waiting  bool     `json:"waiting"`
	Token    string   `json:"token"`
	Metadata string   `json:"metadata"`
	Fence    int64    `json:"fence"`
	ForMS    int64    `json:"for_ms"` // how long it has been held, or waited
	TTLMS    int64    `json:"ttl_ms"` // a hold's time to its local deadline; 0 for a wait
}

// here returns what h's Client holds and waits for now whose key matches
// match (a glob that Locks accepted), longest first.
func (h *handler) here(match string) []hereJSON {
	locals := h.c.Local()
	now := time.Now()   // after Local: no Since is later
	out := []hereJSON{} // [] in JSON, not null
	for _, l := range locals {
		if !globMatch(match, l.Key) {
			continue
		}
		j := hereJSON{Key: l.Key, Keys: l.Keys, Kind: l.Kind, Waiting: l.Waiting, Token: l.Token,
			Metadata: l.Metadata, Fence: l.Fence, ForMS: now.Sub(l.Since).Milliseconds()}
		if !l.Waiting {
			j.TTLMS = max(l.Deadline.Sub(now).Milliseconds(), 1) // listed: its deadline is to come
		}
		out = append(out, j)
	}
	return out
}

// serveHere answers the JSON of this process's holds and waits whose key
// matches the URL's ?match= (else WithMatch's), for the page's script.
func (h *handler) serveHere(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		w.Header().Set("Allow", "GET, HEAD")
		h.fail(w, r, http.StatusMethodNotAllowed, "padlockweb: here takes GET")
		return
	}
	match := h.match(r)
	if _, err := path.Match(match, ""); err != nil {
		h.fail(w, r, http.StatusBadRequest, "padlockweb: "+err.Error())
		return
	}
	w.Header().Set("Cache-Control", "no-store")
	writeJSON(w, http.StatusOK, h.here(match))
}

// A hereRow is a hold or wait of this process as the page's table shows
// it: its cells' text.
type hereRow struct {
	ID, Key, Kind, State, For, Left, Fence, Metadata string
}

// hereRows is the rows of js. Each has an id, key and token (and "#2",
// "#3"... for a second, third... with both the same: a Lock Resume took
// again in this process), by which the page's script finds it.
func hereRows(js []hereJSON) []hereRow {
	rows := make([]hereRow, len(js))
	seen := map[string]int{}
	for i, j := range js {
		rows[i] = hereRowOf(j)
		id := j.Key + " " + j.Token
		seen[id]++
		if n := seen[id]; n > 1 {
			id += "#" + strconv.Itoa(n)
		}
		rows[i].ID = id
	}
	return rows
}

// hereRowOf is the row of j, but for its ID. page.html's script computes
// the same from j's JSON: a change here is a change there.
func hereRowOf(j hereJSON) hereRow {
	r := hereRow{Key: j.Key, Kind: j.Kind, State: "held", For: duration(time.Duration(j.ForMS) * time.Millisecond),
		Left: duration(time.Duration(j.TTLMS) * time.Millisecond), Fence: none, Metadata: orNone(j.Metadata)}
	if len(j.Keys) > 0 {
		r.Key = strings.Join(j.Keys, "\n")
	}
	if j.Waiting {
		r.State, r.Left = "waiting", none
	}
	if j.Fence > 0 {
		r.Fence = strconv.FormatInt(j.Fence, 10)
	}
	return r
}
