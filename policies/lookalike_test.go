package policies

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/gpuext/gpuext/policies/grammar"
)

// selectSoon is Select with a generous deadline, so that a regression to
// quadratic time fails instead of hanging the test run.
func selectSoon(t *testing.T, req Request) (Selection, error) {
	t.Helper()
	type result struct {
		sel Selection
		err error
	}
	done := make(chan result, 1)
	go func() {
		sel, err := BuiltinCatalog().Select(req)
		done <- result{sel, err}
	}()
	select {
	case r := <-done:
		return r.sel, r.err
	case <-time.After(2 * time.Minute):
		t.Fatal("Select did not return")
		return Selection{}, nil
	}
}

// A key that only looks like a gpuext key was ignored: the container ran
// with the default policy and nobody was told. It is an unknown-key error
// that names the key it looks like (fail-open or strict, as any bad request).
func TestLookalikeKeysAreErrors(t *testing.T) {
	for _, tc := range []struct {
		name, key, shown, why string
	}{
		{"Cyrillic o", "p\u043elicy.gpuext.io", `"p\u043elicy.gpuext.io"`, "non-ASCII letters"},
		{"Greek omicron", "p\u03bflicy.gpuext.io", `"p\u03bflicy.gpuext.io"`, "non-ASCII letters"},
		{"Cyrillic in the domain", "policy.gpu\u0435xt.io", `"policy.gpu\u0435xt.io"`, "non-ASCII letters"},
		{"fullwidth letters", "\uff50\uff4f\uff4c\uff49\uff43\uff59.gpuext.io", `"\uff50\uff4f\uff4c\uff49\uff43\uff59.gpuext.io"`, "non-ASCII letters"},
		{"fullwidth dot", "policy\uff0egpuext.io", `"policy\uff0egpuext.io"`, "non-ASCII letters"},
		{"trailing dot", "policy.gpuext.io.", `"policy.gpuext.io."`, "a trailing dot"},
		{"zero-width space", "policy.gpuext.io\u200b", `"policy.gpuext.io\u200b"`, "invisible characters"},
		{"zero-width joiner inside", "pol\u200dicy.gpuext.io", `"pol\u200dicy.gpuext.io"`, "invisible characters"},
		{"soft hyphen", "poli\u00adcy.gpuext.io", `"poli\u00adcy.gpuext.io"`, "invisible characters"},
		{"byte order mark", "\ufeffpolicy.gpuext.io", `"\ufeffpolicy.gpuext.io"`, "invisible characters"},
		{"leading space", " policy.gpuext.io", `" policy.gpuext.io"`, "spaces"},
		{"upper case", "Policy.GPUEXT.io", `"Policy.GPUEXT.io"`, "upper case"},
		{"quota, Cyrillic a", "quot\u0430.gpuext.io", `"quot\u0430.gpuext.io"`, "non-ASCII letters"},
		// control characters are what a NUL-terminated reader would stop at
		{"NUL after", "policy.gpuext.io\x00", `"policy.gpuext.io\x00"`, "control characters"},
		{"NUL inside", "policy.gpu\x00ext.io", `"policy.gpu\x00ext.io"`, "control characters"},
		{"tab after", "policy.gpuext.io\t", `"policy.gpuext.io\t"`, "control characters"},
		{"DEL after", "policy.gpuext.io\x7f", `"policy.gpuext.io\x7f"`, "control characters"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			real, _, _ := strings.Cut(grammar.Fold(tc.key), "/")
			real = strings.TrimRight(real, ".")
			for _, req := range []Request{
				{Annotations: map[string]string{tc.key: "batch"}},
				{Labels: map[string]string{tc.key: "batch"}},
				{PodAnnotations: map[string]string{tc.key + "/pod": "batch"}},
			} {
				_, err := selectSoon(t, req)
				var ke *KeyError
				if !errors.As(err, &ke) || !errors.Is(err, ErrUnknownKey) {
					t.Fatalf("%+v: err %v, want an unknown-key *KeyError", req, err)
				}
				msg := err.Error()
				if !strings.Contains(msg, "looks like "+real) || !strings.Contains(msg, tc.shown) || !strings.Contains(msg, tc.why) {
					t.Fatalf("error %q: want it to name %s, show %s and say %q", msg, real, tc.shown, tc.why)
				}
			}
		})
	}
}

// The scope of a key can look alike too; a container name with characters
// no runtime gives a container never matched and was skipped silently.
func TestLookalikeScopesAreErrors(t *testing.T) {
	for key, want := range map[string]string{
		"policy.gpuext.io/p\u043ed":             `looks like /pod`,
		"policy.gpuext.io/pod\u200b":            `looks like /pod`,
		"policy.gpuext.io/POD":                  `looks like /pod`,
		"policy.gpuext.io/container.w\u0435b":   `container name "w\u0435b"`,
		"policy.gpuext.io/container.web\u200b":  `container name "web\u200b"`,
		"policy.gpuext.io/container.web server": `container name "web server"`,
	} {
		_, err := selectSoon(t, Request{ContainerName: "web", PodAnnotations: map[string]string{key: "batch"}})
		if !errors.Is(err, ErrUnknownKey) || !strings.Contains(err.Error(), want) {
			t.Errorf("%q: err %v, want an unknown-key error with %s", key, err, want)
		}
	}
}

// Keys of other domains, plain ones and ones that merely contain the
// domain's name stay someone else's.
func TestOtherDomainsStayIgnored(t *testing.T) {
	sel, err := selectSoon(t, Request{Annotations: map[string]string{
		"policy.example.io": "x", "gpuext.io.example.com/policy": "x", "mygpuext.io": "x", "app": "x",
		"nvidia.com/gpu": "1", "io.kubernetes.container.name": "web", "p\u043elicy.example.io": "x", "": "x",
	}})
	if err != nil || sel.Policy.Name != DefaultPolicy {
		t.Fatalf("%+v, %v", sel, err)
	}
}

func TestDidYouMeanOnlyForShortKeys(t *testing.T) {
	_, err := selectSoon(t, Request{Labels: map[string]string{"polcy.gpuext.io": "batch"}})
	if !errors.Is(err, ErrUnknownKey) || !strings.Contains(err.Error(), `did you mean "policy.gpuext.io"?`) {
		t.Fatalf("short typo: %v", err)
	}
	long := strings.Repeat("p", 200) + ".gpuext.io"
	_, err = selectSoon(t, Request{Labels: map[string]string{long: "batch"}})
	if !errors.Is(err, ErrUnknownKey) || strings.Contains(err.Error(), "did you mean") {
		t.Fatalf("200-byte key: %v", err)
	}
}

// maxErrorText bounds an error about one huge key or value: the key and the
// value quoted at 128 bytes each (x6 for \u escapes), the list of known keys
// and the message around them.
const maxErrorText = 4 << 10

// A 1 MiB key took 2 s to get its "did you mean" (the edit distance to
// every known key) and a 16 MiB value made a 33 MB error. Both come back,
// with an error of a few hundred bytes that still names the key.
func TestHugeKeysAndValuesMakeShortErrors(t *testing.T) {
	mib := strings.Repeat("x", 1<<20)
	huge := strings.Repeat("\u00e9", 8<<20) // 16 MiB, quoted as \u00e9: 6 bytes each
	commas := strings.Repeat(",", 16<<20)
	for name, req := range map[string]Request{
		"1 MiB unknown key":       {Labels: map[string]string{mib + ".gpuext.io": "batch"}},
		"1 MiB look-alike key":    {Labels: map[string]string{"p\u043elicy.gpuext.io" + strings.Repeat("\u200b", 1<<19): "batch"}},
		"1 MiB key, scope":        {Labels: map[string]string{"policy.gpuext.io/" + mib: "batch"}},
		"1 MiB container name":    {Labels: map[string]string{"policy.gpuext.io/container." + mib + "\u200b": "batch"}},
		"16 MiB policy":           {Labels: map[string]string{KeyPolicy: huge}},
		"16 MiB quota":            {Labels: map[string]string{KeyQuota: huge}},
		"16 MiB eviction":         {Labels: map[string]string{KeyEviction: "lfu:" + huge}},
		"16 MiB priority":         {Labels: map[string]string{KeyPriority: huge}},
		"16 MiB timeslice":        {Labels: map[string]string{KeyTimeslice: huge}},
		"16 MiB probes of commas": {Labels: map[string]string{KeyProbes: commas}},
		"16 MiB probe kernels":    {Labels: map[string]string{KeyProbes: "launch-stats", KeyProbeKernels: commas}},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := selectSoon(t, req)
			var ke *KeyError
			if !errors.As(err, &ke) {
				t.Fatalf("err %v, want a *KeyError", err)
			}
			if n := len(err.Error()); n > maxErrorText {
				t.Fatalf("error is %d bytes (%.300s...), want at most %d", n, err.Error(), maxErrorText)
			}
			if !strings.Contains(err.Error(), keyText(ke.Key)) || !strings.Contains(err.Error(), "bytes)") {
				t.Fatalf("error %.300s does not name the key or say how long what it cut was", err.Error())
			}
		})
	}
	// a 1 MiB key of another domain is not ours, and takes no time either
	if _, err := selectSoon(t, Request{Labels: map[string]string{mib: "x", mib + ".example.io": "x"}}); err != nil {
		t.Fatalf("other domain: %v", err)
	}
}

func TestQuoteTruncates(t *testing.T) {
	for in, want := range map[string]string{
		"batch":                        `"batch"`,
		"p\u043elicy":                  `"p\u043elicy"`,
		strings.Repeat("a", 128):       `"` + strings.Repeat("a", 128) + `"`,
		strings.Repeat("a", 129):       `"` + strings.Repeat("a", 128) + `"... (129 bytes)`,
		strings.Repeat("é", 100):       `"` + strings.Repeat(`\u00e9`, 64) + `"... (200 bytes)`,
		"a" + strings.Repeat("é", 100): `"a` + strings.Repeat(`\u00e9`, 63) + `"... (201 bytes)`, // cut before a split rune
	} {
		if got := quote(in); got != want {
			t.Errorf("quote(%.20q...) = %.60s..., want %.60s...", in, got, want)
		}
	}
}
