package kernelpolicy

// Regenerate with `go generate ./bpf/kernelpolicy` (needs clang; the outputs are committed so `go build` does not).

//go:generate go tool bpf2go -tags linux -target bpfel -no-global-types fifo fifo.bpf.c -- -I../../kmod/include -I/usr/include/x86_64-linux-gnu
//go:generate go tool bpf2go -tags linux -target bpfel -no-global-types lru lru.bpf.c -- -I../../kmod/include -I/usr/include/x86_64-linux-gnu
//go:generate go tool bpf2go -tags linux -target bpfel -no-global-types lfu lfu.bpf.c -- -I../../kmod/include -I/usr/include/x86_64-linux-gnu
//go:generate go tool bpf2go -tags linux -target bpfel -no-global-types mru mru.bpf.c -- -I../../kmod/include -I/usr/include/x86_64-linux-gnu
//go:generate go tool bpf2go -tags linux -target bpfel -no-global-types freqDecay freq_decay.bpf.c -- -I../../kmod/include -I/usr/include/x86_64-linux-gnu
//go:generate go tool bpf2go -tags linux -target bpfel -no-global-types prefetchNone prefetch_none.bpf.c -- -I../../kmod/include -I/usr/include/x86_64-linux-gnu
//go:generate go tool bpf2go -tags linux -target bpfel -no-global-types prefetchAlwaysMax prefetch_always_max.bpf.c -- -I../../kmod/include -I/usr/include/x86_64-linux-gnu
//go:generate go tool bpf2go -tags linux -target bpfel -no-global-types prefetchStride prefetch_stride.bpf.c -- -I../../kmod/include -I/usr/include/x86_64-linux-gnu
//go:generate go tool bpf2go -tags linux -target bpfel -no-global-types tenantQuota tenant_quota.bpf.c -- -I../../kmod/include -I/usr/include/x86_64-linux-gnu
//go:generate go tool bpf2go -tags linux -target bpfel -no-global-types prefetchSequential prefetch_sequential.bpf.c -- -I../../kmod/include -I/usr/include/x86_64-linux-gnu
//go:generate go tool bpf2go -tags linux -target bpfel -no-global-types prefetchTree prefetch_tree.bpf.c -- -I../../kmod/include -I/usr/include/x86_64-linux-gnu
//go:generate go tool bpf2go -tags linux -target bpfel -no-global-types prioWeighted prio_weighted.bpf.c -- -I../../kmod/include -I/usr/include/x86_64-linux-gnu
//go:generate go tool bpf2go -tags linux -target bpfel -no-global-types schedPriority sched_priority.bpf.c -- -I../../kmod/include -I/usr/include/x86_64-linux-gnu
//go:generate go tool bpf2go -tags linux -target bpfel -no-global-types schedAdmit sched_admit.bpf.c -- -I../../kmod/include -I/usr/include/x86_64-linux-gnu

// The object fixtures of dir_test.go (SDK policies, good and bad).
//go:generate sh testdata/objects/build.sh
