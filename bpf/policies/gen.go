package policies

// Regenerate with `go generate ./bpf/policies` (needs clang; the outputs are committed so `go build` does not).

//go:generate go tool bpf2go -tags linux -target bpfel -no-global-types fifo fifo.bpf.c -- -I../../kmod/include -I/usr/include/x86_64-linux-gnu
//go:generate go tool bpf2go -tags linux -target bpfel -no-global-types lru lru.bpf.c -- -I../../kmod/include -I/usr/include/x86_64-linux-gnu
//go:generate go tool bpf2go -tags linux -target bpfel -no-global-types schedPriority sched_priority.bpf.c -- -I../../kmod/include -I/usr/include/x86_64-linux-gnu
//go:generate go tool bpf2go -tags linux -target bpfel -no-global-types schedAdmit sched_admit.bpf.c -- -I../../kmod/include -I/usr/include/x86_64-linux-gnu
