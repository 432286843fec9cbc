package policies

import (
	"errors"

	"github.com/gpuext/gpuext/policies/grammar"
)

// Sentinel errors; test them with errors.Is.
var (
	// ErrUnknownPolicy: a policy name that the catalog does not hold.
	ErrUnknownPolicy = errors.New("unknown policy")
	// ErrBadSize: a size that ParseSize rejects.
	ErrBadSize = grammar.ErrBadSize
	// ErrBadValue: a malformed or out-of-range value (class, algorithm,
	// parameter, duration, number, probe name, field of a policy).
	ErrBadValue = errors.New("bad value")
	// ErrUnknownKey: a key of the gpuext.io domain that is not part of the grammar.
	ErrUnknownKey = grammar.ErrUnknownKey
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

// MaxQuoted is the most bytes of one key or value an error message quotes
// (grammar.Quote).
const MaxQuoted = grammar.MaxQuoted

func quote(s string) string { return grammar.Quote(s) }

func keyText(k string) string { return grammar.KeyText(k) }
