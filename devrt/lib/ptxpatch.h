/*
 * ptxpatch.h - the PTX splice of the device-probe pipeline
 * (docs/device-probes.md): insert the probe module fragment into a PTX
 * module and call the dispatch functions at entry and exit of each probed
 * .entry. Pure text in, text out: no CUDA, no allocation besides the
 * result, so the same source builds into the interposer and the golden-test
 * CLI (devrt/tools/ptxpatch_cli.c).
 */
#ifndef GPUEXT_PTXPATCH_H
#define GPUEXT_PTXPATCH_H

#include <stddef.h>
#include <stdint.h>

#include "gpuext_devrt_probes.h" /* module.conf, the kernel id, the file names */

struct gx_ptx_opts {
	int min_ptx_major, min_ptx_minor; /* the fragment's minimum .version (raised to, never lowered) */
	int min_target;                   /* the fragment's minimum sm_XX; a module below it stays unpatched */
	const char *const *kernels;       /* .entry names to probe; nkernels == 0: every .entry */
	size_t nkernels;
	int guard_entry, guard_exit;      /* GX_GUARD_*: which threads run the probes at that site */
	/*
	 * Inline form (module.conf "inline 1"; inline_entry.ptx, inline_exit.ptx):
	 * templates pasted at the sites instead of the dispatch calls. Both or
	 * neither. Lines before the first line starting with '{' are
	 * declarations, hoisted to the entry's leading declarations; the rest is
	 * the block. GX_PTX_INLINE_SITE / GX_PTX_INLINE_KID are replaced by the
	 * site number (per probed .entry of the module) and the kernel id.
	 */
	const char *inline_entry, *inline_exit;
	size_t inline_entry_len, inline_exit_len;
	/*
	 * Inline form only (module.conf "entry_late", default 1): the entry
	 * block goes after the body's first global load when no label, brace
	 * or end of body comes before that load (it then runs at most once a
	 * thread), so the probe's work overlaps the load instead of delaying
	 * it; a thread that never reaches the load (a bounds check branching
	 * around it, an early ret) runs the entry block at the exit, before
	 * the exit block. 0: at the body's first statement.
	 */
	int entry_late;
};

#define GX_PTX_INLINE_SITE GPUEXT_DEVRT_INLINE_SITE
#define GX_PTX_INLINE_KID GPUEXT_DEVRT_INLINE_KID


/* the comment line of an inline template translated for the thread-0 guard (gpubpf/ptx, GuardMark) */
#define GX_INLINE_GUARD_MARK GPUEXT_DEVRT_INLINE_GUARD_MARK

/* module.conf guard_entry / guard_exit: who needs to run the attach point's programs */
#define GX_GUARD_NONE 0    /* every thread (always correct) */
#define GX_GUARD_THREAD0 1 /* only the thread of linear id 0 of each block: the others branch around */

struct gx_ptx_result {
	char *text;        /* malloc'd, NUL-terminated patched module; NULL when unpatched */
	size_t len;        /* strlen(text) */
	int probed;        /* .entry bodies that got the probe calls */
	int late;          /* of them, with the entry block after the first global load (entry_late) */
	int entries;       /* .entry bodies in the module */
	int target;        /* the module's sm_XX (0 if none was found) */
	char target_text[32]; /* the module's .target token as written, e.g. "sm_90a" */
	char reason[160];  /* "ok", or why the module was left unpatched (one token, no spaces) */
};

/*
 * Patches ptx[0..len) (need not be NUL-terminated) with the fragment.
 * Returns 0 and res->text on success; -1 with res->reason when the module
 * is left as it is (target too low, no probed kernel, parse error, out of
 * memory, already patched).
 */
int gx_ptx_patch(const char *ptx, size_t len, const char *frag, size_t frag_len, const struct gx_ptx_opts *o,
		 struct gx_ptx_result *res);

/* The kernel id the probes see: FNV-1a 64 of the .entry name (gpubpf/abi.KernelID). */
uint64_t gx_kernel_id(const char *name, size_t n);

/*
 * $GPUEXT_TENANT_DIR/probes/module.conf, written by the host's compile step
 * next to module.ptx: the format is defined in gpuext_devrt_probes.h
 * (GPUEXT_DEVRT_CONF_*), which the Go writer is generated from.
 */
#define GX_CONF_VERSION GPUEXT_DEVRT_CONF_VERSION
#define GX_CONF_MAX_MAPS 64
#define GX_CONF_MAX_KERNELS 4096
/* A kernel name (gpubpf/programs MaxKernelNameBytes) and a line of module.conf. */
#define GX_CONF_MAX_KERNEL_NAME GPUEXT_DEVRT_CONF_MAX_KERNEL_NAME
#define GX_CONF_MAX_LINE 8192
#define GX_CONF_MAX_HOST_WRITES GPUEXT_DEVRT_CONF_MAX_HOST_WRITES
#define GX_HOSTW_LAUNCH_TIME GPUEXT_DEVRT_HOSTW_LAUNCH_TIME
#define GX_HOSTW_CLOCK_OFFSET GPUEXT_DEVRT_HOSTW_CLOCK_OFFSET

struct gx_probe_map {
	char name[64];    /* the map's name (the .maps file names it) */
	char symbol[128]; /* __gpuext_map_<name> */
	uint64_t bytes;   /* the whole symbol: descriptor + data */
};

struct gx_probe_hostw {
	int value;        /* GX_HOSTW_* */
	char symbol[128]; /* a map's symbol */
	uint64_t offset;  /* of the u64 in the symbol */
};

struct gx_probe_conf {
	struct gx_ptx_opts opts; /* opts.kernels points into kernel_names */
	int launch_time;
	int inline_form; /* "inline 1": the bundle has inline_entry.ptx and inline_exit.ptx */
	char **kernel_names;
	struct gx_probe_map *maps;
	size_t nmaps;
	struct gx_probe_hostw hostw[GX_CONF_MAX_HOST_WRITES];
	size_t nhostw;
};

/* 0 on success; -1 with err filled (conf left empty). */
int gx_probe_conf_parse(const char *text, size_t len, struct gx_probe_conf *c, char *err, size_t errlen);
void gx_probe_conf_free(struct gx_probe_conf *c);

/* Labels and names the splice introduces (documented; the fragment must not use them). */
#define GX_PTX_EXIT_LABEL "$__gpuext_exit"
#define GX_PTX_PARAM "__gpuext_kid"
#define GX_PTX_REG "%__gpuext_kid"
#define GX_PTX_FUNC_ENTRY "__gpuext_probe_entry"
#define GX_PTX_FUNC_EXIT "__gpuext_probe_exit"
#define GX_PTX_GUARD_PRED "%__gpuext_g"
#define GX_PTX_GUARD_TMP "%__gpuext_t"
#define GX_PTX_SKIP_ENTRY "$__gpuext_skip_entry"
#define GX_PTX_SKIP_EXIT "$__gpuext_skip_exit"
#define GX_PTX_SKIP_ENTRY_AT_EXIT "$__gpuext_skip_entry_x" /* the entry block's guard, run at the exit */

#endif /* GPUEXT_PTXPATCH_H */
