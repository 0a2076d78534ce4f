package main

import "syscall"

// killWithParent has the kernel kill the command when padlock dies (even
// by SIGKILL), so that a command run while leading never outlives the
// leadership.
func killWithParent(attr *syscall.SysProcAttr) { attr.Pdeathsig = syscall.SIGKILL }
