package padlock

import (
	"bufio"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/padlock-go/padlock/driver"
)

// readRESP3 reads what a server may send the tracking connection: every
// RESP3 type, pushes told apart from replies, attributes dropped, and a
// stream that is not RESP3 refused.
func TestReadRESP3(t *testing.T) {
	for _, tt := range []struct {
		name, in string
		want     any
		push     bool
	}{
		{"simple string", "+OK\r\n", "OK", false},
		{"error", "-NOPERM no\r\n", driver.ServerError("NOPERM no"), false},
		{"blob error", "!8\r\nERR a\r\nb\r\n", driver.ServerError("ERR a\r\nb"), false},
		{"integer", ":-2\r\n", int64(-2), false},
		{"blob", "$5\r\na\r\nbc\r\n", "a\r\nbc", false},
		{"null blob", "$-1\r\n", nil, false},
		{"null", "_\r\n", nil, false},
		{"null array", "*-1\r\n", nil, false},
		{"double, big number, boolean", "*3\r\n,1.5\r\n(123456789012345678901\r\n#t\r\n", []any{"1.5", "123456789012345678901", "t"}, false},
		{"map", "%2\r\n+server\r\n$5\r\nredis\r\n+proto\r\n:3\r\n", map[string]any{"server": "redis", "proto": int64(3)}, false},
		{"set", "~1\r\n+a\r\n", []any{"a"}, false},
		{"attribute, then the value", "|1\r\n+ttl\r\n:3\r\n:7\r\n", int64(7), false},
		{"invalidation", ">2\r\n$10\r\ninvalidate\r\n*1\r\n$4\r\nlock\r\n", []any{"invalidate", []any{"lock"}}, true},
		{"invalidation of every key", ">2\r\n$10\r\ninvalidate\r\n_\r\n", []any{"invalidate", nil}, true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			v, push, err := readRESP3(bufio.NewReader(strings.NewReader(tt.in)))
			require.NoError(t, err)
			assert.Equal(t, tt.want, v)
			assert.Equal(t, tt.push, push)
		})
	}
	for _, bad := range []string{"", "+OK\n", "?what\r\n", ":x\r\n", "$5\r\nab\r\n", "$2\r\nabcd", "*2\r\n+a\r\n", "$9223372036854775807\r\n", "*99999999999\r\n"} {
		_, _, err := readRESP3(bufio.NewReader(strings.NewReader(bad)))
		assert.Error(t, err, "%q", bad)
	}
	keys, ok := invalidation([]any{"invalidate", nil})
	assert.True(t, ok)
	assert.Nil(t, keys, "a FLUSHALL: every key")
	keys, ok = invalidation([]any{"invalidate", []any{"a", "b"}})
	assert.True(t, ok)
	assert.Equal(t, []string{"a", "b"}, keys)
	_, ok = invalidation([]any{"message", "x", "y"})
	assert.False(t, ok)
}
