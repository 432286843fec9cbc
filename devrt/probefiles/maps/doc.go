// Package maps reads what device probes counted: the .maps files the
// interposer copies out of GPU memory ($GPUEXT_TENANT_ACCT/probes/
// <pid>-<image>.maps, one per patched image) and its <pid>.status lines.
// It decodes each map symbol (descriptor + data) per the device layouts of
// gpuext_abi.h (array, hash, per-warp summed over slots, ringbuf records),
// aggregates a tenant's maps across processes and images, and summarises
// them through the views of the probe catalog (gpubpf/programs): counters,
// means, the SM histogram, log2-histogram percentiles. gpuextctl probes
// prints the summary.
package maps
