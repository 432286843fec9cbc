package helpers

import (
	"bufio"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/gpuext/gpuext/gpubpf/abi"
	"github.com/gpuext/gpuext/gpubpf/devmap"
	"github.com/gpuext/gpuext/lib/testutil"
)

// hostDriver builds testdata/hostdiff: helpers.cu compiled for the host
// with g++ (the CUDA qualifiers and atomics shimmed), driven over stdin.
func hostDriver(t *testing.T) string {
	return hostBuild(t, "driver", "testdata/hostdiff/driver.cc")
}

// hostBuild compiles helpers.cu for the host (shim.h) with a driver source
// and flags; without g++ the test fails under CI=true, else skips.
func hostBuild(t *testing.T, name, driverSrc string, flags ...string) string {
	t.Helper()
	gxx, err := exec.LookPath("g++")
	if err != nil {
		testutil.SkipOrFail(t, "g++ is needed to build the helper library for the host")
	}
	out := filepath.Join(t.TempDir(), name)
	args := append([]string{"-std=c++17", "-O1", "-Wall", "-Werror", "-DGPUEXT_HELPERS_HOST_TEST"}, flags...)
	args = append(args, "-I../../kmod/include", "-include", "testdata/hostdiff/shim.h",
		"-x", "c++", "helpers.cu", "-x", "none", driverSrc, "-o", out)
	cmd := exec.Command(gxx, args...)
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("%s: %v\n%s", strings.Join(cmd.Args, " "), err, b)
	}
	return out
}

type driver struct {
	t   *testing.T
	in  io.WriteCloser
	out *bufio.Scanner
}

func startDriver(t *testing.T, path string) *driver {
	cmd := exec.Command(path)
	in, _ := cmd.StdinPipe()
	stdout, _ := cmd.StdoutPipe()
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { in.Close(); cmd.Wait() })
	sc := bufio.NewScanner(stdout)
	sc.Buffer(make([]byte, 1<<20), 1<<24)
	return &driver{t: t, in: in, out: sc}
}

func (d *driver) send(format string, args ...any) {
	fmt.Fprintf(d.in, format+"\n", args...)
}

func (d *driver) ask(format string, args ...any) string {
	d.send(format, args...)
	if !d.out.Scan() {
		d.t.Fatalf("driver: no answer to %q: %v", fmt.Sprintf(format, args...), d.out.Err())
	}
	return d.out.Text()
}

func hx(b []byte) string {
	if len(b) == 0 {
		return "-"
	}
	return hex.EncodeToString(b)
}

func randBytes(r *rand.Rand, n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(r.IntN(256))
	}
	return b
}

// TestHelpersMatchSpec runs random operation sequences through the CUDA
// helper library (compiled for the host) and through the executable
// specification (gpubpf/ptx Image, what the interpreter runs): every
// return value and the final bytes of the map must be the same.
func TestHelpersMatchSpec(t *testing.T) {
	drv := hostDriver(t)
	for _, tc := range []struct {
		name            string
		typ             abi.MapType
		ks, vs, max     uint32
		ops             int
		keySpace, slots int
		dumpEveryOp     bool
	}{
		{"array u64", abi.MapArray, 4, 8, 4, 400, 6, 1, true},
		{"array of 3-byte values", abi.MapArray, 4, 3, 5, 300, 7, 1, true},
		{"array of 24-byte values", abi.MapArray, 4, 24, 3, 300, 5, 1, true},
		{"hash u32 -> u64", abi.MapHash, 4, 8, 4, 600, 14, 1, true},
		{"hash 12-byte keys, 20-byte values", abi.MapHash, 12, 20, 3, 600, 9, 1, true},
		{"hash 1-byte keys", abi.MapHash, 1, 8, 2, 300, 6, 1, true},
		{"per-warp u64", abi.MapPerWarp, 4, 8, 2, 300, 3, 5, false},
		{"per-warp 12-byte values", abi.MapPerWarp, 4, 12, 2, 200, 3, 3, false},
		{"ringbuf", abi.MapRingbuf, 0, 0, 256, 60, 0, 1, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l, err := abi.Layout(tc.typ, tc.ks, tc.vs, tc.max)
			if err != nil {
				t.Fatal(err)
			}
			spec := devmap.NewImage(l)
			d := startDriver(t, drv)
			d.send("image %s", hx(spec.Bytes))
			r := rand.New(rand.NewPCG(uint64(len(tc.name)), 7))
			slots := []uint32{0, devmap.Slot(3, 5), devmap.Slot(107, 63), devmap.Slot(255, 1), devmap.Slot(12, 12)}[:tc.slots]
			key := func() []byte {
				if tc.ks == 4 {
					return binary.LittleEndian.AppendUint32(nil, uint32(r.IntN(tc.keySpace)))
				}
				k := make([]byte, tc.ks)
				k[0] = byte(r.IntN(tc.keySpace))
				return k
			}
			for i := 0; i < tc.ops; i++ {
				var op string
				var want, got int64
				switch {
				case tc.typ == abi.MapRingbuf:
					data := randBytes(r, r.IntN(40))
					flags := uint64(r.IntN(5))
					op = fmt.Sprintf("ringbuf %d %s", flags, hx(data))
					want = spec.RingbufOutput(data, flags)
				default:
					k := key()
					slot := slots[r.IntN(len(slots))]
					switch n := r.IntN(10); {
					case n < 3:
						op = fmt.Sprintf("lookup %d %s", slot, hx(k))
						want = int64(spec.Lookup(k, slot))
					case n < 4 && tc.typ == abi.MapHash, n < 4 && r.IntN(8) == 0:
						op = fmt.Sprintf("delete %s", hx(k))
						want = spec.Delete(k)
					default:
						v := randBytes(r, int(tc.vs))
						flags := uint64(r.IntN(4))
						if r.IntN(3) > 0 {
							flags = 0
						}
						op = fmt.Sprintf("update %d %d %s %s", slot, flags, hx(k), hx(v))
						want = spec.Update(k, v, flags, slot)
					}
				}
				got, err = strconv.ParseInt(d.ask("%s", op), 10, 64)
				if err != nil {
					t.Fatal(err)
				}
				if got != want {
					t.Fatalf("op %d %q: helpers.cu returned %d, the spec %d", i, op, got, want)
				}
				if tc.dumpEveryOp {
					if dump := d.ask("dump"); dump != hx(spec.Bytes) {
						t.Fatalf("op %d %q: map bytes differ\nhelpers.cu %s\nspec       %s", i, op, dump, hx(spec.Bytes))
					}
				}
			}
			if dump := d.ask("dump"); dump != hx(spec.Bytes) {
				t.Fatal("final map bytes differ")
			}
		})
	}
}
