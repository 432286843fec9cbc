/*
 * devrt.c - core of the device runtime library: settings from the injection
 * contract (docs/devrt.md), the hook table generated from hooks.def, the
 * resolution of real entry points from libcuda.so.1 / libnvidia-ml.so.1 by
 * soname, and the two lookup interposers that route applications to our
 * wrappers: dlsym (cudart's dlsym(handle, "cuGetProcAddress_v2")) and
 * cuGetProcAddress / cuGetProcAddress_v2 (per-variant wrappers).
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <link.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/auxv.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "devrt.h"
#include "gpuext_devrt_shm.h"
#include "gpuext_devrt_tenant.h"

struct gx_settings gx_cfg = {.enabled = 1};

const struct gx_hook_info gx_hooks[GX_NHOOKS] = {
#define HOOK(sym, lib, base, vmin, vmax, stream, ret, params, args) \
	[GX_H_##sym] = {#sym, lib, base, vmin, vmax, stream, (void *)sym},
#include "hooks.def"
};

/* One original pointer per variant. */
static _Atomic(void *) gx_orig[GX_NHOOKS];
static _Atomic(void *) gx_libs[GX_NLIBS];
static const char *const gx_lib_names[GX_NLIBS] = {"libcuda.so.1", "libnvidia-ml.so.1"};

typedef void *(*gx_dlsym_fn)(void *, const char *);
static _Atomic(gx_dlsym_fn) gx_next_dlsym;

void gx_log(const char *fmt, ...)
{
	char line[512];
	int n = snprintf(line, sizeof(line), "gpuext-devrt[%d]: ", (int)getpid());
	va_list ap;

	va_start(ap, fmt);
	n += vsnprintf(line + n, sizeof(line) - (size_t)n - 1, fmt, ap);
	va_end(ap);
	if (n > (int)sizeof(line) - 2)
		n = (int)sizeof(line) - 2;
	line[n++] = '\n';
	(void)!write(2, line, (size_t)n);
}

uint64_t gx_now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* The real dlsym, never ours: glibc >= 2.34 first, then the x86-64 base version. */
static gx_dlsym_fn gx_dlsym_real(void)
{
	gx_dlsym_fn f = atomic_load_explicit(&gx_next_dlsym, memory_order_acquire);

	if (f)
		return f;
	f = (gx_dlsym_fn)dlvsym(RTLD_NEXT, "dlsym", "GLIBC_2.34");
	if (!f)
		f = (gx_dlsym_fn)dlvsym(RTLD_NEXT, "dlsym", "GLIBC_2.2.5");
	atomic_store_explicit(&gx_next_dlsym, f, memory_order_release);
	return f;
}

/* The library's handle: already loaded if possible, otherwise loaded now (by soname, never a path). */
static void *gx_lib(enum gx_lib lib, int load)
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

static void *gx_lookup_in(void *handle, enum gx_hook id)
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
static void *gx_adopt(enum gx_hook id, void *real)
{
	void *expected = NULL;

	if (!real || real == gx_hooks[id].wrapper)
		return real;
	if (!atomic_compare_exchange_strong(&gx_orig[id], &expected, real) && expected != real)
		GX_DEBUG("lookup %s: keeping first original %p (also offered %p)", gx_hooks[id].sym, expected, real);
	return gx_hooks[id].wrapper;
}

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

/* ---- settings ---- */

/*
 * The tenant's settings: $GPUEXT_TENANT_DIR/settings.bin, one struct
 * gpuext_devrt_tenant written by the host (devrt/tenantcfg). The file's
 * identity: the host replaces it by rename, so a new inode or mtime means
 * new settings.
 */
static char gx_settings_file[4096];
static struct {
	dev_t dev;
	ino_t ino;
	struct timespec mtime;
} gx_cfg_seen;
static _Atomic uint64_t gx_cfg_next_check_ns;
static pthread_mutex_t gx_cfg_mu = PTHREAD_MUTEX_INITIALIZER; /* process-private */

/* Nonzero, with why, when t is not a record to take (the checks gpuext_devrt_tenant.h lists). */
static int gx_settings_invalid(const struct gpuext_devrt_tenant *t, ssize_t n, char *why, size_t size)
{
	if (n != (ssize_t)GPUEXT_DEVRT_TENANT_SIZE)
		snprintf(why, size, "%zd bytes, want %u", n, GPUEXT_DEVRT_TENANT_SIZE);
	else if (t->magic != GPUEXT_DEVRT_TENANT_MAGIC)
		snprintf(why, size, "not a settings file (magic %#llx)", (unsigned long long)t->magic);
	else if (t->version != GPUEXT_DEVRT_TENANT_VERSION)
		snprintf(why, size, "version %u, want %u", t->version, GPUEXT_DEVRT_TENANT_VERSION);
	else if (t->size != GPUEXT_DEVRT_TENANT_SIZE)
		snprintf(why, size, "size field %u, want %u", t->size, GPUEXT_DEVRT_TENANT_SIZE);
	else if (t->priority_class > GPUEXT_DEVRT_CLASS_MAX)
		snprintf(why, size, "priority class %u", t->priority_class);
	else if (t->sm_percent > 100)
		snprintf(why, size, "smPercent %u above 100", t->sm_percent);
	else if (!t->active_window_ns)
		snprintf(why, size, "active window 0");
	else
		return 0;
	return 1;
}

/* Reads the settings file into *t; 0 when it is one to take. Records which file it read. */
static int gx_settings_read(struct gpuext_devrt_tenant *t)
{
	unsigned char buf[GPUEXT_DEVRT_TENANT_SIZE + 1]; /* one more: a longer file is not ours either */
	ssize_t n = 0, r;
	struct stat st;
	char why[96];
	int fd;

	fd = open(gx_cfg.settings_path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
	if (fd < 0) {
		GX_DEBUG("settings %s: %s (no quota, standard priority)", gx_cfg.settings_path, strerror(errno));
		return -1;
	}
	if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
		gx_log("settings %s: not a regular file: ignored (no quota, standard priority)", gx_cfg.settings_path);
		close(fd);
		return -1;
	}
	gx_cfg_seen.dev = st.st_dev;
	gx_cfg_seen.ino = st.st_ino;
	gx_cfg_seen.mtime = st.st_mtim;
	while (n < (ssize_t)sizeof(buf)) {
		r = read(fd, buf + n, sizeof(buf) - (size_t)n);
		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0)
			break;
		n += r;
	}
	close(fd);
	memset(t, 0, sizeof(*t));
	memcpy(t, buf, n < (ssize_t)sizeof(*t) ? (size_t)n : sizeof(*t));
	if (gx_settings_invalid(t, n, why, sizeof(why))) {
		/* always logged: a file the host wrote and the interposer does not take changes behaviour */
		gx_log("settings %s: %s: ignored (no quota, standard priority)", gx_cfg.settings_path, why);
		return -1;
	}
	return 0;
}

uint64_t gx_quota(void)
{
	uint64_t now, next = atomic_load_explicit(&gx_cfg_next_check_ns, memory_order_relaxed);
	struct gpuext_devrt_tenant t;
	struct stat st;

	if (!gx_cfg.settings_path)
		return atomic_load(&gx_cfg.quota_bytes);
	now = gx_now_ns();
	if (now < next || pthread_mutex_trylock(&gx_cfg_mu) != 0)
		return atomic_load(&gx_cfg.quota_bytes);
	atomic_store_explicit(&gx_cfg_next_check_ns, now + 1000000000ull, memory_order_relaxed);
	if (stat(gx_cfg.settings_path, &st) == 0 &&
	    (st.st_ino != gx_cfg_seen.ino || st.st_dev != gx_cfg_seen.dev ||
	     st.st_mtim.tv_sec != gx_cfg_seen.mtime.tv_sec || st.st_mtim.tv_nsec != gx_cfg_seen.mtime.tv_nsec) &&
	    gx_settings_read(&t) == 0) {
		struct gpuext_devrt_usage *u = gx_acct_usage();

		if (t.quota_bytes != atomic_load(&gx_cfg.quota_bytes))
			GX_DEBUG("settings changed: quota %llu -> %llu",
				 (unsigned long long)atomic_load(&gx_cfg.quota_bytes), (unsigned long long)t.quota_bytes);
		atomic_store(&gx_cfg.quota_bytes, t.quota_bytes);
		if (u)
			atomic_store(&u->hdr.quota_bytes, t.quota_bytes);
	}
	pthread_mutex_unlock(&gx_cfg_mu);
	return atomic_load(&gx_cfg.quota_bytes);
}

/* The first read: every setting, taken as the host wrote it (the host resolved the defaults). */
static void gx_settings_load(void)
{
	struct gpuext_devrt_tenant t;

	if (!gx_cfg.settings_path || gx_settings_read(&t) != 0)
		return;
	atomic_store_explicit(&gx_cfg_next_check_ns, gx_now_ns() + 1000000000ull, memory_order_relaxed);
	gx_cfg.tenant_id = t.tenant_id;
	atomic_store(&gx_cfg.quota_bytes, t.quota_bytes);
	gx_cfg.priority_class = t.priority_class;
	gx_cfg.lc_window_ns = t.active_window_ns;
	gx_cfg.sm_percent = t.sm_percent;
}

static void gx_settings_from_env(void)
{
	const char *s;

	s = getenv(GPUEXT_ENV_DEVRT_DEBUG);
	gx_cfg.debug = s && *s && strcmp(s, "0") != 0;
	s = getenv(GPUEXT_ENV_TENANT_ID);
	gx_cfg.tenant_id = s ? strtoull(s, NULL, 10) : 0;
	s = getenv(GPUEXT_ENV_TENANT_DIR);
	if (s && *s &&
	    snprintf(gx_settings_file, sizeof(gx_settings_file), "%s/%s", s, GPUEXT_DEVRT_TENANT_FILE) <
		    (int)sizeof(gx_settings_file))
		gx_cfg.settings_path = gx_settings_file;
	gx_cfg.acct_dir = getenv(GPUEXT_ENV_TENANT_ACCT);
	gx_cfg.board_path = getenv(GPUEXT_ENV_BOARD);
	gx_cfg.max_delay_ns = 50000000ull;
	gx_cfg.lc_window_ns = GPUEXT_DEVRT_DEFAULT_WINDOW_NS;
}

static pthread_once_t gx_once = PTHREAD_ONCE_INIT;

static void gx_runtime_init_once(void)
{
	if (!gx_cfg.enabled)
		return;
	gx_settings_load();
	gx_acct_open();
	gx_priority_open();
	GX_DEBUG("tenant=%llu quota=%llu class=%u window_ns=%llu acct=%s board=%s",
		 (unsigned long long)gx_cfg.tenant_id, (unsigned long long)atomic_load(&gx_cfg.quota_bytes),
		 gx_cfg.priority_class, (unsigned long long)gx_cfg.lc_window_ns,
		 gx_cfg.acct_dir ? gx_cfg.acct_dir : "(process-local)", gx_cfg.board_path ? gx_cfg.board_path : "-");
}

void gx_runtime_init(void)
{
	pthread_once(&gx_once, gx_runtime_init_once);
}

static void gx_trace_line(void)
{
	const char *trace = getenv(GPUEXT_ENV_DEVRT_TRACE);
	const char *tenant = getenv(GPUEXT_ENV_TENANT_ID);
	char line[512];
	int fd, n;

	if (!trace || !*trace)
		return;
	fd = open(trace, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
	if (fd < 0)
		return;
	n = snprintf(line, sizeof(line), "gpuext-devrt pid=%d tenant=%s settings=%s\n", (int)getpid(),
		     tenant ? tenant : "", gx_cfg.settings_path ? gx_cfg.settings_path : "");
	if (n > 0)
		(void)!write(fd, line, (size_t)n < sizeof(line) ? (size_t)n : sizeof(line) - 1);
	close(fd);
}

static void gx_child_after_fork(void)
{
	gx_acct_after_fork();
	gx_probe_after_fork();
}

/*
 * The table must hold our own functions, not whatever an earlier preload
 * exports under the same name: the library is linked -Bsymbolic-functions.
 */
static int gx_table_is_ours(void)
{
	Dl_info di;
	struct link_map *self = NULL, *owner;

	if (!dladdr1((void *)gx_table_is_ours, &di, (void **)&self, RTLD_DL_LINKMAP) || !self)
		return 0;
	for (int i = 0; i < GX_NHOOKS; i++) {
		owner = NULL;
		if (!dladdr1(gx_hooks[i].wrapper, &di, (void **)&owner, RTLD_DL_LINKMAP) || owner != self)
			return 0;
	}
	return 1;
}

/* Cheap: every process of the container runs this; the real work waits for the first CUDA call. */
__attribute__((constructor)) static void gx_constructor(void)
{
	gx_settings_from_env();
	gx_trace_line();
	if (!gx_table_is_ours()) {
		gx_cfg.enabled = 0;
		gx_log("hook table resolves to another object (built without -Bsymbolic-functions?): interposer disabled");
		return;
	}
	if (getauxval(AT_SECURE)) {
		gx_cfg.enabled = 0;
		GX_DEBUG("secure-execution (setuid/setgid/capabilities) process: interposer disabled");
		return;
	}
	pthread_atfork(NULL, NULL, gx_child_after_fork);
}
