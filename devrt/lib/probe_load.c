/*
 * probe_load.c - device probes in the interposer (docs/device-probes.md,
 * "Device probes in the interposer"): the tenant's bundle and each image's
 * patched load. The other jobs are in probe_bind.c, probe_clock.c,
 * probe_copyout.c, probe_ctx.c, probe_files.c and probe_launch.c (see
 * probe_state.h).
 *
 * When the tenant directory holds probes/module.ptx and probes/module.conf
 * (written by the host), every image the application loads is inspected
 * (fatbin.c); its PTX is patched (ptxpatch.c) and loaded instead of the
 * image, with the caller's options. Anything that goes wrong - no PTX,
 * compressed PTX that cannot be unpacked, target too low, JIT failure -
 * loads the caller's image unchanged; the reason goes to the status file
 * $GPUEXT_TENANT_ACCT/probes/<pid>.status, one line per image (<pid>: the
 * process's key, see gx_key in probe_files.c).
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
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "fatbin.h"
#include "probe_state.h"

struct gx_drv_calls gx_drv;
struct gx_probe_state gx_pr;
pthread_mutex_t gx_probe_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_once_t gx_probe_once = PTHREAD_ONCE_INIT;

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

void gx_status(const char *fmt, ...)
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
	snprintf(path, sizeof(path), "%s/%d" GPUEXT_DEVRT_PROBES_STATUS_SUFFIX, gx_pr.dir, gx_key());
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
	snprintf(path, sizeof(path), "%s/" GPUEXT_DEVRT_PROBES_DIR, tdir);
	dirfd = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (dirfd < 0)
		return; /* no probes for this tenant */
	ctext = gx_read_file_at(dirfd, GPUEXT_DEVRT_PROBES_CONF_FILE, &clen);
	if (!ctext) {
		close(dirfd);
		return;
	}
	if (gx_cfg.acct_dir && *gx_cfg.acct_dir) {
		snprintf(gx_pr.dir, sizeof(gx_pr.dir), "%s/" GPUEXT_DEVRT_PROBES_DIR, gx_cfg.acct_dir);
		/* shared by the tenant's processes, like the accounting dir itself */
		if (mkdir(gx_pr.dir, 0777) == 0)
			(void)chmod(gx_pr.dir, 01777);
		else if (errno != EEXIST)
			gx_pr.dir[0] = 0;
	}
	if (gx_probe_conf_parse(ctext, clen, &gx_pr.conf, err, sizeof(err)) != 0) {
		gx_log("device probes off: %s", err);
		gx_status(GX_ST_IMAGE GX_ST_IMAGE_NONE " " GX_ST_STATE GX_ST_OFF " " GX_ST_REASON "%s", err);
		free(ctext);
		close(dirfd);
		return;
	}
	free(ctext);
	gx_pr.frag = gx_read_file_at(dirfd, GPUEXT_DEVRT_PROBES_MODULE_FILE, &gx_pr.frag_len);
	if (gx_pr.conf.inline_form) {
		/* the inline form (both files or neither); without it the dispatch calls are spliced */
		size_t le = 0, lx = 0;
		char *ie = gx_read_file_at(dirfd, GPUEXT_DEVRT_PROBES_INLINE_ENTRY_FILE, &le);
		char *ix = gx_read_file_at(dirfd, GPUEXT_DEVRT_PROBES_INLINE_EXIT_FILE, &lx);

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
		gx_status(GX_ST_IMAGE GX_ST_IMAGE_NONE " " GX_ST_STATE GX_ST_OFF " " GX_ST_REASON GPUEXT_DEVRT_PROBES_MODULE_FILE "-unreadable");
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
	gx_hl_init();
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
		gx_status(GX_ST_IMAGE "%d " GX_ST_STATE GX_ST_UNPATCHED " " GX_ST_REASON "%s kernels=0 jit_ms=0 api=%s kind=%s", index, img.reason, api,
			  gx_image_kind_name(img.kind));
		r = load(arg, image, NULL, 0, &handle);
		gx_hl_unpatched(r == CUDA_SUCCESS ? handle : NULL, index, img.reason);
		gx_image_release(&img);
		return r;
	}
	if (gx_ptx_patch(img.ptx, img.ptx_len, gx_pr.frag, gx_pr.frag_len, &gx_pr.conf.opts, &res) != 0) {
		GX_DEBUG("probes: image %d (%s) unpatched: %s", index, api, res.reason);
		gx_status(GX_ST_IMAGE "%d " GX_ST_STATE GX_ST_UNPATCHED " " GX_ST_REASON "%s kernels=0 jit_ms=0 api=%s kind=%s ptx_arch=%d target=%s",
			  index, res.reason, api, gx_image_kind_name(img.kind), img.ptx_arch,
			  res.target_text[0] ? res.target_text : "-");
		r = load(arg, image, NULL, 0, &handle);
		gx_hl_unpatched(r == CUDA_SUCCESS ? handle : NULL, index, res.reason);
		gx_image_release(&img);
		return r;
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
		gx_status(GX_ST_IMAGE "%d " GX_ST_STATE GX_ST_UNPATCHED " " GX_ST_REASON "jit-failed:%d kernels=0 jit_ms=%.3f api=%s kind=%s ptx_arch=%d "
			  "target=%s",
			  index, r, ms, api, gx_image_kind_name(img.kind), img.ptx_arch, res.target_text);
		snprintf(errlog, sizeof(errlog), "jit-failed:%d", r);
		r = load(arg, image, NULL, 0, &handle);
		gx_hl_unpatched(r == CUDA_SUCCESS ? handle : NULL, index, errlog);
		gx_image_release(&img);
		return r;
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
	gx_status(GX_ST_IMAGE "%d " GX_ST_STATE GX_ST_PATCHED " " GX_ST_REASON "ok kernels=%d/%d jit_ms=%.3f bind_ms=%.3f api=%s kind=%s ptx_arch=%d "
		  "target=%s splice=%s guard=%s,%s",
		  index, res.probed, res.entries, ms, bind_ms, api, gx_image_kind_name(img.kind), img.ptx_arch,
		  res.target_text, gx_pr.conf.opts.inline_entry ? "inline" : "call",
		  gx_pr.conf.opts.guard_entry == GX_GUARD_THREAD0 ? GPUEXT_DEVRT_GUARD_THREAD0_NAME : GPUEXT_DEVRT_GUARD_NONE_NAME,
		  gx_pr.conf.opts.guard_exit == GX_GUARD_THREAD0 ? GPUEXT_DEVRT_GUARD_THREAD0_NAME : GPUEXT_DEVRT_GUARD_NONE_NAME);
	pthread_mutex_unlock(&gx_probe_mu);
	gx_image_release(&img);
	return r;
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
	gx_hl_after_fork();
}
