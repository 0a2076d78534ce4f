//go:build !linux

package main

import "syscall"

// killWithParent does nothing where the kernel cannot kill a child when
// its parent dies: a command of a SIGKILLed padlock lead must then be
// stopped by other means.
func killWithParent(*syscall.SysProcAttr) {}
