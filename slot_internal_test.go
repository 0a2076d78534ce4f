package padlock

import "testing"

// slot must agree with Redis Cluster: CRC16/XMODEM of the hash tag (or the
// whole key) modulo 16384. "123456789" is CRC16/XMODEM's check value
// (0x31C3 = 12739); the others are what CLUSTER KEYSLOT answers.
func TestSlot(t *testing.T) {
	tests := []struct {
		key  string
		want uint16
	}{
		{"123456789", 12739},
		{"foo", 12182},
		{"{user1000}.following", 3443},
		{"{user1000}.followers", 3443},
		{"foo{}{bar}", 8363},
		{"foo{{bar}}zap", 4015},
		{"foo{bar}{zap}", 5061},
	}
	for _, tt := range tests {
		if got := slot(tt.key); got != tt.want {
			t.Errorf("slot(%q) = %d, want %d", tt.key, got, tt.want)
		}
	}
}
