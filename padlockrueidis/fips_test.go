//go:build go1.26

package padlockrueidis_test

import (
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// In Go's strict FIPS 140 mode (GODEBUG=fips140=only, which refuses
// SHA-1), padlock on rueidis runs: a lock cycle and a waiting hand-off, on
// one server and on a Cluster, in this test binary run again in that mode.
func TestFIPSOnlyMode(t *testing.T) {
	t.Parallel() // waits for the other process
	if strings.Contains(os.Getenv("GODEBUG"), "fips140=only") {
		t.Skip("already in FIPS 140-only mode")
	}
	cmd := exec.Command(os.Args[0], "-test.run", "^(TestLockCycle|TestHandOff)$", "-test.count", "1", "-test.v")
	cmd.Env = append(os.Environ(), "GODEBUG=fips140=only")
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "under fips140=only:\n%s", out)
	for _, name := range []string{"TestLockCycle/one_server", "TestLockCycle/cluster", "TestHandOff/one_server", "TestHandOff/cluster"} {
		assert.Contains(t, string(out), "--- PASS: "+name, "under fips140=only:\n%s", out)
	}
}
