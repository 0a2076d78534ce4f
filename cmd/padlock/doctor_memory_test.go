package main

import (
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/padlock-go/padlock/internal/redistest"
)

// padlock doctor on a Redis whose memory is full (maxmemory with
// noeviction) names it and the fix, and on a replica's address names the
// primary to point at; no line holds a doubled period.
func TestDoctorNamesAFullMemoryAndAReplica(t *testing.T) {
	t.Parallel()
	primary := redistest.Start(t)
	require.NoError(t, primary.Client().ConfigSet(t.Context(), "repl-diskless-sync-delay", "0").Err())
	replica := redistest.StartReplica(t, primary)
	full := redistest.Start(t)
	full.FillMemory(t)
	tests := []struct {
		name, addr, danger string
		says, node         []string
	}{
		{"full", full.Addr(), "DANGER  memory " + full.Addr() + ": Redis is out of memory",
			[]string{"maxmemory-policy noeviction refuses writes", "Fix: raise maxmemory (CONFIG SET maxmemory) or free memory."},
			[]string{"noeviction", "used"}},
		{"replica", replica.Addr(), "DANGER  replication " + replica.Addr() + ": this address is a read-only replica",
			[]string{"Fix: point padlock at the primary, " + primary.Addr() + "."},
			[]string{"replica of " + primary.Addr()}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := padlockRun(t, "redis://"+tt.addr, "doctor")
			require.Equal(t, exitDanger, r.code, r.stderr)
			t.Log(r.stdout)
			lines := strings.Split(r.stdout, "\n")
			i := slices.IndexFunc(lines, func(l string) bool { return strings.HasPrefix(l, tt.danger) })
			require.GreaterOrEqual(t, i, 0, "no line begins %q", tt.danger)
			for _, s := range tt.says {
				assert.Contains(t, lines[i], s)
			}
			for _, s := range tt.node {
				assert.Contains(t, lines[1], s, "the node's line")
			}
			assert.NotContains(t, r.stdout, "..")
		})
	}
}
