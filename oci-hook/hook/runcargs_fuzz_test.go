package hook

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// A fuzz input is a command line with its arguments separated by NUL
// (which no argument can hold).
func joinArgs(args []string) string { return strings.Join(args, "\x00") }
func splitArgs(line string) []string {
	if line == "" {
		return nil
	}
	return strings.Split(line, "\x00")
}

// stdFlags parses args with Go's own flag package and the given flags: the
// oracle for parseGoFlags (the part of runc's parsing that is not urfave's).
func stdFlags(args []string, kinds map[string]flagKind) (values map[string]string, rest []string, err error) {
	fs := flag.NewFlagSet("runc", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	for name, k := range kinds {
		switch k {
		case flagBool:
			fs.Bool(name, false, "")
		case flagInt:
			fs.Int(name, 0, "")
		default:
			fs.String(name, "", "")
		}
	}
	if err := fs.Parse(args); err != nil {
		return nil, nil, err
	}
	values = map[string]string{}
	fs.Visit(func(f *flag.Flag) { values[f.Name] = f.Value.String() })
	return values, fs.Args(), nil
}

func parseInt(s string) int64 { n, _ := strconv.ParseInt(s, 0, 64); return n }

const fuzzRuncDir = "testdata/fuzz/FuzzRuncArgs"

// The committed corpus holds every line of the table (runcLines);
// GPUEXT_WRITE_FUZZ_SEEDS=1 rewrites it.
func TestFuzzRuncArgsSeedsCommitted(t *testing.T) {
	for i, l := range runcLines {
		p := filepath.Join(fuzzRuncDir, fmt.Sprintf("seed-%02d", i))
		want := fmt.Appendf(nil, "go test fuzz v1\nstring(%q)\n", joinArgs(l.args))
		if os.Getenv("GPUEXT_WRITE_FUZZ_SEEDS") == "1" {
			if err := os.MkdirAll(fuzzRuncDir, 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(p, want, 0o644); err != nil {
				t.Fatal(err)
			}
			continue
		}
		if got, err := os.ReadFile(p); err != nil || string(got) != string(want) {
			t.Errorf("%s (%s): not the table's line (%v): run GPUEXT_WRITE_FUZZ_SEEDS=1 go test -run %s", p, l.name, err, t.Name())
		}
	}
}

// FuzzRuncArgs: on any command line ParseRuncArgs does not panic, runc
// gets the line without the wrapper's flag, and a line it admits follows
// runc's rule: the id is the one argument left after the command's flags
// (runc's id characters), the bundle the last --bundle/-b value, both the
// same in every runc reading that creates, and the line reads the same
// once the wrapper's flag is gone. Go's flag package is the oracle for the
// flag parsing under every urfave/cli reordering.
func FuzzRuncArgs(f *testing.F) {
	f.Fuzz(func(t *testing.T, line string) {
		args := splitArgs(line)
		c, err := ParseRuncArgs(args, "/cwd")
		if err != nil && !errors.Is(err, ErrAmbiguousRuncArgs) {
			t.Fatalf("error %v is not ErrAmbiguousRuncArgs", err)
		}
		got := c.Args()
		if len(got) > len(args) {
			t.Fatalf("Args() %q is longer than the line %q", got, args)
		}
		for i, j := 0, 0; i < len(got); i, j = i+1, j+1 { // a subsequence of the line
			for j < len(args) && args[j] != got[i] {
				j++
			}
			if j == len(args) {
				t.Fatalf("Args() %q is not the line %q less some arguments", got, args)
			}
		}
		if len(got) < len(args) && c.ConfigPath == "" && !slices.ContainsFunc(args, func(a string) bool { return strings.Contains(a, "config") }) {
			t.Fatalf("Args() %q dropped arguments of %q, which has no --config", got, args)
		}
		for _, r := range runcReorders {
			for _, v := range runcVersions {
				kinds := merge(v.create, runcRunOnly)
				reordered := reorderArgs(r, kinds, args)
				if !slices.Equal(slices.Sorted(slices.Values(reordered)), slices.Sorted(slices.Values(args))) {
					t.Fatalf("%s reordered %q to %q: not the same arguments", r, args, reordered)
				}
				flags, rest, perr := parseGoFlags(reordered, kinds)
				values, srest, serr := stdFlags(reordered, kinds)
				if (perr == nil) != (serr == nil) {
					t.Fatalf("%q: parseGoFlags %v, flag package %v", reordered, perr, serr)
				}
				if perr == nil {
					if !slices.Equal(rest, srest) && !(len(rest) == 0 && len(srest) == 0) {
						t.Fatalf("%q: rest %q, flag package %q", reordered, rest, srest)
					}
					for name, want := range values {
						v, _ := lastValue(flags, name)
						switch kinds[name] {
						case flagBool:
							v = fmt.Sprint(isTrue(flags, name))
						case flagInt:
							v = fmt.Sprint(parseInt(v))
						}
						if v != want {
							t.Fatalf("%q: -%s = %q, flag package %q", reordered, name, v, want)
						}
					}
				}
			}
		}
		if !c.Admits() {
			if c.ContainerID != "" || c.Bundle != "" {
				t.Fatalf("not admitted but id %q bundle %q", c.ContainerID, c.Bundle)
			}
			return
		}
		if c.Command != "create" && c.Command != "run" && c.Command != "restore" {
			t.Fatalf("admits command %q", c.Command)
		}
		if !validRuncID(c.ContainerID, true) || !slices.Contains(c.Rest, c.ContainerID) {
			t.Fatalf("id %q: not an id runc accepts, or not an argument of %q", c.ContainerID, c.Rest)
		}
		if c.BundleArg != "" {
			// --bundle=B, or --bundle and B somewhere else: urfave/cli moves
			// the flag to the front and Go's flag package takes the argument
			// after it there (`create B ID -b` is `-b B ID`)
			flag, given := false, slices.Contains(c.Rest, c.BundleArg)
			for _, a := range c.Rest {
				n, v, eq := strings.Cut(strings.TrimLeft(a, "-"), "=")
				if (n == "bundle" || n == "b") && strings.HasPrefix(a, "-") {
					flag = true
					given = given || (eq && v == c.BundleArg)
				}
			}
			if !flag || !given {
				t.Fatalf("bundle %q is no --bundle/-b value of %q", c.BundleArg, c.Rest)
			}
		}
		if want := filepath.Join("/cwd", c.BundleArg); c.Bundle != want && !(filepath.IsAbs(c.BundleArg) && c.Bundle == filepath.Clean(c.BundleArg)) {
			t.Fatalf("bundle %q from %q", c.Bundle, c.BundleArg)
		}
		again, err := ParseRuncArgs(got, "/cwd")
		if err != nil || !again.Admits() || again.ContainerID != c.ContainerID || again.Bundle != c.Bundle || again.ConfigPath != "" {
			t.Fatalf("runc's line %q reads as %+v, %v; the wrapper's as %+v", got, again, err, c)
		}
	})
}
