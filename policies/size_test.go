package policies

import (
	"errors"
	"math"
	"strings"
	"testing"
)

func TestParseSize(t *testing.T) {
	for _, tc := range []struct {
		in      string
		want    uint64
		errPart string // "" = no error
	}{
		{"0", 0, ""},
		{"1024", 1024, ""},
		{"1024B", 1024, ""},
		{"512MiB", 512 << 20, ""},
		{"8GiB", 8 << 30, ""},
		{"8Gi", 8 << 30, ""},
		{"2TiB", 2 << 40, ""},
		{"10GB", 10e9, ""},
		{"3KB", 3000, ""},
		{"16EiB", 0, `unknown unit "EiB"`},
		{"18446744073709551615", math.MaxUint64, ""},
		{"18446744073709551616", 0, "overflows"},
		{"16777216TiB", 0, "overflows"},
		{"99999999999TiB", 0, "overflows"},
		{"12XB", 0, `unknown unit "XB"`},
		{"8gib", 0, `unknown unit "gib"`},
		{"-1GiB", 0, "negative"},
		{"", 0, "empty"},
		{"GiB", 0, "want a number"},
		{"1.5GiB", 0, "fractions"},
		{" 8GiB", 0, "want a number"},
		{"8 GiB", 0, `unknown unit " GiB"`},
	} {
		got, err := ParseSize(tc.in)
		if tc.errPart == "" {
			if err != nil || got != tc.want {
				t.Errorf("ParseSize(%q) = %d, %v; want %d", tc.in, got, err, tc.want)
			}
			continue
		}
		if !errors.Is(err, ErrBadSize) || !strings.Contains(err.Error(), tc.errPart) {
			t.Errorf("ParseSize(%q) error = %v; want ErrBadSize containing %q", tc.in, err, tc.errPart)
		}
	}
}

func TestFormatSize(t *testing.T) {
	for n, want := range map[uint64]string{0: "0", 1000: "1000B", 1024: "1KiB", 1536 << 20: "1536MiB", 8 << 30: "8GiB", 3 << 40: "3TiB"} {
		if got := FormatSize(n); got != want {
			t.Errorf("FormatSize(%d) = %q, want %q", n, got, want)
		}
	}
}

func FuzzParseSize(f *testing.F) {
	for _, s := range []string{"0", "8GiB", "12XB", "-1GiB", "99999999999TiB", "1.5GiB", "18446744073709551615"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		n, err := ParseSize(s)
		if err != nil {
			if !errors.Is(err, ErrBadSize) {
				t.Fatalf("ParseSize(%q): %v does not wrap ErrBadSize", s, err)
			}
			return
		}
		if back, err := ParseSize(FormatSize(n)); err != nil || back != n {
			t.Fatalf("round trip of %d via %q: %d, %v", n, FormatSize(n), back, err)
		}
	})
}
