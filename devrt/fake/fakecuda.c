/*
 * fakecuda.c - a fake libcuda.so.1 for CI, where no GPU exists.
 *
 * It has the CUDA 12/13 driver signatures the device runtime interposes and
 * behaves like a device with 80 GiB (FAKECUDA_TOTAL_BYTES overrides): device
 * pointers are handed out from a counter, cuMemGetInfo_v2 reports
 * free = total - allocated (per process), cuLaunchKernel sleeps
 * FAKECUDA_KERNEL_US microseconds. cuGetProcAddress(_v2) resolves names by
 * cudaVersion and flags to distinct variant functions (_v2, _ptsz), like the
 * real driver. Every call that reaches it is appended to the file named by
 * FAKECUDA_LOG as one line, "pid=<pid> <symbol> <args>", so tests can assert
 * what reached the "driver".
 *
 * Images (device probes): every image load is numbered; with
 * FAKECUDA_IMAGE_DIR the image received is written there as image-<n>.ptx
 * (PTX text), image-<n>.fatbin (the container of a wrapper or a bare fatbin)
 * or image-<n>.cubin. The .global symbols of PTX text are "device memory"
 * in host memory, sized and initialised from the PTX, returned by
 * cuLibraryGetGlobal / cuModuleGetGlobal_v2 and copied by the memcpy calls.
 * FAKECUDA_PROBE_COUNTER=SYMBOL:OFFSET makes every launch add 1 to the u64 at
 * OFFSET of SYMBOL in every loaded image that has it (a probe that counts
 * launches); FAKECUDA_JIT_FAIL=1 fails loads of patched PTX (text with
 * __gpuext_probe_entry) with CUDA_ERROR_INVALID_PTX and an error log;
 * FAKECUDA_NO_CONTEXT=1: no current context until cuCtxSetCurrent;
 * FAKECUDA_CC=90 sets the device's compute capability (default 90).
 *
 * Several GPUs: FAKECUDA_DEVICES=N (default 1, at most 16) fake GPUs of
 * FAKECUDA_TOTAL_BYTES each, whose UUIDs are GPU-00000000-0000-0000-0000-fa4e<i, 8 hex digits>
 * (fakenvml.c's: one GPU has one UUID in CUDA and NVML, as on a real host).
 * CUDA_VISIBLE_DEVICES is honoured as the real driver does (indices or
 * UUIDs, comma-separated; the list ends at the first entry that names no
 * GPU): the process sees those GPUs as ordinals 0, 1, ... Device ordinal d's
 * primary context is 0x4000 + 0x100 * d; allocations are made on the
 * current context's GPU, each logged as "alloc gpu=<physical index> size=..".
 * The interposer's clock kernel: see fake_clock_launch.
 *
 * The driver's own record of each process's memory (what NVML reports, with
 * or without the interposer): with FAKECUDA_LEDGER_DIR, every allocation and
 * free rewrites <dir>/<pid> as "GPU BYTES" lines (physical GPU index, bytes
 * held there); the fake NVML lists them (FAKENVML_LEDGER_DIR).
 */
#define _GNU_SOURCE
#include <fcntl.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cuda_min.h"
#include "fatbin.h"

#define FAKE_API __attribute__((visibility("default")))

static pthread_mutex_t fake_mu = PTHREAD_MUTEX_INITIALIZER;
static unsigned long long fake_next = 0x7f0000000000ull;
#define FAKE_MAX_GPUS 16
static unsigned long long fake_used[FAKE_MAX_GPUS]; /* per physical GPU */

struct fake_alloc {
	unsigned long long ptr, size;
	int gpu;
};
static struct fake_alloc fake_allocs[4096];

static void fake_log(const char *fmt, ...)
{
	const char *path = getenv("FAKECUDA_LOG");
	char line[512];
	int n, fd;
	va_list ap;

	if (!path || !*path)
		return;
	n = snprintf(line, sizeof(line), "pid=%d ", (int)getpid());
	va_start(ap, fmt);
	n += vsnprintf(line + n, sizeof(line) - (size_t)n - 1, fmt, ap);
	va_end(ap);
	if (n > (int)sizeof(line) - 2)
		n = (int)sizeof(line) - 2;
	line[n++] = '\n';
	fd = open(path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0666);
	if (fd < 0)
		return;
	(void)!write(fd, line, (size_t)n);
	close(fd);
}

/* Under MPS (a pipe directory set), the real driver takes the client's SM
 * share and priority from the environment when it creates a context, on
 * each device: logged the same way, for the tests to read what it saw. */
static void fake_log_mps(const char *api, int dev)
{
	const char *share = getenv("CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"), *prio = getenv("CUDA_MPS_CLIENT_PRIORITY");

	if (getenv("CUDA_MPS_PIPE_DIRECTORY"))
		fake_log("mps-context api=%s dev=%d active_thread_percentage=%.16s client_priority=%.16s", api, dev,
			 share ? share : "unset", prio ? prio : "unset");
}

static unsigned long long fake_total(void)
{
	const char *s = getenv("FAKECUDA_TOTAL_BYTES");

	return s && *s ? strtoull(s, NULL, 10) : 80ull << 30;
}

/* The GPUs this process sees: fake_phys[ordinal] is the physical index. */
static int fake_nvis = -1, fake_phys[FAKE_MAX_GPUS];
static pthread_once_t fake_vis_once = PTHREAD_ONCE_INIT;

static void fake_vis_init(void)
{
	const char *s = getenv("FAKECUDA_DEVICES"), *v = getenv("CUDA_VISIBLE_DEVICES");
	int n = s && *s ? atoi(s) : 1;
	char buf[512], *save = NULL;

	if (n < 1)
		n = 1;
	if (n > FAKE_MAX_GPUS)
		n = FAKE_MAX_GPUS;
	fake_nvis = 0;
	if (!v) {
		for (int i = 0; i < n; i++)
			fake_phys[fake_nvis++] = i;
		return;
	}
	snprintf(buf, sizeof(buf), "%s", v);
	for (char *tok = strtok_r(buf, ",", &save); tok && fake_nvis < FAKE_MAX_GPUS; tok = strtok_r(NULL, ",", &save)) {
		char *end;
		long i = -1;

		if (!strncmp(tok, "GPU-00000000-0000-0000-0000-fa4e", 32))
			i = strtol(tok + 32, &end, 16);
		else
			i = strtol(tok, &end, 10);
		if (end == tok || *end || i < 0 || i >= n)
			break; /* as the driver: the list ends at the first entry that names no GPU */
		fake_phys[fake_nvis++] = (int)i;
	}
}

static int fake_ndev(void)
{
	pthread_once(&fake_vis_once, fake_vis_init);
	return fake_nvis;
}

static uintptr_t fake_primary_of(int ordinal)
{
	return 0x4000 + 0x100 * (uintptr_t)ordinal;
}

static int fake_has_context(void);
static __thread uintptr_t fake_ctx_ptr;

/* The ordinal of the current context (a primary context's device; 0 for any other context). */
static int fake_cur_ordinal(void)
{
	uintptr_t c = fake_ctx_ptr ? fake_ctx_ptr : 0x4000;

	if (c >= 0x4000 && (c - 0x4000) % 0x100 == 0 && (int)((c - 0x4000) / 0x100) < fake_ndev())
		return (int)((c - 0x4000) / 0x100);
	return 0;
}

static int fake_cur_gpu(void)
{
	return fake_ndev() > 0 ? fake_phys[fake_cur_ordinal()] : 0;
}

/* fake_ledger rewrites this process's ledger file (fake_mu held). */
static void fake_ledger(void)
{
	const char *dir = getenv("FAKECUDA_LEDGER_DIR");
	char path[512], tmp[540], buf[FAKE_MAX_GPUS * 48];
	int n = 0, fd;

	if (!dir || !*dir)
		return;
	for (int g = 0; g < FAKE_MAX_GPUS; g++)
		if (fake_used[g])
			n += snprintf(buf + n, sizeof(buf) - n, "%d %llu\n", g, fake_used[g]);
	snprintf(path, sizeof(path), "%s/%d", dir, (int)getpid());
	snprintf(tmp, sizeof(tmp), "%s.tmp", path);
	fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	if (fd < 0)
		return;
	if (write(fd, buf, n) == n && close(fd) == 0)
		rename(tmp, path);
	else
		unlink(tmp);
}

static CUresult fake_alloc(unsigned long long *out, size_t size)
{
	CUresult r = CUDA_ERROR_OUT_OF_MEMORY;
	int gpu = fake_cur_gpu();

	if (fake_ndev() == 0)
		return 100; /* CUDA_ERROR_NO_DEVICE */
	pthread_mutex_lock(&fake_mu);
	if (fake_used[gpu] + size <= fake_total()) {
		for (int i = 0; i < 4096; i++) {
			if (fake_allocs[i].ptr == 0) {
				fake_allocs[i].ptr = fake_next;
				fake_allocs[i].size = size;
				fake_allocs[i].gpu = gpu;
				*out = fake_next;
				fake_next += (size + 0xfffffull) & ~0xfffffull;
				fake_next += 0x100000ull;
				fake_used[gpu] += size;
				fake_ledger();
				r = CUDA_SUCCESS;
				break;
			}
		}
	}
	pthread_mutex_unlock(&fake_mu);
	fake_log("alloc gpu=%d size=%zu rc=%d", gpu, size, r);
	return r;
}

static CUresult fake_free(unsigned long long ptr)
{
	CUresult r = CUDA_ERROR_INVALID_VALUE;

	pthread_mutex_lock(&fake_mu);
	for (int i = 0; i < 4096; i++) {
		if (fake_allocs[i].ptr == ptr && ptr) {
			fake_used[fake_allocs[i].gpu] -= fake_allocs[i].size;
			fake_allocs[i].ptr = 0;
			fake_ledger();
			r = CUDA_SUCCESS;
			break;
		}
	}
	pthread_mutex_unlock(&fake_mu);
	return r;
}

FAKE_API CUresult cuInit(unsigned int Flags)
{
	fake_log("cuInit flags=%u", Flags);
	return CUDA_SUCCESS;
}

FAKE_API CUresult cuDriverGetVersion(int *v)
{
	fake_log("cuDriverGetVersion");
	if (!v)
		return CUDA_ERROR_INVALID_VALUE;
	*v = 13000;
	return CUDA_SUCCESS;
}

FAKE_API CUresult cuMemAlloc_v2(CUdeviceptr *dptr, size_t bytesize)
{
	CUresult r = dptr ? fake_alloc(dptr, bytesize) : CUDA_ERROR_INVALID_VALUE;

	fake_log("cuMemAlloc_v2 size=%zu rc=%d", bytesize, r);
	return r;
}

FAKE_API CUresult cuMemAllocPitch_v2(CUdeviceptr *dptr, size_t *pPitch, size_t WidthInBytes, size_t Height,
				     unsigned int ElementSizeBytes)
{
	size_t pitch = (WidthInBytes + 511u) & ~(size_t)511u; /* the real driver aligns rows too */
	CUresult r;

	if (!dptr || !pPitch)
		return CUDA_ERROR_INVALID_VALUE;
	r = fake_alloc(dptr, pitch * Height);
	if (r == CUDA_SUCCESS)
		*pPitch = pitch;
	fake_log("cuMemAllocPitch_v2 width=%zu height=%zu elem=%u pitch=%zu rc=%d", WidthInBytes, Height,
		 ElementSizeBytes, pitch, r);
	return r;
}

FAKE_API CUresult cuMemAllocManaged(CUdeviceptr *dptr, size_t bytesize, unsigned int flags)
{
	CUresult r = dptr ? fake_alloc(dptr, bytesize) : CUDA_ERROR_INVALID_VALUE;

	fake_log("cuMemAllocManaged size=%zu flags=%u rc=%d", bytesize, flags, r);
	return r;
}

FAKE_API CUresult cuMemFree_v2(CUdeviceptr dptr)
{
	CUresult r = fake_free(dptr);

	fake_log("cuMemFree_v2 ptr=0x%llx rc=%d", dptr, r);
	return r;
}

FAKE_API CUresult cuMemCreate(CUmemGenericAllocationHandle *handle, size_t size, const CUmemAllocationProp *prop,
			      unsigned long long flags)
{
	CUresult r = handle ? fake_alloc(handle, size) : CUDA_ERROR_INVALID_VALUE;

	(void)prop;
	fake_log("cuMemCreate size=%zu flags=%llu rc=%d", size, flags, r);
	return r;
}

FAKE_API CUresult cuMemRelease(CUmemGenericAllocationHandle handle)
{
	CUresult r = fake_free(handle);

	fake_log("cuMemRelease handle=0x%llx rc=%d", handle, r);
	return r;
}

#define FAKE_ASYNC(name)                                                                      \
	FAKE_API CUresult name(CUdeviceptr *dptr, size_t bytesize, CUstream hStream)          \
	{                                                                                     \
		CUresult r = dptr ? fake_alloc(dptr, bytesize) : CUDA_ERROR_INVALID_VALUE;    \
		fake_log(#name " size=%zu stream=%p rc=%d", bytesize, (void *)hStream, r);    \
		return r;                                                                     \
	}
FAKE_ASYNC(cuMemAllocAsync)
FAKE_ASYNC(cuMemAllocAsync_ptsz)

#define FAKE_POOL(name)                                                                                  \
	FAKE_API CUresult name(CUdeviceptr *dptr, size_t bytesize, CUmemoryPool pool, CUstream hStream)  \
	{                                                                                                \
		CUresult r = dptr ? fake_alloc(dptr, bytesize) : CUDA_ERROR_INVALID_VALUE;               \
		fake_log(#name " size=%zu pool=%p stream=%p rc=%d", bytesize, (void *)pool, (void *)hStream, r); \
		return r;                                                                                \
	}
FAKE_POOL(cuMemAllocFromPoolAsync)
FAKE_POOL(cuMemAllocFromPoolAsync_ptsz)

#define FAKE_FREE_ASYNC(name)                                                    \
	FAKE_API CUresult name(CUdeviceptr dptr, CUstream hStream)               \
	{                                                                        \
		CUresult r = fake_free(dptr);                                    \
		fake_log(#name " ptr=0x%llx stream=%p rc=%d", dptr, (void *)hStream, r); \
		return r;                                                        \
	}
FAKE_FREE_ASYNC(cuMemFreeAsync)
FAKE_FREE_ASYNC(cuMemFreeAsync_ptsz)

FAKE_API CUresult cuMemGetInfo_v2(size_t *free, size_t *total)
{
	if (!free || !total)
		return CUDA_ERROR_INVALID_VALUE;
	pthread_mutex_lock(&fake_mu);
	*total = fake_total();
	*free = *total - fake_used[fake_cur_gpu()];
	pthread_mutex_unlock(&fake_mu);
	fake_log("cuMemGetInfo_v2 free=%zu total=%zu", *free, *total);
	return CUDA_SUCCESS;
}

FAKE_API CUresult cuMemGetInfo(unsigned int *free, unsigned int *total)
{
	size_t f, t;

	cuMemGetInfo_v2(&f, &t);
	*free = f > 0xffffffffu ? 0xffffffffu : (unsigned int)f;
	*total = t > 0xffffffffu ? 0xffffffffu : (unsigned int)t;
	fake_log("cuMemGetInfo");
	return CUDA_SUCCESS;
}

/* sleeps the microseconds the environment variable var names (none: no sleep) */
static void fake_sleep_env(const char *var)
{
	const char *s = getenv(var);
	long us = s ? atol(s) : 0;

	if (us > 0) {
		struct timespec ts = {us / 1000000, (us % 1000000) * 1000};
		nanosleep(&ts, NULL);
	}
}

static void fake_kernel_time(void)
{
	fake_sleep_env("FAKECUDA_KERNEL_US");
}


/* ---- images and their .global symbols ---- */

#define FAKE_MAX_IMAGES 64
#define FAKE_MAX_GLOBALS 64

#define FAKE_MAX_CTX 4

struct fake_global {
	char name[128];
	size_t size;
	unsigned char *mem;  /* in the first context (0x4000) */
	unsigned char *init; /* as loaded: what another context's copy starts from */
	uintptr_t ctx[FAKE_MAX_CTX];
	unsigned char *ctxmem[FAKE_MAX_CTX]; /* the copies of other contexts (a library's globals are per context) */
};

struct fake_image {
	int n;
	int unloaded; /* cuLibraryUnload / cuModuleUnload: its globals are gone */
	uintptr_t handle;
	int nglobals;
	struct fake_global g[FAKE_MAX_GLOBALS];
};

static struct fake_image fake_images[FAKE_MAX_IMAGES];
static int fake_nimages;
static int fake_ctx_current = -1; /* -1: not decided yet (FAKECUDA_NO_CONTEXT) */
static __thread uintptr_t fake_ctx_ptr = 0x4000; /* this thread's current context, when there is one (0x4000: device 0's primary) */

/* A global's memory in the current context. fake_mu held. */
static unsigned char *fake_mem_of(struct fake_global *g)
{
	if (fake_ctx_ptr == 0x4000)
		return g->mem;
	for (int c = 0; c < FAKE_MAX_CTX; c++) {
		if (g->ctx[c] == fake_ctx_ptr)
			return g->ctxmem[c];
		if (!g->ctx[c]) {
			g->ctxmem[c] = malloc(g->size ? g->size : 1);
			if (!g->ctxmem[c])
				return g->mem;
			memcpy(g->ctxmem[c], g->init ? g->init : g->mem, g->size);
			g->ctx[c] = fake_ctx_ptr;
			return g->ctxmem[c];
		}
	}
	return g->mem;
}

static size_t fake_type_size(const char *t, size_t n)
{
	if (n < 3 || t[0] != '.')
		return 0;
	if ((t[1] == 'b' || t[1] == 'u' || t[1] == 's') && n == 3 && t[2] == '8')
		return 1;
	if (n == 4 && (t[1] == 'b' || t[1] == 'u' || t[1] == 's' || t[1] == 'f')) {
		if (!strncmp(t + 2, "16", 2))
			return 2;
		if (!strncmp(t + 2, "32", 2))
			return 4;
		if (!strncmp(t + 2, "64", 2))
			return 8;
	}
	return 0;
}

static const char *fake_skip(const char *p)
{
	while (*p == ' ' || *p == '\t' || *p == '\n' || *p == '\r')
		p++;
	return p;
}

/* ".global [.align N] .TYPE NAME[[N]] [= {v, ...} | = v];" -> a zeroed/initialised host buffer */
static void fake_parse_globals(struct fake_image *im, const char *ptx)
{
	for (const char *p = ptx; (p = strstr(p, ".global")) != NULL; p += 7) {
		struct fake_global *g;
		const char *q = p + 7, *name;
		size_t esz = 0, count = 1, nlen;

		if ((p != ptx && !(p[-1] == ' ' || p[-1] == '\t' || p[-1] == '\n')) || (*q != ' ' && *q != '\t'))
			continue;
		q = fake_skip(q);
		if (!strncmp(q, ".align", 6)) {
			q = fake_skip(q + 6);
			while (*q >= '0' && *q <= '9')
				q++;
			q = fake_skip(q);
		}
		{
			size_t tl = strcspn(q, " \t");
			esz = fake_type_size(q, tl);
			q = fake_skip(q + tl);
		}
		if (!esz)
			continue;
		name = q;
		nlen = strcspn(q, " \t[;=");
		q += nlen;
		if (*q == '[') {
			count = strtoull(q + 1, NULL, 10);
			q = strchr(q, ']');
			if (!q)
				continue;
			q++;
		}
		if (im->nglobals >= FAKE_MAX_GLOBALS || !nlen || nlen >= sizeof(im->g[0].name) || !count)
			continue;
		g = &im->g[im->nglobals];
		memcpy(g->name, name, nlen);
		g->name[nlen] = 0;
		g->size = esz * count;
		g->mem = calloc(1, g->size);
		if (!g->mem)
			continue;
		im->nglobals++;
		q = fake_skip(q);
		if (*q == '=') {
			q = fake_skip(q + 1);
			if (*q == '{')
				q++;
			for (size_t k = 0; k < count; k++) {
				char *end;
				unsigned long long v;

				q = fake_skip(q);
				v = strtoull(q, &end, 0);
				if (end == q)
					break;
				for (size_t b = 0; b < esz; b++)
					g->mem[k * esz + b] = (unsigned char)(v >> (8 * b));
				q = fake_skip(end);
				if (*q != ',')
					break;
				q++;
			}
		}
	}
}

static void fake_write_file(const char *name, const void *data, size_t n)
{
	const char *dir = getenv("FAKECUDA_IMAGE_DIR");
	char path[4096];
	int fd;

	if (!dir || !*dir)
		return;
	snprintf(path, sizeof(path), "%s/%s", dir, name);
	fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	if (fd < 0)
		return;
	(void)!write(fd, data, n);
	close(fd);
}

static int fake_patched_jit_fails(const void *image, CUjit_option *opts, void **vals, unsigned int n)
{
	const char *s = getenv("FAKECUDA_JIT_FAIL");
	struct gx_image img;
	int patched;

	if (!s || strcmp(s, "1") != 0)
		return 0;
	gx_image_inspect(image, 0, &img);
	patched = img.kind == GX_IMAGE_PTX && img.ptx && strstr(img.ptx, "__gpuext_probe_entry");
	gx_image_release(&img);
	if (!patched)
		return 0;
	for (unsigned int k = 0; k < n; k++)
		if (opts[k] == CU_JIT_ERROR_LOG_BUFFER && vals[k])
			snprintf(vals[k], 64, "ptxas fatal   : fake JIT failure");
	return 1;
}

/* Records an image load; returns the new image's handle. */
static uintptr_t fake_record_image(const char *api, const void *image, uintptr_t base)
{
	struct gx_image img;
	struct fake_image *im;
	char name[64];
	int n;

	pthread_mutex_lock(&fake_mu);
	n = fake_nimages < FAKE_MAX_IMAGES ? fake_nimages++ : FAKE_MAX_IMAGES - 1;
	im = &fake_images[n];
	memset(im, 0, sizeof(*im));
	im->n = n;
	im->handle = base + (uintptr_t)n * 0x10;
	gx_image_inspect(image, 0, &img);
	if (img.kind == GX_IMAGE_PTX) {
		snprintf(name, sizeof(name), "image-%d.ptx", n);
		fake_write_file(name, img.ptx, img.ptx_len);
		fake_parse_globals(im, img.ptx);
		for (int k = 0; k < im->nglobals; k++)
			if ((im->g[k].init = malloc(im->g[k].size ? im->g[k].size : 1)))
				memcpy(im->g[k].init, im->g[k].mem, im->g[k].size);
	} else if (img.fatbin) {
		snprintf(name, sizeof(name), "image-%d.fatbin", n);
		fake_write_file(name, img.fatbin, img.fatbin_size);
	} else if (img.kind == GX_IMAGE_ELF) {
		const unsigned char *e = image;
		uint64_t shoff;
		uint16_t shentsize, shnum;

		memcpy(&shoff, e + 0x28, 8);
		memcpy(&shentsize, e + 0x3a, 2);
		memcpy(&shnum, e + 0x3c, 2);
		snprintf(name, sizeof(name), "image-%d.cubin", n);
		fake_write_file(name, image, (size_t)(shoff + (uint64_t)shentsize * shnum));
	}
	pthread_mutex_unlock(&fake_mu);
	fake_log("image-load n=%d api=%s kind=%s globals=%d", n, api, gx_image_kind_name(img.kind), im->nglobals);
	gx_image_release(&img);
	return im->handle;
}

static struct fake_global *fake_global_of(uintptr_t handle, const char *name)
{
	for (int i = 0; i < fake_nimages; i++)
		if (fake_images[i].handle == handle)
			for (int k = 0; k < fake_images[i].nglobals; k++)
				if (!strcmp(fake_images[i].g[k].name, name))
					return &fake_images[i].g[k];
	return NULL;
}

/* 1 if p lies in g's memory, in any context */
static int fake_global_has(const struct fake_global *g, CUdeviceptr p)
{
	if (p >= (uintptr_t)g->mem && p < (uintptr_t)g->mem + g->size)
		return 1;
	for (int c = 0; c < FAKE_MAX_CTX; c++)
		if (g->ctxmem[c] && p >= (uintptr_t)g->ctxmem[c] && p < (uintptr_t)g->ctxmem[c] + g->size)
			return 1;
	return 0;
}

/* the image and global holding a "device" address, or NULL */
static struct fake_image *fake_image_at(CUdeviceptr p, struct fake_global **gp)
{
	for (int i = 0; i < fake_nimages; i++)
		for (int k = 0; k < fake_images[i].nglobals; k++)
			if (fake_global_has(&fake_images[i].g[k], p)) {
				*gp = &fake_images[i].g[k];
				return &fake_images[i];
			}
	return NULL;
}

/* the global holding a "device" address, for the call log */
static const char *fake_global_at(CUdeviceptr p)
{
	struct fake_global *g;

	return fake_image_at(p, &g) ? g->name : "?";
}

/* 1 if p lies in a global of an unloaded image. fake_mu held. */
static int fake_unloaded_at(CUdeviceptr p)
{
	struct fake_global *g;
	struct fake_image *im = fake_image_at(p, &g);

	return im && im->unloaded;
}

/* cuLibraryUnload / cuModuleUnload of a loaded image (other handles: the interposer's own modules). */
static void fake_unload(uintptr_t handle)
{
	pthread_mutex_lock(&fake_mu);
	for (int i = 0; i < fake_nimages; i++)
		if (fake_images[i].handle == handle)
			fake_images[i].unloaded = 1;
	pthread_mutex_unlock(&fake_mu);
}

/*
 * Kernel handles of the host-side launch tests: FAKE_FN(i, k) is kernel k
 * of image i (0x50000000 + i * 0x1000 + k * 0x10); its name is
 * "fake_i<i>_k<k>", or for k 99 a 1456-byte CUTLASS-like name. Other
 * handles (0x5000) belong to the newest image, as before.
 */
#define FAKE_FN_BASE ((uintptr_t)0x50000000)
static int fake_fn_image(uintptr_t f)
{
	if (f < FAKE_FN_BASE || f >= FAKE_FN_BASE + (uintptr_t)FAKE_MAX_IMAGES * 0x1000)
		return -1;
	return (int)((f - FAKE_FN_BASE) / 0x1000);
}

/* a probe that counts launches: image i's counter for its kernels, every image's for 0x5000 */
static void fake_probe_run(uintptr_t f)
{
	int only = fake_fn_image(f);
	const char *s = getenv("FAKECUDA_PROBE_COUNTER");
	char sym[128];
	const char *colon;
	size_t off;

	if (!s || !(colon = strchr(s, ':')) || (size_t)(colon - s) >= sizeof(sym))
		return;
	memcpy(sym, s, (size_t)(colon - s));
	sym[colon - s] = 0;
	off = strtoull(colon + 1, NULL, 10);
	pthread_mutex_lock(&fake_mu);
	for (int i = 0; i < fake_nimages; i++)
		for (int k = 0; k < fake_images[i].nglobals && (only < 0 || only == i); k++) {
			struct fake_global *g = &fake_images[i].g[k];
			uint64_t v;

			if (strcmp(g->name, sym) || off + 8 > g->size)
				continue;
			unsigned char *mem = fake_mem_of(g);

			memcpy(&v, mem + off, 8);
			v++;
			memcpy(mem + off, &v, 8);
		}
	pthread_mutex_unlock(&fake_mu);
}

static int fake_has_context(void)
{
	if (fake_ctx_current < 0) {
		const char *s = getenv("FAKECUDA_NO_CONTEXT");

		fake_ctx_current = !(s && !strcmp(s, "1"));
	}
	return fake_ctx_current;
}

FAKE_API CUresult cuCtxGetCurrent(CUcontext *pctx)
{
	if (!pctx)
		return CUDA_ERROR_INVALID_VALUE;
	*pctx = fake_has_context() ? (CUcontext)fake_ctx_ptr : NULL;
	return CUDA_SUCCESS;
}

/*
 * Contexts that end: cuCtxDestroy_v2 ends a context (any but the primary
 * 0x4000); the primary ends when released as often as retained (one
 * reference to start with: the process's) or reset, and a retain starts it
 * again. Making an ended context current is what crashed the real driver
 * ("free(): invalid pointer" at exit on the H200): here it logs
 * "cuCtxSetCurrent ctx=... ended" and aborts the process.
 */
#define FAKE_MAX_ENDED 16
static uintptr_t fake_ended[FAKE_MAX_ENDED];
static int fake_primary_refs = 1;

static int fake_ctx_ended(uintptr_t c)
{
	int r = 0;

	pthread_mutex_lock(&fake_mu);
	if (c == 0x4000)
		r = fake_primary_refs <= 0;
	for (int i = 0; i < FAKE_MAX_ENDED && !r; i++)
		r = fake_ended[i] == c;
	pthread_mutex_unlock(&fake_mu);
	return r;
}

FAKE_API CUresult cuCtxDestroy_v2(CUcontext ctx)
{
	uintptr_t c = (uintptr_t)ctx;

	fake_log("cuCtxDestroy_v2 ctx=%p", (void *)ctx);
	if (!c || c == 0x4000 || fake_ctx_ended(c))
		return 201; /* CUDA_ERROR_INVALID_CONTEXT */
	pthread_mutex_lock(&fake_mu);
	for (int i = 0; i < FAKE_MAX_ENDED; i++)
		if (!fake_ended[i]) {
			fake_ended[i] = c;
			break;
		}
	pthread_mutex_unlock(&fake_mu);
	if (fake_ctx_ptr == c)
		fake_ctx_current = 0;
	return CUDA_SUCCESS;
}

FAKE_API CUresult cuDevicePrimaryCtxGetState(CUdevice dev, unsigned int *flags, int *active)
{
	if (dev < 0 || dev >= fake_ndev() || !flags || !active)
		return CUDA_ERROR_INVALID_VALUE;
	*flags = 0;
	pthread_mutex_lock(&fake_mu);
	*active = fake_primary_refs > 0;
	pthread_mutex_unlock(&fake_mu);
	return CUDA_SUCCESS;
}

FAKE_API CUresult cuDevicePrimaryCtxRetain(CUcontext *pctx, CUdevice dev)
{
	if (dev < 0 || dev >= fake_ndev() || !pctx)
		return CUDA_ERROR_INVALID_VALUE;
	pthread_mutex_lock(&fake_mu);
	if (dev == 0) /* device 0's primary context ends and starts again; the others live as long as the process */
		fake_primary_refs = fake_primary_refs > 0 ? fake_primary_refs + 1 : 1;
	pthread_mutex_unlock(&fake_mu);
	*pctx = (CUcontext)fake_primary_of(dev);
	fake_log("cuDevicePrimaryCtxRetain dev=%d", dev);
	fake_log_mps("cuDevicePrimaryCtxRetain", dev);
	return CUDA_SUCCESS;
}

/* one reference fewer (release), or none (reset) */
static CUresult fake_primary_drop(const char *api, CUdevice dev, int all)
{
	if (dev < 0 || dev >= fake_ndev())
		return CUDA_ERROR_INVALID_VALUE;
	if (dev != 0) {
		fake_log("%s dev=%d", api, dev);
		return CUDA_SUCCESS;
	}
	pthread_mutex_lock(&fake_mu);
	if (all || fake_primary_refs <= 0)
		fake_primary_refs = 0;
	else
		fake_primary_refs--;
	pthread_mutex_unlock(&fake_mu);
	fake_log("%s dev=%d", api, dev);
	return CUDA_SUCCESS;
}

FAKE_API CUresult cuDevicePrimaryCtxRelease_v2(CUdevice dev)
{
	return fake_primary_drop("cuDevicePrimaryCtxRelease_v2", dev, 0);
}

FAKE_API CUresult cuDevicePrimaryCtxReset_v2(CUdevice dev)
{
	return fake_primary_drop("cuDevicePrimaryCtxReset_v2", dev, 1);
}

FAKE_API CUresult cuDevicePrimaryCtxRelease(CUdevice dev)
{
	return fake_primary_drop("cuDevicePrimaryCtxRelease", dev, 0);
}

FAKE_API CUresult cuDevicePrimaryCtxReset(CUdevice dev)
{
	return fake_primary_drop("cuDevicePrimaryCtxReset", dev, 1);
}

FAKE_API CUresult cuCtxSetCurrent(CUcontext ctx)
{
	if (ctx && fake_ctx_ended((uintptr_t)ctx)) {
		fake_log("cuCtxSetCurrent ctx=%p ended", (void *)ctx);
		fprintf(stderr, "fakecuda: cuCtxSetCurrent(%p): the context ended\n", (void *)ctx);
		abort();
	}
	fake_has_context();
	fake_ctx_current = ctx != NULL;
	if (ctx) {
		pthread_mutex_lock(&fake_mu);
		fake_ctx_ptr = (uintptr_t)ctx;
		pthread_mutex_unlock(&fake_mu);
	}
	fake_log("cuCtxSetCurrent ctx=%p", (void *)ctx);
	return CUDA_SUCCESS;
}

/*
 * Stream capture, as far as the interposer meets it: one capture at a time
 * (cuStreamBeginCapture_v2 .. cuStreamEndCapture). While a capture runs in
 * GLOBAL mode, or in the capturing thread itself unless RELAXED, a
 * "potentially unsafe" call (a synchronisation, a copy to or from pageable
 * host memory, a pinned allocation) from a thread not in RELAXED mode
 * (cuThreadExchangeStreamCaptureMode) fails with
 * CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED and invalidates the capture: its
 * cuStreamEndCapture returns CUDA_ERROR_STREAM_CAPTURE_INVALIDATED.
 */
#define FAKE_CAPTURE_GLOBAL 0
#define FAKE_CAPTURE_RELAXED 2
static int fake_cap_active, fake_cap_mode, fake_cap_invalid;
/* a graph: the kernel launches captured into it (CUDA_KERNEL_NODE_PARAMS_v2 each) */
#define FAKE_GRAPH_NODES 256
struct fake_node {
	CUfunction func;
	unsigned int grid[3], block[3], shm;
	void **params, **extra;
	CUkernel kern;
	CUcontext ctx;
};
struct fake_graph {
	int n;
	struct fake_node node[FAKE_GRAPH_NODES];
};
static struct fake_graph fake_captured;
static CUstream fake_cap_stream;
static pthread_t fake_cap_thread;
static __thread int fake_thread_mode = FAKE_CAPTURE_GLOBAL;

static CUresult fake_unsafe(const char *what)
{
	int prohibited;

	pthread_mutex_lock(&fake_mu);
	prohibited = fake_cap_active && fake_thread_mode != FAKE_CAPTURE_RELAXED &&
		     (fake_cap_mode == FAKE_CAPTURE_GLOBAL ||
		      (pthread_equal(fake_cap_thread, pthread_self()) && fake_cap_mode != FAKE_CAPTURE_RELAXED));
	if (prohibited)
		fake_cap_invalid = 1;
	pthread_mutex_unlock(&fake_mu);
	if (!prohibited)
		return CUDA_SUCCESS;
	fake_log("%s during a stream capture rc=900", what);
	return 900; /* CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED */
}

FAKE_API CUresult cuThreadExchangeStreamCaptureMode(int *mode)
{
	int old;

	if (!mode)
		return CUDA_ERROR_INVALID_VALUE;
	old = fake_thread_mode;
	fake_thread_mode = *mode;
	*mode = old;
	return CUDA_SUCCESS;
}

FAKE_API CUresult cuStreamBeginCapture_v2(CUstream s, int mode)
{
	pthread_mutex_lock(&fake_mu);
	fake_cap_active = 1;
	fake_cap_mode = mode;
	fake_cap_invalid = 0;
	fake_cap_stream = s;
	fake_cap_thread = pthread_self();
	pthread_mutex_unlock(&fake_mu);
	fake_log("cuStreamBeginCapture_v2 stream=%p mode=%d", (void *)s, mode);
	return CUDA_SUCCESS;
}

FAKE_API CUresult cuStreamEndCapture(CUstream s, void **graph)
{
	int invalid;

	pthread_mutex_lock(&fake_mu);
	invalid = fake_cap_invalid;
	fake_cap_active = 0;
	pthread_mutex_unlock(&fake_mu);
	fake_log("cuStreamEndCapture stream=%p rc=%d", (void *)s, invalid ? 901 : 0);
	if (invalid)
		return 901; /* CUDA_ERROR_STREAM_CAPTURE_INVALIDATED */
	if (graph) {
		struct fake_graph *g = calloc(1, sizeof(*g));

		pthread_mutex_lock(&fake_mu);
		if (g) {
			*g = fake_captured;
			*graph = g;
		} else {
			*graph = (void *)0x7000;
		}
		memset(&fake_captured, 0, sizeof(fake_captured));
		pthread_mutex_unlock(&fake_mu);
	}
	return CUDA_SUCCESS;
}

FAKE_API CUresult cuStreamIsCapturing(CUstream s, int *status)
{
	if (!status)
		return CUDA_ERROR_INVALID_VALUE;
	pthread_mutex_lock(&fake_mu);
	*status = fake_cap_active && fake_cap_stream == s ? (fake_cap_invalid ? 2 : 1) : 0;
	pthread_mutex_unlock(&fake_mu);
	return CUDA_SUCCESS;
}

FAKE_API CUresult cuCtxSynchronize(void)
{
	if (fake_unsafe("cuCtxSynchronize"))
		return 900;
	fake_sleep_env("FAKECUDA_SYNC_US"); /* how long the context's work takes to finish */
	fake_log("cuCtxSynchronize");
	return CUDA_SUCCESS;
}

FAKE_API CUresult cuCtxGetDevice(CUdevice *dev)
{
	if (!dev || !fake_has_context())
		return 201; /* CUDA_ERROR_INVALID_CONTEXT */
	*dev = fake_cur_ordinal();
	return CUDA_SUCCESS;
}

FAKE_API CUresult cuDeviceGet(CUdevice *dev, int ordinal)
{
	if (!dev || ordinal < 0 || ordinal >= fake_ndev())
		return CUDA_ERROR_INVALID_VALUE;
	*dev = ordinal;
	return CUDA_SUCCESS;
}

FAKE_API CUresult cuDeviceGetCount(int *count)
{
	if (!count)
		return CUDA_ERROR_INVALID_VALUE;
	*count = fake_ndev();
	return CUDA_SUCCESS;
}

FAKE_API CUresult cuDeviceGetAttribute(int *v, int attrib, CUdevice dev)
{
	const char *s = getenv("FAKECUDA_CC");
	int cc = s && *s ? atoi(s) : 90;

	(void)dev;
	if (!v)
		return CUDA_ERROR_INVALID_VALUE;
	if (attrib == CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR)
		*v = cc / 10;
	else if (attrib == CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR)
		*v = cc % 10;
	else
		*v = 0;
	return CUDA_SUCCESS;
}

FAKE_API CUresult cuStreamCreate(CUstream *s, unsigned int flags)
{
	static uintptr_t next = 0x6000;

	if (!s)
		return CUDA_ERROR_INVALID_VALUE;
	*s = (CUstream)(next += 0x10);
	fake_log("cuStreamCreate flags=%u stream=%p", flags, (void *)*s);
	return CUDA_SUCCESS;
}

FAKE_API CUresult cuStreamDestroy_v2(CUstream s)
{
	fake_log("cuStreamDestroy_v2 stream=%p", (void *)s);
	return s ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

FAKE_API CUresult cuStreamSynchronize(CUstream s)
{
	if (fake_unsafe("cuStreamSynchronize"))
		return 900;
	(void)s;
	return CUDA_SUCCESS;
}

FAKE_API CUresult cuMemcpyDtoHAsync_v2(void *dst, CUdeviceptr src, size_t n, CUstream s)
{
	if (fake_unsafe("cuMemcpyDtoHAsync_v2"))
		return 900;
	pthread_mutex_lock(&fake_mu);
	if (fake_unloaded_at(src)) { /* the real driver: freed memory, or someone else's */
		pthread_mutex_unlock(&fake_mu);
		fake_log("cuMemcpyDtoHAsync_v2 src=%s bytes=%zu unloaded", fake_global_at(src), n);
		return CUDA_ERROR_INVALID_VALUE;
	}
	memcpy(dst, (const void *)(uintptr_t)src, n);
	pthread_mutex_unlock(&fake_mu);
	fake_log("cuMemcpyDtoHAsync_v2 src=%s bytes=%zu stream=%p", fake_global_at(src), n, (void *)s);
	return CUDA_SUCCESS;
}

FAKE_API CUresult cuMemcpyHtoDAsync_v2(CUdeviceptr dst, const void *src, size_t n, CUstream s)
{
	if (fake_unsafe("cuMemcpyHtoDAsync_v2"))
		return 900;
	unsigned long long v = 0;

	pthread_mutex_lock(&fake_mu);
	memcpy((void *)(uintptr_t)dst, src, n);
	pthread_mutex_unlock(&fake_mu);
	memcpy(&v, src, n < 8 ? n : 8);
	fake_log("cuMemcpyHtoDAsync_v2 dst=%s bytes=%zu value=%llu stream=%p", fake_global_at(dst), n, v, (void *)s);
	return CUDA_SUCCESS;
}

static CUresult fake_get_global(const char *api, CUdeviceptr *dptr, size_t *bytes, uintptr_t handle, const char *name)
{
	struct fake_global *g;

	if (!fake_has_context()) {
		fake_log("%s name=%s rc=201", api, name);
		return 201; /* CUDA_ERROR_INVALID_CONTEXT */
	}
	g = fake_global_of(handle, name);
	fake_log("%s name=%s %s", api, name, g ? "found" : "not-found");
	if (!g)
		return CUDA_ERROR_NOT_FOUND;
	if (dptr) {
		pthread_mutex_lock(&fake_mu);
		*dptr = (CUdeviceptr)(uintptr_t)fake_mem_of(g);
		pthread_mutex_unlock(&fake_mu);
	}
	if (bytes)
		*bytes = g->size;
	return CUDA_SUCCESS;
}

/* the launch in these tests always uses f=0x5000: it belongs to the newest image of that kind */
static CUresult fake_newest(uintptr_t base, uintptr_t *out)
{
	for (int i = fake_nimages - 1; i >= 0; i--)
		if ((fake_images[i].handle & ~(uintptr_t)0xfffff) == base) {
			*out = fake_images[i].handle;
			return CUDA_SUCCESS;
		}
	return 400; /* CUDA_ERROR_INVALID_HANDLE */
}

/* FAKE_FN(i, k): image i's handle when it has that kind (base), else 400 */
static CUresult fake_fn_handle(uintptr_t f, uintptr_t base, uintptr_t *out)
{
	int i = fake_fn_image(f);

	if (i < 0)
		return fake_newest(base, out);
	if (i >= fake_nimages || (fake_images[i].handle & ~(uintptr_t)0xfffff) != base)
		return 400;
	*out = fake_images[i].handle;
	return CUDA_SUCCESS;
}

FAKE_API CUresult cuKernelGetLibrary(CUlibrary *lib, CUkernel k)
{
	uintptr_t h = 0;
	CUresult r = fake_fn_handle((uintptr_t)k, 0x100000, &h);

	if (r == CUDA_SUCCESS && lib)
		*lib = (CUlibrary)h;
	return r;
}

FAKE_API CUresult cuFuncGetModule(CUmodule *mod, CUfunction f)
{
	uintptr_t h = 0;
	CUresult r = fake_fn_handle((uintptr_t)f, 0x200000, &h);

	if (r == CUDA_SUCCESS && mod)
		*mod = (CUmodule)h;
	return r;
}

/*
 * A module's global gets the value; an allocation has no memory behind it
 * here; anything else is refused, and so is any flag: the H200's driver
 * (580) answers CUDA_ERROR_INVALID_VALUE to the _v2 call with
 * CU_STREAM_WRITE_VALUE_NO_MEMORY_BARRIER (1).
 */
FAKE_API CUresult cuStreamWriteValue64_v2(CUstream s, CUdeviceptr addr, cuuint64_t value, unsigned int flags)
{
	struct fake_global *g;
	CUresult r = CUDA_ERROR_INVALID_VALUE;

	pthread_mutex_lock(&fake_mu);
	if (flags) {
		/* refused */
	} else if (fake_image_at(addr, &g)) {
		memcpy((void *)(uintptr_t)addr, &value, 8);
		r = CUDA_SUCCESS;
	} else {
		for (int i = 0; i < 4096 && r != CUDA_SUCCESS; i++)
			if (fake_allocs[i].ptr && addr >= fake_allocs[i].ptr && addr + 8 <= fake_allocs[i].ptr + fake_allocs[i].size)
				r = CUDA_SUCCESS;
	}
	pthread_mutex_unlock(&fake_mu);
	if (r != CUDA_SUCCESS) {
		fake_log("cuStreamWriteValue64_v2 dst=0x%llx unknown rc=%d", addr, r);
		return r;
	}
	fake_log("cuStreamWriteValue64_v2 dst=%s value=%llu flags=%u stream=%p", fake_global_at(addr),
		 (unsigned long long)value, flags, (void *)s);
	return CUDA_SUCCESS;
}

FAKE_API CUresult cuLibraryGetGlobal(CUdeviceptr *dptr, size_t *bytes, CUlibrary lib, const char *name)
{
	return fake_get_global("cuLibraryGetGlobal", dptr, bytes, (uintptr_t)lib, name);
}

FAKE_API CUresult cuModuleGetGlobal_v2(CUdeviceptr *dptr, size_t *bytes, CUmodule mod, const char *name)
{
	return fake_get_global("cuModuleGetGlobal_v2", dptr, bytes, (uintptr_t)mod, name);
}

/*
 * The interposer's clock kernel (devrt/lib/probe_clock.c, gx_clock_sync): not an
 * application image, so not recorded as one. Launched, a thread plays it:
 * for each round it waits for the host's round number in the mapped flag
 * and answers with the fake %globaltimer, CLOCK_REALTIME +
 * FAKECUDA_GLOBALTIMER_OFFSET_NS; FAKECUDA_CLOCK_NO_START=1: it never runs.
 */
#define FAKE_CLOCK_MODULE ((uintptr_t)0x300000)
#define FAKE_CLOCK_FUNC ((uintptr_t)0x5c10c)

static int fake_is_clock_image(const void *image)
{
	return image && strstr((const char *)image, ".entry __gpuext_clock_sync(") != NULL;
}

struct fake_clock_run {
	volatile uint64_t *flag, *out;
	unsigned int n;
};

static void *fake_clock_kernel(void *arg)
{
	struct fake_clock_run run = *(struct fake_clock_run *)arg;
	const char *s = getenv("FAKECUDA_GLOBALTIMER_OFFSET_NS");
	long long off = s ? atoll(s) : 0;

	free(arg);
	for (unsigned int i = 1; i <= run.n; i++) {
		struct timespec ts;

		while (__atomic_load_n(run.flag, __ATOMIC_ACQUIRE) < i)
			;
		clock_gettime(CLOCK_REALTIME, &ts);
		__atomic_store_n(&run.out[i - 1], (uint64_t)((long long)ts.tv_sec * 1000000000ll + ts.tv_nsec + off),
				 __ATOMIC_RELEASE);
	}
	return NULL;
}

static CUresult fake_clock_launch(void **params)
{
	const char *s = getenv("FAKECUDA_CLOCK_NO_START");
	struct fake_clock_run *run;
	CUdeviceptr flag, out;
	pthread_t th;

	fake_log("cuLaunchKernel clock-sync");
	if (s && !strcmp(s, "1"))
		return CUDA_SUCCESS; /* queued behind work that never ends */
	if (!params || !(run = malloc(sizeof(*run))))
		return CUDA_ERROR_INVALID_VALUE;
	memcpy(&flag, params[0], sizeof(flag));
	memcpy(&out, params[1], sizeof(out));
	memcpy(&run->n, params[2], sizeof(run->n));
	run->flag = (volatile uint64_t *)(uintptr_t)flag;
	run->out = (volatile uint64_t *)(uintptr_t)out;
	if (pthread_create(&th, NULL, fake_clock_kernel, run) != 0) {
		free(run);
		return CUDA_ERROR_OUT_OF_MEMORY;
	}
	pthread_detach(th);
	return CUDA_SUCCESS;
}

FAKE_API CUresult cuModuleGetFunction(CUfunction *f, CUmodule mod, const char *name)
{
	fake_log("cuModuleGetFunction name=%s", name ? name : "");
	if (!f || (uintptr_t)mod != FAKE_CLOCK_MODULE || !name || strcmp(name, "__gpuext_clock_sync"))
		return CUDA_ERROR_NOT_FOUND;
	*f = (CUfunction)FAKE_CLOCK_FUNC;
	return CUDA_SUCCESS;
}

FAKE_API CUresult cuModuleUnload(CUmodule mod)
{
	fake_log("cuModuleUnload mod=%p", (void *)mod);
	fake_unload((uintptr_t)mod);
	return CUDA_SUCCESS;
}

FAKE_API CUresult cuLibraryUnload(CUlibrary lib)
{
	fake_log("cuLibraryUnload lib=%p", (void *)lib);
	fake_unload((uintptr_t)lib);
	return CUDA_SUCCESS;
}

FAKE_API CUresult cuMemHostAlloc(void **p, size_t bytes, unsigned int flags)
{
	if (fake_unsafe("cuMemHostAlloc"))
		return 900;
	if (!p || !(*p = calloc(1, bytes ? bytes : 1)))
		return CUDA_ERROR_OUT_OF_MEMORY;
	fake_log("cuMemHostAlloc bytes=%zu flags=%u", bytes, flags);
	return CUDA_SUCCESS;
}

FAKE_API CUresult cuMemHostGetDevicePointer_v2(CUdeviceptr *d, void *p, unsigned int flags)
{
	(void)flags;
	if (!d || !p)
		return CUDA_ERROR_INVALID_VALUE;
	*d = (CUdeviceptr)(uintptr_t)p; /* mapped host memory: the same address on both sides (UVA) */
	return CUDA_SUCCESS;
}

FAKE_API CUresult cuMemFreeHost(void *p)
{
	fake_log("cuMemFreeHost");
	free(p);
	return CUDA_SUCCESS;
}

/* 1 if the launch went into the capturing stream: recorded as a node */
static int fake_capture_node(CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by,
			     unsigned bz, CUstream s)
{
	int captured = 0;

	pthread_mutex_lock(&fake_mu);
	if (fake_cap_active && fake_cap_stream == s) {
		captured = 1;
		if (fake_captured.n < FAKE_GRAPH_NODES)
			fake_captured.node[fake_captured.n++] =
				(struct fake_node){f, {gx, gy, gz}, {bx, by, bz}, 0, NULL, NULL, NULL, NULL};
	}
	pthread_mutex_unlock(&fake_mu);
	return captured;
}

/* kernel names (FAKE_FN handles; anything else is "fake_kernel") */
static const char *fake_fn_name(uintptr_t f)
{
	static __thread char buf[1500];
	int i = fake_fn_image(f), k = (int)((f - FAKE_FN_BASE) % 0x1000 / 0x10);

	if (i < 0)
		return "fake_kernel";
	if (k == 99) {
		int n = snprintf(buf, sizeof(buf), "_ZN7cutlass6KernelINS_4gemm6kernel%d", i);

		memset(buf + n, 'E', 1456 - (size_t)n);
		buf[1456] = 0;
		return buf;
	}
	snprintf(buf, sizeof(buf), "fake_i%d_k%d", i, k);
	return buf;
}

FAKE_API CUresult cuKernelGetName(const char **name, CUkernel k)
{
	if (!name || fake_fn_handle((uintptr_t)k, 0x100000, &(uintptr_t){0}) != CUDA_SUCCESS)
		return 400;
	*name = fake_fn_name((uintptr_t)k);
	return CUDA_SUCCESS;
}

FAKE_API CUresult cuFuncGetName(const char **name, CUfunction f)
{
	if (!name)
		return CUDA_ERROR_INVALID_VALUE;
	*name = fake_fn_name((uintptr_t)f);
	return CUDA_SUCCESS;
}

/*
 * Events: a launch runs (sleeps) inside cuLaunchKernel, so an event recorded
 * after it completes at once: its time is CLOCK_REALTIME at the record.
 * FAKECUDA_EVENT_PENDING=1: events never complete (cuEventQuery says not
 * ready). cuEventSynchronize and cuEventQuery are "unsafe" during a capture.
 */
struct fake_event {
	int recorded;
	int64_t ns;
};

FAKE_API CUresult cuEventCreate(void **ev, unsigned int flags)
{
	(void)flags;
	if (!ev || !(*ev = calloc(1, sizeof(struct fake_event))))
		return CUDA_ERROR_OUT_OF_MEMORY;
	fake_log("cuEventCreate");
	return CUDA_SUCCESS;
}

FAKE_API CUresult cuEventRecord(void *ev, CUstream s)
{
	struct fake_event *e = ev;
	struct timespec ts;

	(void)s;
	if (!e)
		return 400;
	clock_gettime(CLOCK_REALTIME, &ts);
	e->recorded = 1;
	e->ns = (int64_t)ts.tv_sec * 1000000000ll + ts.tv_nsec;
	return CUDA_SUCCESS;
}

static int fake_event_pending(void)
{
	const char *s = getenv("FAKECUDA_EVENT_PENDING");

	return s && !strcmp(s, "1");
}

FAKE_API CUresult cuEventQuery(void *ev)
{
	struct fake_event *e = ev;

	if (fake_unsafe("cuEventQuery"))
		return 900;
	if (!e || !e->recorded)
		return 400;
	return fake_event_pending() ? 600 /* CUDA_ERROR_NOT_READY */ : CUDA_SUCCESS;
}

FAKE_API CUresult cuEventSynchronize(void *ev)
{
	if (fake_unsafe("cuEventSynchronize"))
		return 900;
	return ev && ((struct fake_event *)ev)->recorded ? CUDA_SUCCESS : 400;
}

FAKE_API CUresult cuEventElapsedTime(float *ms, void *start, void *end)
{
	struct fake_event *a = start, *b = end;

	if (!ms || !a || !b || !a->recorded || !b->recorded)
		return 400;
	if (fake_event_pending())
		return 600;
	*ms = (float)((double)(b->ns - a->ns) / 1e6);
	return CUDA_SUCCESS;
}

FAKE_API CUresult cuEventDestroy_v2(void *ev)
{
	free(ev);
	return CUDA_SUCCESS;
}

/* graphs: instantiated as a copy of the captured graph; a replay runs its nodes */
FAKE_API CUresult cuGraphInstantiateWithFlags(void **exec, void *graph, unsigned long long flags)
{
	struct fake_graph *g = graph, *x;

	(void)flags;
	if (!exec || !g || (uintptr_t)g == 0x7000 || !(x = malloc(sizeof(*x))))
		return CUDA_ERROR_INVALID_VALUE;
	*x = *g;
	*exec = x;
	fake_log("cuGraphInstantiateWithFlags nodes=%d", g->n);
	return CUDA_SUCCESS;
}

FAKE_API CUresult cuGraphGetNodes(void *graph, void **nodes, size_t *n)
{
	struct fake_graph *g = graph;

	if (!g || !n)
		return CUDA_ERROR_INVALID_VALUE;
	if (nodes) {
		size_t m = *n < (size_t)g->n ? *n : (size_t)g->n;

		for (size_t i = 0; i < m; i++)
			nodes[i] = &g->node[i];
		*n = m;
	} else {
		*n = (size_t)g->n;
	}
	return CUDA_SUCCESS;
}

FAKE_API CUresult cuGraphNodeGetType(void *node, int *type)
{
	if (!node || !type)
		return CUDA_ERROR_INVALID_VALUE;
	*type = 0; /* CU_GRAPH_NODE_TYPE_KERNEL */
	return CUDA_SUCCESS;
}

FAKE_API CUresult cuGraphKernelNodeGetParams_v2(void *node, struct fake_node *p)
{
	if (!node || !p)
		return CUDA_ERROR_INVALID_VALUE;
	*p = *(struct fake_node *)node;
	return CUDA_SUCCESS;
}

#define FAKE_GRAPH_LAUNCH(name)                                                                         \
	FAKE_API CUresult name(void *exec, CUstream s)                                                 \
	{                                                                                               \
		struct fake_graph *x = exec;                                                           \
                                                                                                        \
		if (!x)                                                                                 \
			return CUDA_ERROR_INVALID_VALUE;                                                \
		fake_log(#name " nodes=%d stream=%p", x->n, (void *)s);                                 \
		for (int i = 0; i < x->n; i++) {                                                        \
			fake_kernel_time();                                                             \
			fake_probe_run((uintptr_t)x->node[i].func);                                     \
		}                                                                                       \
		return CUDA_SUCCESS;                                                                    \
	}
FAKE_GRAPH_LAUNCH(cuGraphLaunch)
FAKE_GRAPH_LAUNCH(cuGraphLaunch_ptsz)

#define FAKE_LAUNCH(name)                                                                                       \
	FAKE_API CUresult name(CUfunction f, unsigned int gx, unsigned int gy, unsigned int gz, unsigned int bx,   \
			       unsigned int by, unsigned int bz, unsigned int shm, CUstream hStream, void **params, \
			       void **extra)                                                                    \
	{                                                                                                       \
		(void)extra;                                                                                    \
		if ((uintptr_t)f == FAKE_CLOCK_FUNC)                                                            \
			return fake_clock_launch(params);                                                       \
		fake_log(#name " f=%p grid=%ux%ux%u block=%ux%ux%u shm=%u stream=%p", (void *)f, gx, gy, gz, bx, \
			 by, bz, shm, (void *)hStream);                                                         \
		if (fake_capture_node(f, gx, gy, gz, bx, by, bz, hStream))                                      \
			return CUDA_SUCCESS; /* a node of the graph being captured: it runs when replayed */   \
		fake_kernel_time();                                                                             \
		fake_probe_run((uintptr_t)f);                                                                   \
		return CUDA_SUCCESS;                                                                            \
	}
FAKE_LAUNCH(cuLaunchKernel)
FAKE_LAUNCH(cuLaunchKernel_ptsz)

/* cuLaunchKernelEx: CUlaunchConfig is grid[3], block[3], sharedMemBytes, then the stream at offset 32 */
FAKE_API CUresult cuLaunchKernelEx(const void *config, CUfunction f, void **params, void **extra)
{
	unsigned d[7];
	CUstream s;

	if (!config)
		return CUDA_ERROR_INVALID_VALUE;
	memcpy(d, config, sizeof(d));
	memcpy(&s, (const char *)config + 32, sizeof(s));
	(void)params;
	(void)extra;
	fake_log("cuLaunchKernelEx f=%p grid=%ux%ux%u block=%ux%ux%u shm=%u stream=%p", (void *)f, d[0], d[1], d[2], d[3],
		 d[4], d[5], d[6], (void *)s);
	if (fake_capture_node(f, d[0], d[1], d[2], d[3], d[4], d[5], s))
		return CUDA_SUCCESS;
	fake_kernel_time();
	fake_probe_run((uintptr_t)f);
	return CUDA_SUCCESS;
}

FAKE_API CUresult cuLaunchCooperativeKernel(CUfunction f, unsigned int gx, unsigned int gy, unsigned int gz,
					    unsigned int bx, unsigned int by, unsigned int bz, unsigned int shm,
					    CUstream hStream, void **params)
{
	(void)params; /* not through cuLaunchKernel: the interposer would see that call too */
	fake_log("cuLaunchCooperativeKernel f=%p grid=%ux%ux%u block=%ux%ux%u shm=%u stream=%p", (void *)f, gx, gy, gz, bx,
		 by, bz, shm, (void *)hStream);
	if (fake_capture_node(f, gx, gy, gz, bx, by, bz, hStream))
		return CUDA_SUCCESS;
	fake_kernel_time();
	fake_probe_run((uintptr_t)f);
	return CUDA_SUCCESS;
}

FAKE_API CUresult cuLibraryLoadData(CUlibrary *library, const void *code, CUjit_option *jitOptions,
				    void **jitOptionsValues, unsigned int numJitOptions, CUlibraryOption *libraryOptions,
				    void **libraryOptionValues, unsigned int numLibraryOptions)
{
	(void)libraryOptions;
	(void)libraryOptionValues;
	fake_log("cuLibraryLoadData code=%p jit=%u opts=%u", code, numJitOptions, numLibraryOptions);
	if (fake_patched_jit_fails(code, jitOptions, jitOptionsValues, numJitOptions)) {
		fake_log("cuLibraryLoadData rc=218");
		return 218; /* CUDA_ERROR_INVALID_PTX */
	}
	if (library)
		*library = (CUlibrary)fake_record_image("cuLibraryLoadData", code, 0x100000);
	return CUDA_SUCCESS;
}

FAKE_API CUresult cuModuleLoadData(CUmodule *module, const void *image)
{
	if (fake_is_clock_image(image)) {
		fake_log("cuModuleLoadData clock-sync");
		if (module)
			*module = (CUmodule)FAKE_CLOCK_MODULE;
		return CUDA_SUCCESS;
	}
	fake_log("cuModuleLoadData image=%p", image);
	if (fake_patched_jit_fails(image, NULL, NULL, 0))
		return 218;
	if (module)
		*module = (CUmodule)fake_record_image("cuModuleLoadData", image, 0x200000);
	return CUDA_SUCCESS;
}

FAKE_API CUresult cuModuleLoadDataEx(CUmodule *module, const void *image, unsigned int numOptions,
				     CUjit_option *options, void **optionValues)
{
	fake_log("cuModuleLoadDataEx image=%p options=%u", image, numOptions);
	if (fake_patched_jit_fails(image, options, optionValues, numOptions))
		return 218;
	if (module)
		*module = (CUmodule)fake_record_image("cuModuleLoadDataEx", image, 0x200000);
	return CUDA_SUCCESS;
}

FAKE_API CUresult cuGetProcAddress(const char *symbol, void **pfn, int cudaVersion, cuuint64_t flags);
FAKE_API CUresult cuGetProcAddress_v2(const char *symbol, void **pfn, int cudaVersion, cuuint64_t flags,
				      CUdriverProcAddressQueryResult *symbolStatus);

/* name, [vmin, ...), per-thread variant?, function: like the real driver's table */
static const struct {
	const char *name;
	int vmin;
	int ptsz; /* -1: no stream variants; 0: legacy; 1: per-thread */
	void *fn;
} fake_table[] = {
	{"cuInit", 2000, -1, (void *)cuInit},
	{"cuDriverGetVersion", 2020, -1, (void *)cuDriverGetVersion},
	{"cuGetProcAddress", 12000, -1, (void *)cuGetProcAddress_v2},
	{"cuGetProcAddress", 11030, -1, (void *)cuGetProcAddress},
	{"cuMemAlloc", 3020, -1, (void *)cuMemAlloc_v2},
	{"cuMemAllocPitch", 3020, -1, (void *)cuMemAllocPitch_v2},
	{"cuMemFree", 3020, -1, (void *)cuMemFree_v2},
	{"cuMemGetInfo", 3020, -1, (void *)cuMemGetInfo_v2},
	{"cuMemGetInfo", 2000, -1, (void *)cuMemGetInfo},
	{"cuMemAllocManaged", 6000, -1, (void *)cuMemAllocManaged},
	{"cuMemCreate", 10020, -1, (void *)cuMemCreate},
	{"cuMemRelease", 10020, -1, (void *)cuMemRelease},
	{"cuMemAllocAsync", 11020, 0, (void *)cuMemAllocAsync},
	{"cuMemAllocAsync", 11020, 1, (void *)cuMemAllocAsync_ptsz},
	{"cuMemAllocFromPoolAsync", 11020, 0, (void *)cuMemAllocFromPoolAsync},
	{"cuMemAllocFromPoolAsync", 11020, 1, (void *)cuMemAllocFromPoolAsync_ptsz},
	{"cuMemFreeAsync", 11020, 0, (void *)cuMemFreeAsync},
	{"cuMemFreeAsync", 11020, 1, (void *)cuMemFreeAsync_ptsz},
	{"cuLaunchKernel", 4000, 0, (void *)cuLaunchKernel},
	{"cuLaunchKernel", 7000, 1, (void *)cuLaunchKernel_ptsz},
	{"cuLibraryLoadData", 12000, -1, (void *)cuLibraryLoadData},
	{"cuModuleLoadData", 2000, -1, (void *)cuModuleLoadData},
	{"cuCtxSynchronize", 2000, -1, (void *)cuCtxSynchronize},
	{"cuStreamSynchronize", 2000, -1, (void *)cuStreamSynchronize},
	{"cuEventSynchronize", 2000, -1, (void *)cuEventSynchronize},
	{"cuModuleLoadDataEx", 2010, -1, (void *)cuModuleLoadDataEx},
	{"cuCtxSetCurrent", 4000, -1, (void *)cuCtxSetCurrent},
	{"cuCtxDestroy", 4000, -1, (void *)cuCtxDestroy_v2},
	{"cuLibraryUnload", 12000, -1, (void *)cuLibraryUnload},
	{"cuModuleUnload", 2000, -1, (void *)cuModuleUnload},
	{"cuDevicePrimaryCtxRetain", 7000, -1, (void *)cuDevicePrimaryCtxRetain},
	{"cuDeviceGet", 2000, -1, (void *)cuDeviceGet},
	{"cuDeviceGetCount", 2000, -1, (void *)cuDeviceGetCount},
	{"cuCtxGetDevice", 2000, -1, (void *)cuCtxGetDevice},
	{"cuDevicePrimaryCtxRelease", 11000, -1, (void *)cuDevicePrimaryCtxRelease_v2},
	{"cuDevicePrimaryCtxRelease", 7000, -1, (void *)cuDevicePrimaryCtxRelease},
	{"cuDevicePrimaryCtxReset", 11000, -1, (void *)cuDevicePrimaryCtxReset_v2},
	{"cuDevicePrimaryCtxReset", 7000, -1, (void *)cuDevicePrimaryCtxReset},
	{"cuDevicePrimaryCtxGetState", 7000, -1, (void *)cuDevicePrimaryCtxGetState},
	{"cuStreamCreate", 2000, -1, (void *)cuStreamCreate},
	{"cuStreamBeginCapture", 10010, -1, (void *)cuStreamBeginCapture_v2},
	{"cuStreamEndCapture", 10000, -1, (void *)cuStreamEndCapture},
	{"cuGraphInstantiateWithFlags", 11040, -1, (void *)cuGraphInstantiateWithFlags},
	{"cuLaunchKernelEx", 11060, 0, (void *)cuLaunchKernelEx},
	{"cuLaunchCooperativeKernel", 9000, 0, (void *)cuLaunchCooperativeKernel},
	{"cuGraphLaunch", 10000, 0, (void *)cuGraphLaunch},
	{"cuGraphLaunch", 10000, 1, (void *)cuGraphLaunch_ptsz},
};

static CUresult fake_lookup(const char *how, const char *symbol, void **pfn, int cudaVersion, cuuint64_t flags,
			    CUdriverProcAddressQueryResult *st)
{
	int ptsz = (flags & CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM) != 0, found = 0;

	if (!symbol || !pfn)
		return CUDA_ERROR_INVALID_VALUE;
	*pfn = NULL;
	/* entries for one name are ordered newest first */
	for (size_t i = 0; i < sizeof(fake_table) / sizeof(fake_table[0]); i++) {
		if (strcmp(fake_table[i].name, symbol) != 0)
			continue;
		found = 1;
		if (cudaVersion < fake_table[i].vmin || (fake_table[i].ptsz >= 0 && fake_table[i].ptsz != ptsz))
			continue;
		*pfn = fake_table[i].fn;
		break;
	}
	fake_log("%s symbol=%s version=%d flags=%llu -> %s", how, symbol, cudaVersion, (unsigned long long)flags,
		 *pfn ? "found" : found ? "version-not-sufficient" : "not-found");
	if (st)
		*st = *pfn ? CU_GET_PROC_ADDRESS_SUCCESS
			   : found ? CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT : CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
	return *pfn ? CUDA_SUCCESS : CUDA_ERROR_NOT_FOUND;
}

FAKE_API CUresult cuGetProcAddress(const char *symbol, void **pfn, int cudaVersion, cuuint64_t flags)
{
	return fake_lookup("cuGetProcAddress", symbol, pfn, cudaVersion, flags, NULL);
}

FAKE_API CUresult cuGetProcAddress_v2(const char *symbol, void **pfn, int cudaVersion, cuuint64_t flags,
				      CUdriverProcAddressQueryResult *symbolStatus)
{
	return fake_lookup("cuGetProcAddress_v2", symbol, pfn, cudaVersion, flags, symbolStatus);
}
