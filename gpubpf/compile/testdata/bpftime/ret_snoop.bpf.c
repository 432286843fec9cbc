// ret_snoop.bpf.c - gpuext's own program in bpftime's style (as bpftime's
// kernelretsnoop): every thread writes one record, its thread index and
// the time, to a GPU ring buffer with bpf_perf_event_output.
#include <vmlinux.h>
#include <bpf/bpf_helpers.h>

#define BPF_MAP_TYPE_GPU_RINGBUF_MAP 1527

struct rec {
	u64 x, y, z;
	u64 ts;
};

struct {
	__uint(type, BPF_MAP_TYPE_GPU_RINGBUF_MAP);
	__uint(max_entries, 4);
	__type(key, u32);
	__type(value, struct rec);
} rs_events SEC(".maps");

static const u64 (*bpf_get_globaltimer)(void) = (void *)502;
static const u64 (*bpf_get_thread_idx)(u64 *x, u64 *y, u64 *z) = (void *)505;

SEC("kretprobe/_Z4gridPj")
int rs_exit()
{
	struct rec r;

	bpf_get_thread_idx(&r.x, &r.y, &r.z);
	r.ts = bpf_get_globaltimer();
	bpf_perf_event_output(NULL, &rs_events, 0, &r, sizeof(r));
	return 0;
}

char LICENSE[] SEC("license") = "GPL";
