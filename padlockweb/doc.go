// Package padlockweb serves a web page of the locks held in a padlock
// deployment, for operators: which keys are held, by whom (the metadata
// each holder stored), for how long, how long they have left, their
// fencing counters and their waiters. It is mounted like net/http/pprof,
// under a path that ends in a slash:
//
//	mux.Handle("/debug/padlock/", http.StripPrefix("/debug/padlock", padlockweb.Handler(locks)))
//
// The page is rendered on the server, so it lists every lock without
// JavaScript, and a few lines of script refresh it every second from the
// same URL's JSON (Accept: application/json), without a reload. The
// command `padlock serve` serves it for a deployment on its own.
//
// It reads Redis only when asked: one listing (padlock.Client.Locks, a SCAN
// of every node) per request, so a page left open scans the keyspace once a
// second. It is read-only unless WithBreak turns on a break button, which
// a form token and the browser's origin headers protect against cross-site
// requests. Its JSON holds the holders' tokens, with which a lock can be
// released or extended (Client.Resume): mount it where only operators reach
// it. It imports the standard library and padlock only, and costs nothing
// until a request comes.
//
// Below the deployment's locks, every process's alike, it shows what this
// process (the Handler's Client) holds and waits for, from the Client's own
// books (padlock.Client.Local), with no round trip.
package padlockweb
