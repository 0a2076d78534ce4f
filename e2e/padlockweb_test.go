package e2e

import (
	"context"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/page"
	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/padlock-go/padlock"
	"github.com/padlock-go/padlock/internal/redistest"
	"github.com/padlock-go/padlock/padlockweb"
)

// evil is metadata that would run, were the page to write it as HTML.
const evil = `<script>alert(1)</script>`

// chromium is the path of the browser. Without one on PATH the test is
// skipped, or fails when PADLOCK_REDIS=required (CI).
func chromium(t *testing.T) string {
	t.Helper()
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome"} {
		if path, err := exec.LookPath(name); err == nil {
			return path
		}
	}
	if redistest.Required() {
		t.Fatal("PADLOCK_REDIS=required but no chromium on PATH (apt-get install chromium)")
	}
	t.Skip("no chromium on PATH; set PADLOCK_REDIS=required to fail instead")
	return ""
}

// fleet starts a Redis and returns two Clients of it (the page's, and
// another process's), closed when the test ends.
func fleet(t *testing.T) (c, other *padlock.Client) {
	t.Helper()
	srv := redistest.Start(t)
	c, other = padlock.New(srv.Client()), padlock.New(srv.Client())
	t.Cleanup(func() {
		_ = c.Close()
		_ = other.Close()
	})
	return c, other
}

// take acquires key for a minute with opts; the test releases it when it
// ends, if it still holds it.
func take(t *testing.T, c *padlock.Client, key string, opts ...padlock.Option) *padlock.Lock {
	t.Helper()
	l, err := c.TryAcquire(t.Context(), key, time.Minute, opts...)
	require.NoError(t, err)
	t.Cleanup(func() { _ = l.Release(context.Background()) })
	return l
}

// serve serves c's page under /debug/padlock/, as a service mounts it, and
// returns its URL.
func serve(t *testing.T, c *padlock.Client, opts ...padlockweb.Option) string {
	t.Helper()
	mux := http.NewServeMux()
	mux.Handle("/debug/padlock/", http.StripPrefix("/debug/padlock", padlockweb.Handler(c, opts...)))
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	return srv.URL + "/debug/padlock/"
}

// A tab is a page open in headless Chromium, and the dialogs (alert,
// confirm...) that opened in it.
type tab struct {
	ctx context.Context

	mu      sync.Mutex
	dialogs []string // "type: message"
	accept  bool     // whether to accept the next dialogs (else dismiss)
}

// open opens url in a new headless Chromium, closed when the test ends.
func open(t *testing.T, url string) *tab {
	t.Helper()
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(chromium(t)),
		chromedp.NoSandbox, // CI runs as root
		chromedp.DisableGPU,
		chromedp.WindowSize(1000, 420),
	)
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancel := chromedp.NewContext(actx)
	tb := &tab{ctx: ctx}
	require.NoError(t, chromedp.Do(ctx), "start chromium") // with no timeout: the browser lives as long as ctx
	dialogs := chromedp.Events(ctx, page.JavascriptDialogOpening)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for ev, err := range dialogs {
			if err != nil {
				return // the tab closed
			}
			tb.mu.Lock()
			tb.dialogs = append(tb.dialogs, string(ev.Type)+": "+ev.Message)
			accept := tb.accept
			tb.mu.Unlock()
			_, _ = chromedp.Call(ctx, page.HandleJavaScriptDialog, page.HandleJavaScriptDialogParams{Accept: accept})
		}
	}()
	t.Cleanup(func() {
		cancel()
		cancelAlloc()
		<-done
	})
	do(t, tb, chromedp.Navigate(url))
	return tb
}

// run runs a on the tab, within 30s.
func run[T any](t *testing.T, tb *tab, a chromedp.Action[T]) T {
	t.Helper()
	ctx, cancel := context.WithTimeout(tb.ctx, 30*time.Second)
	defer cancel()
	v, err := chromedp.Run(ctx, a)
	require.NoError(t, err)
	return v
}

// do runs steps on the tab, within 30s.
func do(t *testing.T, tb *tab, steps ...chromedp.Action[chromedp.Void]) {
	t.Helper()
	ctx, cancel := context.WithTimeout(tb.ctx, 30*time.Second)
	defer cancel()
	require.NoError(t, chromedp.Do(ctx, steps...))
}

// eval evaluates the JavaScript expression js in the page.
func eval[T any](t *testing.T, tb *tab, js string) T {
	t.Helper()
	return run(t, tb, chromedp.Evaluate[T](js))
}

// waitFor evaluates js every 20ms until it is true, and reports whether it
// was within d. (chromedp.Poll builds its predicate with new Function,
// which the page's Content-Security-Policy forbids; an evaluation from
// DevTools is not subject to it.)
func waitFor(t *testing.T, tb *tab, js string, d time.Duration) bool {
	t.Helper()
	deadline := time.Now().Add(d)
	for {
		if eval[bool](t, tb, js) {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// row is the CSS selector of key's row.
func row(key string) string { return `tr[data-key="` + key + `"]` }

// has is a JavaScript expression: whether the page has an element that
// matches the CSS selector sel (which has no backquote).
func has(sel string) string { return "document.querySelector(`" + sel + "`) !== null" }

// cells is a JavaScript expression: the text of each cell of each row.
const cells = `Array.from(document.querySelectorAll("#locks tr")).map(tr => Array.from(tr.cells).map(td => td.textContent))`

// refreshed is a JavaScript expression: whether the page's script has
// refreshed the table from the JSON.
const refreshed = `document.getElementById("status").textContent.includes("refreshed at")`

func (tb *tab) seen() []string {
	tb.mu.Lock()
	defer tb.mu.Unlock()
	return append([]string(nil), tb.dialogs...)
}

// The page in a browser: it lists each lock with its metadata as text (a
// script in it does not run), refreshes itself without a reload (a lock
// taken shows up, a lock released is gone within 2s), and has no break
// control.
func TestPageInChromium(t *testing.T) {
	c, other := fleet(t)
	take(t, other, "lock:evil", padlock.WithFencing(), padlock.WithMetadata(evil))
	plain := take(t, other, "lock:plain", padlock.WithMetadata("host=web-3 job=daily"))
	tb := open(t, serve(t, c))

	do(t, tb, chromedp.WaitVisible(chromedp.CSS(row("lock:evil"))))
	assert.Equal(t, evil, run(t, tb, chromedp.TextContent(chromedp.CSS(row("lock:evil")+" td.meta"))))
	assert.Equal(t, "host=web-3 job=daily", run(t, tb, chromedp.TextContent(chromedp.CSS(row("lock:plain")+" td.meta"))))
	served := eval[[][]string](t, tb, cells)
	eval[chromedp.Void](t, tb, `window.padlockMark = "this document"`) // a reload would lose it

	require.True(t, waitFor(t, tb, refreshed, 5*time.Second), "the script refreshed the table")
	assert.Contains(t, run(t, tb, chromedp.TextContent(chromedp.CSS(row("lock:evil")+" td.meta"))), evil, "written as text again")
	scripted := eval[[][]string](t, tb, cells)
	require.Len(t, scripted, len(served))
	for i := range served {
		for _, col := range []int{0, 1, 2, 5, 6, 7} { // all but the times, which move
			assert.Equal(t, served[i][col], scripted[i][col], "row %d, column %d: the script writes what the server did", i, col)
		}
	}
	assert.Equal(t, 1, eval[int](t, tb, `document.scripts.length`), "the page's own script alone")
	assert.Equal(t, 0, eval[int](t, tb, `document.querySelectorAll('form[method="post"], input[name="csrf"], [data-csrf]').length`),
		"no break control without WithBreak")

	take(t, other, "lock:late", padlock.WithMetadata(evil+" late"))
	require.True(t, waitFor(t, tb, has(row("lock:late")), 3*time.Second), "a lock taken after the page loaded shows up")
	assert.Equal(t, evil+" late", run(t, tb, chromedp.TextContent(chromedp.CSS(row("lock:late")+" td.meta"))))
	assert.Equal(t, 0, eval[int](t, tb, `document.querySelectorAll("#locks form, #locks button").length`), "nor in a row the script added")

	require.NoError(t, plain.Release(t.Context()))
	released := time.Now()
	require.True(t, waitFor(t, tb, "!("+has(row("lock:plain"))+")", 2*time.Second), "gone within 2s of its release")
	t.Logf("the released lock left the page %v after its release", time.Since(released).Round(time.Millisecond))
	assert.True(t, eval[bool](t, tb, has(row("lock:evil"))))
	assert.Equal(t, "this document", eval[string](t, tb, `window.padlockMark`), "no reload")
	assert.Empty(t, tb.seen(), "no dialog opened: no script of the metadata ran")
	assert.Equal(t, 0, eval[int](t, tb, `document.querySelectorAll("#here tr").length`), "the page's Client holds nothing")
}

// hereCells is a JavaScript expression: the text of each cell of each row
// of this process's table.
const hereCells = `Array.from(document.querySelectorAll("#here tr")).map(tr => Array.from(tr.cells).map(td => td.textContent))`

// hereRow is the CSS selector of the rows of key in this process's table.
func hereRow(key string) string { return `tr[data-here^="` + key + ` "]` }

// The page shows what its own Client holds and waits for, apart from the
// fleet, and keeps it up to date without a reload: a wait that becomes a
// hold, a hold released.
func TestThisProcessInChromium(t *testing.T) {
	c, other := fleet(t)
	mine := take(t, c, "lock:mine", padlock.WithFencing(), padlock.WithMetadata(evil+" mine"))
	theirs := take(t, other, "lock:theirs", padlock.WithMetadata("elsewhere"))
	ctx, cancel := context.WithCancel(t.Context())
	got := make(chan *padlock.Lock, 1)
	go func() {
		defer close(got)
		if l, err := c.Acquire(ctx, "lock:theirs", time.Minute, padlock.WithMetadata("next")); err == nil {
			got <- l
		}
	}()
	t.Cleanup(func() {
		cancel()
		if l := <-got; l != nil {
			_ = l.Release(context.Background())
		}
	})
	time.Sleep(100 * time.Millisecond) // the Acquire waits (a page loaded before shows it on its first refresh)
	tb := open(t, serve(t, c))

	do(t, tb, chromedp.WaitVisible(chromedp.CSS(hereRow("lock:mine"))))
	require.True(t, waitFor(t, tb, has(hereRow("lock:theirs")), 3*time.Second), "the wait")
	served := eval[[][]string](t, tb, hereCells)
	require.True(t, waitFor(t, tb, refreshed, 5*time.Second), "the script refreshed the tables")
	scripted := eval[[][]string](t, tb, hereCells)
	require.Len(t, served, 2)
	require.Len(t, scripted, len(served))
	for i := range served {
		for _, col := range []int{0, 1, 2, 5, 6} { // all but the times, which move
			assert.Equal(t, served[i][col], scripted[i][col], "row %d, column %d: the script writes what the server did", i, col)
		}
	}
	assert.Equal(t, []string{"lock:mine", "lock", "held"}, scripted[0][:3])
	assert.Equal(t, evil+" mine", scripted[0][6], "as text")
	assert.Equal(t, []string{"lock:theirs", "lock", "waiting"}, scripted[1][:3])
	assert.Equal(t, "next", scripted[1][6])
	assert.Equal(t, 1, eval[int](t, tb, `document.querySelectorAll(`+"`"+row("lock:theirs")+"`"+`).length`), "theirs in the fleet's table")

	require.NoError(t, theirs.Release(t.Context()))
	released := time.Now()
	held := "document.querySelector(`" + hereRow("lock:theirs") + "`)?.cells[2].textContent === \"held\""
	require.True(t, waitFor(t, tb, held, 2*time.Second), "the wait became a hold within 2s")
	require.NoError(t, mine.Release(t.Context()))
	require.True(t, waitFor(t, tb, "!("+has(hereRow("lock:mine"))+")", 2*time.Second), "gone within 2s of its release")
	t.Logf("the page showed the hand-off and the release within %v", time.Since(released).Round(time.Millisecond))
	assert.Empty(t, tb.seen(), "no dialog opened")
}

// With WithBreak, each row has a break button, those the script adds too;
// one asks to confirm, then breaks the lock.
func TestBreakInChromium(t *testing.T) {
	c, _ := fleet(t)
	take(t, c, "lock:evil", padlock.WithMetadata(evil))
	victim := take(t, c, "lock:victim", padlock.WithMetadata("pipeline 4711"))
	tb := open(t, serve(t, c, padlockweb.WithBreak()))

	button := func(key string) string { return row(key) + ` form[method="post"][action="break"] button` }
	do(t, tb, chromedp.WaitVisible(chromedp.CSS(button("lock:victim"))))
	assert.True(t, eval[bool](t, tb, has(button("lock:evil"))))
	take(t, c, "lock:late")
	require.True(t, waitFor(t, tb, has(button("lock:late")), 3*time.Second), "a row the script adds has one too")
	assert.Equal(t, eval[string](t, tb, "document.querySelector(`"+row("lock:victim")+" input[name=csrf]`).value"),
		eval[string](t, tb, "document.querySelector(`"+row("lock:late")+" input[name=csrf]`).value"))

	tb.mu.Lock()
	tb.accept = true
	tb.mu.Unlock()
	resp, err := chromedp.RunResponse(tb.ctx, chromedp.Click(chromedp.CSS(button("lock:victim"))))
	require.NoError(t, err)
	assert.Equal(t, int64(http.StatusOK), resp.Status, "back on the page after the break")
	assert.True(t, strings.HasSuffix(resp.URL, "/debug/padlock/"), resp.URL)
	assert.Equal(t, []string{"confirm: Break the lock lock:victim? Whatever holds it loses it."}, tb.seen())
	require.ErrorIs(t, victim.Release(t.Context()), padlock.ErrNotHeld, "broken")
	assert.False(t, eval[bool](t, tb, has(row("lock:victim"))))
	assert.True(t, eval[bool](t, tb, has(row("lock:evil"))))
}

// With PADLOCK_SCREENSHOT=PATH, a PNG of the page of a small fleet, for the
// README (docs/padlockweb.png: PADLOCK_SCREENSHOT=../docs/padlockweb.png).
func TestScreenshot(t *testing.T) {
	path := os.Getenv("PADLOCK_SCREENSHOT")
	if path == "" {
		t.Skip("set PADLOCK_SCREENSHOT=PATH to take one")
	}
	c, _ := fleet(t)
	ctx := t.Context()
	for _, l := range []struct {
		key  string
		ttl  time.Duration
		opts []padlock.Option
	}{
		{"deploy:prod", 2 * time.Hour, []padlock.Option{padlock.WithFencing(), padlock.WithMetadata("pipeline 4711 (alice)")}},
		{"lock:report:daily", 2 * time.Minute, []padlock.Option{padlock.WithFencing(), padlock.WithMetadata("host=web-3 pid=4242")}},
		{"sem:crawler", 30 * time.Second, []padlock.Option{padlock.WithLimit(3), padlock.WithMetadata("host=worker-1 pid=77")}},
		{"sem:crawler", 30 * time.Second, []padlock.Option{padlock.WithLimit(3), padlock.WithMetadata("host=worker-2 pid=91")}},
	} {
		lock, err := c.TryAcquire(ctx, l.key, l.ttl, l.opts...)
		require.NoError(t, err)
		t.Cleanup(func() { _ = lock.Release(context.Background()) })
	}
	lead, err := c.Campaign(ctx, "lead:scheduler", 10*time.Second, "host=web-1")
	require.NoError(t, err)
	t.Cleanup(func() { _ = lead.Resign(context.Background()) })
	wctx, cancel := context.WithCancel(ctx)
	waited := make(chan struct{})
	go func() {
		defer close(waited)
		_, _ = c.Acquire(wctx, "deploy:prod", time.Minute, padlock.WithMetadata("pipeline 4712 (bob)"))
	}()
	t.Cleanup(func() {
		cancel()
		<-waited
	})
	time.Sleep(1500 * time.Millisecond) // a while held, a while waited
	tb := open(t, serve(t, c, padlockweb.WithBreak()))
	require.True(t, waitFor(t, tb, refreshed, 5*time.Second))
	png := run(t, tb, chromedp.FullScreenshot(100))
	require.NoError(t, os.WriteFile(path, png, 0o644))
	t.Logf("%s: %d bytes", path, len(png))
}
