// Package launches reads what the interposer saw of every kernel launch,
// patched image or not: the <pid>.launches files it writes to
// $GPUEXT_TENANT_ACCT/probes (devrt/lib/probe_hostlaunch.c, layout in
// devrt/include/gpuext_devrt_launches.h). Each file holds a process's
// coverage (launches observed device-side, host-side, not at all, and why)
// and its per-kernel launch table (launches, grid and block sizes,
// host-measured latency). The file is written by the tenant and read by
// root: Decode bounds every count and string, ReadFile opens no link and
// no FIFO, and Merge sums a tenant's processes into one bounded table.
package launches
