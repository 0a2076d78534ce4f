// Command padlock runs a command under a distributed lock on Redis, inspects
// a lock, and demonstrates the library.
//
//	padlock run [flags] KEY -- COMMAND [ARGS...]
//	padlock acquire [-ttl D] [-wait D] [-fence] [-limit N] [-shared] [-token T] [-metadata M] KEY
//	padlock extend -ttl D [-token T] KEY
//	padlock release [-token T] KEY
//	padlock break KEY
//	padlock lead [-ttl D] [-value V] [-grace D] KEY -- COMMAND [ARGS...]
//	padlock leader [-json] [-watch] KEY
//	padlock inspect [-json] KEY
//	padlock list [-match GLOB] [-json]
//	padlock top [-match GLOB]
//	padlock serve [-addr HOST:PORT] [-match GLOB] [-break]
//	padlock doctor [-key KEY] [-json]
//	padlock demo [-redis URL]
//	padlock version
//
// Every command but version takes -redis URL (default $PADLOCK_REDIS_URL,
// else $REDIS_URL, else redis://127.0.0.1:6379) and -timeout D (default
// $PADLOCK_TIMEOUT, else 3s): how long to wait for Redis to connect and
// answer each request; a call of one request (inspect, leader, break,
// extend, release, a try without -wait) gives up after it too. -wait
// bounds the wait for a lock, connecting included. Every command's -h
// lists its exit statuses; a usage error is one line, and exits 64.
//
// run acquires KEY, keeps it alive while COMMAND runs, releases it when
// COMMAND exits, and exits with COMMAND's status. It is meant for cron
// entries installed on several hosts that must run on one at a time.
//
// Exit statuses of run, besides the command's own:
//
//	64  usage error
//	69  Redis could not be reached, or answered with an error (the command did not run)
//	75  the lock is held elsewhere (-conflict-exit)
//	79  the lock was lost while the command ran; the command was terminated
//	126 the command could not be started
//	127 the command was not found
//	128+N signal N came while waiting for the lock (the command did not run)
//
// A command killed by a signal exits with 128 plus the signal's number, as
// in a shell. The command runs in a process group of its own and, on
// Linux, is killed if padlock is (run and lead alike).
//
// acquire, extend and release are for shell scripts whose lock outlives
// one command (a CI pipeline that locks a deployment in its first job and
// unlocks it in its last). acquire prints PADLOCK_KEY, PADLOCK_TOKEN and,
// with -fence, PADLOCK_FENCE, shell-quoted, one per line, so that
// eval "$(padlock acquire KEY)" sets them; it exits as run does (0, 64,
// 69, 75). extend and release act on the lock that the token (-token, or
// $PADLOCK_TOKEN) holds, and exit 0 when done, 1 when the token does not
// hold the key, 64 or 69. break ends whatever holds KEY, advances its
// fencing counter and serves its waiters, prints what it broke, and exits
// 0 whether or not anything held it.
//
// lead runs COMMAND while the process leads KEY (see padlock.Client.Lead):
// when the leadership is lost it terminates COMMAND (SIGTERM, then SIGKILL
// after -grace) and campaigns again; SIGTERM or SIGINT stops COMMAND,
// resigns, so that the next candidate leads at once, and exits with
// COMMAND's status (128 plus the signal's number if it never ran). It
// exits 69 if Redis cannot be reached when it starts; once Redis has
// answered, it campaigns through outages. leader prints who leads KEY, or
// with -watch every change; it exits 0 whether or not someone leads, 69
// when Redis cannot be reached.
//
// list prints every held lock whose key matches GLOB (default "*"),
// longest held first, as a table or, with -json, one object a line; top
// shows the same, read again every second, until q. Both exit 0, 64 on a
// usage error (a malformed glob; top: stdout not a terminal), 69 when
// Redis cannot answer (top: its first listing).
//
// serve serves the web page of package padlockweb for the locks whose key
// matches GLOB, on -addr (default 127.0.0.1:8080), read-only unless
// -break, until SIGINT or SIGTERM; then it exits 0. It exits 69 if Redis
// cannot be reached when it starts or -addr cannot be listened on.
//
// doctor checks whether the Redis it talks to is safe for locks (see
// padlock.Client.Check) and prints one line per finding, most severe first.
// It exits 0 when nothing is a danger, 1 when something is, 69 when Redis
// cannot be reached, 64 on usage errors.
//
// version prints padlock's module version ("(devel)" when built from a
// checkout) and the Go version it was built with.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"runtime"
	"runtime/debug"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/padlock-go/padlock"
)

// Exit statuses.
const (
	exitUsage       = 64
	exitUnavailable = 69
	exitConflict    = 75
	exitLost        = 79
	exitCannotRun   = 126
	exitNotFound    = 127
)

const usage = `usage:
  padlock run [flags] KEY -- COMMAND [ARGS...]   run COMMAND while holding the lock KEY
  padlock acquire [flags] KEY                    take KEY and print its variables, for eval
  padlock extend -ttl D [-token T] KEY           extend KEY held by the token ($PADLOCK_TOKEN)
  padlock release [-token T] KEY                 release KEY held by the token ($PADLOCK_TOKEN)
  padlock break KEY                              end whatever holds KEY (for a stuck lock)
  padlock lead [flags] KEY -- COMMAND [ARGS...]  run COMMAND while leading KEY; campaign again when lost
  padlock leader [-json] [-watch] KEY            show who leads KEY (its value, term and ttl), or follow changes
  padlock inspect [-json] KEY                    show who holds KEY, its TTL and fence
  padlock list [-match GLOB] [-json]             list the held locks, longest held first
  padlock top [-match GLOB]                      watch the held locks, read again every second (q quits)
  padlock serve [-addr A] [-match GLOB] [-break] a web page of the held locks, on 127.0.0.1:8080
  padlock doctor [-key KEY] [-json]              is this Redis safe for locks? (exit 1 if not)
  padlock demo [-redis URL]                      play the common cases (no Redis needed)
  padlock version                                print padlock's version and the Go version it was built with

Run 'padlock COMMAND -h' for a command's flags and exit statuses.

Every command but version takes -redis URL and -timeout D. The environment:
  PADLOCK_REDIS_URL  the Redis URL when -redis is not given (else REDIS_URL,
                     else redis://127.0.0.1:6379); demo uses it only with -redis
  PADLOCK_TIMEOUT    how long to wait for Redis to answer when -timeout is not
                     given (default 3s)
  PADLOCK_TOKEN      the token of extend and release when -token is not given

exit status:
  0      done (inspect and leader: whether or not anything is held)
  1      extend, release: the token does not hold KEY; doctor: a danger found;
         demo: a claim did not hold
  64     usage error: nothing was done
  69     Redis could not be reached, or answered with an error
  75     run, acquire: the lock is held elsewhere (run -conflict-exit changes it)
  79     run: the lock was lost while the command ran; the command was terminated
  126    run, lead: the command could not be started
  127    run, lead: the command was not found
  128+N  run, lead: signal N ended the wait, or the command; otherwise run and
         lead exit with the command's status
`

// Exit statuses that most verbs share, for their -h.
const (
	exitUsageHelp = "  64     usage error: nothing was done\n"
	exitRedisHelp = "  69     Redis could not be reached, or answered with an error\n"
)

func main() {
	// padlock says in one line what went wrong; go-redis's own log lines
	// about each failed dial would bury it.
	redis.SetLogger(quiet{})
	os.Exit(run(context.Background(), os.Args[1:], os.Stdout, os.Stderr))
}

// quiet is a go-redis logger that drops everything.
type quiet struct{}

func (quiet) Printf(context.Context, string, ...any) {}

// run dispatches to a subcommand and returns the exit status.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return exitUsage
	}
	verbs := map[string]func(context.Context, []string, io.Writer, io.Writer) int{
		"run": runCmd, "acquire": acquireCmd, "extend": extendCmd, "release": releaseCmd, "break": breakCmd,
		"leader": leaderCmd, "lead": leadCmd, "inspect": inspectCmd, "doctor": doctorCmd, "demo": demoCmd,
		"version": versionCmd, "-version": versionCmd, "--version": versionCmd,
		"list": listCmd, "top": topCmd,
		"serve": serveCmd,
	}
	if cmd, ok := verbs[args[0]]; ok {
		return cmd(ctx, args[1:], stdout, stderr)
	}
	switch args[0] {
	case "help", "-h", "-help", "--help":
		fmt.Fprint(stdout, usage)
		return 0
	}
	if strings.HasPrefix(args[0], "-") {
		fmt.Fprintf(stderr, "padlock: flags go after the command (padlock COMMAND [flags]): %s\nsee padlock -h\n", args[0])
		return exitUsage
	}
	fmt.Fprintf(stderr, "padlock: unknown command %q\nsee padlock -h\n", args[0])
	return exitUsage
}

// versionCmd is 'padlock version': padlock's module version ("(devel)"
// when built from a checkout without a version of its own) and the Go
// version it was built with.
func versionCmd(_ context.Context, args []string, stdout, stderr io.Writer) int {
	v := newVerb("version", "padlock version", "Prints padlock's version and the Go version it was built with.",
		"  0      the version is printed\n"+exitUsageHelp, stdout, stderr)
	if code, ok := v.parse(args); !ok {
		return code
	}
	if v.fset.NArg() > 0 {
		return v.usageError("unexpected %q", v.fset.Arg(0))
	}
	version := "(devel)"
	if info, ok := debug.ReadBuildInfo(); ok && info.Main.Version != "" {
		version = info.Main.Version
	}
	fmt.Fprintf(stdout, "padlock %s %s %s/%s\n", version, runtime.Version(), runtime.GOOS, runtime.GOARCH)
	return 0
}

// verb is one subcommand being run: its flags, and where it writes.
type verb struct {
	name           string
	fset           *flag.FlagSet
	stdout, stderr io.Writer
	help           func()
}

// newVerb returns the verb name with an empty flag set. Its -h prints the
// synopsis, what it does (about), its flags, and its exit statuses
// (exits: one line per status) to stdout.
func newVerb(name, synopsis, about, exits string, stdout, stderr io.Writer) *verb {
	v := &verb{name: name, fset: flag.NewFlagSet(name, flag.ContinueOnError), stdout: stdout, stderr: stderr}
	v.fset.SetOutput(io.Discard) // parse says what is wrong in one line
	v.fset.Usage = func() {}
	v.help = func() {
		fmt.Fprintf(stdout, "usage: %s\n\n%s\n", synopsis, about)
		flags := 0
		v.fset.VisitAll(func(*flag.Flag) { flags++ })
		if flags > 0 {
			fmt.Fprint(stdout, "\nflags:\n")
			v.fset.SetOutput(stdout)
			v.fset.PrintDefaults()
		}
		fmt.Fprintf(stdout, "\nexit status:\n%s", exits)
	}
	return v
}

// parse parses args into the verb's flags. If it returns false, the caller
// exits with code: 0 for -h (the help printed), exitUsage for bad flags
// (said on stderr).
func (v *verb) parse(args []string) (code int, ok bool) {
	err := v.fset.Parse(args)
	switch {
	case err == nil:
		return 0, true
	case errors.Is(err, flag.ErrHelp):
		v.help()
		return 0, false
	}
	return v.usageError("%v", err), false
}

// parseFlags parses args, which are to be flags alone: an argument after
// them is a usage error, followed by hint (like " (-key KEY names its
// key)", or ""). It returns false and the exit status when the verb is
// not to go on.
func (v *verb) parseFlags(args []string, hint string) (code int, ok bool) {
	if code, ok := v.parse(args); !ok {
		return code, false
	}
	if v.fset.NArg() != 0 {
		return v.usageError("unexpected %q: %s takes no arguments%s", v.fset.Arg(0), v.name, hint), false
	}
	return 0, true
}

// usageError says on stderr what is wrong, in one line, and where the
// verb's help is, and returns exitUsage.
func (v *verb) usageError(format string, args ...any) int {
	fmt.Fprintf(v.stderr, "padlock %s: %s\nsee padlock %s -h\n", v.name, fmt.Sprintf(format, args...), v.name)
	return exitUsage
}

// key returns the verb's one argument, KEY; or false and exitUsage, said
// on stderr.
func (v *verb) key() (string, int, bool) {
	args := v.fset.Args()
	switch {
	case len(args) == 0:
		return "", v.usageError("missing KEY"), false
	case len(args) > 1:
		return "", v.extra(args[1]), false
	}
	return args[0], 0, true
}

// extra is the usage error for arg, an argument after the verb's last.
func (v *verb) extra(arg string) int {
	if strings.HasPrefix(arg, "-") {
		return v.usageError("flags go before KEY: %s", arg)
	}
	return v.usageError("unexpected %q after KEY", arg)
}

// isSet reports whether the flag name was given.
func isSet(fset *flag.FlagSet, name string) bool {
	set := false
	fset.Visit(func(f *flag.Flag) { set = set || f.Name == name })
	return set
}

// lockFlags are the flags of the commands that take a lock ('run' and
// 'acquire'): how long to wait, and what to take.
type lockFlags struct {
	wait     *time.Duration
	fence    *bool
	limit    *int
	metadata *string
	minHold  *time.Duration
}

// addLockFlags adds -wait, -fence, -limit, -metadata and -min-hold to fs.
func addLockFlags(fs *flag.FlagSet) lockFlags {
	return lockFlags{
		wait:     fs.Duration("wait", 0, "how long to wait for the lock; 0 tries once"),
		fence:    fs.Bool("fence", false, "take a fencing token (PADLOCK_FENCE)"),
		limit:    fs.Int("limit", 0, "take one of N places of a semaphore on KEY (0: an exclusive lock)"),
		metadata: fs.String("metadata", "", "stored with the lock; shown by 'padlock inspect'\n(default \"host=HOSTNAME pid=PID\" of this process)"),
		minHold:  fs.Duration("min-hold", 0, "keep the lock at least this long after it was taken, even once released: at most one run per interval (0: none)"),
	}
}

// options returns the acquire options the flags ask for; false and the
// exit status, having said why on stderr, if a flag is out of range.
func (f lockFlags) options(v *verb) ([]padlock.Option, int, bool) {
	for _, d := range []struct {
		name  string
		value time.Duration
	}{{"wait", *f.wait}, {"min-hold", *f.minHold}} {
		if d.value < 0 {
			return nil, v.usageError("-%s %v cannot be negative", d.name, d.value), false
		}
	}
	if *f.limit < 0 {
		return nil, v.usageError("-limit %d cannot be negative (0 takes an exclusive lock)", *f.limit), false
	}
	metadata := *f.metadata
	if !isSet(v.fset, "metadata") {
		metadata = defaultMetadata()
	}
	opts := []padlock.Option{padlock.WithMetadata(metadata)}
	if *f.limit > 0 {
		opts = append(opts, padlock.WithLimit(*f.limit))
	}
	if *f.fence {
		opts = append(opts, padlock.WithFencing())
	}
	if *f.minHold > 0 {
		opts = append(opts, padlock.WithMinHold(*f.minHold))
	}
	return opts, 0, true
}
