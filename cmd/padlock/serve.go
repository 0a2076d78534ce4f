package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os/signal"
	"syscall"
	"time"

	"github.com/padlock-go/padlock/padlockweb"
)

// shutdownGrace is how long serve lets requests in flight finish once it is
// told to stop.
const shutdownGrace = 5 * time.Second

// serveExits are the exit statuses of 'padlock serve', for its -h.
const serveExits = "  0      stopped by SIGINT or SIGTERM\n" + exitUsageHelp +
	"  69     Redis could not be reached when it started, or answered with an error;\n" +
	"         or -addr could not be listened on\n"

// serveCmd is 'padlock serve': padlockweb's page of the locks of one
// deployment, until SIGINT or SIGTERM.
func serveCmd(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	v := newVerb("serve", "padlock serve [-addr HOST:PORT] [-match GLOB] [-break] [-redis URL] [-timeout D]",
		"Serves a web page of every lock held in Redis whose key matches GLOB: key, kind,\n"+
			"holders, how long held, time left, fence, waiters and metadata, refreshed every\n"+
			"second; the same URL with Accept: application/json answers the locks as JSON\n"+
			"(the objects of padlock inspect -json, tokens included). Read-only unless\n"+
			"-break. It prints the page's URL on stdout, and stops on SIGINT or SIGTERM,\n"+
			"letting the requests in flight finish.",
		serveExits, stdout, stderr)
	rf := addRedisFlags(v.fset)
	addr := v.fset.String("addr", "127.0.0.1:8080", "listen on this address (loopback by default: whoever reaches\nthe page reads every holder's token)")
	match := v.fset.String("match", "*", "show the locks whose key matches this glob (Redis's; a ?match= in the URL replaces it)")
	breaks := v.fset.Bool("break", false, "a button on each lock breaks it (as padlock break does), by a POST\nthat carries the page's token")
	if code, ok := v.parseFlags(args, ""); !ok {
		return code
	}
	if *match == "" {
		return v.usageError("-match is empty: \"*\" matches every key")
	}
	c, locks, done, code := v.connect(rf)
	if locks == nil {
		return code
	}
	defer done()
	// Reach Redis once first (a glob it rejects included), so that an
	// unreachable one is an exit status, not a page of errors.
	lctx, cancel := c.call(ctx)
	var probe error
	for _, err := range locks.Locks(lctx, *match) {
		probe = err
		break
	}
	cancel()
	if probe != nil {
		return v.listFailed(*match, c, probe)
	}
	opts := []padlockweb.Option{padlockweb.WithMatch(*match), padlockweb.WithTimeout(c.timeout)}
	if *breaks {
		opts = append(opts, padlockweb.WithBreak())
	}
	ln, err := net.Listen("tcp", *addr)
	if err != nil {
		fmt.Fprintf(stderr, "padlock serve: %v\n", err)
		return exitUnavailable
	}
	srv := &http.Server{Handler: padlockweb.Handler(locks, opts...), ReadHeaderTimeout: 10 * time.Second}
	ctx, stop := signal.NotifyContext(ctx, syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	fmt.Fprintf(stdout, "http://%s/\n", ln.Addr())
	fmt.Fprintf(stderr, "padlock serve: the locks of %s matching %s on http://%s/ (break: %v)\n", redact(c.url), *match, ln.Addr(), *breaks)

	select {
	case err := <-served:
		fmt.Fprintf(stderr, "padlock serve: %v\n", err)
		return exitUnavailable
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.Background(), shutdownGrace)
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil {
		_ = srv.Close() // requests still running after the grace: cut them off
	}
	if err := <-served; !errors.Is(err, http.ErrServerClosed) {
		fmt.Fprintf(stderr, "padlock serve: %v\n", err)
	}
	return 0
}
