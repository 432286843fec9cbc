package verifier

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// Kinds of rejection: an *Error wraps one of these, so callers can test
// errors.Is(err, verifier.ErrUnboundedLoop) and so on.
var (
	ErrProgram       = errors.New("malformed program")            // jumps out of range, falling off the end, unreachable code, unsupported insns
	ErrUnboundedLoop = errors.New("unbounded loop")               // a back-edge not proven to terminate, or too many paths
	ErrStack         = errors.New("stack violation")              // outside the 512 bytes, misaligned, or never written
	ErrMemory        = errors.New("memory safety violation")      // ctx, map value and pointer rules; uninitialised registers
	ErrHelper        = errors.New("helper not allowed")           // a helper outside the attach point's whitelist, or bad arguments
	ErrMap           = errors.New("map not allowed")              // a map type or size the device cannot hold
	ErrDivergent     = errors.New("side effect not warp-uniform") // SIMT: a side effect every lane would repeat or disagree on
)

// ErrUnsupportedAttach: Verify was asked about an attach point that is not
// a device attach point.
var ErrUnsupportedAttach = errors.New("not a device probe attach point")

// Error is the rejection of one program, at one instruction.
type Error struct {
	Prog   string
	Insn   int    // raw instruction index (as llvm-objdump numbers them)
	Source string // "file.c:34" from BTF line info, or ""
	Line   string // the source text of that line, if known
	Msg    string
	Kind   error // one of the Err* kinds above
}

func (e *Error) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "prog %s: insn %d", e.Prog, e.Insn)
	if e.Source != "" {
		b.WriteString(" (" + e.Source)
		if e.Line != "" {
			b.WriteString(" " + strconv.Quote(e.Line))
		}
		b.WriteString(")")
	}
	b.WriteString(": " + e.Msg)
	return b.String()
}

// Unwrap returns the kind of the rejection.
func (e *Error) Unwrap() error { return e.Kind }
