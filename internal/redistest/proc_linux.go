package redistest

import "syscall"

// sysProcAttr has the kernel kill a server if the test process dies first,
// so no redis-server outlives its test binary.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
