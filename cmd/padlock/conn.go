package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net/url"
	"os"
	"reflect"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/padlock-go/padlock"
)

// defaultTimeout bounds each round trip to Redis when neither -timeout nor
// PADLOCK_TIMEOUT is given: go-redis's own read timeout.
const defaultTimeout = 3 * time.Second

// localRedis is the Redis URL when neither -redis nor the environment
// gives one.
const localRedis = "redis://127.0.0.1:6379"

// conn is where a verb finds Redis, and how long it waits for an answer.
type conn struct {
	url     string
	timeout time.Duration
}

// redisFlags are -redis and -timeout, whose defaults come from the
// environment once the flags are parsed (so that -h shows no password).
type redisFlags struct {
	fset    *flag.FlagSet
	url     *string
	timeout *time.Duration
}

// addRedisFlags adds -redis and -timeout to fset.
func addRedisFlags(fset *flag.FlagSet) redisFlags {
	return redisFlags{
		fset: fset,
		url: fset.String("redis", "", "Redis URL: redis://[user:password@]host:port[/db], or rediss:// for TLS\n"+
			"(default $PADLOCK_REDIS_URL, else $REDIS_URL, else "+localRedis+")"),
		timeout: addTimeoutFlag(fset),
	}
}

// addTimeoutFlag adds -timeout to fset.
func addTimeoutFlag(fset *flag.FlagSet) *time.Duration {
	return fset.Duration("timeout", 0, "give up on Redis after this long without an answer: bounds connecting and each request\n"+
		"(default $PADLOCK_TIMEOUT, else 3s: go-redis's own read timeout, ample for a loaded\n"+
		"server or a TLS handshake across regions, short enough that a job whose Redis\n"+
		"does not answer says so in seconds)")
}

// conn returns where the flags and the environment say Redis is, or a
// usage error.
func (f redisFlags) conn() (conn, error) {
	c := conn{url: *f.url}
	if !isSet(f.fset, "redis") {
		c.url = defaultRedisURL()
	}
	var err error
	c.timeout, err = timeout(f.fset, *f.timeout)
	return c, err
}

// timeout is the -timeout flag's value if it was given, else
// $PADLOCK_TIMEOUT's, else defaultTimeout; an error if the one chosen is
// not a duration of at least 1ms.
func timeout(fset *flag.FlagSet, flagValue time.Duration) (time.Duration, error) {
	if isSet(fset, "timeout") {
		if flagValue < time.Millisecond {
			return 0, fmt.Errorf("-timeout %v is under 1ms", flagValue)
		}
		return flagValue, nil
	}
	env := os.Getenv("PADLOCK_TIMEOUT")
	if env == "" {
		return defaultTimeout, nil
	}
	d, err := time.ParseDuration(env)
	switch {
	case err != nil:
		return 0, fmt.Errorf("PADLOCK_TIMEOUT=%q is not a duration (like 5s or 500ms)", env)
	case d < time.Millisecond:
		return 0, fmt.Errorf("PADLOCK_TIMEOUT=%q is under 1ms", env)
	}
	return d, nil
}

// defaultRedisURL is where padlock finds Redis when -redis is not given.
func defaultRedisURL() string {
	for _, name := range []string{"PADLOCK_REDIS_URL", "REDIS_URL"} {
		if v := os.Getenv(name); v != "" {
			return v
		}
	}
	return localRedis
}

// call returns a context for one call to Redis: ctx, ending after the
// timeout.
func (c conn) call(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, c.timeout)
}

// dial makes a go-redis client of c. It does not contact Redis.
func (c conn) dial() (*redis.Client, error) {
	rawURL, skipVerify, err := takeSkipVerify(c.url)
	if err != nil {
		return nil, fmt.Errorf("bad Redis URL: %w", err)
	}
	opt, err := redis.ParseURL(rawURL)
	if uerr := (*url.Error)(nil); errors.As(err, &uerr) {
		err = uerr.Err // without the URL, which may hold a password
	}
	if err != nil {
		return nil, fmt.Errorf("bad Redis URL %s: %w", redact(c.url), err)
	}
	if skipVerify && opt.TLSConfig != nil {
		opt.TLSConfig.InsecureSkipVerify = true
	}
	// Give up quickly on an unreachable server: a cron job should say so,
	// not hang. A context's deadline (-wait) bounds a round trip too.
	opt.DialTimeout, opt.ReadTimeout, opt.WriteTimeout = c.timeout, c.timeout, c.timeout
	opt.ContextTimeoutEnabled = true
	setDialerRetries(opt, 1)
	opt.MaxRetries = 1
	return redis.NewClient(opt), nil
}

// client makes the Client of a verb, and what closes it; nil and the exit
// status, said on stderr, if the URL is bad.
func (v *verb) client(c conn, opts ...padlock.Option) (*padlock.Client, func(), int) {
	rdb, err := c.dial()
	if err != nil {
		return nil, nil, v.usageError("%v", err)
	}
	locks := padlock.New(rdb, opts...)
	return locks, func() {
		_ = locks.Close() // the lock stays held: Close releases nothing
		_ = rdb.Close()
	}, 0
}

// connect is the verb's Client, of the Redis that rf and the environment
// name, and where that is; done closes the Client. When it cannot make
// one, locks is nil and code is the exit status.
func (v *verb) connect(rf redisFlags, opts ...padlock.Option) (c conn, locks *padlock.Client, done func(), code int) {
	c, err := rf.conn()
	if err != nil {
		return c, nil, nil, v.usageError("%v", err)
	}
	locks, done, code = v.client(c, opts...)
	return c, locks, done, code
}

// fail reports err, the failure of what the verb tried to do (a phrase
// like "read who leads KEY"), on stderr, and returns the exit status for
// it: 64 for bad input, 69 otherwise.
func (v *verb) fail(what string, c conn, err error) int {
	return v.failWithin(what, c, fmt.Sprintf("-timeout %v", c.timeout), err)
}

// failWithin is fail for a call whose context ended within (a flag and
// its value).
func (v *verb) failWithin(what string, c conn, within string, err error) int {
	if errors.Is(err, padlock.ErrInvalid) {
		return v.usageError("%s", cause(err))
	}
	msg := cause(err)
	switch {
	case errors.Is(err, context.DeadlineExceeded):
		msg = fmt.Sprintf("no answer from %s within %s (%s)", redact(c.url), within, msg)
	case errors.Is(err, os.ErrDeadlineExceeded):
		msg = fmt.Sprintf("no answer from %s within -timeout %v (%s)", redact(c.url), c.timeout, msg)
	}
	fmt.Fprintf(v.stderr, "padlock %s: cannot %s: %s\n", v.name, what, msg)
	return exitUnavailable
}

// opPrefix is how padlock's errors begin: "padlock: ", what failed, and
// the key, quoted: `padlock: inspect "k": `, `padlock: lock lost: "k": `.
var opPrefix = regexp.MustCompile(`^padlock: [^"]*"(?:[^"\\]|\\.)*": `)

// cause is err's message without what the verb's own message says in its
// words: padlock's prefix, what failed and the key.
func cause(err error) string {
	msg := opPrefix.ReplaceAllString(err.Error(), "")
	msg = strings.TrimPrefix(msg, "padlock: ")
	return strings.TrimPrefix(msg, "invalid argument: ")
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
