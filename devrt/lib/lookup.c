/*
 * lookup.c - the two lookups the interposer answers, so that applications
 * reach the wrappers (docs/devrt.md): dlsym (cudart's dlsym(handle,
 * "cuGetProcAddress_v2"), RTLD_NEXT resolved relative to the caller) and
 * cuGetProcAddress / cuGetProcAddress_v2 (the variant a (name, version,
 * flags) lookup stands for).
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <link.h>
#include <string.h>

#include "devrt.h"

static int gx_hook_by_symbol(const char *name)
{
	if (!name || (name[0] != 'c' && name[0] != 'n') || (name[1] != 'u' && name[1] != 'v'))
		return -1;
	for (int i = 0; i < GX_NHOOKS; i++)
		if (strcmp(gx_hooks[i].sym, name) == 0)
			return i;
	return -1;
}

/* The variant cuGetProcAddress(symbol, cudaVersion, flags) stands for, or -1. */
static int gx_hook_for_lookup(const char *symbol, int version, cuuint64_t flags)
{
	int ptsz = (flags & CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM) != 0;

	if (!symbol)
		return -1;
	for (int i = 0; i < GX_NHOOKS; i++) {
		const struct gx_hook_info *h = &gx_hooks[i];

		if (!h->base || strcmp(h->base, symbol) != 0 || version < h->vmin || version >= h->vmax)
			continue;
		if (h->stream == GX_STREAM_ANY || (h->stream == GX_STREAM_PTSZ) == ptsz)
			return i;
	}
	return -1;
}

/*
 * RTLD_NEXT relative to our caller, not to us: the first object after the
 * caller's in load order that defines the name.
 */
static void *gx_dlsym_next(gx_dlsym_fn real, const char *name, const void *caller)
{
	Dl_info di;
	struct link_map *self = NULL, *m;

	if (!dladdr1(caller, &di, (void **)&self, RTLD_DL_LINKMAP) || !self)
		return real(RTLD_NEXT, name);
	for (m = self->l_next; m; m = m->l_next) {
		struct link_map *owner = NULL;
		void *h, *p;

		/* a proper handle (the vdso and the main program have none by name) */
		if (!m->l_name || !*m->l_name || !(h = dlopen(m->l_name, RTLD_LAZY | RTLD_NOLOAD)))
			continue;
		p = real(h, name);
		dlclose(h);
		if (p && dladdr1(p, &di, (void **)&owner, RTLD_DL_LINKMAP) && owner == m)
			return p;
	}
	return NULL;
}

__attribute__((visibility("default"))) void *dlsym(void *handle, const char *name)
{
	const void *caller = __builtin_return_address(0);
	gx_dlsym_fn real = gx_dlsym_real();
	int id;
	void *p, *lib;

	if (!real)
		return NULL;
	id = gx_hook_by_symbol(name);
	if (id < 0 || !gx_cfg.enabled)
		return handle == RTLD_NEXT ? gx_dlsym_next(real, name, caller) : real(handle, name);
	if (handle == RTLD_DEFAULT || handle == RTLD_NEXT) {
		/* only while the real library is in the process */
		lib = gx_lib(gx_hooks[id].lib, 0);
		p = gx_lookup_in(lib, (enum gx_hook)id);
		if (!p)
			return NULL;
		return gx_adopt((enum gx_hook)id, p);
	}
	p = real(handle, name);
	if (!p || p == gx_hooks[id].wrapper)
		return p;
	lib = gx_lib(gx_hooks[id].lib, 0);
	if (!lib || gx_lookup_in(lib, (enum gx_hook)id) != p)
		return p; /* someone else's function of that name: not ours to wrap */
	GX_DEBUG("dlsym %s: wrapped", name);
	return gx_adopt((enum gx_hook)id, p);
}

static CUresult gx_after_lookup(CUresult r, const char *symbol, void **pfn, int version, cuuint64_t flags)
{
	int id;

	if (r != CUDA_SUCCESS || !pfn || !*pfn || !gx_cfg.enabled)
		return r;
	id = gx_hook_for_lookup(symbol, version, flags);
	if (id < 0) {
		GX_DEBUG("lookup %s version=%d flags=%llu: not wrapped", symbol, version, (unsigned long long)flags);
		return r;
	}
	*pfn = gx_adopt((enum gx_hook)id, *pfn);
	GX_DEBUG("lookup %s version=%d flags=%llu -> %s", symbol, version, (unsigned long long)flags,
		 gx_hooks[id].sym);
	return r;
}

CUresult cuGetProcAddress(const char *symbol, void **pfn, int cudaVersion, cuuint64_t flags)
{
	gx_pfn_cuGetProcAddress real = gx_orig_cuGetProcAddress();

	if (!real)
		return CUDA_ERROR_NOT_INITIALIZED;
	return gx_after_lookup(real(symbol, pfn, cudaVersion, flags), symbol, pfn, cudaVersion, flags);
}

CUresult cuGetProcAddress_v2(const char *symbol, void **pfn, int cudaVersion, cuuint64_t flags,
			     CUdriverProcAddressQueryResult *symbolStatus)
{
	gx_pfn_cuGetProcAddress_v2 real = gx_orig_cuGetProcAddress_v2();

	if (!real)
		return CUDA_ERROR_NOT_INITIALIZED;
	return gx_after_lookup(real(symbol, pfn, cudaVersion, flags, symbolStatus), symbol, pfn, cudaVersion,
			       flags);
}
