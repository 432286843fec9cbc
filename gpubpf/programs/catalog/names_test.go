package catalog

import (
	"errors"
	"slices"
	"testing"
)

// The built-in names are the entries' file names, each a valid probe name.
func TestNames(t *testing.T) {
	got := Names()
	if want := []string{"launch-count", "launch-latency", "launch-stats", "sm-histogram"}; !slices.Equal(got, want) {
		t.Fatalf("Names() = %q, want %q", got, want)
	}
	for _, n := range got {
		if !NameRE.MatchString(n) {
			t.Errorf("built-in probe %q does not match %s", n, NameRE)
		}
	}
	got[0] = "changed"
	if Names()[0] != "launch-count" {
		t.Error("Names returned the package's own slice")
	}
}

func TestCheck(t *testing.T) {
	known := Names()
	if err := Check(known, []string{"sm-histogram", "launch-stats"}); err != nil {
		t.Fatalf("known names: %v", err)
	}
	err := Check(known, []string{"launch-stats", "launch-counts", "nope"})
	if !errors.Is(err, ErrUnknownProbe) {
		t.Fatalf("unknown name: %v, want ErrUnknownProbe", err)
	}
	if want := `unknown probe "launch-counts" (known: launch-count, launch-latency, launch-stats, sm-histogram)`; err.Error() != want {
		t.Errorf("error %q, want %q", err, want)
	}
	if err := Check(nil, []string{"launch-stats"}); !errors.Is(err, ErrUnknownProbe) {
		t.Errorf("an empty set took a name: %v", err)
	}
}
