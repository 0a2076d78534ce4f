// Package redistest starts real redis-server processes for tests, on free
// loopback ports, and stops them when the test ends. It only ever signals
// the processes it started.
//
// When redis-server is not on PATH, Start skips the test, or fails it if the
// environment variable PADLOCK_REDIS is "required" (as in CI). WithBinary
// starts another server binary instead (another Redis version, Valkey);
// Servers lists the binaries of the compatibility matrix, from the
// environment variable PADLOCK_SERVERS.
package redistest

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"
)

// T is what Start needs of a test: *testing.T and *testing.B have it, and
// a program (the benchmarks in bench/) can provide it too.
type T interface {
	Helper()
	Cleanup(func())
	Fatalf(format string, args ...any)
	Skip(args ...any)
	TempDir() string
}

// startTimeout bounds how long a server may take to answer PING.
const startTimeout = 10 * time.Second

// startTries bounds how many ports Start tries.
const startTries = 5

// An Option changes how Start configures a server.
type Option func(*config)

type config struct {
	bin  string // the server binary; "" for redis-server on PATH
	args []string
	conf string // a config file, given to redis-server before the flags
	tls  bool
}

// WithAOF turns on the append-only file with appendfsync always, so that
// every write is on disk before Redis answers and survives kill -9.
func WithAOF() Option {
	return func(c *config) {
		c.args = append(c.args, "--appendonly", "yes", "--appendfsync", "always")
	}
}

// WithBinary starts the server binary at path (a redis-server or
// valkey-server of any version) instead of redis-server from PATH.
func WithBinary(path string) Option {
	return func(c *config) { c.bin = path }
}

// Servers returns the server binaries the compatibility matrix runs
// against: the paths in PADLOCK_SERVERS, separated by ':', or, when it is
// unset or empty, redis-server from PATH alone. A listed path that is not
// an executable file fails t (a typo must not shrink the matrix); with
// PADLOCK_SERVERS unset and no redis-server on PATH, t is skipped or
// failed as by Available.
func Servers(t T) []string {
	t.Helper()
	var bins []string
	for _, p := range strings.Split(os.Getenv("PADLOCK_SERVERS"), ":") {
		if p == "" {
			continue
		}
		if fi, err := os.Stat(p); err != nil || fi.IsDir() || fi.Mode()&0o111 == 0 {
			t.Fatalf("redistest: PADLOCK_SERVERS lists %q, which is not an executable file (%v)", p, err)
		}
		bins = append(bins, p)
	}
	if len(bins) == 0 {
		Available(t)
		path, _ := exec.LookPath("redis-server")
		bins = append(bins, path)
	}
	return bins
}

// withOpts returns opts followed by more, in a slice of its own.
func withOpts(opts []Option, more ...Option) []Option {
	return append(append([]Option(nil), opts...), more...)
}

// WithArgs passes extra redis-server arguments, such as
// "--cluster-enabled", "yes".
func WithArgs(args ...string) Option {
	return func(c *config) { c.args = append(c.args, args...) }
}

// A Server is one redis-server process started by Start.
type Server struct {
	t       T
	bin     string
	dir     string
	args    []string
	conf    string
	port    int
	tlsPort int
	tls     bool

	mu     sync.Mutex
	cmd    *exec.Cmd
	exited chan struct{} // closed when cmd has exited
	paused bool
}

// Required reports whether tests must run against real Redis rather than
// skip (PADLOCK_REDIS=required).
func Required() bool { return os.Getenv("PADLOCK_REDIS") == "required" }

// Available reports whether redis-server is on PATH. When it is not, it
// fails t if Required, and skips it otherwise.
func Available(t T) {
	t.Helper()
	if _, err := exec.LookPath("redis-server"); err != nil {
		if Required() {
			t.Fatalf("PADLOCK_REDIS=required but redis-server is not on PATH: %v", err)
		}
		t.Skip("redis-server not on PATH; set PADLOCK_REDIS=required to fail instead")
	}
}

// Start starts a redis-server on a free 127.0.0.1 port, with persistence
// off unless an Option turns it on, and waits until it answers PING. It
// checks that the server that answers is the one it started (by its
// process id): another test binary may start a server on the port it
// picked, or hold it, and Start then tries another port, up to startTries
// ports in all, before it fails t. The server is killed when the test
// ends.
func Start(t T, opts ...Option) *Server {
	t.Helper()
	var c config
	for _, o := range opts {
		o(&c)
	}
	if c.bin == "" {
		Available(t)
		c.bin = "redis-server"
	}
	s := &Server{t: t, bin: c.bin, dir: t.TempDir(), args: c.args, conf: c.conf, tls: c.tls}
	t.Cleanup(s.cleanup)
	var err error
	for try := 0; try < startTries; try++ {
		if s.port, err = pickPort(); err != nil {
			continue
		}
		if s.tls {
			if s.tlsPort, err = pickPort(); err != nil {
				continue
			}
		}
		if err = s.start(); err == nil {
			return s
		}
	}
	t.Fatalf("redistest: start %s: gave up after %d tries: %v", s.bin, startTries, err)
	return nil
}

// pickPort picks the port for a server to start on: freePort, or in this
// package's tests a port they choose.
var pickPort = freePort

// freePort asks the kernel for a free loopback port. Another process may
// take it before redis-server binds it (start finds out); Start then tries
// another.
func freePort() (int, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port, nil
}

// Addr returns the server's host:port.
func (s *Server) Addr() string { return "127.0.0.1:" + strconv.Itoa(s.port) }

// Port returns the server's port.
func (s *Server) Port() int { return s.port }

// Dir returns the server's working directory (where its AOF lives).
func (s *Server) Dir() string { return s.dir }

// Client returns a go-redis client for the server with its default
// options, closed when the test ends.
func (s *Server) Client() *redis.Client {
	rdb := redis.NewClient(&redis.Options{Addr: s.Addr()})
	s.t.Cleanup(func() { _ = rdb.Close() })
	return rdb
}

// start starts the server on s.port and waits until it is ready. It
// returns an error that wraps errPortTaken if another process holds the
// port (or the TLS port): the server could not bind it, or another server
// answers there.
func (s *Server) start() error {
	cmd, exited, err := s.launch()
	if err != nil {
		return err
	}
	deadline := time.Now().Add(startTimeout)
	for time.Now().Before(deadline) {
		select {
		case <-exited:
			err := fmt.Errorf("redis-server on port %d exited: %s", s.port, s.logTail())
			if strings.Contains(err.Error(), "Address already in use") {
				err = fmt.Errorf("%w: %w", errPortTaken, err)
			}
			return err
		default:
		}
		pid, err := answer(s.Addr())
		if pid != 0 && pid != cmd.Process.Pid {
			s.kill()
			return fmt.Errorf("%w: port %d answers as process %d, not as the redis-server started (%d)",
				errPortTaken, s.port, pid, cmd.Process.Pid)
		}
		if pid != 0 && err == nil {
			return nil
		}
		time.Sleep(10 * time.Millisecond)
	}
	s.kill()
	return fmt.Errorf("redis-server on port %d did not answer PING within %v: %s", s.port, startTimeout, s.logTail())
}

// errPortTaken is what start's error wraps when another process holds the
// port it was to start on, as another test binary's server may: Start then
// tries another port.
var errPortTaken = errors.New("port taken by another process")

// launch runs the server process and returns it, with a channel closed
// when it has exited.
func (s *Server) launch() (*exec.Cmd, chan struct{}, error) {
	args := append([]string{
		"--port", strconv.Itoa(s.port),
		"--bind", "127.0.0.1",
		"--dir", s.dir,
		"--save", "",
		"--appendonly", "no",
		"--daemonize", "no",
		"--protected-mode", "no",
		"--logfile", filepath.Join(s.dir, "redis.log"),
	}, s.args...)
	if s.conf != "" {
		args = append([]string{s.conf}, args...)
	}
	if s.tls {
		targs, err := tlsArgs(s.dir, s.tlsPort)
		if err != nil {
			return nil, nil, err
		}
		args = append(args, targs...)
	}
	cmd := exec.Command(s.bin, args...)
	cmd.SysProcAttr = sysProcAttr()
	if err := cmd.Start(); err != nil {
		return nil, nil, err
	}
	exited := make(chan struct{})
	go func() {
		_ = cmd.Wait()
		close(exited)
	}()
	s.mu.Lock()
	s.cmd, s.exited, s.paused = cmd, exited, false
	s.mu.Unlock()
	return cmd, exited, nil
}

// answer asks the server at addr for its process id (INFO server's
// process_id; a Sentinel has it too) and PINGs it, over a raw connection.
// pid is 0 if what answers does not tell; err is nil if it answers PONG. A
// server that is still loading its data answers -LOADING, which is not
// ready.
func answer(addr string) (pid int, err error) {
	conn, err := net.DialTimeout("tcp", addr, time.Second)
	if err != nil {
		return 0, err
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(time.Second))
	if _, err := conn.Write([]byte("INFO server\r\nPING\r\n")); err != nil {
		return 0, err
	}
	r := bufio.NewReader(conn)
	info, err := readBulk(r)
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(info, "\r\n") {
		if v, ok := strings.CutPrefix(line, "process_id:"); ok {
			pid, _ = strconv.Atoi(v)
		}
	}
	line, err := r.ReadString('\n')
	if err != nil {
		return pid, err
	}
	if !strings.HasPrefix(line, "+PONG") {
		return pid, errors.New(strings.TrimSpace(line))
	}
	return pid, nil
}

// readBulk reads one RESP bulk string from r; an error reply is an error.
func readBulk(r *bufio.Reader) (string, error) {
	line, err := r.ReadString('\n')
	if err != nil {
		return "", err
	}
	n, err := strconv.Atoi(strings.TrimSpace(strings.TrimPrefix(line, "$")))
	if !strings.HasPrefix(line, "$") || err != nil || n < 0 {
		return "", fmt.Errorf("not a bulk string: %q", strings.TrimSpace(line))
	}
	b := make([]byte, n+2)
	if _, err := io.ReadFull(r, b); err != nil {
		return "", err
	}
	return string(b[:n]), nil
}

func (s *Server) logTail() string {
	b, _ := os.ReadFile(filepath.Join(s.dir, "redis.log"))
	if len(b) > 2000 {
		b = b[len(b)-2000:]
	}
	return string(b)
}

// signal sends sig to the server if it is running.
func (s *Server) signal(sig syscall.Signal) (exited chan struct{}) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd == nil {
		return nil
	}
	select {
	case <-s.exited:
		return nil
	default:
	}
	_ = s.cmd.Process.Signal(sig)
	return s.exited
}

// Stop shuts the server down with SIGTERM (Redis then writes and syncs its
// AOF, if on) and waits for it to exit. Connections are refused until
// Restart.
func (s *Server) Stop() {
	s.t.Helper()
	s.Resume()
	if exited := s.signal(syscall.SIGTERM); exited != nil {
		select {
		case <-exited:
		case <-time.After(startTimeout):
			s.kill()
		}
	}
}

// Kill ends the server with SIGKILL, as a crash would, and waits for it.
func (s *Server) Kill() { s.kill() }

func (s *Server) kill() {
	if exited := s.signal(syscall.SIGKILL); exited != nil {
		<-exited
	}
}

// Pause stops the server with SIGSTOP: connections stay open and nothing
// answers until Resume.
func (s *Server) Pause() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd != nil && !s.paused {
		_ = s.cmd.Process.Signal(syscall.SIGSTOP)
		s.paused = true
	}
}

// Resume continues a paused server.
func (s *Server) Resume() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd != nil && s.paused {
		_ = s.cmd.Process.Signal(syscall.SIGCONT)
		s.paused = false
	}
}

// Restart stops the server (if it runs) and starts it again on the same
// port and directory: without persistence it comes back empty. If another
// process took the port meanwhile (another server answers there, or the
// server cannot bind it), Restart fails the test after a second of tries.
func (s *Server) Restart() {
	s.t.Helper()
	s.Stop()
	var err error
	for try := 0; try < 20; try++ {
		if err = s.start(); err == nil {
			return
		}
		time.Sleep(50 * time.Millisecond) // the port may be in TIME_WAIT
	}
	s.t.Fatalf("redistest: restart redis-server: %v", err)
}

func (s *Server) cleanup() {
	s.Resume()
	s.kill()
}

// DeadAddr is a loopback address where no Redis answers: a listener of
// the test's own that closes every connection at once. It stays open
// until the test ends, so no other test binary's server can start on the
// port meanwhile, as one could on a port closed at once.
func DeadAddr(t T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("redistest: listen: %v", err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			conn.Close()
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		<-done
	})
	return ln.Addr().String()
}

// Calls is how many times the server rdb talks to has run the command cmd
// ("scan", "evalsha"...) since it started, as INFO commandstats counts.
func Calls(t T, rdb *redis.Client, cmd string) int64 {
	t.Helper()
	info, err := rdb.Info(context.Background(), "commandstats").Result()
	if err != nil {
		t.Fatalf("redistest: INFO commandstats: %v", err)
	}
	for _, line := range strings.Split(info, "\n") {
		rest, ok := strings.CutPrefix(strings.TrimSpace(line), "cmdstat_"+cmd+":calls=")
		if !ok {
			continue
		}
		n, err := strconv.ParseInt(rest[:strings.IndexByte(rest+",", ',')], 10, 64)
		if err != nil {
			t.Fatalf("redistest: INFO commandstats: %q: %v", line, err)
		}
		return n
	}
	return 0
}
