//go:build !go1.26

package fipsoff

// Run runs f: Go before 1.26 has no strict FIPS 140 mode to leave (see
// fipsoff.go).
func Run(f func()) { f() }
