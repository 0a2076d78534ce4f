//go:build !go1.26

package padlock_test

// unenforced runs f: Go before 1.26 has no strict FIPS 140 mode to leave
// (see fips_test.go).
func unenforced(f func()) { f() }
