//go:build go1.26

package padlock_test

import "crypto/fips140"

// unenforced runs f, and the goroutines it starts, outside Go's strict FIPS
// 140 mode (GODEBUG=fips140=only): for miniredis, a test server in the
// test's process, which hashes scripts with SHA-1 as Redis does. padlock
// itself runs enforced: the tests' own goroutines stay so.
func unenforced(f func()) { fips140.WithoutEnforcement(f) }
