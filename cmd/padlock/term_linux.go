package main

import (
	"fmt"
	"os"
	"os/exec"
	"strings"
)

// stty runs stty(1) with args on the terminal f (its standard input), and
// returns what it printed, or an error if f is not a terminal.
func stty(f *os.File, args ...string) (string, error) {
	cmd := exec.Command("stty", args...)
	cmd.Stdin = f
	out, err := cmd.Output()
	return strings.TrimSpace(string(out)), err
}

// isTerminal reports whether f is a terminal.
func isTerminal(f *os.File) bool {
	_, err := stty(f, "-g")
	return err == nil
}

// cbreak puts the terminal f in cbreak mode: each key reaches a read at
// once, without Enter and without echo, and a read with no key waiting
// returns nothing after a tenth of a second; Ctrl-C still sends SIGINT,
// and output is processed as before. It returns what restores the
// terminal's settings, or an error (f is not a terminal) and changes
// nothing.
func cbreak(f *os.File) (restore func(), err error) {
	old, err := stty(f, "-g")
	if err != nil {
		return nil, err
	}
	if _, err := stty(f, "-icanon", "-echo", "min", "0", "time", "1"); err != nil {
		return nil, err
	}
	return func() { _, _ = stty(f, old) }, nil
}

// termSize is the terminal f's size in characters, or 0, 0 if not known.
func termSize(f *os.File) (cols, rows int) {
	out, err := stty(f, "size")
	if err != nil {
		return 0, 0
	}
	if _, err := fmt.Sscan(out, &rows, &cols); err != nil {
		return 0, 0
	}
	return cols, rows
}
