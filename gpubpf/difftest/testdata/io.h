/* io.h - the context of the difftest C programs: BPF_PROG_TEST_RUN copies
 * it in and out (BPF_PROG_TYPE_SYSCALL). */
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>

struct io {
	__u64 in[6];
	__u64 out[16];
};
