/*
 * gpuext_devrt_launches.h - the .launches file, defined once.
 *
 * The interposer (devrt/lib/probe_hostlaunch.c) sees every kernel launch of
 * a process whose tenant has device probes, patched image or not, and
 * writes what the host measured to $GPUEXT_TENANT_ACCT/probes/<pid>.launches
 * (<pid>: the process's key, probe_load.c gx_key), every second and at
 * exit (temp + rename). The host (devrt/probefiles/launches, whose layout_gen.go
 * is generated from this header) decodes it. The file is written by the
 * tenant's processes and read by root: the reader checks every count and
 * string here before it uses it.
 *
 *   struct gpuext_devrt_launches_header
 *   ncoverage times struct gpuext_devrt_launches_coverage: every launch of
 *     the process, summed by how it is observed and why (sums over the
 *     whole table, the rows not written included)
 *   nrows times struct gpuext_devrt_launches_row: the kernels with the most
 *     launches, then at most one row per measured class named
 *     GPUEXT_DEVRT_LAUNCHES_OTHER holding the rest
 *
 * measured: GPUEXT_DEVRT_MEASURED_DEVICE (the kernel's image carries the
 * probes: its counts are the device's), _HOST (the image could not be
 * patched or the kernel is not probed: the host's launch arguments and
 * events are all there is), _NONE (launches known to have happened whose
 * kernels the host could not see: graph replays of a graph whose nodes it
 * could not read).
 *
 * All fields are fixed width, little-endian (x86-64, aarch64), naturally
 * aligned; strings are NUL padded printable ASCII.
 */
#ifndef GPUEXT_DEVRT_LAUNCHES_H
#define GPUEXT_DEVRT_LAUNCHES_H

#include <stdint.h>

#define GPUEXT_DEVRT_LAUNCHES_MAGIC "GXPLNCH\0" /* the 8 bytes of magic[], the last one NUL */
#define GPUEXT_DEVRT_LAUNCHES_VERSION 1u
#define GPUEXT_DEVRT_LAUNCHES_NAME_SIZE 160u  /* kernel name prefix; name_len says whether it was cut */
#define GPUEXT_DEVRT_LAUNCHES_REASON_SIZE 48u /* why a kernel is measured host-side (the image's status reason) */
#define GPUEXT_DEVRT_LAUNCHES_MAX_ROWS 66u    /* 64 kernels + an "other" row per measured class */
#define GPUEXT_DEVRT_LAUNCHES_TOP 64u
#define GPUEXT_DEVRT_LAUNCHES_MAX_COVERAGE 32u
#define GPUEXT_DEVRT_LAUNCHES_HIST 64u /* log2 buckets of host-measured latency, ns: bucket i holds [2^i, 2^(i+1)) */
#define GPUEXT_DEVRT_LAUNCHES_OTHER "(other)"

#define GPUEXT_DEVRT_MEASURED_DEVICE 1u
#define GPUEXT_DEVRT_MEASURED_HOST 2u
#define GPUEXT_DEVRT_MEASURED_NONE 3u

#define GPUEXT_DEVRT_LAUNCHES_FLAG_LATENCY 1u /* host latency (events) was measured */

struct gpuext_devrt_launches_header {
	char magic[8];      /* GPUEXT_DEVRT_LAUNCHES_MAGIC */
	uint32_t version;   /* GPUEXT_DEVRT_LAUNCHES_VERSION */
	uint32_t pid;       /* the process's key */
	uint64_t seq;       /* write sequence number: 1, 2, ... */
	uint64_t time_ns;   /* CLOCK_REALTIME of the write */
	uint32_t tenant_id; /* from the tenant config */
	uint32_t final;     /* 1: the write at process exit */
	uint32_t nrows;     /* rows that follow the coverage, at most GPUEXT_DEVRT_LAUNCHES_MAX_ROWS */
	uint32_t ncoverage; /* coverage entries, at most GPUEXT_DEVRT_LAUNCHES_MAX_COVERAGE */
	uint32_t flags;     /* GPUEXT_DEVRT_LAUNCHES_FLAG_* */
	uint32_t kernels;   /* distinct kernels seen (rows written or not) */
	uint64_t graph_launches;   /* cuGraphLaunch calls */
	uint64_t lat_skipped;      /* host-measured launches whose latency was not taken (no free event, capture, error) */
	uint64_t lat_calib_ns;     /* the event clock's calibration round trip: latencies are +- half of it */
	uint64_t lat_hist[GPUEXT_DEVRT_LAUNCHES_HIST]; /* host-measured launch-to-completion latency, log2 ns */
};

struct gpuext_devrt_launches_coverage {
	uint32_t measured;                               /* GPUEXT_DEVRT_MEASURED_* */
	uint32_t kernels;                                /* distinct kernels in it */
	char reason[GPUEXT_DEVRT_LAUNCHES_REASON_SIZE]; /* "ok" for device; the image's reason otherwise */
	uint64_t launches;
	uint64_t blocks; /* the launches' grid sizes summed */
};

struct gpuext_devrt_launches_row {
	uint64_t kernel_id; /* FNV-1a 64 of the whole name (gpubpf/abi.KernelID); 0 in an "other" row */
	char name[GPUEXT_DEVRT_LAUNCHES_NAME_SIZE]; /* the name's first bytes, NUL padded */
	uint32_t name_len;  /* the whole name's length: more than the prefix means it was cut */
	uint32_t measured;  /* GPUEXT_DEVRT_MEASURED_* */
	char reason[GPUEXT_DEVRT_LAUNCHES_REASON_SIZE];
	uint32_t image;     /* the image index in the process; 0xffffffff: not one the interposer saw */
	uint32_t kernels;   /* 1; in an "other" row the kernels it holds */
	uint64_t launches;  /* all its launches: direct and in graph replays */
	uint64_t graph_launches; /* of them, in graph replays */
	uint64_t blocks;    /* grid sizes summed */
	uint32_t grid_last[3], block_last[3]; /* the last launch's */
	uint64_t max_blocks;   /* the largest grid (blocks) */
	uint32_t max_threads;  /* the largest block (threads) */
	uint32_t pad;
	uint64_t lat_count, lat_sum_ns, lat_min_ns, lat_max_ns; /* host-measured latency of its launches */
};

_Static_assert(sizeof(struct gpuext_devrt_launches_header) == 80 + 8 * GPUEXT_DEVRT_LAUNCHES_HIST, "launches header layout");
_Static_assert(sizeof(struct gpuext_devrt_launches_coverage) == 72, "launches coverage layout");
_Static_assert(sizeof(struct gpuext_devrt_launches_row) == 328, "launches row layout");
_Static_assert(sizeof(GPUEXT_DEVRT_LAUNCHES_MAGIC) == 8 + 1, "magic is 8 bytes");

#endif /* GPUEXT_DEVRT_LAUNCHES_H */
