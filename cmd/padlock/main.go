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
//	padlock inspect [-redis URL] [-json] KEY
//	padlock doctor [-redis URL] [-key KEY] [-json]
//	padlock demo [-redis URL]
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
// COMMAND's status (128 plus the signal's number if it never ran). leader
// prints who leads KEY, or with -watch every change; it exits 0 whether or
// not someone leads, 69 when Redis cannot be reached.
//
// doctor checks whether the Redis it talks to is safe for locks (see
// padlock.Client.Check) and prints one line per finding, most severe first.
// It exits 0 when nothing is a danger, 1 when something is, 69 when Redis
// cannot be reached, 64 on usage errors.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/url"
	"os"
	"reflect"
	"strconv"
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
  padlock inspect [-redis URL] [-json] KEY       show who holds KEY, its TTL and fence
  padlock doctor [-redis URL] [-key KEY] [-json] is this Redis safe for locks? (exit 1 if not)
  padlock demo [-redis URL]                      play the common cases (no Redis needed)

Run 'padlock COMMAND -h' for a command's flags.
`

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
	switch args[0] {
	case "run":
		return runCmd(ctx, args[1:], stdout, stderr)
	case "acquire":
		return acquireCmd(ctx, args[1:], stdout, stderr)
	case "extend":
		return extendCmd(ctx, args[1:], stdout, stderr)
	case "release":
		return releaseCmd(ctx, args[1:], stdout, stderr)
	case "break":
		return breakCmd(ctx, args[1:], stdout, stderr)
	case "leader":
		return leaderCmd(ctx, args[1:], stdout, stderr)
	case "lead":
		return leadCmd(ctx, args[1:], stdout, stderr)
	case "inspect":
		return inspectCmd(ctx, args[1:], stdout, stderr)
	case "doctor":
		return doctorCmd(ctx, args[1:], stdout, stderr)
	case "demo":
		return demoCmd(ctx, args[1:], stdout, stderr)
	case "help", "-h", "-help", "--help":
		fmt.Fprint(stdout, usage)
		return 0
	}
	fmt.Fprintf(stderr, "padlock: unknown command %q\n%s", args[0], usage)
	return exitUsage
}

// newFlags returns a flag set for a subcommand that prints its errors and
// usage (synopsis, then what it does, then the flags) to stderr.
func newFlags(name, synopsis, about string, stderr io.Writer) *flag.FlagSet {
	fset := flag.NewFlagSet(name, flag.ContinueOnError)
	fset.SetOutput(stderr)
	fset.Usage = func() {
		fmt.Fprintf(fset.Output(), "usage: %s\n\n%s\n\nflags:\n", synopsis, about)
		fset.PrintDefaults()
	}
	return fset
}

// parseFlags parses args into fset. If it returns false, the caller exits
// with code: 0 for -h, exitUsage for bad flags (already reported).
func parseFlags(fset *flag.FlagSet, args []string) (code int, ok bool) {
	err := fset.Parse(args)
	switch {
	case err == nil:
		return 0, true
	case errors.Is(err, flag.ErrHelp):
		return 0, false
	}
	return exitUsage, false
}

// defaultRedisURL is where padlock finds Redis when -redis is not given.
func defaultRedisURL() string {
	for _, name := range []string{"PADLOCK_REDIS_URL", "REDIS_URL"} {
		if v := os.Getenv(name); v != "" {
			return v
		}
	}
	return "redis://127.0.0.1:6379"
}

// redisFlag adds the -redis flag to fs.
func redisFlag(fs *flag.FlagSet) *string {
	return fs.String("redis", defaultRedisURL(),
		"Redis URL: redis://[user:password@]host:port[/db], or rediss:// for TLS\n(default from PADLOCK_REDIS_URL, else REDIS_URL)")
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
		metadata: fs.String("metadata", defaultMetadata(), "stored with the lock; shown by 'padlock inspect'"),
		minHold:  fs.Duration("min-hold", 0, "keep the lock at least this long after it was taken, even once released: at most one run per interval (0: none)"),
	}
}

// options returns the acquire options the flags ask for; false, having
// said why on stderr, if a flag is out of range.
func (f lockFlags) options(verb string, stderr io.Writer) ([]padlock.Option, bool) {
	if *f.wait < 0 || *f.limit < 0 || *f.minHold < 0 {
		fmt.Fprintf(stderr, "padlock %s: -wait, -limit and -min-hold cannot be negative\n", verb)
		return nil, false
	}
	opts := []padlock.Option{padlock.WithMetadata(*f.metadata)}
	if *f.limit > 0 {
		opts = append(opts, padlock.WithLimit(*f.limit))
	}
	if *f.fence {
		opts = append(opts, padlock.WithFencing())
	}
	if *f.minHold > 0 {
		opts = append(opts, padlock.WithMinHold(*f.minHold))
	}
	return opts, true
}

// dial makes a go-redis client from a URL. It does not contact Redis.
func dial(rawURL string) (*redis.Client, error) {
	rawURL, skipVerify, err := takeSkipVerify(rawURL)
	if err != nil {
		return nil, fmt.Errorf("bad -redis URL: %w", err)
	}
	opt, err := redis.ParseURL(rawURL)
	if err != nil {
		return nil, fmt.Errorf("bad -redis URL: %w", err)
	}
	if skipVerify && opt.TLSConfig != nil {
		opt.TLSConfig.InsecureSkipVerify = true
	}
	// Give up quickly on an unreachable server: a cron job should say so,
	// not hang.
	setDialerRetries(opt, 1)
	opt.MaxRetries = 1
	return redis.NewClient(opt), nil
}

// client makes the Client of a verb, and what closes it; nil and the exit
// status if the URL is bad.
func client(redisURL, verb string, stderr io.Writer) (*padlock.Client, func(), int) {
	rdb, err := dial(redisURL)
	if err != nil {
		fmt.Fprintf(stderr, "padlock %s: %v\n", verb, err)
		return nil, nil, exitUsage
	}
	locks := padlock.New(rdb)
	return locks, func() {
		_ = locks.Close() // the lock stays held: Close releases nothing
		_ = rdb.Close()
	}, 0
}

// takeSkipVerify removes the skip_verify=true|false query parameter from a
// Redis URL and returns its value. The command reads it itself, so that it
// works with go-redis versions whose ParseURL does not know it (before
// v9.8).
func takeSkipVerify(rawURL string) (string, bool, error) {
	u, err := url.Parse(rawURL)
	if err != nil || !u.Query().Has("skip_verify") {
		return rawURL, false, nil // ParseURL reports what is wrong
	}
	q := u.Query()
	skip, err := strconv.ParseBool(q.Get("skip_verify"))
	if err != nil {
		return "", false, fmt.Errorf("skip_verify=%q: want true or false", q.Get("skip_verify"))
	}
	q.Del("skip_verify")
	u.RawQuery = q.Encode()
	return u.String(), skip, nil
}

// setDialerRetries sets opt.DialerRetries, a field go-redis has from
// v9.16 on (older versions dial once per attempt, as wanted here).
func setDialerRetries(opt *redis.Options, n int) {
	if f := reflect.ValueOf(opt).Elem().FieldByName("DialerRetries"); f.IsValid() && f.CanSet() {
		f.SetInt(int64(n))
	}
}

// redact hides the password in a Redis URL for messages.
func redact(url string) string {
	at := strings.LastIndexByte(url, '@')
	scheme := strings.Index(url, "://")
	if at < 0 || scheme < 0 || at < scheme {
		return url
	}
	return url[:scheme+3] + "***" + url[at:]
}
