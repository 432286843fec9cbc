package grammar

import (
	"fmt"
	"strconv"
	"strings"
	"unicode/utf8"
)

// MaxQuoted is the most bytes of one key or value an error message quotes:
// a value of 16 MiB must not make a 33 MB log line.
const MaxQuoted = 128

// Quote is s quoted for an error message: ASCII only (a Cyrillic "о" shows
// as \u043e, a zero-width space as \u200b), and for a long s its first
// MaxQuoted bytes, then "... (N bytes)".
func Quote(s string) string {
	if len(s) <= MaxQuoted {
		return strconv.QuoteToASCII(s)
	}
	cut := MaxQuoted
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return fmt.Sprintf("%s... (%d bytes)", strconv.QuoteToASCII(s[:cut]), len(s))
}

// KeyText is a key as an error names it: as written when it is short
// printable ASCII (the common case reads naturally), quoted otherwise.
func KeyText(k string) string {
	if len(k) <= MaxQuoted && !strings.ContainsFunc(k, func(r rune) bool { return r <= ' ' || r >= 0x7f }) {
		return k
	}
	return Quote(k)
}
