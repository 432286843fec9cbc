// launch_gap.bpf.c - gpuext's own program in bpftime's style (the shape of
// bpftime's launchlate): a host uprobe on the launch call stores the host's
// time of the launch, shifted by an offset its loader put in lg_calib, in
// an array the device program reads, and every thread bins the time from
// its kernel's launch to its own start into a GPU array with a plain +=
// (one atomic add on the device). gpuext runs no host uprobe (and no
// program uses lg_calib on the device): the descriptor's hostWrites have
// the interposer write lg_host[0] (the launch time, in the device's clock,
// before each launch) and lg_clock[0] (the device clock's offset from the
// host's CLOCK_MONOTONIC, at bind), which every thread uses to store its
// start on the host's monotonic clock (the last writer wins).
#include <vmlinux.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>

#define BPF_MAP_TYPE_GPU_ARRAY_MAP 1503
#define BINS 10

struct {
	__uint(type, BPF_MAP_TYPE_GPU_ARRAY_MAP);
	__uint(max_entries, BINS);
	__type(key, u32);
	__type(value, u64);
} lg_hist SEC(".maps");

// the launch's host time on the device's clock
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, u32);
	__type(value, u64);
} lg_host SEC(".maps");

// the device's clock - the host's CLOCK_MONOTONIC
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, u32);
	__type(value, u64);
} lg_clock SEC(".maps");

// the host loader's clock offset, read by the host uprobe only
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, u32);
	__type(value, u64);
} lg_calib SEC(".maps");

// 0: threads that found no launch time; 1: a thread's start on the host's CLOCK_MONOTONIC
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 2);
	__type(key, u32);
	__type(value, u64);
} lg_misc SEC(".maps");

static const u64 (*bpf_get_globaltimer)(void) = (void *)502;

// Under bpftime this runs on the host at each launch; gpuext loads no host program.
SEC("uprobe")
int BPF_KPROBE(lg_launch, const void *func)
{
	u32 key = 0;
	u64 now = bpf_ktime_get_ns();
	u64 *off = bpf_map_lookup_elem(&lg_calib, &key);

	if (off)
		now += *off;
	bpf_map_update_elem(&lg_host, &key, &now, BPF_ANY);
	return 0;
}

static __always_inline u32 bin_of(u64 ns)
{
	u32 b = 0;
	for (u64 lim = 100; b < BINS - 1 && ns >= lim; lim *= 10)
		b++;
	return b;
}

SEC("kprobe/_Z4gridPj")
int lg_entry()
{
	u64 now = bpf_get_globaltimer();
	u32 key = 0, start_key = 1;
	u64 *launched = bpf_map_lookup_elem(&lg_host, &key);
	u64 *off = bpf_map_lookup_elem(&lg_clock, &key);

	if (!launched || !off || *launched == 0) {
		u64 *none = bpf_map_lookup_elem(&lg_misc, &key);
		if (none)
			__atomic_add_fetch(none, 1, __ATOMIC_SEQ_CST);
		return 0;
	}
	u32 bin = bin_of(now > *launched ? now - *launched : 0);
	u64 *count = bpf_map_lookup_elem(&lg_hist, &bin);
	if (count)
		*count += 1;
	u64 *start = bpf_map_lookup_elem(&lg_misc, &start_key);
	if (start)
		*start = now - *off;
	return 0;
}

char LICENSE[] SEC("license") = "GPL";
