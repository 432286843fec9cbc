//go:build kernellab && kernelbench

package guest

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gpuext/gpuext/bpf"
)

// The trace-replay benchmark (issue 3, "Benchmark"): every pattern at every
// oversubscription under each memory policy, replayed in a fresh gpusim
// context, one machine-readable BENCH line per run.  All numbers come from
// gpusim's simulated memory model: SIMULATED, not a GPU.
//
// Built only with -tags kernelbench (test/kernel/lab.sh bench), so a normal
// kernel lab run neither pays for it nor reports it as skipped.

const (
	benchBlocks = 24 // VA blocks a trace spans (the working set)
	benchPasses = 3  // passes of the cyclic patterns
)

var benchOversub = []float64{1.0, 1.25, 1.5, 2.0}

// benchCombo: one eviction x prefetch combination.  The default is LRU
// eviction with tree-threshold prefetch; each other eviction policy runs with
// the default prefetch, each other prefetch policy with LRU eviction.  "stock"
// is the driver without a policy (its built-in LRU and tree rule), a check that
// the default policies reproduce it.
type benchCombo struct {
	evict, prefetch string
	ev              bpf.EvictionPolicy
	pf              bpf.PrefetchPolicy
}

var benchCombos = []benchCombo{
	{"lru", "tree-threshold", bpf.EvictLRU, bpf.PrefetchTreeThreshold},
	{"stock", "stock", bpf.EvictDefault, bpf.PrefetchDefault},
	{"fifo", "tree-threshold", bpf.EvictFIFO, bpf.PrefetchTreeThreshold},
	{"lfu", "tree-threshold", bpf.EvictLFU, bpf.PrefetchTreeThreshold},
	{"mru", "tree-threshold", bpf.EvictMRU, bpf.PrefetchTreeThreshold},
	{"freq-decay", "tree-threshold", bpf.EvictFreqDecay, bpf.PrefetchTreeThreshold}, // period 4 (no param: the default)
	{"lru", "none", bpf.EvictLRU, bpf.PrefetchNone},
	{"lru", "always-max", bpf.EvictLRU, bpf.PrefetchAlwaysMax},
	{"lru", "sequential", bpf.EvictLRU, bpf.PrefetchSequential},
	{"lru", "stride", bpf.EvictLRU, bpf.PrefetchStride},
	// gpu_ext's llama.cpp pair (examples/stride-lfu, from the lab's policy
	// directory): its stride prefetch (2 pages ahead) and its LFU list
	// eviction, together as gpu_ext runs them.
	{"stride-lfu", "stride-lfu", bpf.EvictionPolicy(strideLFUID), bpf.PrefetchPolicy(strideLFUID)},
	// gpu_ext's 2Q approximation (examples/two-queue, from the lab's policy
	// directory): 2Q eviction, hot-accesses 2 (no param: the default), with
	// the default prefetch.
	{"two-queue", "tree-threshold", bpf.EvictionPolicy(twoQueueID), bpf.PrefetchTreeThreshold},
}

// strideLFUID and twoQueueID name examples/stride-lfu and examples/two-queue
// in a tenant config (policies of the policy directory, by their
// GPUEXT_POLICY_NAMED ids).
var (
	strideLFUID = bpf.NamedPolicyID(bpf.OpsName("stride-lfu"))
	twoQueueID  = bpf.NamedPolicyID(bpf.OpsName("two-queue"))
)

// attachBenchPolicies attaches every policy the combinations name.
func attachBenchPolicies(t *testing.T) {
	t.Helper()
	for _, p := range []string{"fifo", "lru", "lfu", "mru", "freq-decay", "none", "always-max", "sequential", "stride", "tree-threshold", "tenant-quota"} {
		a := attach(t, p)
		t.Cleanup(func() { a.Close() })
	}
	dir, l := dirLoader(t)
	attachFromDir(t, dir, l, "stride-lfu")
	attachFromDir(t, dir, l, "two-queue")
}

// benchRand is a fixed-seed xorshift generator: the traces are the same on
// every run.
type benchRand uint64

func (r *benchRand) next(n int) int {
	x := uint64(*r)
	x ^= x << 13
	x ^= x >> 7
	x ^= x << 17
	*r = benchRand(x)
	return int(x % uint64(n))
}

// benchPatterns returns the trace lines of each pattern over benchBlocks blocks.
func benchPatterns() []struct {
	name  string
	lines []string
} {
	const w = benchBlocks
	var seq, strided, random, gemm, hot []string
	// sequential: every page of the working set in order, benchPasses times.
	for p := 0; p < benchPasses; p++ {
		seq = append(seq, fmt.Sprintf("scan 0 0 %d 1", w*pagesPerBlock))
	}
	// strided: every 4th page of the working set, benchPasses times.
	for p := 0; p < benchPasses; p++ {
		strided = append(strided, fmt.Sprintf("scan 0 0 %d 4", w*pagesPerBlock/4))
	}
	// random: uniform random pages of the working set.
	r := benchRand(0x9e3779b97f4a7c15)
	for i := 0; i < w*pagesPerBlock/2; i++ {
		random = append(random, fmt.Sprintf("touch %d %d", r.next(w), r.next(pagesPerBlock)))
	}
	// GEMM-like tiled: C = A x B over 4x4 tiles of 256 pages (half a VA
	// block); A in blocks 0..7, B in 8..15, C in 16..23.  For each (i, j),
	// for each k: read tile A(i,k) and B(k,j) (every 8th page), then update C(i,j).
	const n, tilePages, tileStep = 4, pagesPerBlock / 2, 8
	tile := func(base, row, col int) string {
		t := row*n + col // tile index, 2 per block
		return fmt.Sprintf("scan %d %d %d %d", base+t/2, (t%2)*tilePages, tilePages/tileStep, tileStep)
	}
	for i := 0; i < n; i++ {
		for j := 0; j < n; j++ {
			for k := 0; k < n; k++ {
				gemm = append(gemm, tile(0, i, k), tile(8, k, j))
			}
			gemm = append(gemm, tile(16, i, j))
		}
	}
	// hotspot: 80% of touches on 4 hot blocks (1/6 of the working set),
	// 20% uniform over all blocks; random pages.
	r = benchRand(0x2545f4914f6cdd1d)
	for i := 0; i < w*pagesPerBlock/2; i++ {
		b := r.next(w)
		if r.next(10) < 8 {
			b = r.next(4)
		}
		hot = append(hot, fmt.Sprintf("touch %d %d", b, r.next(pagesPerBlock)))
	}
	return []struct {
		name  string
		lines []string
	}{{"sequential", seq}, {"strided", strided}, {"random", random}, {"gemm-tiled", gemm}, {"hotspot", hot}}
}

// replayBatched writes trace lines in writes under gpusim's 64 KiB limit.
func replayBatched(t *testing.T, ctx string, lines []string) {
	t.Helper()
	var b strings.Builder
	flush := func() {
		if b.Len() > 0 {
			if err := os.WriteFile(ctx+"/trace", []byte(b.String()), 0); err != nil {
				t.Fatalf("%s: replay: %v", filepath.Base(ctx), err)
			}
			b.Reset()
		}
	}
	for _, l := range lines {
		if b.Len()+len(l)+1 > 60<<10 {
			flush()
		}
		b.WriteString(l)
		b.WriteByte('\n')
	}
	flush()
}

func TestBenchmarkTraces(t *testing.T) {
	requireLab(t)
	reg := openRegistry(t)
	attachBenchPolicies(t)
	cgs := make([]string, len(benchCombos))
	for i, c := range benchCombos {
		cgs[i], _ = tenantCgroupConfig(t, reg, fmt.Sprintf("bench-%s-%s", c.evict, c.prefetch), bpf.GpuextTenantConfig{
			AbiVersion: bpf.ABIVersion, EvictionPolicy: uint32(c.ev), PrefetchPolicy: uint32(c.pf)})
	}
	t0 := time.Now()
	fmt.Printf("BENCH-BEGIN SIMULATED blocks=%d passes=%d\n", benchBlocks, benchPasses)
	run := 0
	for _, pat := range benchPatterns() {
		for _, o := range benchOversub {
			chunks := int(float64(benchBlocks)/o + 0.5)
			for i, c := range benchCombos {
				name := fmt.Sprintf("bench%d", run)
				run++
				deviceChunks(t, chunks)
				ctx := gpuCtx(t, name, cgs[i])
				start := time.Now()
				replayBatched(t, ctx, pat.lines)
				s := readStatsQuiet(t, ctx)
				fmt.Printf("BENCH pattern=%s oversub=%.2f chunks=%d evict=%s prefetch=%s touches=%d faults=%d pages_in=%d pages_out=%d evictions=%d prefetched=%d policy_faults=%d policy_evictions=%d replay_ms=%d SIMULATED\n",
					pat.name, o, chunks, c.evict, c.prefetch, s.touches, s.faults, s.pagesIn, s.pagesOut, s.evictions,
					s.prefetched, s.policyFaults, s.policyEvictions, time.Since(start).Milliseconds())
				if err := os.WriteFile(gpusimDir+"/ctl", []byte("destroy "+name), 0); err != nil {
					t.Fatalf("destroy %s: %v", name, err)
				}
				if c.evict != "stock" && (s.tenant == 0 || s.policyFaults != s.faults) {
					t.Errorf("%s %s/%s: tenant %d, policy faults %d of %d: the policies did not run", pat.name, c.evict, c.prefetch, s.tenant, s.policyFaults, s.faults)
				}
			}
		}
	}
	fmt.Printf("BENCH-END runs=%d elapsed_s=%.1f SIMULATED\n", run, time.Since(t0).Seconds())
}
