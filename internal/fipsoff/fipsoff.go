//go:build go1.26

// Package fipsoff runs an in-process miniredis outside Go's strict FIPS 140
// mode (GODEBUG=fips140=only): miniredis hashes scripts with SHA-1, as
// Redis does. padlock itself, and the goroutines of its callers, stay
// enforced.
package fipsoff

import "crypto/fips140"

// Run runs f, and the goroutines it starts, outside strict FIPS 140 mode.
func Run(f func()) { fips140.WithoutEnforcement(f) }
