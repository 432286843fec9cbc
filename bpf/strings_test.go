package bpf

import (
	"strings"
	"testing"
)

func TestPutExact(t *testing.T) {
	var buf [8]int8
	if err := putExact(buf[:], "1234567", "tenant key"); err != nil {
		t.Fatalf("7 bytes in an 8-byte field: %v", err)
	}
	if got := cstring(buf[:]); got != "1234567" {
		t.Fatalf("round trip = %q", got)
	}
	if err := putExact(buf[:], "12345678", "tenant key"); err == nil || !strings.Contains(err.Error(), "tenant key") {
		t.Fatalf("8 bytes: err = %v, want one naming the field", err)
	}
	if err := putExact(buf[:], "a\x00b", "container id"); err == nil || !strings.Contains(err.Error(), "container id") {
		t.Fatalf("NUL: err = %v", err)
	}
	if err := putExact(buf[:], "ab", "x"); err != nil || cstring(buf[:]) != "ab" {
		t.Fatalf("shorter value must clear the old one: %q, %v", cstring(buf[:]), err)
	}
}

func TestPutTruncated(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"short", "short"},
		{"exactly", "exactly"},
		{"much-too-long", "much-to"},
		{"abcdefé", "abcdef"}, // é would need bytes 6-7 and the NUL byte 8: dropped whole
		{"abcdeé", "abcdeé"},  // fits exactly in 7 bytes
		{"ab\x00cd", "ab"},
	} {
		var buf [8]int8
		putTruncated(buf[:], tc.in)
		if got := cstring(buf[:]); got != tc.want {
			t.Errorf("putTruncated(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}
