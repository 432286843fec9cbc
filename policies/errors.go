package policies

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"unicode/utf8"
)

// Sentinel errors; test them with errors.Is.
var (
	// ErrUnknownPolicy: a policy name that the catalog does not hold.
	ErrUnknownPolicy = errors.New("unknown policy")
	// ErrBadSize: a size that ParseSize rejects.
	ErrBadSize = errors.New("bad size")
	// ErrBadValue: a malformed or out-of-range value (class, algorithm,
	// parameter, duration, number, probe name, field of a policy).
	ErrBadValue = errors.New("bad value")
	// ErrUnknownKey: a key of the gpuext.io domain that is not part of the grammar.
	ErrUnknownKey = errors.New("unknown key")
	// ErrForbidden: a request that the admin constraints refuse.
	ErrForbidden = errors.New("forbidden")
	// ErrMissingParam: a parameterised policy selected without its parameter.
	ErrMissingParam = errors.New("missing parameter")
	// ErrBadCatalog: a catalog or constraints file that does not decode.
	ErrBadCatalog = errors.New("bad catalog")
)

// kindError is an error whose text is its own message and which matches a
// sentinel through errors.Is, so messages read naturally
// (`unknown eviction policy "lruu"`) and still classify.
type kindError struct {
	msg  string
	kind error
}

func (e *kindError) Error() string { return e.msg }
func (e *kindError) Unwrap() error { return e.kind }

func badValue(msg string) error { return &kindError{msg: msg, kind: ErrBadValue} }

// MaxQuoted is the most bytes of one key or value an error message quotes:
// a value of 16 MiB must not make a 33 MB log line.
const MaxQuoted = 128

// quote is s quoted for an error message: ASCII only (a Cyrillic "о" shows
// as \u043e, a zero-width space as \u200b), and for a long s its first
// MaxQuoted bytes, then "... (N bytes)".
func quote(s string) string {
	if len(s) <= MaxQuoted {
		return strconv.QuoteToASCII(s)
	}
	cut := MaxQuoted
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return fmt.Sprintf("%s... (%d bytes)", strconv.QuoteToASCII(s[:cut]), len(s))
}

// keyText is a key as an error names it: as written when it is short
// printable ASCII (the common case reads naturally), quoted otherwise.
func keyText(k string) string {
	if len(k) <= MaxQuoted && !strings.ContainsFunc(k, func(r rune) bool { return r <= ' ' || r >= 0x7f }) {
		return k
	}
	return quote(k)
}
