// launch_bins.bpf.c - gpuext's own program in bpftime's style (a latency
// histogram, as bpftime's launchlate): every thread puts the time since the
// launch into one of ten log10 bins of a GPU array with a plain *count += 1,
// which the loader makes one atomic add; bpf_printk is dropped.
#include <vmlinux.h>
#include <bpf/bpf_helpers.h>

#define BPF_MAP_TYPE_GPU_ARRAY_MAP 1503
#define BINS 10

struct {
	__uint(type, BPF_MAP_TYPE_GPU_ARRAY_MAP);
	__uint(max_entries, BINS);
	__type(key, u32);
	__type(value, u64);
} lb_hist SEC(".maps");

static const u64 (*bpf_get_globaltimer)(void) = (void *)502;

static __always_inline u32 bin_of(u64 ns)
{
	u32 b = 0;
	for (u64 lim = 100; b < BINS - 1 && ns >= lim; lim *= 10)
		b++;
	return b;
}

SEC("kprobe/_Z4gridPj")
int lb_entry(struct gpuext_probe_ctx *ctx)
{
	u64 now = bpf_get_globaltimer();
	u64 delta = now > ctx->launch_ns ? now - ctx->launch_ns : 0;
	u32 bin = bin_of(delta);
	u64 *count = bpf_map_lookup_elem(&lb_hist, &bin);
	if (count)
		*count += 1;
	else
		bpf_printk("no bin %u\n", bin);
	return 0;
}

char LICENSE[] SEC("license") = "GPL";
