package grammar

import (
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
)

// ErrBadSize: a size that ParseSize rejects.
var ErrBadSize = errors.New("bad size")

// sizeUnits are the units ParseSize accepts. Binary units (KiB..TiB, and the
// Kubernetes spellings Ki..Ti) are powers of 1024; KB..TB are powers of 1000.
var sizeUnits = map[string]uint64{
	"": 1, "B": 1,
	"KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30, "TiB": 1 << 40,
	"Ki": 1 << 10, "Mi": 1 << 20, "Gi": 1 << 30, "Ti": 1 << 40,
	"KB": 1e3, "MB": 1e6, "GB": 1e9, "TB": 1e12,
}

const unitList = "B, KiB, MiB, GiB, TiB, Ki, Mi, Gi, Ti, KB, MB, GB, TB"

// ParseSize parses a byte size: a non-negative decimal integer followed by an
// optional unit (see README.md), e.g. "0", "1024", "512MiB", "8GiB", "10GB".
// Fractions are refused ("1.5GiB": write "1536MiB"). Errors wrap ErrBadSize.
func ParseSize(s string) (uint64, error) {
	bad := func(why string) error { return fmt.Errorf("%w %s: %s", ErrBadSize, Quote(s), why) }
	if s == "" {
		return 0, bad("empty")
	}
	if s[0] == '-' {
		return 0, bad("negative")
	}
	i := 0
	for i < len(s) && s[i] >= '0' && s[i] <= '9' {
		i++
	}
	digits, unit := s[:i], s[i:]
	if digits == "" {
		return 0, bad("want a number followed by a unit (" + unitList + ")")
	}
	if strings.HasPrefix(unit, ".") {
		return 0, bad("fractions are not supported: use a smaller unit (1536MiB, not 1.5GiB)")
	}
	mult, ok := sizeUnits[unit]
	if !ok {
		return 0, bad(fmt.Sprintf("unknown unit %s (want %s)", Quote(unit), unitList))
	}
	n, err := strconv.ParseUint(digits, 10, 64)
	if errors.Is(err, strconv.ErrRange) || (err == nil && n > math.MaxUint64/mult) {
		return 0, bad("overflows 64 bits")
	}
	if err != nil {
		return 0, bad(err.Error())
	}
	return n * mult, nil
}

// FormatSize writes n in the largest binary unit that divides it exactly
// ("8GiB", "1536MiB", "1000B", "0"); ParseSize(FormatSize(n)) == n.
func FormatSize(n uint64) string {
	if n == 0 {
		return "0"
	}
	for _, u := range []struct {
		name string
		mult uint64
	}{{"TiB", 1 << 40}, {"GiB", 1 << 30}, {"MiB", 1 << 20}, {"KiB", 1 << 10}} {
		if n%u.mult == 0 {
			return strconv.FormatUint(n/u.mult, 10) + u.name
		}
	}
	return strconv.FormatUint(n, 10) + "B"
}
