package probes

// Regenerate with `go generate ./policies/probes` (needs clang; the .o files
// are committed so `go build` does not). -fdebug-compilation-dir keeps the
// objects free of machine paths; -g gives BTF maps and line info for the
// verifier's messages.

//go:generate clang -O2 -g -target bpf -Wall -Werror -fdebug-compilation-dir=. -I../../kmod/include -c launch_stats.bpf.c -o launch_stats.o
//go:generate clang -O2 -g -target bpf -Wall -Werror -fdebug-compilation-dir=. -I../../kmod/include -c sm_histogram.bpf.c -o sm_histogram.o
//go:generate clang -O2 -g -target bpf -Wall -Werror -fdebug-compilation-dir=. -I../../kmod/include -c launch_latency.bpf.c -o launch_latency.o
