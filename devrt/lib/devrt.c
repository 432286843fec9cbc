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

/* The value after "key": in a small JSON object, or NULL. Tolerant: no full parser. */
static const char *gx_json_value(const char *json, const char *key)
{
	size_t klen = strlen(key);
	const char *p = json;

	while ((p = strstr(p, key)) != NULL) {
		const char *q = p + klen;

		p = q;
		if (q - klen == json || q[-klen - 1] != '"' || *q != '"')
			continue;
		q++;
		while (*q == ' ' || *q == '\t' || *q == '\n' || *q == '\r')
			q++;
		if (*q != ':')
			continue;
		q++;
		while (*q == ' ' || *q == '\t' || *q == '\n' || *q == '\r')
			q++;
		return q;
	}
	return NULL;
}

static uint64_t gx_json_u64(const char *json, const char *key, uint64_t dflt)
{
	const char *v = gx_json_value(json, key);
	char *end;
	unsigned long long n;

	if (!v || *v < '0' || *v > '9')
		return dflt;
	errno = 0;
	n = strtoull(v, &end, 10);
	return errno || end == v ? dflt : (uint64_t)n;
}

static int gx_json_str_is(const char *json, const char *key, const char *want)
{
	const char *v = gx_json_value(json, key);
	size_t n = strlen(want);

	return v && *v == '"' && strncmp(v + 1, want, n) == 0 && v[n + 1] == '"';
}

/* The config file's identity: the host replaces it by rename, so a new inode or mtime means new settings. */
static struct {
	dev_t dev;
	ino_t ino;
	struct timespec mtime;
} gx_cfg_seen;
static _Atomic uint64_t gx_cfg_next_check_ns;
static pthread_mutex_t gx_cfg_mu = PTHREAD_MUTEX_INITIALIZER; /* process-private */

/* Reads the config into buf; 0 on success. Records which file it read. */
static int gx_config_text(char *buf, size_t size)
{
	ssize_t n = 0, r;
	struct stat st;
	int fd;

	fd = open(gx_cfg.config_path, O_RDONLY | O_CLOEXEC);
	if (fd < 0) {
		GX_DEBUG("config %s: %s (no quota, standard priority)", gx_cfg.config_path, strerror(errno));
		return -1;
	}
	if (fstat(fd, &st) == 0) {
		gx_cfg_seen.dev = st.st_dev;
		gx_cfg_seen.ino = st.st_ino;
		gx_cfg_seen.mtime = st.st_mtim;
	}
	while (n < (ssize_t)size - 1 && (r = read(fd, buf + n, size - 1 - (size_t)n)) > 0)
		n += r;
	close(fd);
	buf[n] = 0;
	return 0;
}

uint64_t gx_quota(void)
{
	uint64_t now, next = atomic_load_explicit(&gx_cfg_next_check_ns, memory_order_relaxed);
	struct stat st;
	char buf[16384];

	if (!gx_cfg.config_path || !*gx_cfg.config_path)
		return atomic_load(&gx_cfg.quota_bytes);
	now = gx_now_ns();
	if (now < next || pthread_mutex_trylock(&gx_cfg_mu) != 0)
		return atomic_load(&gx_cfg.quota_bytes);
	atomic_store_explicit(&gx_cfg_next_check_ns, now + 1000000000ull, memory_order_relaxed);
	if (stat(gx_cfg.config_path, &st) == 0 &&
	    (st.st_ino != gx_cfg_seen.ino || st.st_dev != gx_cfg_seen.dev ||
	     st.st_mtim.tv_sec != gx_cfg_seen.mtime.tv_sec || st.st_mtim.tv_nsec != gx_cfg_seen.mtime.tv_nsec) &&
	    gx_config_text(buf, sizeof(buf)) == 0) {
		uint64_t q = gx_json_u64(buf, "quotaBytes", 0);
		struct gpuext_devrt_usage *u = gx_acct_usage();

		if (q != atomic_load(&gx_cfg.quota_bytes))
			GX_DEBUG("config changed: quota %llu -> %llu", (unsigned long long)atomic_load(&gx_cfg.quota_bytes),
				 (unsigned long long)q);
		atomic_store(&gx_cfg.quota_bytes, q);
		if (u)
			atomic_store(&u->hdr.quota_bytes, q);
	}
	pthread_mutex_unlock(&gx_cfg_mu);
	return atomic_load(&gx_cfg.quota_bytes);
}

static void gx_read_config(void)
{
	char buf[16384];

	if (!gx_cfg.config_path || !*gx_cfg.config_path || gx_config_text(buf, sizeof(buf)) != 0)
		return;
	atomic_store_explicit(&gx_cfg_next_check_ns, gx_now_ns() + 1000000000ull, memory_order_relaxed);
	gx_cfg.tenant_id = gx_json_u64(buf, "tenantId", gx_cfg.tenant_id);
	atomic_store(&gx_cfg.quota_bytes, gx_json_u64(buf, "quotaBytes", 0));
	if (gx_json_str_is(buf, "priorityClass", "latency-critical"))
		gx_cfg.priority_class = GPUEXT_DEVRT_CLASS_LATENCY_CRITICAL;
	else if (gx_json_str_is(buf, "priorityClass", "best-effort"))
		gx_cfg.priority_class = GPUEXT_DEVRT_CLASS_BEST_EFFORT;
	else
		gx_cfg.priority_class = GPUEXT_DEVRT_CLASS_STANDARD;
	/* The active window; configs from before it existed give the timeslice. */
	gx_cfg.lc_window_ns = gx_json_u64(buf, "activeWindowUs", gx_json_u64(buf, "timesliceUs", 0)) * 1000ull;
	if (!gx_cfg.lc_window_ns)
		gx_cfg.lc_window_ns = 2000000ull;
	gx_cfg.sm_percent = (uint32_t)gx_json_u64(buf, "smPercent", 0);
	if (gx_cfg.sm_percent > 100)
		gx_cfg.sm_percent = 0;
}

static void gx_settings_from_env(void)
{
	const char *s;

	s = getenv("GPUEXT_DEVRT_DEBUG");
	gx_cfg.debug = s && *s && strcmp(s, "0") != 0;
	s = getenv("GPUEXT_TENANT_ID");
	gx_cfg.tenant_id = s ? strtoull(s, NULL, 10) : 0;
	gx_cfg.config_path = getenv("GPUEXT_TENANT_CONFIG");
	gx_cfg.acct_dir = getenv("GPUEXT_TENANT_ACCT");
	gx_cfg.board_path = getenv("GPUEXT_BOARD");
	gx_cfg.max_delay_ns = 50000000ull;
	gx_cfg.lc_window_ns = 2000000ull;
}

static pthread_once_t gx_once = PTHREAD_ONCE_INIT;

static void gx_runtime_init_once(void)
{
	if (!gx_cfg.enabled)
		return;
	gx_read_config();
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
	const char *trace = getenv("GPUEXT_DEVRT_TRACE");
	const char *tenant = getenv("GPUEXT_TENANT_ID");
	char line[512];
	int fd, n;

	if (!trace || !*trace)
		return;
	fd = open(trace, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
	if (fd < 0)
		return;
	n = snprintf(line, sizeof(line), "gpuext-devrt pid=%d tenant=%s config=%s\n", (int)getpid(),
		     tenant ? tenant : "", gx_cfg.config_path ? gx_cfg.config_path : "");
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
