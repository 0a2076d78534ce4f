package padlock

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"strconv"

	"github.com/padlock-go/padlock/driver"
)

// readRESP3 reads one RESP3 value from r, as padlock's own tracking
// connection (goredis_track.go) needs it: numbers as int64, strings as
// string, nulls as nil, error replies as driver.ServerError, arrays, sets
// and pushes as []any, maps as map[string]any; doubles, big numbers and
// booleans as their text. push reports a push (an invalidation). An
// attribute before a value is read and dropped.
func readRESP3(r *bufio.Reader) (v any, push bool, err error) {
	line, err := r.ReadString('\n')
	if err != nil {
		return nil, false, err
	}
	if len(line) < 3 || line[len(line)-2] != '\r' {
		return nil, false, fmt.Errorf("padlock: not RESP3: %q", line)
	}
	kind, body := line[0], line[1:len(line)-2]
	switch kind {
	case '+', ',', '(', '#':
		return body, false, nil
	case '-':
		return driver.ServerError(body), false, nil
	case '_':
		return nil, false, nil
	case ':':
		n, err := strconv.ParseInt(body, 10, 64)
		return n, false, err
	case '$', '=', '!':
		s, err := readBlob(r, body)
		if err != nil || s == nil {
			return nil, false, err
		}
		if kind == '!' {
			return driver.ServerError(*s), false, nil
		}
		return *s, false, nil
	case '*', '~', '>', '%', '|':
		n, err := strconv.Atoi(body)
		if err != nil {
			return nil, false, err
		}
		if n < 0 {
			return nil, false, nil // RESP2's null array
		}
		if n > maxRESP3 {
			return nil, false, fmt.Errorf("padlock: not RESP3: %d elements", n)
		}
		if kind == '%' || kind == '|' {
			n *= 2
		}
		elems := make([]any, n)
		for i := range elems {
			if elems[i], _, err = readRESP3(r); err != nil {
				return nil, false, err
			}
		}
		switch kind {
		case '|': // an attribute: the value follows
			return readRESP3(r)
		case '%':
			m := make(map[string]any, n/2)
			for i := 0; i < n; i += 2 {
				m[fmt.Sprint(elems[i])] = elems[i+1]
			}
			return m, false, nil
		}
		return elems, kind == '>', nil
	}
	return nil, false, fmt.Errorf("padlock: not RESP3: %q", line)
}

// maxRESP3 bounds the length of a blob, array or map read: nothing padlock
// asks for comes near it; a stream that says more is not Redis.
const maxRESP3 = 64 << 20

// readBlob reads a blob of the length body says (nil: a null).
func readBlob(r *bufio.Reader, body string) (*string, error) {
	n, err := strconv.Atoi(body)
	if err != nil {
		return nil, err
	}
	if n < 0 {
		return nil, nil
	}
	if n > maxRESP3 {
		return nil, fmt.Errorf("padlock: not RESP3: a blob of %d bytes", n)
	}
	b := make([]byte, n+2)
	if _, err := io.ReadFull(r, b); err != nil {
		return nil, err
	}
	if string(b[n:]) != "\r\n" {
		return nil, errors.New("padlock: not RESP3: a blob without its CRLF")
	}
	s := string(b[:n])
	return &s, nil
}
