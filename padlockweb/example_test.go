package padlockweb_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/padlock-go/padlock"
	"github.com/padlock-go/padlock/internal/fipsoff"
	"github.com/padlock-go/padlock/padlockweb"
)

// The page of a service's locks, mounted beside its other debug pages.
// A browser gets the HTML page; a tool that asks for JSON gets the locks
// as `padlock list -json` prints them.
func ExampleHandler() {
	var mr *miniredis.Miniredis
	var err error
	fipsoff.Run(func() { mr, err = miniredis.Run() }) // in a service: your Redis
	if err != nil {
		fmt.Println(err)
		return
	}
	defer mr.Close()
	rdb := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	defer rdb.Close()
	locks := padlock.New(rdb)
	defer locks.Close()
	ctx := context.Background()
	lock, err := locks.TryAcquire(ctx, "lock:report", time.Minute, padlock.WithMetadata("host=web-3 job=daily"))
	if err != nil {
		fmt.Println(err)
		return
	}
	defer lock.Release(ctx)

	mux := http.NewServeMux()
	mux.Handle("/debug/padlock/", http.StripPrefix("/debug/padlock", padlockweb.Handler(locks)))
	srv := httptest.NewServer(mux) // in a service: its own listener, behind its access control
	defer srv.Close()

	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, srv.URL+"/debug/padlock/?match=lock:*", nil)
	req.Header.Set("Accept", "application/json")
	resp, err := srv.Client().Do(req)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer resp.Body.Close()
	var held []struct {
		Key, Kind, Metadata string
		TTLMs               int64 `json:"ttl_ms"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&held); err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(resp.Status, resp.Header.Get("Content-Type"))
	for _, l := range held {
		fmt.Printf("%s: %s of %q, %v left\n", l.Key, l.Kind, l.Metadata, (time.Duration(l.TTLMs) * time.Millisecond).Round(time.Second))
	}
	// Output:
	// 200 OK application/json
	// lock:report: lock of "host=web-3 job=daily", 1m0s left
}
