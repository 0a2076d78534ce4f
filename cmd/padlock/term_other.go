//go:build !linux

package main

import (
	"errors"
	"os"
)

// isTerminal reports whether f is a terminal, as far as the standard
// library tells: a character device (which /dev/null also is).
func isTerminal(f *os.File) bool {
	fi, err := f.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
}

// cbreak fails: outside Linux, keys are read a line at a time (a key,
// then Enter).
func cbreak(*os.File) (restore func(), err error) {
	return nil, errors.New("no cbreak mode on this system")
}

// termSize is 0, 0: the terminal's size is not known.
func termSize(*os.File) (cols, rows int) { return 0, 0 }
