package padlockweb

// globMatch reports whether key matches the glob pattern as Redis's SCAN
// MATCH reads it (and so as Client.Locks lists): '*' any run of bytes,
// '/' included (unlike path.Match), '?' any one byte, "[...]" one byte of
// a set ("[^...]" not of it; "a-z" a range), '\' the next byte as itself.
// The pattern is one that path.Match accepts (Locks refuses the others).
func globMatch(pattern, key string) bool {
	for len(pattern) > 0 {
		switch pattern[0] {
		case '*':
			for len(pattern) > 1 && pattern[1] == '*' {
				pattern = pattern[1:]
			}
			if len(pattern) == 1 {
				return true
			}
			for i := 0; i <= len(key); i++ {
				if globMatch(pattern[1:], key[i:]) {
					return true
				}
			}
			return false
		case '?':
			if key == "" {
				return false
			}
		case '[':
			if key == "" {
				return false
			}
			n, ok := matchClass(pattern[1:], key[0])
			if !ok || n >= len(pattern) {
				return false // not in it, or no ']' (path.Match refuses that)
			}
			pattern = pattern[n:]
		case '\\':
			if len(pattern) > 1 {
				pattern = pattern[1:]
			}
			fallthrough
		default:
			if key == "" || key[0] != pattern[0] {
				return false
			}
		}
		pattern, key = pattern[1:], key[1:]
	}
	return key == ""
}

// matchClass reports whether b is in the class that class begins with
// (the pattern after its '['), as Redis reads one: a ']' ends it, even
// first; "x-y" is a range (its ends are never escapes, and y may be ']'),
// '\' makes the next byte itself. It returns the index of the class's
// ']' in the pattern.
func matchClass(class string, b byte) (int, bool) {
	i := 0
	negated := i < len(class) && class[i] == '^'
	if negated {
		i++
	}
	in := false
	for ; i < len(class) && class[i] != ']'; i++ {
		switch {
		case class[i] == '\\' && i+1 < len(class):
			i++
			in = in || class[i] == b
		case i+2 < len(class) && class[i+1] == '-':
			lo, hi := min(class[i], class[i+2]), max(class[i], class[i+2])
			in = in || lo <= b && b <= hi
			i += 2
		default:
			in = in || class[i] == b
		}
	}
	return i + 1, in != negated
}
