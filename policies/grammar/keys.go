package grammar

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/gpuext/gpuext/lib/strictjson"
)

// Domain is the key domain of gpuext labels and annotations.
const Domain = "gpuext.io"

// The keys of the selection grammar (README.md). Each may also be written
// KEY/pod and KEY/container.NAME.
const (
	KeyPolicy     = "policy." + Domain
	KeyQuota      = "quota." + Domain
	KeyPriority   = "priority." + Domain
	KeyEviction   = "eviction." + Domain
	KeyPrefetch   = "prefetch." + Domain
	KeyTimeslice  = "timeslice." + Domain
	KeyInterleave = "interleave." + Domain
	KeyProbes     = "probes." + Domain
	// KeyProbeKernels limits the container's probes to some kernels
	// (.entry names, mangled); see Selection.ProbeKernels.
	KeyProbeKernels = "probe-kernels." + Domain
	KeyTenant       = "tenant." + Domain
)

// OverrideKeys are the keys that change one setting of the selected policy.
var OverrideKeys = []string{KeyQuota, KeyPriority, KeyEviction, KeyPrefetch, KeyTimeslice, KeyInterleave, KeyProbes, KeyProbeKernels, KeyTenant}

// Keys lists every key of the grammar.
var Keys = append([]string{KeyPolicy}, OverrideKeys...)

// MaxHintKey is the longest unknown key that gets a "did you mean" hint
// (the edit distance takes time by the square of the length).
const MaxHintKey = 128

// ErrUnknownKey: a key of the gpuext.io domain that is not part of the grammar.
var ErrUnknownKey = errors.New("unknown key")

// keyError is an error of ParseKey: its text is its own message, and it
// matches ErrUnknownKey.
type keyError struct{ msg string }

func (e *keyError) Error() string { return e.msg }
func (e *keyError) Unwrap() error { return ErrUnknownKey }

// IsKey says whether a label or annotation key is of the gpuext.io domain
// as ParseKey reads it: the part before the first '/' is gpuext.io or a
// subdomain of it once look-alike characters are folded (Fold), so that
// "p\u043elicy.gpuext.io" is ours (and an error) wherever it is read.
func IsKey(key string) bool {
	_, _, ours, _ := ParseKey(key)
	return ours
}

// ParseKey splits a key of the gpuext.io domain into its base key and scope.
// ours is false for keys of other domains. scope is "", "pod" or
// "container.NAME". A key that only looks like one of the domain (Fold:
// Cyrillic or fullwidth letters, invisible or control characters, a
// trailing dot, upper case) is ours and an error naming the key it looks like: ignoring it would
// silently drop the user's request.
func ParseKey(key string) (base, scope string, ours bool, err error) {
	prefix, scope, slash := strings.Cut(key, "/")
	folded, fscope, _ := strings.Cut(Fold(key), "/")
	folded = strings.TrimRight(folded, ".")
	if folded != Domain && !strings.HasSuffix(folded, "."+Domain) {
		return "", "", false, nil
	}
	unknown := func(why string) error { return &keyError{msg: why} }
	if !slices.Contains(Keys, prefix) {
		if slices.Contains(Keys, folded) {
			return "", "", true, unknown(fmt.Sprintf("unknown key %s: it looks like %s but is not (%s); write %s",
				Quote(prefix), folded, LookalikeWhy(prefix), folded))
		}
		return "", "", true, unknown(fmt.Sprintf("unknown key %s%s (known: %s)", KeyText(prefix), keyHint(folded), strings.Join(Keys, ", ")))
	}
	name, isContainer := strings.CutPrefix(scope, "container.")
	switch {
	case !slash:
	case scope == "pod":
	case isContainer && name != "" && !strings.ContainsFunc(name, func(r rune) bool { return r <= ' ' || r >= 0x7f || r == '/' }):
	case isContainer && name != "" && !strings.Contains(name, "/"):
		return "", "", true, unknown(fmt.Sprintf("container name %s in %s has characters no container name has (%s)",
			Quote(name), KeyText(key), LookalikeWhy(name)))
	default:
		hint := ""
		if fscope == "pod" || strings.HasPrefix(fscope, "container.") {
			hint = fmt.Sprintf(": it looks like /%s but is not (%s)", KeyText(fscope), LookalikeWhy(scope))
		}
		return "", "", true, unknown(fmt.Sprintf("unknown key suffix %s%s (want %s, %s/pod or %s/container.NAME)", Quote("/"+scope), hint, prefix, prefix, prefix))
	}
	return prefix, scope, true, nil
}

func keyHint(k string) string {
	if len(k) > MaxHintKey {
		return ""
	}
	for _, known := range Keys {
		if strictjson.EditDistance(k, known) <= 2 {
			return fmt.Sprintf(", did you mean %q?", known)
		}
	}
	return ""
}

// Fold maps what looks like an ASCII key to that key, by hand (the
// NFKC-and-confusables idea, for the letters a key can have): fullwidth
// forms to ASCII, Cyrillic, Greek and other letters that look Latin to
// their Latin twins, other dots and slashes to '.' and '/'; it drops
// invisible characters (zero-width, bidi marks, soft hyphen, byte order
// mark: Unicode's format class), ASCII control characters (a NUL, where a
// C reader would end the key) and white space, and lower-cases.
func Fold(k string) string {
	var b strings.Builder
	b.Grow(len(k))
	for _, r := range k {
		switch {
		case r < ' ' || r == 0x7f: // NUL and the other ASCII controls: invisible too
			continue
		case r < utf8.RuneSelf:
		case r >= 0xFF01 && r <= 0xFF5E: // fullwidth ASCII
			r -= 0xFF01 - '!'
		case unicode.Is(unicode.Cf, r) || unicode.IsSpace(r):
			continue
		default:
			if l, ok := lookalikes[r]; ok {
				r = l
			}
		}
		if unicode.IsSpace(r) {
			continue
		}
		b.WriteRune(unicode.ToLower(r))
	}
	return b.String()
}

// lookalikes are letters and marks that look like the ASCII ones of a key.
var lookalikes = map[rune]rune{
	// Cyrillic
	'а': 'a', 'в': 'b', 'с': 'c', 'ԁ': 'd', 'е': 'e', 'ё': 'e', 'һ': 'h', 'і': 'i', 'ї': 'i', 'ј': 'j', 'к': 'k',
	'ӏ': 'l', 'м': 'm', 'н': 'h', 'о': 'o', 'р': 'p', 'ԛ': 'q', 'г': 'r', 'ѕ': 's', 'т': 't', 'ц': 'u', 'ѵ': 'v',
	'ԝ': 'w', 'х': 'x', 'у': 'y', 'ү': 'y',
	'А': 'A', 'В': 'B', 'С': 'C', 'Е': 'E', 'Н': 'H', 'І': 'I', 'Ј': 'J', 'К': 'K', 'М': 'M', 'О': 'O', 'Р': 'P',
	'Ѕ': 'S', 'Т': 'T', 'Х': 'X', 'У': 'Y', 'Ԛ': 'Q', 'Ԝ': 'W',
	// Greek
	'α': 'a', 'β': 'b', 'ε': 'e', 'η': 'n', 'ι': 'i', 'κ': 'k', 'ν': 'v', 'ο': 'o', 'ρ': 'p', 'τ': 't', 'υ': 'u',
	'χ': 'x', 'γ': 'y', 'ϲ': 'c', 'ϳ': 'j',
	'Α': 'A', 'Β': 'B', 'Ε': 'E', 'Ζ': 'Z', 'Η': 'H', 'Ι': 'I', 'Κ': 'K', 'Μ': 'M', 'Ν': 'N', 'Ο': 'O', 'Ρ': 'P',
	'Τ': 'T', 'Υ': 'Y', 'Χ': 'X',
	// Latin variants
	'ı': 'i', 'ȷ': 'j', 'ſ': 's', 'ɑ': 'a', 'ɡ': 'g', 'ℓ': 'l', 'ⅰ': 'i', 'ⅼ': 'l', 'ⅽ': 'c', 'ⅾ': 'd', 'ⅿ': 'm',
	// dots, hyphens and slashes
	'。': '.', '｡': '.', '․': '.', '﹒': '.', '·': '.', '‐': '-', '‑': '-', '‒': '-', '–': '-', '−': '-', '﹣': '-',
	'∕': '/', '⁄': '/', '／': '/', '⧸': '/',
}

// LookalikeWhy says how a key differs from the ASCII one it looks like.
func LookalikeWhy(k string) string {
	var why []string
	if strings.ContainsFunc(k, func(r rune) bool { return unicode.Is(unicode.Cf, r) || unicode.IsSpace(r) }) {
		why = append(why, "invisible characters or spaces")
	}
	if strings.ContainsFunc(k, func(r rune) bool { return r < ' ' || r == 0x7f }) {
		why = append(why, "control characters")
	}
	if strings.ContainsFunc(k, func(r rune) bool { return r >= utf8.RuneSelf && !unicode.Is(unicode.Cf, r) && !unicode.IsSpace(r) }) {
		why = append(why, "non-ASCII letters")
	}
	if strings.HasSuffix(strings.TrimRightFunc(k, func(r rune) bool { return unicode.Is(unicode.Cf, r) || unicode.IsSpace(r) }), ".") {
		why = append(why, "a trailing dot")
	}
	if strings.ContainsFunc(k, unicode.IsUpper) {
		why = append(why, "upper case")
	}
	if len(why) == 0 {
		return "other characters"
	}
	return strings.Join(why, ", ")
}
