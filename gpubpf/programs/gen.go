package programs

// Regenerate with `go generate ./gpubpf/programs` (needs clang; the objects
// are committed so `go build` does not, and `make lint` regenerates them and
// fails on a difference). bpf2go keeps BTF (maps, and the line info the
// device verifier quotes in its messages). The catalog reads the objects by
// file name (catalog/*.json "object"); the generated loaders are unused.

//go:generate go tool bpf2go -tags linux -target bpfel -no-global-types launchstats launch_stats.bpf.c -- -I../../kmod/include
//go:generate go tool bpf2go -tags linux -target bpfel -no-global-types launchcount launch_count.bpf.c -- -I../../kmod/include
//go:generate go tool bpf2go -tags linux -target bpfel -no-global-types smhistogram sm_histogram.bpf.c -- -I../../kmod/include
//go:generate go tool bpf2go -tags linux -target bpfel -no-global-types launchlatency launch_latency.bpf.c -- -I../../kmod/include
