package redistest

import (
	"flag"
	"strconv"
)

// Parallel sets go test's -parallel to n unless the command line gave it.
// Tests that start servers of their own mostly wait on them, so more of
// them than GOMAXPROCS may run at once. Call it from TestMain, before
// m.Run; it parses the command line.
func Parallel(n int) {
	flag.Parse()
	given := false
	flag.Visit(func(f *flag.Flag) { given = given || f.Name == "test.parallel" })
	if !given {
		_ = flag.Set("test.parallel", strconv.Itoa(n))
	}
}
