package padlockweb_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/padlock-go/padlock"
	"github.com/padlock-go/padlock/internal/redistest"
	"github.com/padlock-go/padlock/padlockweb"
)

func TestMain(m *testing.M) {
	redistest.Parallel(4)
	goleak.VerifyTestMain(m, goleak.IgnoreAnyFunction("github.com/redis/go-redis/v9/internal/pool.(*ConnPool).tryDial"))
}

// The path the tests mount the Handler at, as a service would (see the
// package doc).
const mount = "/ops/locks/"

// A site is a Handler on a real Redis, served on loopback.
type site struct {
	srv   *httptest.Server
	c     *padlock.Client
	redis *redistest.Server
}

// serve starts a Redis, a Client of it, and a server of the Client's
// Handler with opts under mount.
func serve(t *testing.T, opts ...padlockweb.Option) site {
	t.Helper()
	s := redistest.Start(t)
	c := padlock.New(s.Client())
	t.Cleanup(func() { _ = c.Close() })
	return site{srv: serveClient(t, c, opts...), c: c, redis: s}
}

// serveClient serves c's Handler with opts under mount.
func serveClient(t *testing.T, c *padlock.Client, opts ...padlockweb.Option) *httptest.Server {
	mux := http.NewServeMux()
	mux.Handle(mount, http.StripPrefix(strings.TrimSuffix(mount, "/"), padlockweb.Handler(c, opts...)))
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	return srv
}

// reply is what the site answered.
type reply struct {
	status int
	header http.Header
	body   string
}

// do sends req to the site's server, without following redirects.
func do(t *testing.T, srv *httptest.Server, req *http.Request) reply {
	t.Helper()
	client := *srv.Client()
	client.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	resp, err := client.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return reply{status: resp.StatusCode, header: resp.Header, body: string(body)}
}

// get GETs mount+rel with the Accept header accept ("" for none).
func get(t *testing.T, srv *httptest.Server, rel, accept string) reply {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, srv.URL+mount+rel, nil)
	require.NoError(t, err)
	if accept != "" {
		req.Header.Set("Accept", accept)
	}
	return do(t, srv, req)
}

// post POSTs form to mount+rel, with headers.
func post(t *testing.T, srv *httptest.Server, rel string, form url.Values, headers ...string) reply {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, srv.URL+mount+rel, strings.NewReader(form.Encode()))
	require.NoError(t, err)
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Set(headers[i], headers[i+1])
	}
	return do(t, srv, req)
}

const browser = "text/html,application/xhtml+xml,application/xml;q=0.9,*/*;q=0.8"

// take acquires key for a minute with opts, and releases it when the test
// ends.
func take(t *testing.T, c *padlock.Client, key string, opts ...padlock.Option) *padlock.Lock {
	t.Helper()
	l, err := c.TryAcquire(t.Context(), key, time.Minute, opts...)
	require.NoError(t, err)
	t.Cleanup(func() { _ = l.Release(context.Background()) })
	return l
}

// held reports whether key is held.
func held(t *testing.T, c *padlock.Client, key string) bool {
	t.Helper()
	info, err := c.Inspect(t.Context(), key)
	require.NoError(t, err)
	return info.Held
}

// The page names every lock, its kind, holders and metadata, rendered on
// the server, and offers no break without WithBreak.
func TestPageNamesEveryLock(t *testing.T) {
	t.Parallel()
	s := serve(t)
	take(t, s.c, "lock:report", padlock.WithFencing(), padlock.WithMetadata("host=web-3 job=daily"))
	take(t, s.c, "sem:crawl", padlock.WithLimit(3), padlock.WithMetadata("crawler 1"))
	take(t, s.c, "sem:crawl", padlock.WithLimit(3), padlock.WithMetadata("crawler 2"))
	take(t, s.c, "db:read", padlock.WithShared(), padlock.WithMetadata("reader 7"))
	lead, err := s.c.Campaign(t.Context(), "lead:scheduler", time.Minute, "host=web-9")
	require.NoError(t, err)
	t.Cleanup(func() { _ = lead.Resign(context.Background()) })

	for _, accept := range []string{"", browser} {
		r := get(t, s.srv, "", accept)
		require.Equal(t, http.StatusOK, r.status, r.body)
		assert.Equal(t, "text/html; charset=utf-8", r.header.Get("Content-Type"))
		assert.Contains(t, r.header.Get("Content-Security-Policy"), "default-src 'none'")
		assert.Contains(t, r.body, "4 locks held matching *")
		for _, want := range []string{
			`<tr data-key="db:read"><td class="key">db:read</td><td>shared</td><td class="n">1</td>`,
			`<tr data-key="lead:scheduler"><td class="key">lead:scheduler</td><td>leader</td><td class="n">1</td>`,
			`<tr data-key="lock:report"><td class="key">lock:report</td><td>lock</td><td class="n">1</td>`,
			`<tr data-key="sem:crawl"><td class="key">sem:crawl</td><td>semaphore</td><td class="n">2 of 3</td>`,
			`<td class="meta">host=web-3 job=daily</td>`,
			`<td class="meta">host=web-9</td>`,
			`<td class="meta">reader 7</td>`,
			`<td class="n">1</td><td class="n">0</td>`, // the report's fence, its waiters
		} {
			assert.Contains(t, r.body, want)
		}
		// Soonest to expire first: both taken within a millisecond expire together.
		assert.Regexp(t, "<td class=\"meta\">crawler (1\ncrawler 2|2\ncrawler 1)</td>", r.body, "each holder's, one a line")
		rows := regexp.MustCompile(`<tr data-key="([^"]*)"`).FindAllStringSubmatch(r.body, -1)
		var keys []string
		for _, m := range rows {
			keys = append(keys, m[1])
		}
		assert.Equal(t, []string{"db:read", "lead:scheduler", "lock:report", "sem:crawl"}, keys, "each once, by key")
		assert.NotContains(t, r.body, `action="break"`)
		assert.NotContains(t, r.body, `name="csrf"`)
		assert.NotContains(t, r.body, `data-csrf="`)
	}
}

// A waiter shows in its lock's row, with how long it has waited.
func TestPageShowsWaiters(t *testing.T) {
	t.Parallel()
	s := serve(t)
	take(t, s.c, "lock:busy")
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan struct{})
	go func() {
		defer close(done)
		_, _ = s.c.Acquire(ctx, "lock:busy", time.Minute)
	}()
	t.Cleanup(func() {
		cancel()
		<-done
	})
	require.Eventually(t, func() bool {
		return strings.Contains(get(t, s.srv, "", "").body, `<td class="n">1 (oldest `)
	}, 5*time.Second, 20*time.Millisecond)
}

// The page shows this process's holds and waits (its Client's), apart
// from the fleet's locks, and "here" serves them as JSON for its script.
func TestPageShowsThisProcess(t *testing.T) {
	t.Parallel()
	s := serve(t)
	other := padlock.New(s.redis.Client())
	t.Cleanup(func() { _ = other.Close() })
	mine := take(t, s.c, "lock:mine", padlock.WithFencing(), padlock.WithMetadata("<b>job 7</b>"))
	take(t, other, "lock:theirs", padlock.WithMetadata("elsewhere"))
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan struct{})
	go func() {
		defer close(done)
		_, _ = s.c.Acquire(ctx, "lock:theirs", time.Minute, padlock.WithMetadata("next"))
	}()
	t.Cleanup(func() {
		cancel()
		<-done
	})
	type hereJSON struct {
		Key, Kind, Token, Metadata string
		Waiting                    bool
		Fence                      int64
		ForMS                      int64 `json:"for_ms"`
		TTLMS                      int64 `json:"ttl_ms"`
	}
	var got []hereJSON
	require.Eventually(t, func() bool {
		r := get(t, s.srv, "here", "")
		require.Equal(t, http.StatusOK, r.status, r.body)
		assert.Equal(t, "application/json", r.header.Get("Content-Type"))
		got = nil
		require.NoError(t, json.Unmarshal([]byte(r.body), &got), r.body)
		return len(got) == 2
	}, 5*time.Second, 20*time.Millisecond, "the hold and the wait")
	assert.Equal(t, "lock:mine", got[0].Key, "longest first")
	assert.Equal(t, hereJSON{Key: "lock:mine", Kind: "lock", Token: mine.Token(), Metadata: "<b>job 7</b>", Fence: mine.Fence(),
		ForMS: got[0].ForMS, TTLMS: got[0].TTLMS}, got[0])
	assert.Positive(t, got[0].Fence)
	assert.InDelta(t, time.Until(mine.Deadline()).Milliseconds(), got[0].TTLMS, 1000)
	assert.Equal(t, "lock:theirs", got[1].Key)
	assert.True(t, got[1].Waiting)
	assert.Equal(t, "next", got[1].Metadata)
	assert.Zero(t, got[1].TTLMS)

	r := get(t, s.srv, "", "")
	require.Equal(t, http.StatusOK, r.status, r.body)
	assert.Contains(t, r.body, "2 locks held or awaited here matching *")
	assert.Contains(t, r.body, `<tr data-here="lock:mine `+mine.Token()+`"><td class="key">lock:mine</td><td>lock</td><td>held</td>`)
	assert.Contains(t, r.body, `<td class="meta">&lt;b&gt;job 7&lt;/b&gt;</td>`)
	assert.Regexp(t, `<tr data-here="lock:theirs [^"]+"><td class="key">lock:theirs</td><td>lock</td><td>waiting</td><td class="n">[0-9.sm]+</td><td class="n">\x{2013}</td><td class="n">\x{2013}</td><td class="meta">next</td>`, r.body)
	assert.Equal(t, 1, strings.Count(r.body, "elsewhere"), "another Client's hold is in the fleet's table only")

	r = get(t, s.srv, "here?match=lock:m*", "")
	require.NoError(t, json.Unmarshal([]byte(r.body), &got), r.body)
	require.Len(t, got, 1)
	assert.Equal(t, "lock:mine", got[0].Key)
	assert.Contains(t, get(t, s.srv, "?match=lock:m*", "").body, "1 lock held or awaited here matching lock:m*")
	r = get(t, s.srv, "here?match="+url.QueryEscape("ops:["), "")
	assert.Equal(t, http.StatusBadRequest, r.status, r.body)

	// Redis's glob: * takes '/' too, as in the fleet's table. A Lock that
	// Resume took again here has a row of its own.
	slash := take(t, s.c, "jobs/42")
	again, err := s.c.Resume(t.Context(), "jobs/42", slash.Token())
	require.NoError(t, err)
	r = get(t, s.srv, "", "")
	assert.Contains(t, r.body, `<tr data-here="jobs/42 `+slash.Token()+`"><td class="key">jobs/42</td>`)
	assert.Contains(t, r.body, `<tr data-here="jobs/42 `+slash.Token()+`#2"><td class="key">jobs/42</td>`)
	assert.Contains(t, r.body, `<tr data-key="jobs/42">`)
	require.NoError(t, again.Release(t.Context()))

	require.NoError(t, mine.Release(t.Context()))
	r = get(t, s.srv, "here?match=lock:m*", "")
	assert.Equal(t, "[]\n", r.body)
}

// A request of the page or of its JSON costs one listing (one SCAN pass,
// here of one page, and one script); one of "here" sends Redis nothing:
// a page left open costs a listing a second, as top does.
func TestOneListingPerRequest(t *testing.T) {
	t.Parallel()
	s := serve(t)
	take(t, s.c, "lock:a")
	raw := s.redis.Client()
	calls := func() (scans, scripts int64) {
		return redistest.Calls(t, raw, "scan"), redistest.Calls(t, raw, "evalsha") + redistest.Calls(t, raw, "eval")
	}
	get(t, s.srv, "", "") // the script is loaded
	for _, rel := range []string{"", "?match=lock:*"} {
		for _, accept := range []string{"", "application/json"} {
			scans, scripts := calls()
			r := get(t, s.srv, rel, accept)
			require.Equal(t, http.StatusOK, r.status, r.body)
			scans2, scripts2 := calls()
			assert.Equal(t, int64(1), scans2-scans, "SCANs of %q %q", rel, accept)
			assert.Equal(t, int64(1), scripts2-scripts, "scripts of %q %q", rel, accept)
		}
	}
	scans, scripts := calls()
	require.Equal(t, http.StatusOK, get(t, s.srv, "here", "").status)
	scans2, scripts2 := calls()
	assert.Equal(t, scans, scans2)
	assert.Equal(t, scripts, scripts2)
}

// The same URL with Accept: application/json is a JSON array of the
// locks, each as LockInfo's MarshalJSON writes it, sorted by key; [] when
// none is held.
func TestJSONArray(t *testing.T) {
	t.Parallel()
	s := serve(t)
	r := get(t, s.srv, "", "application/json")
	require.Equal(t, http.StatusOK, r.status, r.body)
	assert.Equal(t, "application/json", r.header.Get("Content-Type"))
	assert.Equal(t, "[]\n", r.body)

	take(t, s.c, "lock:b", padlock.WithMetadata("bee"))
	take(t, s.c, "lock:a", padlock.WithFencing(), padlock.WithMetadata("ay"))
	take(t, s.c, "sem:c", padlock.WithLimit(2))
	for _, accept := range []string{"application/json", "application/json; charset=utf-8", "text/plain;q=0.5, application/json"} {
		r = get(t, s.srv, "", accept)
		require.Equal(t, http.StatusOK, r.status, r.body)
		assert.Equal(t, "Accept", r.header.Get("Vary"))
		var got []map[string]any
		require.NoError(t, json.Unmarshal([]byte(r.body), &got), r.body)
		require.Len(t, got, 3, r.body)
		for i, key := range []string{"lock:a", "lock:b", "sem:c"} {
			info, err := s.c.Inspect(t.Context(), key)
			require.NoError(t, err)
			want, err := json.Marshal(info)
			require.NoError(t, err)
			var fields map[string]any
			require.NoError(t, json.Unmarshal(want, &fields))
			assert.Equal(t, slices.Sorted(mapKeys(fields)), slices.Sorted(mapKeys(got[i])), "the fields of %s", key)
			for _, f := range []string{"key", "held", "kind", "token", "metadata", "fence", "limit", "waiting"} {
				assert.Equal(t, fields[f], got[i][f], "%s of %s", f, key)
			}
		}
	}
}

func mapKeys(m map[string]any) func(func(string) bool) {
	return func(yield func(string) bool) {
		for k := range m {
			if !yield(k) {
				return
			}
		}
	}
}

// Metadata that is HTML is shown as text in the page and is a JSON string
// in the JSON: nothing of it runs.
func TestEscapesWhatRedisHolds(t *testing.T) {
	t.Parallel()
	s := serve(t)
	const evil = `<script>alert(1)</script>`
	take(t, s.c, `lock:"><img src=x onerror=alert(2)>`, padlock.WithMetadata(evil))
	take(t, s.c, "lock:evil", padlock.WithMetadata(evil))
	take(t, s.c, "sem:evil", padlock.WithLimit(2), padlock.WithMetadata(evil+"</td>"))

	r := get(t, s.srv, "", "")
	require.Equal(t, http.StatusOK, r.status, r.body)
	assert.NotContains(t, r.body, evil)
	assert.NotContains(t, r.body, "<img")
	assert.Equal(t, 1, strings.Count(r.body, "<script"), "the page's own script alone")
	assert.Contains(t, r.body, `<td class="meta">&lt;script&gt;alert(1)&lt;/script&gt;</td>`)
	assert.Contains(t, r.body, `<td class="meta">&lt;script&gt;alert(1)&lt;/script&gt;&lt;/td&gt;</td>`)
	assert.Contains(t, r.body, `<td class="key">lock:&#34;&gt;&lt;img src=x onerror=alert(2)&gt;</td>`)

	r = get(t, s.srv, "?match=lock:evil", "application/json")
	require.Equal(t, http.StatusOK, r.status, r.body)
	assert.NotContains(t, r.body, "<script")
	assert.Contains(t, r.body, `"metadata":"\u003cscript\u003ealert(1)\u003c/script\u003e"`)
	var got []struct{ Metadata string }
	require.NoError(t, json.Unmarshal([]byte(r.body), &got))
	require.Len(t, got, 1)
	assert.Equal(t, evil, got[0].Metadata)
}

// ?match= picks the keys; WithMatch is its default; a glob that Locks
// rejects is a 400 that says why.
func TestMatch(t *testing.T) {
	t.Parallel()
	s := serve(t)
	take(t, s.c, "lock:a")
	take(t, s.c, "job:b")
	keys := func(srv *httptest.Server, rel string) []string {
		t.Helper()
		r := get(t, srv, rel, "application/json")
		require.Equal(t, http.StatusOK, r.status, r.body)
		var got []struct{ Key string }
		require.NoError(t, json.Unmarshal([]byte(r.body), &got))
		var out []string
		for _, l := range got {
			out = append(out, l.Key)
		}
		return out
	}
	assert.Equal(t, []string{"job:b", "lock:a"}, keys(s.srv, ""))
	assert.Equal(t, []string{"lock:a"}, keys(s.srv, "?match=lock:*"))
	assert.Equal(t, []string{"job:b", "lock:a"}, keys(s.srv, "?match="), "an empty field: the default")
	jobs := serveClient(t, s.c, padlockweb.WithMatch("job:*"))
	assert.Equal(t, []string{"job:b"}, keys(jobs, ""))
	assert.Equal(t, []string{"lock:a"}, keys(jobs, "?match=lock:*"), "the query replaces the default")
	r := get(t, jobs, "?match=lock:*", "")
	assert.Contains(t, r.body, `<input name="match" value="lock:*">`)
	assert.Contains(t, r.body, "1 lock held matching lock:*")

	r = get(t, s.srv, "?match="+url.QueryEscape("ops:["), "")
	assert.Equal(t, http.StatusBadRequest, r.status)
	assert.Equal(t, "text/plain; charset=utf-8", r.header.Get("Content-Type"))
	assert.Contains(t, r.body, `padlockweb: padlock: invalid argument: the glob "ops:["`)
	r = get(t, s.srv, "?match="+url.QueryEscape("ops:["), "application/json")
	assert.Equal(t, http.StatusBadRequest, r.status)
	var e struct{ Error string }
	require.NoError(t, json.Unmarshal([]byte(r.body), &e), r.body)
	assert.Contains(t, e.Error, `the glob "ops:["`)
	r = get(t, serveClient(t, s.c, padlockweb.WithMatch("ops:[")), "", "")
	assert.Equal(t, http.StatusBadRequest, r.status, r.body)
}

// WithMaxLocks bounds a listing, and the page and the JSON say so.
func TestMaxLocks(t *testing.T) {
	t.Parallel()
	s := serve(t)
	for _, k := range []string{"lock:1", "lock:2", "lock:3"} {
		take(t, s.c, k)
	}
	srv := serveClient(t, s.c, padlockweb.WithMaxLocks(2))
	r := get(t, srv, "", "application/json")
	require.Equal(t, http.StatusOK, r.status, r.body)
	assert.Equal(t, "2", r.header.Get("Padlock-Truncated"))
	var got []struct{ Key string }
	require.NoError(t, json.Unmarshal([]byte(r.body), &got))
	assert.Len(t, got, 2)
	r = get(t, srv, "", "")
	assert.Contains(t, r.body, "2 locks held matching * (the first 2 found: narrow the glob to see the rest)")
	r = get(t, s.srv, "", "application/json")
	assert.Empty(t, r.header.Get("Padlock-Truncated"))
}

// breakToken reads the break forms' token from the page (the script's
// copy, for the rows it adds), and checks that each form has it.
func breakToken(t *testing.T, srv *httptest.Server) string {
	t.Helper()
	r := get(t, srv, "", "")
	require.Equal(t, http.StatusOK, r.status, r.body)
	m := regexp.MustCompile(`<tbody id="locks" data-match="[^"]*" data-csrf="([^"]+)">`).FindStringSubmatch(r.body)
	require.NotNil(t, m, "no break token: %s", r.body)
	for _, f := range regexp.MustCompile(`<input type="hidden" name="csrf" value="([^"]*)">`).FindAllStringSubmatch(r.body, -1) {
		assert.Equal(t, m[1], f[1])
	}
	return m[1]
}

// WithBreak: a POST with the page's token breaks the lock; one without it,
// with another, or from another origin changes nothing.
func TestBreak(t *testing.T) {
	t.Parallel()
	s := serve(t, padlockweb.WithBreak())
	stuck := take(t, s.c, "lock:stuck", padlock.WithFencing(), padlock.WithMetadata("pipeline 4711"))
	token := breakToken(t, s.srv)
	assert.Contains(t, get(t, s.srv, "", "").body, `<input type="hidden" name="key" value="lock:stuck">`)
	assert.NotEqual(t, token, breakToken(t, serveClient(t, s.c, padlockweb.WithBreak())), "each Handler its own token")

	tests := []struct {
		name    string
		form    url.Values
		headers []string
	}{
		{"no token", url.Values{"key": {"lock:stuck"}}, nil},
		{"empty token", url.Values{"key": {"lock:stuck"}, "csrf": {""}}, nil},
		{"wrong token", url.Values{"key": {"lock:stuck"}, "csrf": {token[:len(token)-1] + "x"}}, nil},
		{"cross-site", url.Values{"key": {"lock:stuck"}, "csrf": {token}}, []string{"Sec-Fetch-Site", "cross-site"}},
		{"other origin", url.Values{"key": {"lock:stuck"}, "csrf": {token}}, []string{"Origin", "https://evil.example"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := post(t, s.srv, "break", tt.form, tt.headers...)
			assert.Equal(t, http.StatusForbidden, r.status, r.body)
			assert.True(t, held(t, s.c, "lock:stuck"), "nothing changed")
		})
	}
	r := post(t, s.srv, "break?key=lock:stuck&csrf="+token, url.Values{})
	assert.Equal(t, http.StatusForbidden, r.status, "the token in the URL is not the form's")
	assert.True(t, held(t, s.c, "lock:stuck"))
	r = get(t, s.srv, "break?key=lock:stuck&csrf="+token, "")
	assert.Equal(t, http.StatusMethodNotAllowed, r.status)
	assert.Equal(t, "POST", r.header.Get("Allow"))
	assert.True(t, held(t, s.c, "lock:stuck"))
	r = post(t, s.srv, "break", url.Values{"csrf": {token}})
	assert.Equal(t, http.StatusBadRequest, r.status, "no key")

	r = post(t, s.srv, "break", url.Values{"key": {"lock:stuck"}, "csrf": {token}, "match": {"lock:*"}},
		"Origin", s.srv.URL, "Sec-Fetch-Site", "same-origin")
	assert.Equal(t, http.StatusSeeOther, r.status, r.body)
	assert.Equal(t, "./?match=lock%3A%2A", r.header.Get("Location"), "back to the page, wherever it is mounted")
	assert.False(t, held(t, s.c, "lock:stuck"))
	require.ErrorIs(t, stuck.Release(t.Context()), padlock.ErrNotHeld)

	// A tool asks for JSON: what it broke.
	take(t, s.c, "lock:again", padlock.WithMetadata("job 2"))
	r = post(t, s.srv, "break", url.Values{"key": {"lock:again"}, "csrf": {token}}, "Accept", "application/json")
	require.Equal(t, http.StatusOK, r.status, r.body)
	var info struct{ Key, Metadata string }
	require.NoError(t, json.Unmarshal([]byte(r.body), &info))
	assert.Equal(t, "lock:again", info.Key)
	assert.Equal(t, "job 2", info.Metadata)
	assert.False(t, held(t, s.c, "lock:again"))
}

// Without WithBreak there is no break at all, whatever the form holds.
func TestReadOnlyByDefault(t *testing.T) {
	t.Parallel()
	s := serve(t)
	take(t, s.c, "lock:kept")
	withBreak := serveClient(t, s.c, padlockweb.WithBreak())
	token := breakToken(t, withBreak) // a token of another Handler of the Client
	r := post(t, s.srv, "break", url.Values{"key": {"lock:kept"}, "csrf": {token}})
	assert.Equal(t, http.StatusNotFound, r.status, r.body)
	r = post(t, s.srv, "break", url.Values{"key": {"lock:kept"}, "csrf": {""}})
	assert.Equal(t, http.StatusNotFound, r.status, r.body)
	assert.True(t, held(t, s.c, "lock:kept"))
}

// The page is GET and HEAD; other paths are not found.
func TestMethodsAndPaths(t *testing.T) {
	t.Parallel()
	s := serve(t)
	r := post(t, s.srv, "", url.Values{})
	assert.Equal(t, http.StatusMethodNotAllowed, r.status)
	assert.Equal(t, "GET, HEAD", r.header.Get("Allow"))
	req, err := http.NewRequestWithContext(t.Context(), http.MethodHead, s.srv.URL+mount, nil)
	require.NoError(t, err)
	assert.Equal(t, http.StatusOK, do(t, s.srv, req).status)
	for _, rel := range []string{"nope", "break/x", "x/break"} {
		assert.Equal(t, http.StatusNotFound, get(t, s.srv, rel, "").status, rel)
	}
}

// A closed Client, a Redis that is down and one that does not answer in
// time are each a 503 with a one-line message, not a panic.
func TestRedisFailures(t *testing.T) {
	t.Parallel()
	t.Run("closed", func(t *testing.T) {
		t.Parallel()
		s := serve(t)
		require.NoError(t, s.c.Close())
		r := get(t, s.srv, "", "")
		assert.Equal(t, http.StatusServiceUnavailable, r.status)
		assert.Equal(t, "text/html; charset=utf-8", r.header.Get("Content-Type"))
		assert.Contains(t, r.body, `<p id="status" class="stale">not listed (padlockweb: padlock: client closed`)
		assert.Contains(t, r.body, `<tbody id="here">`, "the page, with this process's table")
		r = get(t, s.srv, "", "application/json")
		assert.Equal(t, http.StatusServiceUnavailable, r.status)
		assert.JSONEq(t, `{"error": "padlockweb: padlock: client closed: list the locks \"*\" after Close"}`, r.body)
	})
	t.Run("down", func(t *testing.T) {
		t.Parallel()
		rdb := redis.NewClient(&redis.Options{Addr: redistest.DeadAddr(t), MaxRetries: -1})
		c := padlock.New(rdb)
		t.Cleanup(func() { _ = c.Close(); _ = rdb.Close() })
		srv := serveClient(t, c)
		r := get(t, srv, "", "")
		assert.Equal(t, http.StatusServiceUnavailable, r.status)
		assert.Contains(t, r.body, "not listed (padlockweb: padlock: list the locks", r.body)
		assert.Contains(t, r.body, "0 locks held or awaited here matching *")
		r = get(t, srv, "", "application/json")
		assert.Equal(t, http.StatusServiceUnavailable, r.status)
		assert.Contains(t, r.body, `"error":"padlockweb: padlock: list the locks`)
		r = get(t, srv, "here", "")
		assert.Equal(t, http.StatusOK, r.status, "this process's table needs no Redis")
		assert.Equal(t, "[]\n", r.body)
	})
	t.Run("silent", func(t *testing.T) {
		t.Parallel()
		s := serve(t)
		srv := serveClient(t, s.c, padlockweb.WithTimeout(300*time.Millisecond))
		s.redis.Pause()
		t.Cleanup(s.redis.Resume)
		start := time.Now()
		r := get(t, srv, "", "application/json")
		assert.Equal(t, http.StatusServiceUnavailable, r.status, r.body)
		assert.Contains(t, r.body, "deadline exceeded")
		assert.Less(t, time.Since(start), 5*time.Second, "bounded by WithTimeout, not go-redis's read timeout")
	})
}

// A program's mistakes panic in Handler, when it starts.
func TestHandlerPanics(t *testing.T) {
	t.Parallel()
	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"})
	c := padlock.New(rdb)
	t.Cleanup(func() { _ = c.Close(); _ = rdb.Close() })
	assert.NotPanics(t, func() { padlockweb.Handler(c, nil, padlockweb.WithTimeout(time.Second)) })
	assert.PanicsWithValue(t, "padlockweb: Handler of a nil Client", func() { padlockweb.Handler(nil) })
	for _, opt := range []padlockweb.Option{padlockweb.WithMatch(""), padlockweb.WithTimeout(0), padlockweb.WithMaxLocks(-1)} {
		assert.Panics(t, func() { padlockweb.Handler(c, opt) })
	}
}
