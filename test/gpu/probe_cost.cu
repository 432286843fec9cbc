// probe_cost.cu - what an entry+exit probe costs on a ~5 us kernel, piece by
// piece: the small kernel of probeapps.cu with hand-written probe shapes
// (what the inline splice leaves after ptxas), all timed in one process,
// interleaved over rounds, so the variants see the same GPU state. Prints one
// line per variant: median us per kernel and the ratio to the plain kernel.
//
//   nvcc -O2 -arch=sm_90 -o probe_cost test/gpu/probe_cost.cu && ./probe_cost [ROUNDS] [ITERS]
//
// Variants (thread 0 of each block does the probe work; slots as the
// per-warp maps have them):
//   plain        no probe
//   count        red.add at entry and exit on the warp's slot (%smid, %warpid)
//                - the shape of launch-count
//   count-cta    the same, the slot from the block index (no special-register reads)
//   count-cta-tid the same, %tid.x (0 in the leader) added to the address:
//                ptxas can no longer prove it warp-uniform and emits the RED
//                without warp aggregation (VOTEU/UFLO/UPOPC + a lane-id test)
//   entry-only   the entry red.add only
//   exit-only    the exit red.add only
//   exit-store   entry red.add, exit a plain store (no atomic) to the slot
//   stats        count + %globaltimer at entry and exit - the shape of launch-stats
//   timer-only   %globaltimer at entry and exit into a register, no memory
//   guard-only   the leader branch and the slot's special registers, no memory
// and the shapes the splice emits now (gpubpf/ptx, docs/device-probes.md
// "What the splice emits"), as ptxas gets them: the block's slot (linear
// block index & 16383), %tid.x (0) added to each address, map strides as the
// probes' maps have them:
//   lc-exit      launch-count: at exit one red.add (blocks), block 0 a second
//                (launches); nothing at entry
//   ls-defer     launch-stats: entry reads %globaltimer into a register (block 0
//                also counts the launch), exit three red.adds (blockNs += exit -
//                entry, blocks, blockExits)
//   ls-exit2     the same with two red.adds at exit (blockNs, blocks): what
//                dropping blockExits would buy
//   ls-pack      ls-defer with one red.add at exit: (exit - entry) << 20 | 1,
//                the block count in the low 20 bits and the time above them
//                (a reader that keeps the count's wraps recovers both exactly)
//   ls-clock     ls-defer with %clock64 (the SM's cycle counter) for
//                %globaltimer: what the timer reads cost
//   ls-clock-pack ls-pack with %clock64
//   ls-exit-time no entry stamp; exit one red.add of %globaltimer (the add
//                waits for the exit's timer read)
//   ls-entry-time the entry stamp kept to the exit, where one red.add of 1
//                does not wait for any timer read
//   ls-entry-nodiv ls-entry-time with the stamp read by every thread (no
//                branch around it; thread 0 keeps it): is the cost the
//                leader's branch before the body's first load?
//   ls-late-stamp ls-entry-time with thread 0's stamp taken after the body's
//                load is issued (not a shape a splice at entry can emit):
//                is it where the stamp is taken?
//   ls-late-full launch-stats as a splice could place it late: the entry
//                block (thread 0: slot, stamp, block 0's launch count) put
//                after the body's first global load, a flag for the path
//                that skips the load (the exit then runs the entry block
//                first), exit three red.adds as ls-defer
//   lc-late      launch-count with its slot taken in that late entry block;
//                the exit only adds
//   grid-floor   no per-block atomic: block 0 adds the grid's block count and
//                the launch at its exit (counts blocks launched, not blocks
//                that ran: the floor of any counter, not a probe we ship)
// Each variant runs as a CUDA graph of 1000 launches (GPU time, not the
// host's launch rate).
//
// More arguments are PTX files of this program's own kernels, or of
// probeapps.cu's, as the splice leaves them (nvcc -ptx, then ptxpatch_cli
// with a probe's module): each is loaded with cuModuleLoadData and its plain
// kernel (small<0>, or small_kernel) timed in the same rotation as the shapes above, named by the
// file, so the real splice and the hand-written floor are measured side by
// side. For each, the sums of its ls_counters / lc_counters copies are
// printed after the run (INFO probe_cost_counts ... counts=exact|wrong):
// blocks must be launches x 4096, launches the graph launches x 1000; then
// again (variant NAME-short) after 10 launches whose upper half of blocks
// skips the body's load entirely.
//
//   nvcc -O2 -arch=sm_90 -o probe_cost probe_cost.cu -lcuda && ./probe_cost 12 20000 spliced.ptx ...
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <vector>
#include <cuda.h>
#include <cuda_runtime.h>
#include <string>

#include "read_file.h"

#define SLOTS 16384
typedef unsigned long long u64;

__device__ u64 g_counts[SLOTS * 4];

static __device__ __forceinline__ void red_add(u64 *p, u64 v)
{
	asm volatile("red.global.add.u64 [%0], %1;" ::"l"(p), "l"(v) : "memory");
}

static __device__ __forceinline__ u64 gtimer(void)
{
	u64 t;
	asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
	return t;
}

static __device__ __forceinline__ u64 clk64(void)
{
	u64 t;
	asm volatile("mov.u64 %0, %%clock64;" : "=l"(t));
	return t;
}

static __device__ __forceinline__ unsigned warp_slot(void)
{
	unsigned sm, w;
	asm volatile("mov.u32 %0, %%smid;" : "=r"(sm));
	asm volatile("mov.u32 %0, %%warpid;" : "=r"(w));
	return (sm * 64 + w) & (SLOTS - 1);
}

/* %tid.x through asm: the compiler cannot derive it is 0 in the leader */
static __device__ __forceinline__ unsigned tid_x(void)
{
	unsigned t;
	asm volatile("mov.u32 %0, %%tid.x;" : "=r"(t));
	return t;
}

static __device__ __forceinline__ bool leader(void)
{
	return (threadIdx.x | threadIdx.y | threadIdx.z) == 0;
}

enum { V_PLAIN, V_COUNT, V_COUNT_CTA, V_COUNT_CTA_TID, V_ENTRY, V_EXIT, V_EXIT_STORE, V_STATS, V_TIMER, V_GUARD, V_LC_EXIT, V_LS_DEFER, V_LS_EXIT2, V_GRID_FLOOR, V_LS_PACK, V_LS_CLOCK, V_LS_CLOCK_PACK, V_LS_EXIT_TIME, V_LS_ENTRY_TIME, V_LS_ENTRY_NODIV, V_LS_LATE_STAMP, V_LS_LATE_FULL, V_LC_LATE, V_N };
static const char *names[V_N] = {"plain", "count", "count-cta", "count-cta-tid", "entry-only", "exit-only", "exit-store", "stats", "timer-only", "guard-only",
				 "lc-exit", "ls-defer", "ls-exit2", "grid-floor", "ls-pack", "ls-clock", "ls-clock-pack", "ls-exit-time",
				 "ls-entry-time", "ls-entry-nodiv", "ls-late-stamp", "ls-late-full", "lc-late"};

/* the probes' map values: launch-count 2 counters a slot, launch-stats 4 */
__device__ u64 g_lc[SLOTS * 2];
__device__ u64 g_ls[SLOTS * 4];

/* the splice's block slot: the linear block index (x + nx*(y + ny*z)) */
static __device__ __forceinline__ unsigned block_linear(void)
{
	return (blockIdx.z * gridDim.y + blockIdx.y) * gridDim.x + blockIdx.x;
}

template <int V> __device__ __forceinline__ u64 ls_time(void)
{
	return V == V_LS_CLOCK || V == V_LS_CLOCK_PACK ? clk64() : gtimer();
}

template <int V> __global__ void small(float *x, int n, u64 *sink)
{
	if (V == V_PLAIN) { /* probeapps.cu's small_kernel exactly: what a splice is given */
		int i = blockIdx.x * blockDim.x + threadIdx.x;
		if (i < n)
			x[i] = x[i] * 1.0001f + 0.5f;
		return;
	}
	u64 t0 = 0;
	unsigned bl = 0;
	const bool ls = V == V_LS_DEFER || V == V_LS_EXIT2 || V == V_LS_PACK || V == V_LS_CLOCK || V == V_LS_CLOCK_PACK || V == V_LS_ENTRY_TIME;
	if (V == V_LS_ENTRY_NODIV) {
		t0 = gtimer(); /* every thread: no branch around the read */
		bl = block_linear();
	}
	if (ls && leader()) {
		bl = block_linear();
		t0 = ls_time<V>();
		if (bl == 0)
			red_add(&g_ls[(bl & (SLOTS - 1)) * 4 + 0] + tid_x(), 1);
	}
	if (V == V_LS_LATE_FULL || V == V_LC_LATE) {
		/* the splice's late entry: after the body's first load, on the
		 * path that makes it; a flag for the path that does not */
		int i = blockIdx.x * blockDim.x + threadIdx.x;
		bool entered = false;
		if (i < n) {
			float xi = x[i];
			if (leader()) {
				bl = block_linear();
				if (V == V_LS_LATE_FULL) {
					t0 = gtimer();
					if (bl == 0)
						red_add(&g_ls[(bl & (SLOTS - 1)) * 4 + 0] + tid_x(), 1);
				}
			}
			entered = true;
			x[i] = xi * 1.0001f + 0.5f;
		}
		if (!leader())
			return;
		if (!entered) {
			bl = block_linear();
			if (V == V_LS_LATE_FULL) {
				t0 = gtimer();
				if (bl == 0)
					red_add(&g_ls[(bl & (SLOTS - 1)) * 4 + 0] + tid_x(), 1);
			}
		}
		if (V == V_LS_LATE_FULL) {
			u64 *p = &g_ls[(bl & (SLOTS - 1)) * 4] + tid_x();
			red_add(p + 2, gtimer() - t0);
			red_add(p + 1, 1);
			red_add(p + 3, 1);
		} else {
			u64 *p = &g_lc[(bl & (SLOTS - 1)) * 2] + tid_x();
			red_add(p + 1, 1);
			if (bl == 0)
				red_add(p, 1);
		}
		return;
	}
	if (V >= V_LC_EXIT) {
		int i = blockIdx.x * blockDim.x + threadIdx.x;
		if (V == V_LS_LATE_STAMP) {
			float xi = i < n ? x[i] : 0.f;
			if (leader()) {
				bl = block_linear();
				t0 = gtimer(); /* after the load is issued, before its use */
			}
			if (i < n)
				x[i] = xi * 1.0001f + 0.5f;
		} else if (i < n)
			x[i] = x[i] * 1.0001f + 0.5f;
		if (!leader())
			return;
		if (V == V_LC_EXIT) {
			bl = block_linear();
			u64 *p = &g_lc[(bl & (SLOTS - 1)) * 2] + tid_x();
			red_add(p + 1, 1);
			if (bl == 0)
				red_add(p, 1);
		} else if (V == V_LS_EXIT_TIME) {
			bl = block_linear();
			red_add(&g_ls[(bl & (SLOTS - 1)) * 4] + tid_x() + 2, gtimer());
		} else if (V == V_LS_ENTRY_TIME || V == V_LS_ENTRY_NODIV || V == V_LS_LATE_STAMP) {
			red_add(&g_ls[(bl & (SLOTS - 1)) * 4] + tid_x() + 1, 1);
			if (t0 == 12345)
				*sink = 3; /* never: keeps the entry's read */
		} else if (V == V_LS_PACK || V == V_LS_CLOCK_PACK) {
			u64 *p = &g_ls[(bl & (SLOTS - 1)) * 4] + tid_x();
			red_add(p + 2, ((ls_time<V>() - t0) << 20) | 1);
		} else if (ls) {
			u64 *p = &g_ls[(bl & (SLOTS - 1)) * 4] + tid_x();
			red_add(p + 2, ls_time<V>() - t0);
			red_add(p + 1, 1);
			if (V != V_LS_EXIT2)
				red_add(p + 3, 1);
		} else if (blockIdx.x == 0 && blockIdx.y == 0 && blockIdx.z == 0) { /* V_GRID_FLOOR */
			red_add(&g_lc[1] + tid_x(), (u64)gridDim.x * gridDim.y * gridDim.z);
			red_add(&g_lc[0] + tid_x(), 1);
		}
		return;
	}
	if (leader()) {
		unsigned s = V == V_COUNT_CTA || V == V_COUNT_CTA_TID ? (blockIdx.x & (SLOTS - 1)) : warp_slot();
		if (V == V_COUNT_CTA_TID)
			s += tid_x(); /* 0 here */
		if (V == V_STATS || V == V_TIMER)
			t0 = gtimer();
		if (V == V_COUNT || V == V_COUNT_CTA || V == V_COUNT_CTA_TID || V == V_ENTRY || V == V_EXIT_STORE || V == V_STATS)
			red_add(&g_counts[s * 4 + 1], 1);
		if (V == V_STATS)
			red_add(&g_counts[s * 4 + 2], (u64)0 - t0);
	}
	int i = blockIdx.x * blockDim.x + threadIdx.x;
	if (i < n)
		x[i] = x[i] * 1.0001f + 0.5f;
	if (leader()) {
		unsigned s = V == V_COUNT_CTA || V == V_COUNT_CTA_TID ? (blockIdx.x & (SLOTS - 1)) : warp_slot();
		if (V == V_COUNT_CTA_TID)
			s += tid_x();
		if (V == V_COUNT || V == V_COUNT_CTA || V == V_COUNT_CTA_TID || V == V_EXIT || V == V_STATS)
			red_add(&g_counts[s * 4 + 3], 1);
		if (V == V_EXIT_STORE)
			*(volatile u64 *)&g_counts[s * 4 + 3] = (u64)blockIdx.x;
		if (V == V_STATS)
			red_add(&g_counts[s * 4 + 2], gtimer());
		if (V == V_TIMER && gtimer() - t0 == 12345)
			*sink = 1; /* never: keeps the reads */
		if (V == V_GUARD && s == 0xffffffffu)
			*sink = 2; /* never: the leader branch and the slot read alone */
	}
}

typedef void (*kern)(float *, int, u64 *);
static kern kernels[V_N] = {small<V_PLAIN>, small<V_COUNT>, small<V_COUNT_CTA>, small<V_COUNT_CTA_TID>, small<V_ENTRY>,
			     small<V_EXIT>, small<V_EXIT_STORE>, small<V_STATS>, small<V_TIMER>, small<V_GUARD>,
			     small<V_LC_EXIT>, small<V_LS_DEFER>, small<V_LS_EXIT2>, small<V_GRID_FLOOR>,
			     small<V_LS_PACK>, small<V_LS_CLOCK>, small<V_LS_CLOCK_PACK>, small<V_LS_EXIT_TIME>, small<V_LS_ENTRY_TIME>,
			     small<V_LS_ENTRY_NODIV>, small<V_LS_LATE_STAMP>, small<V_LS_LATE_FULL>, small<V_LC_LATE>};

static double now_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec * 1e-9;
}

int main(int argc, char **argv)
{
	int rounds = argc > 1 ? atoi(argv[1]) : 10, iters = argc > 2 ? atoi(argv[2]) : 20000;
	int nmod = argc > 3 ? argc - 3 : 0, nv = V_N + nmod;
	int len = 1 << 20;
	float *d;
	u64 *sink;
	cudaMalloc(&d, len * sizeof(float));
	cudaMalloc(&sink, 8);
	cudaMemset(d, 0, len * sizeof(float));
	cudaEvent_t e0, e1;
	cudaEventCreate(&e0);
	cudaEventCreate(&e1);
	/* the spliced modules: their small<0>, loaded in the runtime's context */
	std::vector<CUmodule> mods(nmod);
	std::vector<CUfunction> fns(nmod);
	std::vector<std::string> vname(nv);
	for (int v = 0; v < V_N; v++)
		vname[v] = names[v];
	for (int m = 0; m < nmod; m++) {
		char *text = read_file(argv[3 + m], NULL);
		CUresult r = text ? cuModuleLoadData(&mods[m], text) : CUDA_ERROR_FILE_NOT_FOUND;
		/* this file's small<0>, or probeapps.cu's small_kernel (the same body, two parameters: the third is not read) */
		if (r == CUDA_SUCCESS && cuModuleGetFunction(&fns[m], mods[m], "_Z5smallILi0EEvPfiPy") != CUDA_SUCCESS)
			r = cuModuleGetFunction(&fns[m], mods[m], "_Z12small_kernelPfi");
		if (r != CUDA_SUCCESS) {
			const char *es = "?";
			cuGetErrorString(r, &es);
			printf("FAIL probe-cost: %s: %s\n", argv[3 + m], es);
			return 1;
		}
		free(text);
		std::string b = argv[3 + m];
		vname[V_N + m] = "ptx:" + b.substr(b.find_last_of('/') + 1);
	}
	auto launch = [&](int v, cudaStream_t s) {
		if (v < V_N) {
			kernels[v]<<<len / 256, 256, 0, s>>>(d, len, sink);
			return;
		}
		void *args[] = {&d, &len, &sink};
		cuLaunchKernel(fns[v - V_N], len / 256, 1, 1, 256, 1, 1, 0, (CUstream)s, args, NULL);
	};
	for (double t = now_s(); now_s() - t < 0.5;) /* clocks up */
		for (int v = 0; v < nv; v++) {
			for (int i = 0; i < 200; i++)
				launch(v, 0);
			cudaDeviceSynchronize();
		}
	/* the spliced modules' counters start from 0: the warm-up's launches are not counted */
	auto counters = [&](int m, const char *sym, int per, u64 *sum) {
		CUdeviceptr p;
		size_t sz;
		if (cuModuleGetGlobal(&p, &sz, mods[m], sym) != CUDA_SUCCESS)
			return false;
		std::vector<u64> h(sz / 8);
		cuMemcpyDtoH(h.data(), p, sz);
		for (int k = 0; k < per; k++)
			sum[k] = 0;
		/* a per-warp map: 32 bytes of header, then the copies, per values of 8 bytes */
		for (size_t w = 4; w + per <= h.size(); w += per)
			for (int k = 0; k < per; k++)
				sum[k] += h[w + k];
		std::vector<u64> z(sz / 8 - 4, 0); /* read and cleared */
		cuMemcpyHtoD(p + 32, z.data(), z.size() * 8);
		return true;
	};
	for (int m = 0; m < nmod; m++) {
		u64 s[4];
		counters(m, "__gpuext_map_ls_counters", 4, s) || counters(m, "__gpuext_map_lc_counters", 2, s);
	}
	/* each variant as a graph of 1000 launches: GPU time, not the host's launch rate */
	cudaStream_t st;
	cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking);
	std::vector<cudaGraphExec_t> ge(nv);
	for (int v = 0; v < nv; v++) {
		cudaGraph_t g;
		cudaStreamBeginCapture(st, cudaStreamCaptureModeThreadLocal);
		for (int i = 0; i < 1000; i++)
			launch(v, st);
		cudaStreamEndCapture(st, &g);
		cudaGraphInstantiate(&ge[v], g, 0);
	}
	iters = (iters + 999) / 1000 * 1000;
	std::vector<std::vector<float>> us(nv);
	for (int r = 0; r < rounds; r++)
		for (int k = 0; k < nv; k++) {
			int v = (k + r) % nv; /* rotate the order */
			float ms = 0;
			cudaEventRecord(e0, st);
			for (int i = 0; i < iters / 1000; i++)
				cudaGraphLaunch(ge[v], st);
			cudaEventRecord(e1, st);
			cudaEventSynchronize(e1);
			cudaEventElapsedTime(&ms, e0, e1);
			us[v].push_back(ms * 1000.f / iters);
		}
	if (cudaGetLastError() != cudaSuccess) {
		printf("FAIL probe-cost: %s\n", cudaGetErrorString(cudaGetLastError()));
		return 1;
	}
	float base = 0;
	for (int v = 0; v < nv; v++) {
		std::sort(us[v].begin(), us[v].end());
		float med = us[v][us[v].size() / 2];
		if (v == 0)
			base = med;
		printf("INFO probe_cost variant=%s median_us=%.3f min_us=%.3f max_us=%.3f ratio=%.4f\n", vname[v].c_str(), med, us[v].front(),
		       us[v].back(), med / base);
	}
	/* what the spliced modules counted: launches, blocks, exits */
	int bad = 0;
	auto report = [&](int m, const char *run, u64 want_launches) {
		u64 s[4] = {0, 0, 0, 0};
		u64 want_blocks = want_launches * (len / 256);
		if (counters(m, "__gpuext_map_ls_counters", 4, s)) {
			bool ok = s[0] == want_launches && s[1] == want_blocks && s[3] == s[1];
			printf("INFO probe_cost_counts variant=%s%s counts=%s launches=%llu blocks=%llu block_exits=%llu mean_block_ns=%.1f want_launches=%llu want_blocks=%llu\n",
			       vname[V_N + m].c_str(), run, ok ? "exact" : "wrong", s[0], s[1], s[3], s[3] ? (double)s[2] / s[3] : 0.0,
			       want_launches, want_blocks);
			bad += !ok;
		} else if (counters(m, "__gpuext_map_lc_counters", 2, s)) {
			bool ok = s[0] == want_launches && s[1] == want_blocks;
			printf("INFO probe_cost_counts variant=%s%s counts=%s launches=%llu blocks=%llu want_launches=%llu want_blocks=%llu\n",
			       vname[V_N + m].c_str(), run, ok ? "exact" : "wrong", s[0], s[1], want_launches, want_blocks);
			bad += !ok;
		}
	};
	for (int m = 0; m < nmod; m++)
		report(m, "", (u64)rounds * iters);
	/*
	 * Then 10 launches with n short of the grid: from block 2048 on no
	 * thread passes the bounds check, so no thread 0 reaches the body's
	 * load, and a late entry block runs at the exit (its copy) or not at
	 * all: every block must still be counted once.
	 */
	int half = len / 2 - 100;
	for (int m = 0; m < nmod; m++) {
		void *args[] = {&d, &half, &sink};
		for (int i = 0; i < 10; i++)
			cuLaunchKernel(fns[m], len / 256, 1, 1, 256, 1, 1, 0, 0, args, NULL);
		cuCtxSynchronize();
		report(m, "-short", 10);
	}
	return bad ? 1 : 0;
}
