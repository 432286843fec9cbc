/*
 * probe_copyout.c - copying a bound image's GPU-resident maps out
 * (device probes, probe_state.h): on our own stream into a staging buffer,
 * then to $GPUEXT_TENANT_ACCT/probes/<pid>-<image>[-<ctxn>].maps (temp +
 * rename; the layout is gpuext_devrt_maps.h), every second from a thread
 * of our own and a last time from an atexit handler.
 */
#define _GNU_SOURCE
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "probe_state.h"

_Static_assert(GX_CONF_MAX_MAPS <= GPUEXT_DEVRT_MAPS_MAX_MAPS, "a .maps file holds every map of module.conf");

/*
 * Copies the image's maps out and writes them (gx_write_maps). Makes the
 * image's context current: the caller restores its own. 0 on success.
 * gx_probe_mu held.
 */
int gx_copy_out(struct gx_pimage *im, int final)
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
void gx_write_maps(struct gx_pimage *im, int final)
{
	char path[PATH_MAX + 64], tmp[PATH_MAX + 64];
	struct gpuext_devrt_maps_header hdr;
	size_t off = 0;
	int fd, ok;

	im->seq++;
	if (im->ctxn) {
		snprintf(path, sizeof(path), "%s/%d-%d-%d" GPUEXT_DEVRT_PROBES_MAPS_SUFFIX, gx_pr.dir, gx_key(), im->index, im->ctxn);
		snprintf(tmp, sizeof(tmp), "%s/.%d-%d-%d" GPUEXT_DEVRT_PROBES_MAPS_SUFFIX ".tmp", gx_pr.dir, gx_key(), im->index, im->ctxn);
	} else {
		snprintf(path, sizeof(path), "%s/%d-%d" GPUEXT_DEVRT_PROBES_MAPS_SUFFIX, gx_pr.dir, gx_key(), im->index);
		snprintf(tmp, sizeof(tmp), "%s/.%d-%d" GPUEXT_DEVRT_PROBES_MAPS_SUFFIX ".tmp", gx_pr.dir, gx_key(), im->index);
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
		gx_hl_write(0);
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
		gx_hl_write(1);
		gx_capture_restore(mode);
	}
	pthread_mutex_unlock(&gx_probe_mu);
}

/* gx_probe_mu held */
void gx_start_copy_out(void)
{
	if (!gx_pr.exit_registered) {
		gx_pr.exit_registered = 1;
		atexit(gx_probe_at_exit);
	}
	if (!gx_pr.thread_started && gx_pr.dir[0]) { /* maps, or the host-side launch table (gx_hl_write) */
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
