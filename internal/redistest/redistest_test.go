package redistest

import (
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// picks has pickPort return ports, in turn, and then free ports again,
// until the test ends.
func picks(t *testing.T, ports ...int) {
	t.Cleanup(func() { pickPort = freePort })
	pickPort = func() (int, error) {
		if len(ports) == 0 {
			return freePort()
		}
		p := ports[0]
		ports = ports[1:]
		return p, nil
	}
}

// always has pickPort return port every time, until the test ends.
func always(t *testing.T, port int) {
	t.Cleanup(func() { pickPort = freePort })
	pickPort = func() (int, error) { return port, nil }
}

// impostor starts a server of the test's own, as another test binary's
// would be, with one key in it.
func impostor(t *testing.T) *Server {
	imp := Start(t)
	require.NoError(t, imp.Client().Set(t.Context(), "impostor:key", "kept", 0).Err())
	return imp
}

// untouched checks that nothing reached imp: its key is there, alone.
func untouched(t *testing.T, imp *Server) {
	t.Helper()
	rdb := imp.Client()
	assert.Equal(t, "kept", rdb.Get(t.Context(), "impostor:key").Val(), "the impostor's key")
	assert.EqualValues(t, 1, rdb.DBSize(t.Context()).Val(), "the impostor's DBSIZE")
}

// own checks that s answers as the process Start started, on a port of its
// own, and works.
func own(t *testing.T, s *Server, taken int) {
	t.Helper()
	assert.NotEqual(t, taken, s.Port(), "started on the taken port")
	info, err := s.Client().Info(t.Context(), "server").Result()
	require.NoError(t, err)
	assert.Contains(t, info, "process_id:"+strconv.Itoa(s.cmd.Process.Pid)+"\r\n", "the server that answers is the one started")
	rdb := s.Client()
	require.NoError(t, rdb.Set(t.Context(), "own:key", "v", 0).Err())
	require.NoError(t, rdb.FlushAll(t.Context()).Err())
}

// fatalT records the Fatalf of a test instead of ending it.
type fatalT struct {
	*testing.T
	msg string
}

func (f *fatalT) Fatalf(format string, args ...any) { f.msg = fmt.Sprintf(format, args...) }

func TestStartSkipsAPortAnotherServerHolds(t *testing.T) {
	imp := impostor(t)
	picks(t, imp.Port())
	s := Start(t)
	own(t, s, imp.Port())
	untouched(t, imp)
}

// The race the other way: what holds the port is no Redis (or has not
// answered yet), and the server started fails to bind it.
func TestStartSkipsAPortAnotherProcessListensOn(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer ln.Close()
	taken := ln.Addr().(*net.TCPAddr).Port
	picks(t, taken)
	own(t, Start(t), taken)
}

func TestStartGivesUpWhenEveryPortIsTaken(t *testing.T) {
	imp := impostor(t)
	always(t, imp.Port())
	ft := &fatalT{T: t}
	assert.Nil(t, Start(ft))
	assert.Contains(t, ft.msg, "taken")
	assert.Contains(t, ft.msg, strconv.Itoa(startTries)+" tries")
	untouched(t, imp)
}

// A restarted server keeps its port: if another server took it meanwhile,
// Restart fails the test rather than hand it the other server.
func TestRestartFailsWhenItsPortWasTaken(t *testing.T) {
	ft := &fatalT{T: t}
	s := Start(ft)
	require.Empty(t, ft.msg)
	s.Stop()
	picks(t, s.Port())
	imp := impostor(t)
	require.Equal(t, s.Port(), imp.Port())
	s.Restart()
	assert.Contains(t, ft.msg, "taken")
	untouched(t, imp)
}

func TestSentinelSkipsAPortAnotherServerHolds(t *testing.T) {
	if os.Getenv("PADLOCK_LONG") == "" {
		t.Skip("slow: runs in the long mode (PADLOCK_LONG=1, as in CI)")
	}
	primary := Start(t)
	imp := impostor(t)
	picks(t, imp.Port())
	sen := StartSentinel(t, primary, "m")
	assert.NotEqual(t, imp.Port(), sen.Port(), "started on the taken port")
	info, err := sen.Client().Info(t.Context(), "server").Result()
	require.NoError(t, err)
	assert.Contains(t, info, "redis_mode:sentinel")
	assert.True(t, strings.Contains(info, "process_id:"+strconv.Itoa(sen.cmd.Process.Pid)+"\r\n"), "the sentinel that answers is the one started")
	untouched(t, imp)
}
