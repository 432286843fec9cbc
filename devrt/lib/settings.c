/*
 * settings.c - the tenant's settings (docs/devrt.md): the environment of
 * the injection contract (names from gpuext_devrt_env.h) and
 * $GPUEXT_TENANT_DIR/settings.bin, one struct gpuext_devrt_tenant
 * (gpuext_devrt_tenant.h) written by the host; the quota follows the file
 * when the host replaces it.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "devrt.h"
#include "gpuext_devrt_shm.h"
#include "gpuext_devrt_tenant.h"

/* no settings file: standard (0 is latency-critical in the one numbering, gpuext_prio.h) */
struct gx_settings gx_cfg = {.enabled = 1, .priority_class = GPUEXT_DEVRT_CLASS_STANDARD};

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
	else if (t->version != GPUEXT_DEVRT_TENANT_VERSION && t->version != GPUEXT_DEVRT_TENANT_VERSION_V2)
		snprintf(why, size, "version %u, want %u", t->version, GPUEXT_DEVRT_TENANT_VERSION);
	else if (t->size != GPUEXT_DEVRT_TENANT_SIZE)
		snprintf(why, size, "size field %u, want %u", t->size, GPUEXT_DEVRT_TENANT_SIZE);
	else if (t->priority_class > GPUEXT_DEVRT_CLASS_MAX)
		snprintf(why, size, "priority class %u", t->priority_class);
	else if (t->sm_percent > 100)
		snprintf(why, size, "smPercent %u above 100", t->sm_percent);
	else if (t->mps_client_priority > GPUEXT_DEVRT_MPS_PRIORITY_MAX)
		snprintf(why, size, "mpsClientPriority %u above %u", t->mps_client_priority, GPUEXT_DEVRT_MPS_PRIORITY_MAX);
	else if (!t->active_window_ns)
		snprintf(why, size, "active window 0");
	else if (t->ndevices > GPUEXT_DEVRT_MAX_DEVICES)
		snprintf(why, size, "ndevices %u above %u", t->ndevices, GPUEXT_DEVRT_MAX_DEVICES);
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
	if (t->version == GPUEXT_DEVRT_TENANT_VERSION_V2)
		t->priority_class = gpuext_devrt_class_from_v2(t->priority_class);
	return 0;
}

/* The per-device quotas of t into gx_cfg. */
static void gx_take_devices(const struct gpuext_devrt_tenant *t)
{
	for (unsigned i = 0; i < GPUEXT_DEVRT_MAX_DEVICES; i++)
		atomic_store(&gx_cfg.device_quota[i], i < t->ndevices ? t->device_quota_bytes[i] : 0);
	atomic_store(&gx_cfg.ndevices, t->ndevices);
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
		gx_take_devices(&t);
		if (u)
			atomic_store(&u->hdr.quota_bytes, t.quota_bytes);
	}
	pthread_mutex_unlock(&gx_cfg_mu);
	return atomic_load(&gx_cfg.quota_bytes);
}

int gx_device_limit(int dev, uint64_t *limit)
{
	uint64_t q = gx_quota();
	uint32_t n = atomic_load(&gx_cfg.ndevices);

	if (n == 0) {
		*limit = q;
		return q != 0;
	}
	if (dev < 0 || (uint32_t)dev >= n) {
		*limit = 0; /* not one of the tenant's devices */
		return 1;
	}
	*limit = atomic_load(&gx_cfg.device_quota[dev]);
	return *limit != 0;
}

/* The first read: every setting, taken as the host wrote it (the host resolved the defaults). */
void gx_settings_load(void)
{
	struct gpuext_devrt_tenant t;

	if (!gx_cfg.settings_path || gx_settings_read(&t) != 0)
		return;
	atomic_store_explicit(&gx_cfg_next_check_ns, gx_now_ns() + 1000000000ull, memory_order_relaxed);
	gx_cfg.tenant_id = t.tenant_id;
	atomic_store(&gx_cfg.quota_bytes, t.quota_bytes);
	gx_take_devices(&t);
	gx_cfg.priority_class = t.priority_class;
	gx_cfg.lc_window_ns = t.active_window_ns;
	gx_cfg.sm_percent = t.sm_percent;
	gx_cfg.mps_client_priority = t.mps_client_priority;
	gx_cfg.launch_gate = (t.flags & GPUEXT_DEVRT_TENANT_LAUNCH_GATE) != 0;
	gx_cfg.host_gpus = t.host_gpus;
}

void gx_debug_from_env(void)
{
	const char *s = getenv(GPUEXT_ENV_DEVRT_DEBUG);

	gx_cfg.debug = s && *s && strcmp(s, "0") != 0;
}

void gx_settings_from_env(void)
{
	const char *s;

	gx_debug_from_env();
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
