/*
 * probe.c - device probes in the interposer (docs/device-probes.md,
 * "Device probes in the interposer").
 *
 * When the tenant directory holds probes/module.ptx and probes/module.conf
 * (written by the host), every image the application loads is inspected
 * (fatbin.c); its PTX is patched (ptxpatch.c) and loaded instead of the
 * image, with the caller's options. Anything that goes wrong - no PTX,
 * compressed PTX that cannot be unpacked, target too low, JIT failure -
 * loads the caller's image unchanged; the reason goes to the status file
 * $GPUEXT_TENANT_ACCT/probes/<pid>.status, one line per image (<pid>: the
 * process's key, see gx_key).
 *
 * After a patched load, in a context: the map symbols and
 * __gpuext_tenant_id are looked up (cuLibraryGetGlobal /
 * cuModuleGetGlobal_v2) and the tenant id written. A thread copies the maps
 * to $GPUEXT_TENANT_ACCT/probes/<pid>-<image>.maps every second (own
 * non-blocking stream, cuMemcpyDtoHAsync, so it never waits behind the
 * application's legacy stream), and an atexit handler, registered at the
 * first patched load (so it runs before cudart's teardown), copies them a
 * last time. Probes off: one failed open() at the first image load, nothing
 * else. All locks are process-private.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "devrt.h"
#include "fatbin.h"
#include "gpuext_devrt_maps.h"
#include "ptxpatch.h"

/* driver functions the probes call (not hooked): one list, typed pointers */
#define GX_DRIVER_CALLS(X)                                                                         \
	X(cuCtxGetCurrent, (CUcontext * pctx))                                                     \
	X(cuCtxSetCurrent, (CUcontext ctx))                                                        \
	X(cuCtxSynchronize, (void))                                                                \
	X(cuCtxGetDevice, (CUdevice * dev))                                                        \
	X(cuDeviceGet, (CUdevice * dev, int ordinal))                                              \
	X(cuDeviceGetAttribute, (int *value, int attrib, CUdevice dev))                            \
	X(cuStreamCreate, (CUstream * stream, unsigned int flags))                                 \
	X(cuStreamSynchronize, (CUstream stream))                                                  \
	X(cuStreamDestroy_v2, (CUstream stream))                                                   \
	X(cuDevicePrimaryCtxGetState, (CUdevice dev, unsigned int *flags, int *active))            \
	X(cuDevicePrimaryCtxRetain, (CUcontext * pctx, CUdevice dev))                              \
	X(cuDevicePrimaryCtxRelease_v2, (CUdevice dev))                                            \
	X(cuMemcpyDtoHAsync_v2, (void *dst, CUdeviceptr src, size_t bytes, CUstream stream))       \
	X(cuMemcpyHtoDAsync_v2, (CUdeviceptr dst, const void *src, size_t bytes, CUstream stream)) \
	X(cuLibraryGetGlobal, (CUdeviceptr * dptr, size_t *bytes, CUlibrary lib, const char *name)) \
	X(cuModuleGetGlobal_v2, (CUdeviceptr * dptr, size_t *bytes, CUmodule mod, const char *name)) \
	X(cuLibraryGetModule, (CUmodule * mod, CUlibrary lib))                                      \
	X(cuKernelGetLibrary, (CUlibrary * lib, CUkernel kernel))                                   \
	X(cuFuncGetModule, (CUmodule * mod, CUfunction f))                                          \
	X(cuStreamWriteValue64_v2, (CUstream stream, CUdeviceptr addr, cuuint64_t value, unsigned int flags)) \
	X(cuModuleLoadData, (CUmodule * mod, const void *image))                                   \
	X(cuModuleUnload, (CUmodule mod))                                                          \
	X(cuModuleGetFunction, (CUfunction * f, CUmodule mod, const char *name))                   \
	X(cuLaunchKernel, (CUfunction f, unsigned int gx, unsigned int gy, unsigned int gz, unsigned int bx, \
			   unsigned int by, unsigned int bz, unsigned int shm, CUstream stream, void **params,   \
			   void **extra))                                                                  \
	X(cuMemHostAlloc, (void **p, size_t bytes, unsigned int flags))                            \
	X(cuMemHostGetDevicePointer_v2, (CUdeviceptr * dptr, void *p, unsigned int flags))          \
	X(cuMemFreeHost, (void *p))                                                               \
	X(cuThreadExchangeStreamCaptureMode, (int *mode))                                          \
	X(cuStreamIsCapturing, (CUstream stream, int *status))

#define GX_DRV_TYPE(name, params) typedef CUresult (*gx_drv_##name) params;
GX_DRIVER_CALLS(GX_DRV_TYPE)
#undef GX_DRV_TYPE

static struct {
#define GX_DRV_FIELD(name, params) gx_drv_##name name;
	GX_DRIVER_CALLS(GX_DRV_FIELD)
#undef GX_DRV_FIELD
} gx_drv;

#define GX_SYM_TENANT "__gpuext_tenant_id"
#define GX_SYM_LAUNCH_NS "__gpuext_launch_ns"
#define GX_LAUNCH_CACHE 4096 /* direct-mapped by function handle: frameworks launch thousands of kernels */
#define GX_PROBE_MAX_IMAGES 1024
_Static_assert(GX_CONF_MAX_MAPS <= GPUEXT_DEVRT_MAPS_MAX_MAPS, "a .maps file holds every map of module.conf");

struct gx_pimage {
	int index;
	int is_library;
	void *handle;      /* CUlibrary or CUmodule */
	int bound;         /* symbols looked up in ctx */
	int gone;          /* its context ended (gx_ctx_ending): never bound again */
	int ending;        /* its primary context is being released or reset: no copy until we know */
	int lib_counted;   /* counted in gx_pr.libraries (a library's first binding) */
	char *ptx;         /* the patched text: kept for the process's life (the driver may load lazily from it) */
	CUcontext ctx;
	CUmodule ctx_module; /* a library's module in ctx (launch time: CUfunction -> image) */
	CUdeviceptr launch_ns; /* __gpuext_launch_ns in ctx, 0 if none */
	_Atomic int64_t clock_offset; /* %globaltimer - CLOCK_REALTIME in ctx (gx_clock_sync), added to launch times */
	int clock_synced;             /* 1: clock_offset measured; -1: tried and failed (the copy thread retries); 0: not yet */
	struct timespec clock_at;     /* when, CLOCK_MONOTONIC */
	CUstream stream;   /* non-blocking, ours */
	CUdeviceptr map_ptr[GX_CONF_MAX_MAPS];
	size_t map_bytes[GX_CONF_MAX_MAPS];
	unsigned char *host; /* staging for one copy of all maps */
	size_t host_size;
	uint64_t seq;
	/*
	 * A library is loaded once for every context: its kernels run, with
	 * their own maps, in each context they are launched in. The image's
	 * first binding is the entry gx_probe_load made (ctxn 0); each further
	 * context gets an entry of its own (ctxn 1, 2, ...), chained from the
	 * first, with its own maps file <pid>-<image>-<ctxn>.maps.
	 */
	int ctxn;
	struct gx_pimage *_Atomic next_ctx;
};

#define GX_PROBE_MAX_CTX 16 /* contexts a library image is bound in */
#define GX_CTX_ENDED ((CUcontext)(uintptr_t)1) /* first_ctx once the first context ended: matches none */

static struct {
	int on;
	struct gx_probe_conf conf;
	char *frag;
	size_t frag_len;
	char dir[PATH_MAX];  /* $GPUEXT_TENANT_ACCT/probes, "" if unusable */
	_Atomic int next_index;
	_Atomic int key;      /* names this process's files: its pid, or pid + n << 22 if taken (0: not yet) */
	_Atomic int pending;  /* patched images not yet bound to a context */
	_Atomic int launch_time; /* 1 while launch times are written */
	_Atomic int launch_time_failed; /* a write failed: launch times stay off for the process */
	_Atomic int libraries;   /* bound library images: a launch checks its context */
	_Atomic(CUcontext) first_ctx; /* the context the first image was bound in */
	_Atomic uint64_t launch_cache[GX_LAUNCH_CACHE]; /* f << 16 | (image slot + 1), 0xffff: none */
	int exit_registered, thread_started, stopping;
	/* the clock kernel's module, kept in the first context measured (others load and unload their own) */
	CUmodule clock_mod;
	CUcontext clock_mod_ctx;
	struct gx_pimage *images[GX_PROBE_MAX_IMAGES];
	int nimages;
} gx_pr;

static pthread_once_t gx_probe_once = PTHREAD_ONCE_INIT;
static pthread_mutex_t gx_probe_mu = PTHREAD_MUTEX_INITIALIZER; /* process-private: images, files, thread */

static char *gx_read_file_at(int dirfd, const char *name, size_t *len)
{
	int fd = openat(dirfd, name, O_RDONLY | O_CLOEXEC);
	struct stat st;
	char *buf;
	size_t n = 0;

	if (fd < 0)
		return NULL;
	if (fstat(fd, &st) != 0 || st.st_size < 0 || st.st_size > (64 << 20) || !(buf = malloc((size_t)st.st_size + 1))) {
		close(fd);
		return NULL;
	}
	while (n < (size_t)st.st_size) {
		ssize_t r = read(fd, buf + n, (size_t)st.st_size - n);

		if (r <= 0)
			break;
		n += (size_t)r;
	}
	close(fd);
	buf[n] = 0;
	*len = n;
	return buf;
}

/*
 * The number naming this process's files. Containers of a pod share the
 * directory but not a pid namespace (each has a pid 1), and a restarted
 * process may reuse a pid: the first free name among pid, pid + 1 << 22,
 * pid + 2 << 22, ... is claimed with O_EXCL (pids are below 1 << 22).
 */
static int gx_key(void)
{
	int key = atomic_load(&gx_pr.key), expected = 0, created = 0;
	char path[PATH_MAX + 32];

	if (key)
		return key;
	if (!gx_pr.dir[0])
		return (int)getpid();
	for (int n = 0; n < 256; n++) {
		int fd;

		key = (int)getpid() + (n << 22);
		snprintf(path, sizeof(path), "%s/%d.status", gx_pr.dir, key);
		fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
		if (fd < 0 && errno == EEXIST)
			continue;
		if (fd >= 0) {
			close(fd);
			created = 1;
		}
		break; /* claimed, or an error the writes will meet too */
	}
	if (!atomic_compare_exchange_strong(&gx_pr.key, &expected, key)) {
		if (created)
			unlink(path); /* another thread claimed one first: give ours back */
		return expected;
	}
	return key;
}

static void gx_status(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void gx_status(const char *fmt, ...)
{
	char path[PATH_MAX + 32], line[512];
	va_list ap;
	int fd, n;

	if (!gx_pr.dir[0])
		return;
	va_start(ap, fmt);
	n = vsnprintf(line, sizeof(line) - 1, fmt, ap);
	va_end(ap);
	if (n < 0)
		return;
	if (n > (int)sizeof(line) - 2)
		n = (int)sizeof(line) - 2;
	line[n++] = '\n';
	snprintf(path, sizeof(path), "%s/%d.status", gx_pr.dir, gx_key());
	fd = open(path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
	if (fd < 0)
		return;
	(void)!write(fd, line, (size_t)n);
	close(fd);
}

static void gx_probe_init_once(void)
{
	const char *tdir = getenv(GPUEXT_ENV_TENANT_DIR);
	char path[PATH_MAX], err[160];
	size_t clen = 0;
	char *ctext;
	int dirfd;

	if (!gx_cfg.enabled || !tdir || !*tdir)
		return;
	/*
	 * probes/ is a symlink the host swaps to a new bundle directory in one
	 * rename: resolve it once, so both files come from the same bundle.
	 */
	snprintf(path, sizeof(path), "%s/probes", tdir);
	dirfd = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (dirfd < 0)
		return; /* no probes for this tenant */
	ctext = gx_read_file_at(dirfd, "module.conf", &clen);
	if (!ctext) {
		close(dirfd);
		return;
	}
	if (gx_cfg.acct_dir && *gx_cfg.acct_dir) {
		snprintf(gx_pr.dir, sizeof(gx_pr.dir), "%s/probes", gx_cfg.acct_dir);
		/* shared by the tenant's processes, like the accounting dir itself */
		if (mkdir(gx_pr.dir, 0777) == 0)
			(void)chmod(gx_pr.dir, 01777);
		else if (errno != EEXIST)
			gx_pr.dir[0] = 0;
	}
	if (gx_probe_conf_parse(ctext, clen, &gx_pr.conf, err, sizeof(err)) != 0) {
		gx_log("device probes off: %s", err);
		gx_status("image=- state=off reason=%s", err);
		free(ctext);
		close(dirfd);
		return;
	}
	free(ctext);
	gx_pr.frag = gx_read_file_at(dirfd, "module.ptx", &gx_pr.frag_len);
	if (gx_pr.conf.inline_form) {
		/* the inline form (both files or neither); without it the dispatch calls are spliced */
		size_t le = 0, lx = 0;
		char *ie = gx_read_file_at(dirfd, "inline_entry.ptx", &le);
		char *ix = gx_read_file_at(dirfd, "inline_exit.ptx", &lx);

		if (ie && ix && le && lx) {
			gx_pr.conf.opts.inline_entry = ie;
			gx_pr.conf.opts.inline_entry_len = le;
			gx_pr.conf.opts.inline_exit = ix;
			gx_pr.conf.opts.inline_exit_len = lx;
		} else {
			gx_log("device probes: inline form unreadable, calling the dispatch functions");
			free(ie);
			free(ix);
		}
	}
	close(dirfd);
	if (!gx_pr.frag || !gx_pr.frag_len) {
		gx_log("device probes off: %s/module.ptx unreadable", path);
		gx_status("image=- state=off reason=module.ptx-unreadable");
		free((char *)gx_pr.conf.opts.inline_entry);
		free((char *)gx_pr.conf.opts.inline_exit);
		gx_probe_conf_free(&gx_pr.conf);
		return;
	}
#define GX_DRV_LOAD(name, params) gx_drv.name = (gx_drv_##name)gx_driver_sym(#name);
	GX_DRIVER_CALLS(GX_DRV_LOAD)
#undef GX_DRV_LOAD
	if (!gx_drv.cuStreamWriteValue64_v2) /* drivers that export only the unversioned name */
		gx_drv.cuStreamWriteValue64_v2 = (gx_drv_cuStreamWriteValue64_v2)gx_driver_sym("cuStreamWriteValue64");
	gx_pr.on = 1;
	GX_DEBUG("device probes on: %zu maps, %zu kernels listed, min ptx %d.%d, min target sm_%d, status in %s",
		 gx_pr.conf.nmaps, gx_pr.conf.opts.nkernels, gx_pr.conf.opts.min_ptx_major,
		 gx_pr.conf.opts.min_ptx_minor, gx_pr.conf.opts.min_target, gx_pr.dir[0] ? gx_pr.dir : "(nowhere)");
}

/* The current device's sm_XX (device 0's before any context is current), 0 if unknown. */
static int gx_device_arch(void)
{
	CUcontext ctx = NULL;
	CUdevice dev;
	int major = 0, minor = 0;

	if (!gx_drv.cuCtxGetCurrent || !gx_drv.cuDeviceGetAttribute)
		return 0;
	if (gx_drv.cuCtxGetCurrent(&ctx) != CUDA_SUCCESS || !ctx || !gx_drv.cuCtxGetDevice ||
	    gx_drv.cuCtxGetDevice(&dev) != CUDA_SUCCESS) {
		if (!gx_drv.cuDeviceGet || gx_drv.cuDeviceGet(&dev, 0) != CUDA_SUCCESS)
			return 0;
	}
	if (gx_drv.cuDeviceGetAttribute(&major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, dev) != CUDA_SUCCESS ||
	    gx_drv.cuDeviceGetAttribute(&minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, dev) != CUDA_SUCCESS)
		return 0;
	return major * 10 + minor;
}

static CUresult gx_get_global(struct gx_pimage *im, const char *name, CUdeviceptr *p, size_t *bytes)
{
	if (im->is_library)
		return gx_drv.cuLibraryGetGlobal ? gx_drv.cuLibraryGetGlobal(p, bytes, (CUlibrary)im->handle, name)
						 : CUDA_ERROR_NOT_FOUND;
	return gx_drv.cuModuleGetGlobal_v2 ? gx_drv.cuModuleGetGlobal_v2(p, bytes, (CUmodule)im->handle, name)
					   : CUDA_ERROR_NOT_FOUND;
}

/*
 * Stream capture: while an application captures a graph in GLOBAL mode (as
 * PyTorch does), a "potentially unsafe" call from any thread - a
 * synchronisation, a copy to pageable memory, a pinned allocation - fails
 * and invalidates the application's capture. The interposer's own calls
 * (binding, the clock kernel, copy-out) touch only its own stream and
 * memory, so they run in RELAXED mode: the copy thread for good, the
 * application's thread for the duration of the call.
 */
#define GX_CAPTURE_MODE_RELAXED 2

static int gx_capture_relax(void)
{
	int mode = GX_CAPTURE_MODE_RELAXED;

	if (!gx_drv.cuThreadExchangeStreamCaptureMode || gx_drv.cuThreadExchangeStreamCaptureMode(&mode) != CUDA_SUCCESS)
		return -1;
	return mode;
}

static void gx_capture_restore(int mode)
{
	if (mode >= 0 && gx_drv.cuThreadExchangeStreamCaptureMode)
		gx_drv.cuThreadExchangeStreamCaptureMode(&mode);
}

/*
 * The device's %globaltimer and the host's CLOCK_REALTIME are different
 * clocks: on the H200 the GPU's ran microseconds behind, more than a launch
 * takes, so launch latencies came out negative. gx_clock_sync measures the
 * offset the way NTP does, with a kernel of one thread on our own stream:
 * per round the host stamps h0, posts the round number in mapped pinned
 * memory, the kernel (polling it) answers with %globaltimer, and the host
 * stamps h1 when the answer lands; offset = g - (h0 + h1) / 2, within
 * +-(h1 - h0) / 2. The round with the shortest h1 - h0 wins (the first one
 * also waits for the kernel to start). Launch times are then written in
 * the device's clock: host time + offset.
 */
#define GX_CLOCK_ROUNDS 32
#define GX_CLOCK_START_NS 200000000ll /* the kernel has this long to start */
#define GX_CLOCK_ROUND_NS 20000000ll  /* then each answer this long (a late one is skipped) */
#define GX_CLOCK_MAX_MISSES 4         /* late answers before it stops */
#define GX_CLOCK_RESYNC_S 30          /* the copy thread measures again this often */

static const char gx_clock_ptx[] =
	".version 6.0\n"
	".target sm_70\n"
	".address_size 64\n"
	".visible .entry __gpuext_clock_sync(.param .u64 flag, .param .u64 out, .param .u32 n)\n"
	"{\n"
	"\t.reg .pred %p<3>;\n"
	"\t.reg .b32 %r<3>;\n"
	"\t.reg .b64 %rd<8>;\n"
	"\tld.param.u64 %rd1, [flag];\n"
	"\tld.param.u64 %rd2, [out];\n"
	"\tld.param.u32 %r1, [n];\n"
	"\tmov.u32 %r2, 0;\n"
	"$Lround:\n"
	"\tsetp.ge.u32 %p1, %r2, %r1;\n"
	"\t@%p1 bra $Ldone;\n"
	"\tadd.u32 %r2, %r2, 1;\n"
	"\tcvt.u64.u32 %rd3, %r2;\n"
	"$Lwait:\n"
	"\tld.volatile.global.u64 %rd4, [%rd1];\n"
	"\tsetp.lt.u64 %p2, %rd4, %rd3;\n"
	"\t@%p2 bra $Lwait;\n"
	"\tmov.u64 %rd5, %globaltimer;\n"
	"\tmul.wide.u32 %rd6, %r2, 8;\n"
	"\tadd.u64 %rd7, %rd2, %rd6;\n"
	"\tst.volatile.global.u64 [%rd7+-8], %rd5;\n"
	"\tmembar.sys;\n"
	"\tbra $Lround;\n"
	"$Ldone:\n"
	"\tret;\n"
	"}\n";

static int64_t gx_realtime_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	return (int64_t)ts.tv_sec * 1000000000ll + ts.tv_nsec;
}

/*
 * Measures im->clock_offset in im's context (current), on im->stream.
 * gx_probe_mu held. Writes one status line. 0: measured.
 */
static int gx_clock_measure(struct gx_pimage *im, const char *why)
{
	CUmodule m = NULL;
	CUfunction fn = NULL;
	volatile uint64_t *flag;
	volatile uint64_t *out;
	void *host = NULL;
	CUdeviceptr dflag = 0;
	unsigned int n = GX_CLOCK_ROUNDS;
	int64_t best_rtt = -1, best_off = 0, prev = atomic_load(&im->clock_offset);
	int answered = 0, started = 0, misses = 0;
	CUresult r;
	const char *fail = NULL;

	if (!gx_drv.cuModuleLoadData || !gx_drv.cuModuleGetFunction || !gx_drv.cuLaunchKernel ||
	    !gx_drv.cuMemHostAlloc || !gx_drv.cuMemHostGetDevicePointer_v2 || !gx_drv.cuMemFreeHost ||
	    !gx_drv.cuStreamSynchronize || !im->stream) {
		gx_status("image=%d clock=unsynced reason=driver-calls-missing", im->index);
		return -1;
	}
	if (gx_pr.clock_mod && gx_pr.clock_mod_ctx == im->ctx) {
		m = gx_pr.clock_mod;
	} else if ((r = gx_drv.cuModuleLoadData(&m, gx_clock_ptx)) != CUDA_SUCCESS) {
		gx_status("image=%d clock=unsynced reason=module-load-failed:%d", im->index, r);
		return -1;
	} else if (!gx_pr.clock_mod) {
		gx_pr.clock_mod = m, gx_pr.clock_mod_ctx = im->ctx;
	}
	if ((r = gx_drv.cuModuleGetFunction(&fn, m, "__gpuext_clock_sync")) != CUDA_SUCCESS)
		fail = "no-function";
	else if ((r = gx_drv.cuMemHostAlloc(&host, (1 + GX_CLOCK_ROUNDS) * 8,
					    CU_MEMHOSTALLOC_DEVICEMAP | CU_MEMHOSTALLOC_PORTABLE)) != CUDA_SUCCESS || !host)
		fail = "host-alloc-failed";
	else if ((r = gx_drv.cuMemHostGetDevicePointer_v2(&dflag, host, 0)) != CUDA_SUCCESS)
		fail = "no-device-pointer";
	if (fail) {
		gx_status("image=%d clock=unsynced reason=%s:%d", im->index, fail, r);
		if (host)
			gx_drv.cuMemFreeHost(host);
		if (m != gx_pr.clock_mod && gx_drv.cuModuleUnload)
			gx_drv.cuModuleUnload(m);
		return -1;
	}
	flag = (volatile uint64_t *)host;
	out = flag + 1;
	memset(host, 0, (1 + GX_CLOCK_ROUNDS) * 8);
	{
		CUdeviceptr dout = dflag + 8;
		void *params[] = {&dflag, &dout, &n};

		r = gx_drv.cuLaunchKernel(fn, 1, 1, 1, 1, 1, 1, 0, im->stream, params, NULL);
	}
	if (r != CUDA_SUCCESS) {
		gx_status("image=%d clock=unsynced reason=launch-failed:%d", im->index, r);
		gx_drv.cuMemFreeHost(host);
		if (m != gx_pr.clock_mod && gx_drv.cuModuleUnload)
			gx_drv.cuModuleUnload(m);
		return -1;
	}
	for (unsigned int i = 1; i <= n && misses < GX_CLOCK_MAX_MISSES; i++) {
		int64_t h0 = gx_realtime_ns(), h1 = h0, limit = started ? GX_CLOCK_ROUND_NS : GX_CLOCK_START_NS;
		uint64_t g;

		__atomic_store_n(flag, (uint64_t)i, __ATOMIC_SEQ_CST);
		while ((g = __atomic_load_n(&out[i - 1], __ATOMIC_ACQUIRE)) == 0 && (h1 = gx_realtime_ns()) - h0 < limit)
			;
		h1 = gx_realtime_ns();
		if (!g) {
			/*
			 * Late (this thread or the GPU was busy): the round is
			 * skipped; the kernel answers it when it can and goes on
			 * to the next number posted. Not started at all: give up.
			 */
			if (!started)
				break;
			misses++;
			continue;
		}
		started = 1;
		answered++;
		if (best_rtt < 0 || h1 - h0 < best_rtt) {
			best_rtt = h1 - h0;
			best_off = (int64_t)(g - (uint64_t)h0) - (h1 - h0) / 2;
		}
	}
	if (__atomic_load_n(&out[n - 1], __ATOMIC_ACQUIRE) == 0) {
		/* the kernel has not finished: let it finish whenever it runs; its memory stays */
		__atomic_store_n(flag, UINT64_MAX, __ATOMIC_SEQ_CST);
		if (!answered)
			gx_status("image=%d clock=unsynced why=%s reason=kernel-did-not-start", im->index, why);
	} else {
		gx_drv.cuStreamSynchronize(im->stream);
		gx_drv.cuMemFreeHost(host);
		if (m != gx_pr.clock_mod && gx_drv.cuModuleUnload) /* another context's copy */
			gx_drv.cuModuleUnload(m);
	}
	if (!answered)
		return -1;
	atomic_store(&im->clock_offset, best_off);
	clock_gettime(CLOCK_MONOTONIC, &im->clock_at);
	gx_status("image=%d clock=synced why=%s offset_ns=%lld error_ns=%lld rounds=%d/%u drift_ns=%lld", im->index, why,
		  (long long)best_off, (long long)(best_rtt + 1) / 2, answered, n,
		  im->clock_synced > 0 ? (long long)(best_off - prev) : 0ll);
	GX_DEBUG("probes: image %d: device clock - host clock = %lld ns (+-%lld, %d rounds, %s)", im->index,
		 (long long)best_off, (long long)(best_rtt + 1) / 2, answered, why);
	im->clock_synced = 1;
	return 0;
}

/*
 * gx_clock_measure, and a failure remembered: a measurement can wait up to
 * GX_CLOCK_START_NS for a GPU that is busy, so the context's other binds
 * (on the application's launch path) take the failure instead of trying
 * again, and the copy thread retries every GX_CLOCK_RESYNC_S. A context
 * measured before keeps its last offset.
 */
static int gx_clock_sync(struct gx_pimage *im, const char *why)
{
	if (gx_clock_measure(im, why) == 0)
		return 0;
	if (im->clock_synced <= 0)
		im->clock_synced = -1;
	clock_gettime(CLOCK_MONOTONIC, &im->clock_at);
	return -1;
}

/*
 * The clock offset is the context's: one image per context measures it
 * (the first of gx_pr.images[0..n) bound there with launch times), the
 * others copy it. gx_probe_mu held.
 */
static struct gx_pimage *gx_clock_owner(CUcontext ctx, int n)
{
	for (int i = 0; i < n; i++)
		if (gx_pr.images[i]->ctx == ctx && gx_pr.images[i]->launch_ns && gx_pr.images[i]->clock_synced)
			return gx_pr.images[i];
	return NULL;
}

static void gx_clock_copy(struct gx_pimage *im, const struct gx_pimage *owner)
{
	atomic_store(&im->clock_offset, atomic_load(&owner->clock_offset));
	im->clock_at = owner->clock_at;
	im->clock_synced = owner->clock_synced;
}

/*
 * Looks the symbols up in the current context and writes the tenant id.
 * Called with gx_probe_mu held. 0: bound (or given up: reported); -1: no context yet.
 */
static int gx_bind(struct gx_pimage *im)
{
	CUcontext ctx = NULL;
	CUdeviceptr tid = 0;
	size_t tid_bytes = 0, total = 0;
	uint32_t tenant = (uint32_t)gx_cfg.tenant_id;
	int found = 0;

	if (!gx_drv.cuCtxGetCurrent || gx_drv.cuCtxGetCurrent(&ctx) != CUDA_SUCCESS || !ctx)
		return -1;
	im->ctx = ctx;
	im->bound = 1;
	if (im->is_library && !im->ctxn) {
		atomic_fetch_add(&gx_pr.libraries, 1);
		im->lib_counted = 1;
	}
	{
		/*
		 * Once the first context ended (GX_CTX_ENDED) this is not re-armed:
		 * a library first bound there may run in any later context, and
		 * only the lookup at launch binds it there.
		 */
		CUcontext none = NULL;

		atomic_compare_exchange_strong(&gx_pr.first_ctx, &none, ctx);
	}
	if (!gx_drv.cuStreamCreate || gx_drv.cuStreamCreate(&im->stream, CU_STREAM_NON_BLOCKING) != CUDA_SUCCESS) {
		/* (another context's entry is not another patched image) */
		gx_status("image=%d state=%s reason=no-copy-stream", im->index, im->ctxn ? "bound" : "patched");
		im->stream = NULL;
		return 0;
	}
	for (size_t k = 0; k < gx_pr.conf.nmaps; k++) {
		const struct gx_probe_map *m = &gx_pr.conf.maps[k];
		CUdeviceptr p = 0;
		size_t bytes = 0;

		if (gx_get_global(im, m->symbol, &p, &bytes) != CUDA_SUCCESS || !p) {
			GX_DEBUG("probes: image %d has no map symbol %s", im->index, m->symbol);
			continue;
		}
		if (bytes != m->bytes)
			GX_DEBUG("probes: image %d map %s is %zu bytes, module.conf says %llu", im->index, m->symbol, bytes,
				 (unsigned long long)m->bytes);
		im->map_ptr[k] = p;
		im->map_bytes[k] = bytes < m->bytes ? bytes : m->bytes;
		total += (im->map_bytes[k] + 7) & ~(size_t)7;
		found++;
	}
	im->host_size = total;
	im->host = total ? malloc(total) : NULL;
	if (total && !im->host)
		im->stream = NULL; /* no copy-out; the probes still run */
	if (gx_pr.conf.launch_time) {
		size_t lb = 0;

		if (gx_get_global(im, GX_SYM_LAUNCH_NS, &im->launch_ns, &lb) != CUDA_SUCCESS || lb < 8)
			im->launch_ns = 0;
		if (im->is_library && gx_drv.cuLibraryGetModule &&
		    gx_drv.cuLibraryGetModule(&im->ctx_module, (CUlibrary)im->handle) != CUDA_SUCCESS)
			im->ctx_module = NULL;
		if (im->launch_ns && gx_drv.cuStreamWriteValue64_v2) {
			/* an image of a context already measured takes its offset */
			struct gx_pimage *owner = gx_clock_owner(ctx, gx_pr.nimages);

			if (owner && owner != im)
				gx_clock_copy(im, owner);
			else
				gx_clock_sync(im, "bind");
			if (!atomic_load(&gx_pr.launch_time_failed))
				atomic_store(&gx_pr.launch_time, 1);
		}
	}
	if (gx_get_global(im, GX_SYM_TENANT, &tid, &tid_bytes) == CUDA_SUCCESS && tid && tid_bytes >= 4 &&
	    gx_drv.cuMemcpyHtoDAsync_v2 && gx_drv.cuStreamSynchronize &&
	    gx_drv.cuMemcpyHtoDAsync_v2(tid, &tenant, sizeof(tenant), im->stream) == CUDA_SUCCESS)
		gx_drv.cuStreamSynchronize(im->stream);
	else
		GX_DEBUG("probes: image %d: tenant id not set", im->index);
	GX_DEBUG("probes: image %d bound in context %p: %d of %zu maps, tenant %u", im->index, (void *)ctx, found,
		 gx_pr.conf.nmaps, tenant);
	return 0;
}

static void gx_write_maps(struct gx_pimage *im, int final);

/*
 * Copies the image's maps out and writes them (gx_write_maps). Makes the
 * image's context current: the caller restores its own. 0 on success.
 * gx_probe_mu held.
 */
static int gx_copy_out(struct gx_pimage *im, int final)
{
	size_t off = 0;
	int ok = 1;

	if (!im->bound || im->ending || !im->stream || !gx_pr.dir[0] || !gx_drv.cuCtxSetCurrent ||
	    !gx_drv.cuMemcpyDtoHAsync_v2 || !gx_drv.cuStreamSynchronize)
		return -1;
	if (gx_drv.cuCtxSetCurrent(im->ctx) != CUDA_SUCCESS)
		return -1;
	if (final && gx_drv.cuCtxSynchronize)
		gx_drv.cuCtxSynchronize(); /* the application's last kernels count */
	for (size_t k = 0; k < gx_pr.conf.nmaps; k++) {
		if (im->map_ptr[k] && gx_drv.cuMemcpyDtoHAsync_v2(im->host + off, im->map_ptr[k], im->map_bytes[k],
								  im->stream) != CUDA_SUCCESS)
			ok = 0;
		off += (im->map_bytes[k] + 7) & ~(size_t)7;
	}
	if (!ok || gx_drv.cuStreamSynchronize(im->stream) != CUDA_SUCCESS) {
		GX_DEBUG("probes: image %d: copy-out failed", im->index);
		return -1;
	}
	gx_write_maps(im, final);
	return 0;
}

/* Writes the image's last copy of its maps to <pid>-<index>[-<ctxn>].maps (temp + rename). */
static void gx_write_maps(struct gx_pimage *im, int final)
{
	char path[PATH_MAX + 64], tmp[PATH_MAX + 64];
	struct gpuext_devrt_maps_header hdr;
	size_t off = 0;
	int fd, ok;

	im->seq++;
	if (im->ctxn) {
		snprintf(path, sizeof(path), "%s/%d-%d-%d.maps", gx_pr.dir, gx_key(), im->index, im->ctxn);
		snprintf(tmp, sizeof(tmp), "%s/.%d-%d-%d.maps.tmp", gx_pr.dir, gx_key(), im->index, im->ctxn);
	} else {
		snprintf(path, sizeof(path), "%s/%d-%d.maps", gx_pr.dir, gx_key(), im->index);
		snprintf(tmp, sizeof(tmp), "%s/.%d-%d.maps.tmp", gx_pr.dir, gx_key(), im->index);
	}
	fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	if (fd < 0)
		return;
	memset(&hdr, 0, sizeof(hdr));
	memcpy(hdr.magic, GPUEXT_DEVRT_MAPS_MAGIC, sizeof(hdr.magic));
	hdr.version = GPUEXT_DEVRT_MAPS_VERSION;
	hdr.pid = (uint32_t)gx_key();
	hdr.image = (uint32_t)im->index;
	hdr.nmaps = (uint32_t)gx_pr.conf.nmaps;
	hdr.seq = im->seq;
	hdr.time_ns = (uint64_t)gx_realtime_ns();
	hdr.tenant_id = (uint32_t)gx_cfg.tenant_id;
	hdr.final = final ? 1u : 0u;
	ok = write(fd, &hdr, sizeof(hdr)) == (ssize_t)sizeof(hdr);
	off = 0;
	for (size_t k = 0; k < gx_pr.conf.nmaps && ok; k++) {
		struct gpuext_devrt_maps_entry mh;
		size_t padded = (im->map_bytes[k] + 7) & ~(size_t)7;

		memset(&mh, 0, sizeof(mh));
		memcpy(mh.name, gx_pr.conf.maps[k].name, strnlen(gx_pr.conf.maps[k].name, sizeof(mh.name) - 1));
		mh.bytes = im->map_ptr[k] ? im->map_bytes[k] : 0;
		ok = write(fd, &mh, sizeof(mh)) == (ssize_t)sizeof(mh);
		if (ok && im->map_ptr[k] && padded)
			ok = write(fd, im->host + off, padded) == (ssize_t)padded;
		off += padded;
	}
	close(fd);
	if (!ok || rename(tmp, path) != 0) {
		unlink(tmp);
		GX_DEBUG("probes: image %d: writing %s failed", im->index, path);
	}
}

/*
 * Measures the clock offset again in each context with launch times, once
 * GX_CLOCK_RESYNC_S have passed since the last time (or now: final, at
 * exit, so the status file shows the drift over the run). The images of a
 * context share the result. gx_probe_mu held.
 */
static void gx_clock_resync(int final)
{
	struct timespec now;

	if (!atomic_load(&gx_pr.launch_time) || !gx_drv.cuCtxSetCurrent)
		return;
	clock_gettime(CLOCK_MONOTONIC, &now);
	for (int i = 0; i < gx_pr.nimages; i++) {
		struct gx_pimage *im = gx_pr.images[i], *owner;

		if (!im->bound || !im->launch_ns || !im->clock_synced)
			continue;
		owner = gx_clock_owner(im->ctx, i); /* measured earlier in this pass, or now */
		if (owner) {
			gx_clock_copy(im, owner);
		} else if ((final ? im->clock_synced > 0 : now.tv_sec - im->clock_at.tv_sec >= GX_CLOCK_RESYNC_S) &&
			   gx_drv.cuCtxSetCurrent(im->ctx) == CUDA_SUCCESS) {
			gx_clock_sync(im, final ? "exit" : "periodic");
		}
	}
}

static void *gx_copy_thread(void *arg)
{
	(void)arg;
	(void)gx_capture_relax(); /* this thread's calls never belong to a capture */
	for (;;) {
		struct timespec one = {1, 0};

		nanosleep(&one, NULL);
		pthread_mutex_lock(&gx_probe_mu);
		if (gx_pr.stopping) {
			pthread_mutex_unlock(&gx_probe_mu);
			return NULL;
		}
		for (int i = 0; i < gx_pr.nimages; i++)
			gx_copy_out(gx_pr.images[i], 0);
		gx_clock_resync(0);
		pthread_mutex_unlock(&gx_probe_mu);
	}
}

/* atexit: registered at the first patched load, after cudart's own handlers, so it runs before them. */
static void gx_probe_at_exit(void)
{
	int mode;

	pthread_mutex_lock(&gx_probe_mu);
	if (!gx_pr.stopping) {
		gx_pr.stopping = 1;
		mode = gx_capture_relax();
		for (int i = 0; i < gx_pr.nimages; i++)
			gx_copy_out(gx_pr.images[i], 1);
		gx_clock_resync(1);
		gx_capture_restore(mode);
	}
	pthread_mutex_unlock(&gx_probe_mu);
}

/*
 * Contexts that end. A context the application destroys (cuCtxDestroy), or
 * a device's primary context released for the last time or reset, takes
 * its modules, our stream and the maps with it. Its images get a last copy
 * of their maps (final) while the context still exists and are unbound for
 * good, so neither the copy thread nor the exit handler uses the context
 * again: on the H200 a process that destroyed a context whose image was
 * bound aborted at exit ("free(): invalid pointer") when the exit handler
 * made the dead context current.
 */

/*
 * gx_probe_mu held. destroy_stream: the context still exists, our stream in
 * it goes now. missed: the final copy could not be made. A module's entry
 * loses its handle (its context took the module); a library's keeps it for
 * its other contexts.
 */
static void gx_unbind(struct gx_pimage *im, const char *why, int destroy_stream, int missed)
{
	if (destroy_stream && im->stream && gx_drv.cuStreamDestroy_v2)
		gx_drv.cuStreamDestroy_v2(im->stream);
	im->stream = NULL;
	im->bound = 0;
	im->gone = 1;
	im->ending = 0;
	im->ctx = NULL;
	im->launch_ns = 0;
	if (!im->is_library)
		im->handle = NULL;
	free(im->host);
	im->host = NULL;
	gx_status("image=%d ctx=%d state=unbound reason=%s%s copies=%llu", im->index, im->ctxn, why,
		  missed ? " final=missed" : "", (unsigned long long)im->seq);
}

/* gx_probe_mu held: function handles may name other functions from now on. */
static void gx_forget_launches(void)
{
	for (int i = 0; i < GX_LAUNCH_CACHE; i++)
		atomic_store(&gx_pr.launch_cache[i], 0);
}

/* gx_probe_mu held: no launch finds an image through the ended context. */
static void gx_forget_ctx(CUcontext ctx)
{
	CUcontext c = ctx;

	atomic_compare_exchange_strong(&gx_pr.first_ctx, &c, GX_CTX_ENDED);
	if (gx_pr.clock_mod_ctx == ctx) /* the module went with the context */
		gx_pr.clock_mod = NULL, gx_pr.clock_mod_ctx = NULL;
	gx_forget_launches();
}

/*
 * The bound images that end now: by handle (unloaded) or in ctx (its
 * context is destroyed, or, final_only, already ended). Each gets its final
 * copy, made in its own context while that still exists (or, final_only,
 * the copy made before written as the last), and is unbound. After the
 * exit handler (stopping) it made the final copies: they are only
 * unbound. The caller's capture mode and current context are kept.
 * gx_probe_mu held. Returns how many ended.
 */
static int gx_end_images(void *handle, CUcontext ctx, const char *why, int final_only)
{
	CUcontext cur = NULL;
	int mode = gx_capture_relax(), n = 0, switched = 0;

	if (gx_drv.cuCtxGetCurrent)
		gx_drv.cuCtxGetCurrent(&cur);
	for (int i = 0; i < gx_pr.nimages; i++) {
		struct gx_pimage *im = gx_pr.images[i];
		int missed = 0;

		if (!im->bound || (handle ? im->handle != handle : im->ctx != ctx))
			continue;
		if (final_only) {
			gx_write_maps(im, 1);
		} else if (!gx_pr.stopping) {
			missed = gx_copy_out(im, 1) != 0;
			switched = 1;
			GX_DEBUG("probes: image %d ctx %d %s: final copy %s", im->index, im->ctxn, why,
				 missed ? "failed (its context already ended?)" : "made");
		}
		gx_unbind(im, why, !final_only, missed);
		n++;
	}
	if (switched && gx_drv.cuCtxSetCurrent)
		gx_drv.cuCtxSetCurrent(cur);
	gx_capture_restore(mode);
	return n;
}

/*
 * Before cuLibraryUnload / cuModuleUnload of an image we patched (cudart
 * unloads its libraries in cudaDeviceReset and at exit): the maps are
 * module globals and go with it, so every context's entry of the image
 * gets its final copy now and is unbound. Afterwards a copy would read
 * freed device memory, or memory given to someone else.
 */
void gx_probe_unload(void *handle)
{
	if (!gx_pr.on || !handle)
		return;
	pthread_mutex_lock(&gx_probe_mu);
	GX_DEBUG("probes: image handle %p unloaded", handle);
	gx_end_images(handle, NULL, "unloaded", 0);
	for (int i = 0; i < gx_pr.nimages; i++) {
		struct gx_pimage *im = gx_pr.images[i];

		if (im->handle != handle)
			continue;
		if (!im->bound && !im->gone) { /* loaded, never bound: nothing to copy or bind any more */
			im->gone = 1;
			atomic_fetch_sub(&gx_pr.pending, 1);
		}
		if (im->lib_counted) {
			im->lib_counted = 0;
			atomic_fetch_sub(&gx_pr.libraries, 1);
		}
		free(im->ptx); /* the driver no longer loads from it */
		im->ptx = NULL;
		im->handle = NULL; /* a later load may get the same handle: a new image */
	}
	gx_forget_launches();
	pthread_mutex_unlock(&gx_probe_mu);
}

/* Before cuCtxDestroy(ctx). */
void gx_probe_ctx_destroy(CUcontext ctx)
{
	GX_DEBUG("probes: context %p destroyed", (void *)ctx);
	if (!gx_pr.on || !ctx)
		return;
	pthread_mutex_lock(&gx_probe_mu);
	if (gx_end_images(NULL, ctx, "context-destroyed", 0))
		gx_forget_ctx(ctx);
	pthread_mutex_unlock(&gx_probe_mu);
}

/*
 * Before cuDevicePrimaryCtxRelease/Reset(dev): the primary context's
 * handle (retained and released again, so the application's count is as
 * it was), its images' maps copied out; NULL when it is not active or no
 * image is bound. The release may not be the last: until
 * gx_probe_primary_after knows, the images are "ending", and the copy
 * thread leaves them alone (it would make a context current that the
 * release may be freeing).
 */
CUcontext gx_probe_primary_before(CUdevice dev)
{
	CUcontext p = NULL, cur = NULL;
	unsigned int flags = 0;
	int active = 0, mode, n = 0;

	GX_DEBUG("probes: primary context of device %d released or reset", (int)dev);
	if (!gx_pr.on || !gx_drv.cuDevicePrimaryCtxGetState || !gx_drv.cuDevicePrimaryCtxRetain ||
	    !gx_drv.cuDevicePrimaryCtxRelease_v2)
		return NULL;
	pthread_mutex_lock(&gx_probe_mu);
	if (gx_pr.nimages && gx_drv.cuDevicePrimaryCtxGetState(dev, &flags, &active) == CUDA_SUCCESS && active &&
	    gx_drv.cuDevicePrimaryCtxRetain(&p, dev) == CUDA_SUCCESS) {
		gx_drv.cuDevicePrimaryCtxRelease_v2(dev);
		mode = gx_capture_relax();
		if (gx_drv.cuCtxGetCurrent)
			gx_drv.cuCtxGetCurrent(&cur);
		for (int i = 0; i < gx_pr.nimages; i++) {
			struct gx_pimage *im = gx_pr.images[i];

			if (!im->bound || im->ctx != p)
				continue;
			if (!gx_pr.stopping && gx_copy_out(im, 1) == 0)
				n++;
			im->ending = 1;
		}
		if (n && gx_drv.cuCtxSetCurrent)
			gx_drv.cuCtxSetCurrent(cur);
		gx_capture_restore(mode);
	}
	pthread_mutex_unlock(&gx_probe_mu);
	return p;
}

/* After cuDevicePrimaryCtxRelease/Reset(dev): if the primary context p ended, its images go. */
void gx_probe_primary_after(CUdevice dev, CUcontext p)
{
	unsigned int flags = 0;
	int active = 1;

	if (!p)
		return;
	pthread_mutex_lock(&gx_probe_mu);
	if (gx_drv.cuDevicePrimaryCtxGetState(dev, &flags, &active) == CUDA_SUCCESS && !active) {
		gx_end_images(NULL, p, "primary-context-ended", 1);
		gx_forget_ctx(p);
	} else {
		for (int i = 0; i < gx_pr.nimages; i++)
			if (gx_pr.images[i]->ctx == p)
				gx_pr.images[i]->ending = 0;
	}
	pthread_mutex_unlock(&gx_probe_mu);
}

/* gx_probe_mu held */
static void gx_start_copy_out(void)
{
	if (!gx_pr.exit_registered) {
		gx_pr.exit_registered = 1;
		atexit(gx_probe_at_exit);
	}
	if (!gx_pr.thread_started && gx_pr.dir[0] && gx_pr.conf.nmaps) {
		pthread_t th;
		pthread_attr_t attr;
		sigset_t all, old;

		/* the thread takes none of the application's signals */
		sigfillset(&all);
		pthread_sigmask(SIG_SETMASK, &all, &old);
		pthread_attr_init(&attr);
		pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
		if (pthread_create(&th, &attr, gx_copy_thread, NULL) == 0)
			gx_pr.thread_started = 1;
		else
			GX_DEBUG("probes: no copy-out thread; maps are copied at exit only");
		pthread_attr_destroy(&attr);
		pthread_sigmask(SIG_SETMASK, &old, NULL);
	}
}

static void gx_sanitize(char *s)
{
	for (; *s; s++)
		if (*s == '\n' || *s == '\r')
			*s = ' ';
}

CUresult gx_probe_load(const char *api, int is_library, const void *image, gx_load_fn load, void *arg)
{
	struct gx_image img;
	struct gx_ptx_result res;
	struct gx_pimage *im;
	char errlog[4096];
	void *handle = NULL;
	struct timespec t0, t1;
	double ms, bind_ms;
	int index;
	CUresult r;

	gx_runtime_init();
	pthread_once(&gx_probe_once, gx_probe_init_once);
	if (!gx_pr.on)
		return load(arg, image, NULL, 0, &handle);
	index = atomic_fetch_add(&gx_pr.next_index, 1);
	if (gx_image_inspect(image, gx_device_arch(), &img) != 0) {
		GX_DEBUG("probes: image %d (%s, %s) unpatched: %s", index, api, gx_image_kind_name(img.kind), img.reason);
		gx_status("image=%d state=unpatched reason=%s kernels=0 jit_ms=0 api=%s kind=%s", index, img.reason, api,
			  gx_image_kind_name(img.kind));
		gx_image_release(&img);
		return load(arg, image, NULL, 0, &handle);
	}
	if (gx_ptx_patch(img.ptx, img.ptx_len, gx_pr.frag, gx_pr.frag_len, &gx_pr.conf.opts, &res) != 0) {
		GX_DEBUG("probes: image %d (%s) unpatched: %s", index, api, res.reason);
		gx_status("image=%d state=unpatched reason=%s kernels=0 jit_ms=0 api=%s kind=%s ptx_arch=%d target=%s",
			  index, res.reason, api, gx_image_kind_name(img.kind), img.ptx_arch,
			  res.target_text[0] ? res.target_text : "-");
		gx_image_release(&img);
		return load(arg, image, NULL, 0, &handle);
	}
	errlog[0] = 0;
	clock_gettime(CLOCK_MONOTONIC, &t0);
	r = load(arg, res.text, errlog, sizeof(errlog), &handle);
	clock_gettime(CLOCK_MONOTONIC, &t1);
	ms = (double)(t1.tv_sec - t0.tv_sec) * 1e3 + (double)(t1.tv_nsec - t0.tv_nsec) / 1e6;
	if (r != CUDA_SUCCESS) {
		static _Atomic int logged;

		free(res.text);
		errlog[sizeof(errlog) - 1] = 0;
		gx_sanitize(errlog);
		/* the first few always (the app's stderr), the rest in the status file and the debug log */
		if (atomic_fetch_add(&logged, 1) < 3 || gx_cfg.debug)
			gx_log("device probes: image %d (%s): patched load failed (CUresult %d)%s%s; loading the original",
			       index, api, r, errlog[0] ? ": " : "", errlog);
		gx_status("image=%d state=unpatched reason=jit-failed:%d kernels=0 jit_ms=%.3f api=%s kind=%s ptx_arch=%d "
			  "target=%s",
			  index, r, ms, api, gx_image_kind_name(img.kind), img.ptx_arch, res.target_text);
		gx_image_release(&img);
		return load(arg, image, NULL, 0, &handle);
	}
	GX_DEBUG("probes: image %d (%s) patched: %d of %d kernels, %.3f ms", index, api, res.probed, res.entries, ms);
	im = calloc(1, sizeof(*im));
	if (im) {
		im->index = index;
		im->is_library = is_library;
		im->handle = handle;
		im->ptx = res.text;
	}
	bind_ms = 0;
	pthread_mutex_lock(&gx_probe_mu);
	if (im && gx_pr.nimages < GX_PROBE_MAX_IMAGES) {
		int mode = gx_capture_relax();

		gx_pr.images[gx_pr.nimages++] = im;
		clock_gettime(CLOCK_MONOTONIC, &t0);
		if (gx_bind(im) != 0)
			atomic_fetch_add(&gx_pr.pending, 1);
		gx_capture_restore(mode);
		clock_gettime(CLOCK_MONOTONIC, &t1);
		bind_ms = (double)(t1.tv_sec - t0.tv_sec) * 1e3 + (double)(t1.tv_nsec - t0.tv_nsec) / 1e6;
		gx_start_copy_out();
	} else {
		free(im); /* the probes run; nothing is copied out; res.text stays (the driver may read it) */
	}
	/* the status line after binding: with lazy loading the JIT may happen in the first symbol lookup */
	gx_status("image=%d state=patched reason=ok kernels=%d/%d jit_ms=%.3f bind_ms=%.3f api=%s kind=%s ptx_arch=%d "
		  "target=%s splice=%s guard=%s,%s",
		  index, res.probed, res.entries, ms, bind_ms, api, gx_image_kind_name(img.kind), img.ptx_arch,
		  res.target_text, gx_pr.conf.opts.inline_entry ? "inline" : "call",
		  gx_pr.conf.opts.guard_entry == GX_GUARD_THREAD0 ? "thread0" : "none",
		  gx_pr.conf.opts.guard_exit == GX_GUARD_THREAD0 ? "thread0" : "none");
	pthread_mutex_unlock(&gx_probe_mu);
	gx_image_release(&img);
	return r;
}

/* The bound image whose module f belongs to, in the current context; NULL if none. */
static struct gx_pimage *gx_image_of(CUfunction f)
{
	uintptr_t key = (uintptr_t)f;
	size_t slot = (key >> 4) % GX_LAUNCH_CACHE;
	uint64_t c = atomic_load_explicit(&gx_pr.launch_cache[slot], memory_order_acquire);
	CUlibrary lib = NULL;
	CUmodule mod = NULL;
	int found = -1;

	if (c && (c >> 16) == key) {
		unsigned idx = (unsigned)(c & 0xffff);

		return idx == 0xffff ? NULL : gx_pr.images[idx - 1];
	}
	if (pthread_mutex_trylock(&gx_probe_mu) != 0)
		return NULL; /* this launch goes without a time; never wait */
	if (gx_drv.cuKernelGetLibrary && gx_drv.cuKernelGetLibrary(&lib, (CUkernel)f) == CUDA_SUCCESS && lib) {
		for (int i = 0; i < gx_pr.nimages && found < 0; i++)
			if (gx_pr.images[i]->is_library && gx_pr.images[i]->handle == (void *)lib)
				found = i;
	} else if (gx_drv.cuFuncGetModule && gx_drv.cuFuncGetModule(&mod, f) == CUDA_SUCCESS && mod) {
		for (int i = 0; i < gx_pr.nimages && found < 0; i++)
			if (gx_pr.images[i]->handle == (void *)mod || gx_pr.images[i]->ctx_module == mod)
				found = i;
	}
	if (key < (1ull << 48))
		atomic_store_explicit(&gx_pr.launch_cache[slot], ((uint64_t)key << 16) | (found < 0 ? 0xffffu : (unsigned)found + 1),
				      memory_order_release);
	pthread_mutex_unlock(&gx_probe_mu);
	return found < 0 ? NULL : gx_pr.images[found];
}

/*
 * The entry of a library image for context ctx: the chain's, or a new one,
 * bound now (never waiting: NULL when the lock is taken, try at the next
 * launch).
 */
static struct gx_pimage *gx_image_in_ctx(struct gx_pimage *first, CUcontext ctx)
{
	struct gx_pimage *im, *last = first, *n;
	int count = 0, mode;

	for (im = first; im; im = atomic_load_explicit(&im->next_ctx, memory_order_acquire)) {
		if (im->ctx == ctx)
			return im;
		last = im;
		count++;
	}
	if (!first->is_library || !(first->bound || first->gone) || count >= GX_PROBE_MAX_CTX ||
	    gx_pr.nimages >= GX_PROBE_MAX_IMAGES || pthread_mutex_trylock(&gx_probe_mu) != 0)
		return NULL; /* (nimages only grows: read unlocked, at worst a launch late) */
	for (im = first; im; im = atomic_load_explicit(&im->next_ctx, memory_order_acquire)) /* again, under the lock */
		if (im->ctx == ctx)
			break;
	if (!im && gx_pr.nimages < GX_PROBE_MAX_IMAGES && (n = calloc(1, sizeof(*n)))) {
		for (last = first; atomic_load(&last->next_ctx); last = atomic_load(&last->next_ctx))
			;
		n->index = first->index;
		n->is_library = 1;
		n->handle = first->handle;
		n->ptx = NULL; /* the first entry keeps the text */
		n->ctxn = last->ctxn + 1;
		mode = gx_capture_relax();
		gx_bind(n);
		gx_capture_restore(mode);
		gx_pr.images[gx_pr.nimages++] = n;
		atomic_store_explicit(&last->next_ctx, n, memory_order_release);
		gx_status("image=%d ctx=%d state=bound context=%p", n->index, n->ctxn, (void *)ctx);
		im = n;
	}
	pthread_mutex_unlock(&gx_probe_mu);
	return im;
}

static void gx_launch_time(struct gx_pimage *im, CUstream stream, int ptsz)
{
	CUresult r;

	if (!im || !im->launch_ns)
		return; /* not a probed module */
	if (ptsz && !stream)
		stream = GX_CU_STREAM_PER_THREAD;
	{
		/*
		 * A launch into a capturing stream: the graph would replay this
		 * time with every launch. An error (the legacy stream while a
		 * blocking stream captures) is no launch time either.
		 */
		int capturing = 0;

		if (gx_drv.cuStreamIsCapturing && (gx_drv.cuStreamIsCapturing(stream, &capturing) != CUDA_SUCCESS || capturing))
			return;
	}
	/* in the device's clock (gx_clock_sync; 0 if it could not be measured) */
	r = gx_drv.cuStreamWriteValue64_v2(stream, im->launch_ns,
					   (cuuint64_t)(gx_realtime_ns() + atomic_load_explicit(&im->clock_offset, memory_order_relaxed)),
					   0);
	if (r != CUDA_SUCCESS) {
		atomic_store(&gx_pr.launch_time_failed, 1); /* the next bind does not turn it back on */
		if (atomic_exchange(&gx_pr.launch_time, 0)) {
			gx_log("device probes: launch time off: cuStreamWriteValue64 failed (CUresult %d)", r);
			gx_status("image=- launch_time=off reason=stream-write-failed:%d", r);
		}
	}
}

void gx_probe_before_launch(CUfunction f, CUstream stream, int ptsz)
{
	if (atomic_load_explicit(&gx_pr.pending, memory_order_relaxed) &&
	    pthread_mutex_trylock(&gx_probe_mu) == 0) { /* never make a launch wait: try again at the next one */
		int mode = gx_capture_relax(); /* the launch may go into a capturing stream */

		for (int i = 0; i < gx_pr.nimages; i++)
			if (!gx_pr.images[i]->bound && !gx_pr.images[i]->gone && gx_bind(gx_pr.images[i]) == 0)
				atomic_fetch_sub(&gx_pr.pending, 1);
		gx_capture_restore(mode);
		pthread_mutex_unlock(&gx_probe_mu);
	}
	if (f && (atomic_load_explicit(&gx_pr.launch_time, memory_order_relaxed) ||
		  atomic_load_explicit(&gx_pr.libraries, memory_order_relaxed))) {
		struct gx_pimage *im;
		CUcontext ctx = NULL;
		int lt = atomic_load_explicit(&gx_pr.launch_time, memory_order_relaxed);

		if (!gx_drv.cuCtxGetCurrent || gx_drv.cuCtxGetCurrent(&ctx) != CUDA_SUCCESS || !ctx)
			return;
		/* without launch times, only a launch in another context than the first needs the image */
		if (!lt && ctx == atomic_load_explicit(&gx_pr.first_ctx, memory_order_relaxed))
			return;
		if (!(im = gx_image_of(f)))
			return;
		if (im->ctx != ctx) /* a library's kernel in another context: that context's entry */
			im = gx_image_in_ctx(im, ctx);
		if (im && lt)
			gx_launch_time(im, stream, ptsz);
	}
}

/* The child of a fork has no copy thread and none of the parent's contexts. */
void gx_probe_after_fork(void)
{
	pthread_mutex_init(&gx_probe_mu, NULL);
	gx_pr.nimages = 0;
	gx_pr.thread_started = 0;
	atomic_store(&gx_pr.key, 0);
	atomic_store(&gx_pr.pending, 0);
	atomic_store(&gx_pr.launch_time, 0);
	atomic_store(&gx_pr.launch_time_failed, 0);
	atomic_store(&gx_pr.libraries, 0);
	gx_pr.clock_mod = NULL, gx_pr.clock_mod_ctx = NULL;
	atomic_store(&gx_pr.first_ctx, NULL);
	for (int i = 0; i < GX_LAUNCH_CACHE; i++)
		atomic_store(&gx_pr.launch_cache[i], 0);
}
