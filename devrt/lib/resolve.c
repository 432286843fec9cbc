/*
 * resolve.c - the real entry points behind the wrappers (docs/devrt.md):
 * the hook table generated from hooks.def, libcuda.so.1 and
 * libnvidia-ml.so.1 found by soname, the real dlsym, each variant's original
 * pointer (looked up, or adopted from a lookup the application made).
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdatomic.h>

#include "devrt.h"

const struct gx_hook_info gx_hooks[GX_NHOOKS] = {
#define HOOK(sym, lib, base, vmin, vmax, stream, ret, params, args) \
	[GX_H_##sym] = {#sym, lib, base, vmin, vmax, stream, (void *)sym},
#include "hooks.def"
};

/* One original pointer per variant. */
static _Atomic(void *) gx_orig[GX_NHOOKS];
static _Atomic(void *) gx_libs[GX_NLIBS];
static const char *const gx_lib_names[GX_NLIBS] = {"libcuda.so.1", "libnvidia-ml.so.1"};

static _Atomic(gx_dlsym_fn) gx_next_dlsym;

/*
 * The version of dlsym in a glibc older than 2.34, where libdl.so.2 defines
 * it under the architecture's first glibc version. glibc 2.34 moved it into
 * libc as dlsym@GLIBC_2.34 on every architecture.
 */
#if defined(__x86_64__)
#define GX_DLSYM_OLD_VERSION "GLIBC_2.2.5"
#elif defined(__aarch64__)
#define GX_DLSYM_OLD_VERSION "GLIBC_2.17"
#endif

/*
 * The real dlsym, never ours. This library exports dlsym and is linked
 * -Bsymbolic-functions, so a plain dlsym(RTLD_NEXT, "dlsym") from here would
 * call our own (and recurse): the real one is looked up by version with
 * dlvsym, GLIBC_2.34 first, then GX_DLSYM_OLD_VERSION where the architecture
 * has one. On another architecture with a glibc older than 2.34 there is no
 * real dlsym: every dlsym of the process fails, and the first says so.
 */
gx_dlsym_fn gx_dlsym_real(void)
{
	static _Atomic int logged;
	gx_dlsym_fn f = atomic_load_explicit(&gx_next_dlsym, memory_order_acquire);

	if (f)
		return f;
	f = (gx_dlsym_fn)dlvsym(RTLD_NEXT, "dlsym", "GLIBC_2.34");
#ifdef GX_DLSYM_OLD_VERSION
	if (!f)
		f = (gx_dlsym_fn)dlvsym(RTLD_NEXT, "dlsym", GX_DLSYM_OLD_VERSION);
#endif
	if (!f && !atomic_exchange(&logged, 1))
		gx_log("no real dlsym: neither dlsym@GLIBC_2.34 nor this architecture's older version found");
	atomic_store_explicit(&gx_next_dlsym, f, memory_order_release);
	return f;
}

/* The library's handle: already loaded if possible, otherwise loaded now (by soname, never a path). */
void *gx_lib(enum gx_lib lib, int load)
{
	void *h = atomic_load_explicit(&gx_libs[lib], memory_order_acquire);

	if (h)
		return h;
	h = dlopen(gx_lib_names[lib], RTLD_NOW | RTLD_NOLOAD);
	if (!h && load)
		h = dlopen(gx_lib_names[lib], RTLD_NOW);
	if (h)
		atomic_store_explicit(&gx_libs[lib], h, memory_order_release);
	return h;
}

void *gx_lookup_in(void *handle, enum gx_hook id)
{
	gx_dlsym_fn real = gx_dlsym_real();
	void *p;

	if (!real || !handle)
		return NULL;
	p = real(handle, gx_hooks[id].sym);
	return p == gx_hooks[id].wrapper ? NULL : p;
}

void *gx_real(enum gx_hook id)
{
	void *p = atomic_load_explicit(&gx_orig[id], memory_order_acquire);
	void *expected = NULL;

	if (p)
		return p;
	p = gx_lookup_in(gx_lib(gx_hooks[id].lib, 1), id);
	if (!p)
		return NULL;
	if (!atomic_compare_exchange_strong(&gx_orig[id], &expected, p))
		return expected;
	return p;
}

void *gx_driver_sym(const char *name)
{
	gx_dlsym_fn real = gx_dlsym_real();
	void *lib = gx_lib(GX_LIB_CUDA, 0);

	return real && lib ? real(lib, name) : NULL;
}

/* Record the driver's pointer for a variant (first one wins); returns our wrapper. */
void *gx_adopt(enum gx_hook id, void *real)
{
	void *expected = NULL;

	if (!real || real == gx_hooks[id].wrapper)
		return real;
	if (!atomic_compare_exchange_strong(&gx_orig[id], &expected, real) && expected != real)
		GX_DEBUG("lookup %s: keeping first original %p (also offered %p)", gx_hooks[id].sym, expected, real);
	return gx_hooks[id].wrapper;
}
