//go:build go1.26

package main

import "crypto/fips140"

// unenforced runs f, and the goroutines it starts, outside Go's strict FIPS
// 140 mode (GODEBUG=fips140=only): for the demo's in-process miniredis,
// which hashes scripts with SHA-1 as Redis does. padlock and the demo's
// own code stay enforced.
func unenforced(f func()) { fips140.WithoutEnforcement(f) }
