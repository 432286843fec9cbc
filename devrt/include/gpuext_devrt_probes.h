/*
 * gpuext_devrt_probes.h - the device-probe contract between the host's
 * compile step (Go, gpubpf/abi and gpubpf/compile) and the interposer
 * (C, devrt/lib/probe_*.c, ptxpatch.c), defined once: the bundle's directory
 * and file names, the module.conf format (version, directives, host_write
 * and guard values), the PTX symbols both sides name, the <key>.status line
 * keys and values, and the kernel id (FNV-1a 64 of a .entry name).
 *
 * The interposer includes this header; gpubpf/abi/abigen.c prints it as Go
 * constants (gpubpf/abi/abi_gen.go, `go generate ./gpubpf/abi`) and
 * `make lint` fails when the committed Go differs. Every string here is
 * printable ASCII without quotes or backslashes (the generator refuses
 * others).
 *
 * Rules for editing: a new directive or value is ignored by older
 * interposers (they skip what they do not know), so it needs no version
 * bump; changing the meaning of an existing one bumps
 * GPUEXT_DEVRT_CONF_VERSION.
 */
#ifndef GPUEXT_DEVRT_PROBES_H
#define GPUEXT_DEVRT_PROBES_H

#include <stddef.h>
#include <stdint.h>

/* ---- files ---- */

/*
 * The bundle: $GPUEXT_TENANT_DIR/probes/ (the host swaps the symlink to a
 * new bundle in one rename). The reports: $GPUEXT_TENANT_ACCT/probes/.
 */
#define GPUEXT_DEVRT_PROBES_DIR "probes"
#define GPUEXT_DEVRT_PROBES_MODULE_FILE "module.ptx"      /* the fragment the patcher splices */
#define GPUEXT_DEVRT_PROBES_MANIFEST_FILE "manifest.json" /* the host's description (never read by C) */
#define GPUEXT_DEVRT_PROBES_CONF_FILE "module.conf"       /* the lines below */
/* The inline form of each attach point ("inline 1"): pasted at the sites. */
#define GPUEXT_DEVRT_PROBES_INLINE_ENTRY_FILE "inline_entry.ptx"
#define GPUEXT_DEVRT_PROBES_INLINE_EXIT_FILE "inline_exit.ptx"
/* Per process (<key>: the pid, or a free number; probe_files.c): */
#define GPUEXT_DEVRT_PROBES_STATUS_SUFFIX ".status"     /* <key>.status: the lines below */
#define GPUEXT_DEVRT_PROBES_MAPS_SUFFIX ".maps"         /* <key>-<image>[-<ctx>].maps (gpuext_devrt_maps.h) */
#define GPUEXT_DEVRT_PROBES_LAUNCHES_SUFFIX ".launches" /* <key>.launches (gpuext_devrt_launches.h) */

/* ---- module.conf ---- */

/*
 * One directive a line, '#' starts a comment, fields separated by blanks:
 *   version 1
 *   min_ptx 7.8
 *   min_target 70
 *   launch_time 0|1
 *   kernel NAME                    (zero or more; none: every .entry)
 *   map NAME SYMBOL TOTAL_BYTES    (zero or more; TOTAL_BYTES = descriptor + data)
 *   guard_entry thread0|none       (default none; an unknown value is none)
 *   guard_exit thread0|none
 *   inline 0|1                     (default 0)
 *   entry_late 0|1                 (default 1; inline form only)
 *   host_write VALUE SYMBOL OFFSET (zero or more: the interposer writes the
 *                                  u64 VALUE at byte OFFSET (8-aligned) of
 *                                  the global SYMBOL; an unknown VALUE is
 *                                  ignored)
 * Unknown directives are ignored (newer hosts may add some); a bad known one
 * makes the whole file invalid (probes off for the process, reported).
 */
#define GPUEXT_DEVRT_CONF_VERSION 1

/* The directives: each word once, and the list the generator prints (X(go name, word)). */
#define GPUEXT_DEVRT_CONF_KW_VERSION "version"
#define GPUEXT_DEVRT_CONF_KW_MIN_PTX "min_ptx"
#define GPUEXT_DEVRT_CONF_KW_MIN_TARGET "min_target"
#define GPUEXT_DEVRT_CONF_KW_LAUNCH_TIME "launch_time"
#define GPUEXT_DEVRT_CONF_KW_KERNEL "kernel"
#define GPUEXT_DEVRT_CONF_KW_MAP "map"
#define GPUEXT_DEVRT_CONF_KW_HOST_WRITE "host_write"
#define GPUEXT_DEVRT_CONF_KW_GUARD_ENTRY "guard_entry"
#define GPUEXT_DEVRT_CONF_KW_GUARD_EXIT "guard_exit"
#define GPUEXT_DEVRT_CONF_KW_INLINE "inline"
#define GPUEXT_DEVRT_CONF_KW_ENTRY_LATE "entry_late"
#define GPUEXT_DEVRT_CONF_DIRECTIVES(X)                           \
	X(confVersion, GPUEXT_DEVRT_CONF_KW_VERSION)              \
	X(confMinPTX, GPUEXT_DEVRT_CONF_KW_MIN_PTX)               \
	X(confMinTarget, GPUEXT_DEVRT_CONF_KW_MIN_TARGET)         \
	X(confLaunchTime, GPUEXT_DEVRT_CONF_KW_LAUNCH_TIME)       \
	X(confKernel, GPUEXT_DEVRT_CONF_KW_KERNEL)                \
	X(confMap, GPUEXT_DEVRT_CONF_KW_MAP)                      \
	X(confHostWrite, GPUEXT_DEVRT_CONF_KW_HOST_WRITE)         \
	X(confGuardEntry, GPUEXT_DEVRT_CONF_KW_GUARD_ENTRY)       \
	X(confGuardExit, GPUEXT_DEVRT_CONF_KW_GUARD_EXIT)         \
	X(confInline, GPUEXT_DEVRT_CONF_KW_INLINE)                \
	X(confEntryLate, GPUEXT_DEVRT_CONF_KW_ENTRY_LATE)

/* guard_entry / guard_exit values: who runs the attach point's programs */
#define GPUEXT_DEVRT_GUARD_NONE_NAME "none"       /* every thread (always correct) */
#define GPUEXT_DEVRT_GUARD_THREAD0_NAME "thread0" /* only linear thread 0 of each block */

/*
 * host_write VALUE: what the interposer writes into a map element; the
 * interposer's number for each is never 0.
 *   launch-time:  before each launch of a probed kernel, on its stream, the
 *                 launch's host time in the device's %globaltimer clock, ns;
 *   clock-offset: at bind, an s64: %globaltimer minus the host's
 *                 CLOCK_MONOTONIC, ns.
 */
#define GPUEXT_DEVRT_HOSTW_LAUNCH_TIME_NAME "launch-time"
#define GPUEXT_DEVRT_HOSTW_CLOCK_OFFSET_NAME "clock-offset"
#define GPUEXT_DEVRT_HOSTW_LAUNCH_TIME 1
#define GPUEXT_DEVRT_HOSTW_CLOCK_OFFSET 2

/* The most host_write lines one module.conf may have (gpubpf/programs MaxHostWrites). */
#define GPUEXT_DEVRT_CONF_MAX_HOST_WRITES 8
/* The longest kernel name a kernel line may hold (gpubpf/programs MaxKernelNameBytes). */
#define GPUEXT_DEVRT_CONF_MAX_KERNEL_NAME 4096

/* ---- PTX symbols of a translated module ---- */

#define GPUEXT_DEVRT_SYM_TENANT_ID "__gpuext_tenant_id" /* .visible .global .u32 the interposer sets after load */
#define GPUEXT_DEVRT_SYM_LAUNCH_NS "__gpuext_launch_ns" /* .visible .global .u64 it sets before each launch */
#define GPUEXT_DEVRT_SYM_MAP_PREFIX "__gpuext_map_"     /* + a map's name: descriptor + data */
/* .visible .global .u64 the interposer may set after load: bpf_get_current_pid_tgid on the device */
#define GPUEXT_DEVRT_SYM_PID_TGID "__gpuext_pid_tgid"

/*
 * The inline form's templates (inline_entry.ptx, inline_exit.ptx): the
 * placeholders the patcher replaces with the site number (unique per probed
 * .entry of the module) and the kernel id (an unsigned hex literal), and the
 * comment line of a template translated for the thread-0 site guard (the
 * patcher then runs it under the guard whatever module.conf says).
 */
#define GPUEXT_DEVRT_INLINE_SITE "@GXSITE@"
#define GPUEXT_DEVRT_INLINE_KID "@GXKID@"
#define GPUEXT_DEVRT_INLINE_GUARD_MARK "// gpuext: runs under the thread-0 site guard"

/* ---- <key>.status ---- */

/*
 * One line per event, blank-separated KEY=VALUE pairs, written by the
 * interposer (probe_load.c gx_status) and read by devrt/probefiles/maps
 * (ParseStatus). The keys and values the reader acts on:
 *   image=N|- state=patched|unpatched|bound|unbound|off reason=WORD ...
 *   image=- launch_time=off reason=WORD   (launch times stopped)
 *   image=N ctx=C state=unbound ... final=missed
 * Other pairs are details a reader shows as they are.
 */
#define GPUEXT_DEVRT_STATUS_KEY_IMAGE "image"
#define GPUEXT_DEVRT_STATUS_KEY_STATE "state"
#define GPUEXT_DEVRT_STATUS_KEY_REASON "reason"
#define GPUEXT_DEVRT_STATUS_KEY_LAUNCH_TIME "launch_time"
#define GPUEXT_DEVRT_STATUS_KEY_FINAL "final"
#define GPUEXT_DEVRT_STATUS_IMAGE_NONE "-" /* a process-wide line */
#define GPUEXT_DEVRT_STATUS_PATCHED "patched"
#define GPUEXT_DEVRT_STATUS_UNPATCHED "unpatched"
#define GPUEXT_DEVRT_STATUS_BOUND "bound"
#define GPUEXT_DEVRT_STATUS_UNBOUND "unbound"
#define GPUEXT_DEVRT_STATUS_OFF "off"
#define GPUEXT_DEVRT_STATUS_MISSED "missed"

/* ---- the kernel id ---- */

/* FNV-1a 64 of a .entry name: what a probe's ctx.kernel_id holds. */
#define GPUEXT_DEVRT_FNV64_OFFSET 14695981039346656037ull
#define GPUEXT_DEVRT_FNV64_PRIME 1099511628211ull

static inline uint64_t gpuext_devrt_kernel_id(const char *name, size_t n)
{
	uint64_t h = GPUEXT_DEVRT_FNV64_OFFSET;

	for (size_t i = 0; i < n; i++) {
		h ^= (unsigned char)name[i];
		h *= GPUEXT_DEVRT_FNV64_PRIME;
	}
	return h;
}

#endif /* GPUEXT_DEVRT_PROBES_H */
