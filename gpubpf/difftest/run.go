package difftest

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"sort"
	"strings"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/ringbuf"

	"github.com/gpuext/gpuext/gpubpf/devmap"
	"github.com/gpuext/gpuext/gpubpf/ptx"
)

// Result is what a run of a corpus program left behind.
type Result struct {
	R0   uint64 // the kernel reports the low 32 bits only; compare R0 as uint32
	Ctx  []byte
	Maps map[string][]devmap.Entry // by map name, entries ordered by key
}

// ErrVerifier wraps a kernel verifier rejection (a generator bug).
var ErrVerifier = errors.New("kernel verifier rejected the program")

// RunKernel loads c in the host kernel and runs it once with BPF_PROG_TEST_RUN.
func RunKernel(c Case) (Result, error) {
	coll, err := ebpf.NewCollectionWithOptions(c.Spec, ebpf.CollectionOptions{Programs: ebpf.ProgramOptions{LogLevel: ebpf.LogLevelBranch}})
	if err != nil {
		var ve *ebpf.VerifierError
		if errors.As(err, &ve) {
			return Result{}, fmt.Errorf("%w: %+v", ErrVerifier, ve)
		}
		return Result{}, fmt.Errorf("load %s: %w", c.Name, err)
	}
	defer coll.Close()
	ctx := bytes.Clone(c.Ctx)
	out := make([]byte, len(ctx))
	ret, err := coll.Programs[ProgName].Run(&ebpf.RunOptions{Context: ctx, ContextOut: out})
	if err != nil {
		return Result{}, fmt.Errorf("run %s: %w", c.Name, err)
	}
	res := Result{R0: uint64(ret), Ctx: out, Maps: map[string][]devmap.Entry{}}
	for name, m := range coll.Maps {
		ents, err := dumpKernelMap(m)
		if err != nil {
			return Result{}, fmt.Errorf("dump map %s: %w", name, err)
		}
		res.Maps[name] = ents
	}
	return res, nil
}

func dumpKernelMap(m *ebpf.Map) ([]devmap.Entry, error) {
	var out []devmap.Entry
	switch m.Type() {
	case ebpf.Array:
		for i := uint32(0); i < m.MaxEntries(); i++ {
			v := make([]byte, m.ValueSize())
			if err := m.Lookup(i, &v); err != nil {
				return nil, err
			}
			out = append(out, devmap.Entry{Key: binary.LittleEndian.AppendUint32(nil, i), Value: v})
		}
	case ebpf.PerCPUArray:
		// The host's view: per index, the u64 words summed over CPUs.
		stride := (int(m.ValueSize()) + 7) &^ 7
		for i := uint32(0); i < m.MaxEntries(); i++ {
			all, err := m.LookupBytes(i)
			if err != nil {
				return nil, err
			}
			sum := make([]byte, stride)
			for c := 0; c+stride <= len(all); c += stride {
				for w := 0; w < stride; w += 8 {
					binary.LittleEndian.PutUint64(sum[w:], binary.LittleEndian.Uint64(sum[w:])+binary.LittleEndian.Uint64(all[c+w:]))
				}
			}
			out = append(out, devmap.Entry{Key: binary.LittleEndian.AppendUint32(nil, i), Value: sum[:m.ValueSize()]})
		}
	case ebpf.RingBuf:
		rd, err := ringbuf.NewReader(m)
		if err != nil {
			return nil, err
		}
		defer rd.Close()
		rd.SetDeadline(time.Now())
		for n := uint64(0); ; n++ {
			rec, err := rd.Read()
			if errors.Is(err, os.ErrDeadlineExceeded) {
				break
			}
			if err != nil {
				return nil, err
			}
			out = append(out, devmap.Entry{Key: binary.LittleEndian.AppendUint64(nil, n), Value: rec.RawSample})
		}
	case ebpf.Hash:
		var k, v []byte
		it := m.Iterate()
		for it.Next(&k, &v) {
			out = append(out, devmap.Entry{Key: bytes.Clone(k), Value: bytes.Clone(v)})
		}
		if err := it.Err(); err != nil {
			return nil, err
		}
		sort.Slice(out, func(i, j int) bool { return bytes.Compare(out[i].Key, out[j].Key) < 0 })
	default:
		return nil, fmt.Errorf("map type %s not in the corpus", m.Type())
	}
	return out, nil
}

// Device is a corpus program translated to PTX with its harness entry.
type Device struct {
	Module *ptx.Module
	Entry  string
}

// Translate translates c with its harness entry.
func Translate(c Case) (*Device, error) {
	m, err := ptx.Translate(c.Spec, nil, ptx.Options{Harness: true})
	if err != nil {
		return nil, fmt.Errorf("translate %s: %w", c.Name, err)
	}
	return &Device{Module: m, Entry: ptx.HarnessEntry(ProgName)}, nil
}

// RunDevice translates c and runs its harness entry in ptxinterp as
// thread 0 of a 1x1 launch.
func RunDevice(c Case) (Result, error) {
	r, err := runDeviceImages(c)
	if err != nil {
		return Result{}, err
	}
	return r.Result, nil
}

// Compare lists the differences of a device result from the kernel's.
func Compare(kernel, device Result) []string {
	var diffs []string
	if uint32(kernel.R0) != uint32(device.R0) {
		diffs = append(diffs, fmt.Sprintf("r0: kernel %#x, device %#x", uint32(kernel.R0), uint32(device.R0)))
	}
	for off := 0; off < len(kernel.Ctx) || off < len(device.Ctx); off += 8 {
		k, d := word(kernel.Ctx, off), word(device.Ctx, off)
		if k != d {
			diffs = append(diffs, fmt.Sprintf("ctx[%d:%d] (%s): kernel %#x, device %#x", off, off+8, ctxField(off), k, d))
		}
	}
	// The device module holds the maps the program references; a map
	// the program never names keeps its initial contents in the kernel.
	var names []string
	for n := range device.Maps {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		k, ok := kernel.Maps[n]
		if !ok {
			diffs = append(diffs, fmt.Sprintf("map %s: on the device only", n))
			continue
		}
		d := device.Maps[n]
		if a, b := fmtEntries(k), fmtEntries(d); a != b {
			diffs = append(diffs, fmt.Sprintf("map %s: kernel {%s}, device {%s}", n, a, b))
		}
	}
	return diffs
}

func ctxField(off int) string {
	switch {
	case off == CtxResult:
		return "r0"
	case off >= CtxRegs:
		return fmt.Sprintf("r%d", (off-CtxRegs)/8+1)
	}
	return "input"
}

func word(b []byte, off int) uint64 {
	if off+8 > len(b) {
		return 0xbad0bad0bad0bad0
	}
	return binary.LittleEndian.Uint64(b[off:])
}

func fmtEntries(es []devmap.Entry) string {
	var parts []string
	for _, e := range es {
		parts = append(parts, fmt.Sprintf("%x:%x", e.Key, e.Value))
	}
	return strings.Join(parts, " ")
}

// Dump is the program text of a case, for a mismatch report.
func Dump(c Case) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s ctx=%x\n", c.Name, c.Ctx)
	for _, n := range sortedMaps(c.Spec) {
		ms := c.Spec.Maps[n]
		fmt.Fprintf(&b, "map %s: %s key %d value %d max %d contents %v\n", n, ms.Type, ms.KeySize, ms.ValueSize, ms.MaxEntries, ms.Contents)
	}
	fmt.Fprintf(&b, "%v", c.Spec.Programs[ProgName].Instructions)
	return b.String()
}

func sortedMaps(spec *ebpf.CollectionSpec) []string {
	var names []string
	for n := range spec.Maps {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}
