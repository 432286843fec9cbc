package bpf

import (
	"fmt"
	"strings"
)

// The ABI's strings are fixed-size, NUL-terminated char arrays ([N]int8 in
// Go). Identifying strings (tenant key, policy, container id) must fit
// whole: cutting them could make two different keys equal. Display-only
// strings (names, cgroup path) are cut to fit.

// putExact stores s in dst, or fails naming field if s does not fit with
// its NUL or contains a NUL.
func putExact(dst []int8, s, field string) error {
	if len(s) > len(dst)-1 {
		return fmt.Errorf("%s: %d bytes, at most %d", field, len(s), len(dst)-1)
	}
	if strings.IndexByte(s, 0) >= 0 {
		return fmt.Errorf("%s: contains a NUL byte", field)
	}
	put(dst, s)
	return nil
}

// putTruncated stores as much of s as fits with its NUL, cut at a UTF-8
// boundary and at the first NUL. No marker is added.
func putTruncated(dst []int8, s string) {
	if i := strings.IndexByte(s, 0); i >= 0 {
		s = s[:i]
	}
	if max := len(dst) - 1; len(s) > max {
		cut := 0
		for i := range s { // rune starts: every one is a safe cut
			if i > max {
				break
			}
			cut = i
		}
		s = s[:cut]
	}
	put(dst, s)
}

func put(dst []int8, s string) {
	clear(dst)
	for i := 0; i < len(s); i++ {
		dst[i] = int8(s[i])
	}
}

// cstringBytes returns the bytes of src up to its first NUL.
func cstringBytes(src []int8) []byte {
	b := make([]byte, 0, len(src))
	for _, c := range src {
		if c == 0 {
			break
		}
		b = append(b, byte(c))
	}
	return b
}

// cstring returns src up to its first NUL as a string.
func cstring(src []int8) string { return string(cstringBytes(src)) }
