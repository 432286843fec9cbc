/*
 * acct.c - per-tenant device-memory accounting across processes.
 *
 * The usage file ($GPUEXT_TENANT_ACCT/usage, layout in gpuext_devrt_shm.h) is
 * mapped MAP_SHARED by every process of the tenant. A process owns one slot:
 * it holds an open-file-description write lock (F_OFD_SETLK) on the slot's
 * first byte for as long as it lives (liveness beacon, never waited on) and
 * changes only its own counters, with atomic adds. The lock belongs to the
 * library's own open of the file: another open and close of the same file in
 * the process (any library may do it) leaves it alone, where a POSIX record
 * lock would be dropped. A forked child reopens the file, so it never holds
 * (through the shared open) the lock of a parent that died. The tenant total is the sum over live slots; a slot whose owner
 * is gone (pid set, lock free) is not counted and is reclaimed.
 *
 * Allocation protocol: reserve (add to own slot, then sum: sequentially
 * consistent, so of two racing processes at least one sees the other), check
 * against the quota, and only then call the driver; undo on refusal or on
 * driver failure. Sizes of live allocations are remembered per pointer/handle
 * in a process-private table so frees subtract exactly what was added.
 *
 * The quota applies per GPU: each slot also counts its bytes per device
 * ordinal (slot_dev), and an allocation is checked against the quota of the
 * device it is made on (gx_device_limit) with the tenant's bytes there.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "devrt.h"
#include "gpuext_devrt_shm.h"

static struct gpuext_devrt_usage *gx_u; /* shared file or process-local fallback */
static int gx_fd = -1;
static int gx_my = -1; /* our slot */
static pthread_mutex_t gx_slot_mu = PTHREAD_MUTEX_INITIALIZER; /* process-private */

struct gx_entry {
	uint64_t key;
	uint64_t bytes;
	int kind; /* 0 empty, -1 deleted */
	int dev;  /* device ordinal it was made on; -1: not accounted per device */
};

static pthread_mutex_t gx_tab_mu = PTHREAD_MUTEX_INITIALIZER; /* process-private */
static struct gx_entry *gx_tab;
static size_t gx_tab_cap, gx_tab_used; /* used counts live and deleted */

struct gpuext_devrt_usage *gx_acct_usage(void)
{
	return gx_u;
}

int gx_acct_slot(void)
{
	return gx_my;
}

static uint64_t gx_self_start_time(void)
{
	char buf[1024];
	ssize_t n;
	int fd = open("/proc/self/stat", O_RDONLY | O_CLOEXEC);
	char *p;
	unsigned long long v = 0;

	if (fd < 0)
		return 0;
	n = read(fd, buf, sizeof(buf) - 1);
	close(fd);
	if (n <= 0)
		return 0;
	buf[n] = 0;
	p = strrchr(buf, ')'); /* comm may hold spaces */
	if (!p)
		return 0;
	/* after ")" come fields 3.. ; starttime is field 22 */
	for (int field = 2; field < 22 && p; field++)
		p = strchr(p + 1, ' ');
	if (p)
		v = strtoull(p + 1, NULL, 10);
	return v;
}

/* Takes (F_WRLCK) or drops (F_UNLCK) our lock on slot i; never waits. */
static int gx_lock_slot(int i, short type)
{
	/* OFD locks want l_pid 0 */
	struct flock fl = {.l_type = type, .l_whence = SEEK_SET, .l_start = GPUEXT_DEVRT_SLOT_LOCK_OFFSET(i), .l_len = 1, .l_pid = 0};

	return fcntl(gx_fd, F_OFD_SETLK, &fl);
}

/* Does a live process (other than us) own slot i? */
static int gx_slot_live(int i)
{
	struct flock fl = {.l_type = F_WRLCK, .l_whence = SEEK_SET, .l_start = GPUEXT_DEVRT_SLOT_LOCK_OFFSET(i), .l_len = 1, .l_pid = 0};

	if (gx_fd < 0)
		return i == gx_my;
	if (i == gx_my)
		return 1;
	if (fcntl(gx_fd, F_OFD_GETLK, &fl) != 0)
		return 1; /* cannot tell: count it (never under-count) */
	return fl.l_type != F_UNLCK;
}

/* The slot's counter of device dev, or NULL for an ordinal the file has no counter for. */
static _Atomic uint64_t *gx_dev_counter(int slot, int dev)
{
	if (!gx_u || slot < 0 || dev < 0 || dev >= (int)GPUEXT_DEVRT_MAX_DEVICES)
		return NULL;
	return &gx_u->slot_dev[slot].bytes[dev];
}

static void gx_slot_zero(int i)
{
	struct gpuext_devrt_slot *s = &gx_u->slot[i];

	for (unsigned d = 0; d < GPUEXT_DEVRT_MAX_DEVICES; d++)
		atomic_store(&gx_u->slot_dev[i].bytes[d], 0);
	atomic_store(&s->bytes, 0);
	atomic_store(&s->peak, 0);
	atomic_store(&s->allocs, 0);
	atomic_store(&s->frees, 0);
	atomic_store(&s->refused, 0);
	atomic_store(&s->delayed, 0);
	atomic_store(&s->start_time, 0);
}

/* Slot i is ours (locked): clear whatever a dead owner left. */
static void gx_slot_take(int i, uint32_t newpid)
{
	struct gpuext_devrt_slot *s = &gx_u->slot[i];
	uint32_t old = atomic_load(&s->pid);

	if (old != 0 && atomic_compare_exchange_strong(&s->pid, &old, 0))
		GX_DEBUG("reclaimed slot %d of dead pid %u", i, old);
	gx_slot_zero(i);
	if (newpid) {
		uint32_t zero = 0;

		atomic_store(&s->start_time, gx_self_start_time());
		atomic_compare_exchange_strong(&s->pid, &zero, newpid);
	}
}

/* Reclaim a dead owner's slot: lock it, CAS its pid to 0, zero it, unlock. */
static void gx_slot_reclaim(int i)
{
	if (gx_lock_slot(i, F_WRLCK) != 0)
		return; /* its owner is alive after all, or another process is reclaiming */
	if (atomic_load(&gx_u->slot[i].pid) != 0)
		gx_slot_take(i, 0);
	gx_lock_slot(i, F_UNLCK);
}

static void gx_local_fallback(const char *why);

static int gx_claim_slot(void)
{
	uint32_t me = (uint32_t)getpid();

	if (gx_my >= 0 || !gx_u)
		return gx_my;
	pthread_mutex_lock(&gx_slot_mu);
	if (gx_my < 0 && gx_fd < 0) {
		gx_my = 0; /* process-local: one slot */
		gx_slot_take(0, me);
	}
	/* free slots first, then those of dead owners */
	for (int pass = 0; pass < 2 && gx_my < 0; pass++) {
		for (int i = 0; i < (int)GPUEXT_DEVRT_SLOTS && gx_my < 0; i++) {
			uint32_t pid = atomic_load(&gx_u->slot[i].pid);

			if ((pass == 0) != (pid == 0))
				continue;
			if (gx_lock_slot(i, F_WRLCK) != 0) {
				if (errno == EAGAIN || errno == EACCES)
					continue; /* a live owner */
				pthread_mutex_unlock(&gx_slot_mu);
				GX_DEBUG("usage file: no open-file-description locks (%s)", strerror(errno));
				gx_local_fallback("open-file-description locks unsupported");
				return gx_claim_slot();
			}
			gx_slot_take(i, me);
			gx_my = i;
		}
	}
	pthread_mutex_unlock(&gx_slot_mu);
	if (gx_my < 0)
		GX_DEBUG("no free slot in the usage file: allocations are refused");
	else
		GX_DEBUG("slot %d", gx_my);
	return gx_my;
}

static void gx_local_fallback(const char *why)
{
	void *m = mmap(NULL, sizeof(struct gpuext_devrt_usage), PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS,
		       -1, 0);

	GX_DEBUG("usage file: %s: accounting is process-local", why);
	if (gx_fd >= 0)
		close(gx_fd);
	gx_fd = -1;
	gx_u = m == MAP_FAILED ? NULL : m;
}

/*
 * The process's exit(), counted in its tenant's usage header (exits, and
 * failed_exits when the status is not 0): registered once, for the process
 * that opened the file (a forked child that exits inherits the handler and
 * is not counted).
 */
static pid_t gx_exit_pid;
static void gx_on_exit(int status, void *arg)
{
	(void)arg;
	if (getpid() != gx_exit_pid || !gx_u)
		return;
	atomic_fetch_add(&gx_u->hdr.exits, 1);
	if (status != 0)
		atomic_fetch_add(&gx_u->hdr.failed_exits, 1);
}

static void gx_exit_watch(void)
{
	if (gx_exit_pid)
		return;
	gx_exit_pid = getpid();
	if (on_exit(gx_on_exit, NULL) != 0)
		gx_exit_pid = 0;
}

void gx_acct_open(void)
{
	char path[4096];
	struct stat st;
	uint64_t zero = 0;
	void *m;

	if (!gx_cfg.acct_dir || !*gx_cfg.acct_dir) {
		gx_local_fallback(GPUEXT_ENV_TENANT_ACCT " not set");
		goto header;
	}
	if (snprintf(path, sizeof(path), "%s/%s", gx_cfg.acct_dir, GPUEXT_DEVRT_USAGE_FILE) >= (int)sizeof(path)) {
		gx_local_fallback("path too long");
		goto header;
	}
	gx_fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0666);
	if (gx_fd < 0) {
		gx_local_fallback(strerror(errno));
		goto header;
	}
	if (fstat(gx_fd, &st) != 0 || !S_ISREG(st.st_mode)) {
		gx_local_fallback("not a regular file");
		goto header;
	}
	if (st.st_uid == geteuid())
		(void)fchmod(gx_fd, 0666); /* processes of one tenant may run as different users */
	if ((size_t)st.st_size < sizeof(struct gpuext_devrt_usage) &&
	    ftruncate(gx_fd, (off_t)sizeof(struct gpuext_devrt_usage)) != 0) {
		gx_local_fallback(strerror(errno));
		goto header;
	}
	m = mmap(NULL, sizeof(struct gpuext_devrt_usage), PROT_READ | PROT_WRITE, MAP_SHARED, gx_fd, 0);
	if (m == MAP_FAILED) {
		gx_local_fallback(strerror(errno));
		goto header;
	}
	gx_u = m;
	gx_exit_watch();
header:
	if (!gx_u)
		return;
	/* all-zero is the valid empty state; the first process stamps the header */
	atomic_compare_exchange_strong(&gx_u->hdr.magic, &zero, GPUEXT_DEVRT_USAGE_MAGIC);
	gx_u->hdr.version = GPUEXT_DEVRT_SHM_VERSION; /* same values from every process */
	gx_u->hdr.nslots = GPUEXT_DEVRT_SLOTS;
	gx_u->hdr.header_size = sizeof(struct gpuext_devrt_usage_header);
	gx_u->hdr.slot_size = sizeof(struct gpuext_devrt_slot);
	if (atomic_load(&gx_u->hdr.magic) != GPUEXT_DEVRT_USAGE_MAGIC) {
		munmap(gx_u, sizeof(*gx_u));
		gx_u = NULL;
		gx_local_fallback("bad magic");
		if (!gx_u)
			return;
		atomic_store(&gx_u->hdr.magic, GPUEXT_DEVRT_USAGE_MAGIC);
	}
	atomic_store(&gx_u->hdr.tenant_id, gx_cfg.tenant_id);
	atomic_store(&gx_u->hdr.quota_bytes, atomic_load(&gx_cfg.quota_bytes));
	atomic_store(&gx_u->hdr.priority_class, gx_cfg.priority_class);
}

/*
 * The child shares the parent's open of the usage file, and with it the
 * parent's slot lock: were it to keep that open, a parent that died would
 * still look alive. Both the fd and the mapping hold the open (a mapping
 * keeps its file open), so the child opens the file anew, maps the new open
 * over the old mapping (same file, same pages) and drops the shared fd. It
 * holds no slot and no device memory.
 */
static void gx_acct_reopen_in_child(void)
{
	char path[4096];
	struct stat was, now;
	int fd;

	if (gx_fd < 0)
		return;
	fd = -1;
	if (fstat(gx_fd, &was) != 0 ||
	    snprintf(path, sizeof(path), "%s/%s", gx_cfg.acct_dir, GPUEXT_DEVRT_USAGE_FILE) >= (int)sizeof(path) ||
	    (fd = open(path, O_RDWR | O_CLOEXEC | O_NOFOLLOW)) < 0 || fstat(fd, &now) != 0 ||
	    now.st_dev != was.st_dev || now.st_ino != was.st_ino ||
	    mmap(gx_u, sizeof(*gx_u), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED, fd, 0) == MAP_FAILED ||
	    dup3(fd, gx_fd, O_CLOEXEC) < 0) {
		if (fd >= 0)
			close(fd);
		munmap(gx_u, sizeof(*gx_u)); /* the parent's open goes with it */
		gx_u = NULL;
		gx_local_fallback("usage file not reopened after fork");
		return;
	}
	close(fd);
}

void gx_acct_after_fork(void)
{
	gx_acct_reopen_in_child();
	gx_my = -1;
	pthread_mutex_init(&gx_slot_mu, NULL);
	pthread_mutex_init(&gx_tab_mu, NULL);
	gx_tab = NULL; /* the parent's allocations are not the child's */
	gx_tab_cap = gx_tab_used = 0;
}

/*
 * Sum of live slots, over every device (dev < 0) or on one, in one pass that
 * also sums every device into *total when total is not NULL; with reclaim,
 * also clears slots of dead owners.
 */
static uint64_t gx_tenant_used_on(int dev, int reclaim, uint64_t *total)
{
	uint64_t sum = 0, all = 0;

	for (int i = 0; i < (int)GPUEXT_DEVRT_SLOTS; i++) {
		struct gpuext_devrt_slot *s = &gx_u->slot[i];
		_Atomic uint64_t *d = gx_dev_counter(i, dev);

		if (atomic_load(&s->pid) == 0)
			continue;
		if (gx_slot_live(i)) {
			uint64_t b = atomic_load(&s->bytes);

			all += b;
			sum += d ? atomic_load(d) : b;
		} else if (reclaim)
			gx_slot_reclaim(i);
	}
	if (total)
		*total = all;
	return sum;
}

static uint64_t gx_tenant_used(int reclaim)
{
	return gx_tenant_used_on(-1, reclaim, NULL);
}

uint64_t gx_acct_tenant_used(void)
{
	gx_runtime_init();
	return gx_u ? gx_tenant_used(1) : 0;
}

uint64_t gx_acct_device_used(int dev)
{
	gx_runtime_init();
	if (!gx_u || dev < 0 || dev >= (int)GPUEXT_DEVRT_MAX_DEVICES)
		return 0;
	return gx_tenant_used_on(dev, 1, NULL);
}

static void gx_max(_Atomic uint64_t *a, uint64_t v)
{
	uint64_t cur = atomic_load_explicit(a, memory_order_relaxed);

	while (cur < v && !atomic_compare_exchange_weak(a, &cur, v))
		;
}

int gx_acct_reserve(int dev, uint64_t bytes, const char *what)
{
	struct gpuext_devrt_slot *s;
	_Atomic uint64_t *d;
	uint64_t mine, used, total, quota;
	int i, limited;

	gx_runtime_init();
	if (!gx_u || !gx_cfg.enabled)
		return 0;
	limited = gx_device_limit(dev, &quota);
	i = gx_claim_slot();
	if (i < 0) {
		if (!limited)
			return 0;
		atomic_fetch_add(&gx_u->hdr.refused_allocs, 1);
		return -1;
	}
	s = &gx_u->slot[i];
	d = gx_dev_counter(i, dev);
	mine = atomic_fetch_add(&s->bytes, bytes) + bytes;
	if (d)
		atomic_fetch_add(d, bytes);
	used = gx_tenant_used_on(dev, 0, &total); /* one scan: this device's bytes and the tenant's */
	if (limited && (used > quota || !d)) {
		used = d ? gx_tenant_used_on(dev, 1, &total) : 0; /* dead owners' bytes do not count: check again */
		if (used > quota || !d) {
			atomic_fetch_sub(&s->bytes, bytes);
			if (d)
				atomic_fetch_sub(d, bytes);
			atomic_fetch_add(&s->refused, 1);
			atomic_fetch_add(&gx_u->hdr.refused_allocs, 1);
			GX_DEBUG("%s %llu refused: tenant would use %llu of quota %llu on device %d", what,
				 (unsigned long long)bytes, (unsigned long long)used, (unsigned long long)quota, dev);
			return -1;
		}
	}
	gx_max(&s->peak, mine);
	gx_max(&gx_u->hdr.peak_bytes, total);
	GX_DEBUG("%s %llu reserved: tenant uses %llu of quota %llu on device %d", what, (unsigned long long)bytes,
		 (unsigned long long)used, (unsigned long long)quota, dev);
	return 0;
}

void gx_acct_unreserve(int dev, uint64_t bytes)
{
	_Atomic uint64_t *d = gx_dev_counter(gx_my, dev);

	if (!gx_u || gx_my < 0 || !bytes)
		return;
	atomic_fetch_sub(&gx_u->slot[gx_my].bytes, bytes);
	if (d)
		atomic_fetch_sub(d, bytes);
}

/* ---- process-private size table: (kind, key) -> bytes, open addressing ---- */

static size_t gx_hash(uint64_t key, int kind)
{
	key ^= (uint64_t)kind * 0x9e3779b97f4a7c15ull;
	key ^= key >> 33;
	key *= 0xff51afd7ed558ccdull;
	key ^= key >> 33;
	return (size_t)key;
}

static int gx_tab_put(int kind, uint64_t key, int dev, uint64_t bytes);

static int gx_tab_grow(void)
{
	struct gx_entry *old = gx_tab;
	size_t oldcap = gx_tab_cap, cap = oldcap ? oldcap * 2 : 1024;
	struct gx_entry *t = calloc(cap, sizeof(*t));

	if (!t)
		return -1;
	gx_tab = t;
	gx_tab_cap = cap;
	gx_tab_used = 0;
	for (size_t i = 0; i < oldcap; i++)
		if (old[i].kind > 0)
			gx_tab_put(old[i].kind, old[i].key, old[i].dev, old[i].bytes);
	free(old);
	return 0;
}

static int gx_tab_put(int kind, uint64_t key, int dev, uint64_t bytes)
{
	size_t i;

	if ((gx_tab_used + 1) * 2 > gx_tab_cap && gx_tab_grow() != 0)
		return -1;
	for (i = gx_hash(key, kind) & (gx_tab_cap - 1);; i = (i + 1) & (gx_tab_cap - 1)) {
		if (gx_tab[i].kind <= 0) {
			if (gx_tab[i].kind == 0)
				gx_tab_used++;
			gx_tab[i] = (struct gx_entry){key, bytes, kind, dev};
			return 0;
		}
		if (gx_tab[i].kind == kind && gx_tab[i].key == key) {
			gx_tab[i].bytes += bytes; /* same address handed out twice: keep both sizes */
			return 0;
		}
	}
}

void gx_acct_commit(int kind, uint64_t key, int dev, uint64_t bytes)
{
	int rc;

	if (!gx_u || gx_my < 0 || !gx_cfg.enabled)
		return;
	if (!gx_dev_counter(gx_my, dev))
		dev = -1;
	atomic_fetch_add(&gx_u->slot[gx_my].allocs, 1);
	pthread_mutex_lock(&gx_tab_mu);
	rc = gx_tab_put(kind, key, dev, bytes);
	pthread_mutex_unlock(&gx_tab_mu);
	if (rc != 0) {
		/* cannot remember the size: stay exact by not keeping it charged */
		gx_acct_unreserve(dev, bytes);
		GX_DEBUG("size table full: %llu bytes not tracked", (unsigned long long)bytes);
	}
}

int gx_acct_forget(int kind, uint64_t key, uint64_t *bytes)
{
	int found = -1, dev = -1;

	if (!gx_u || gx_my < 0)
		return -1;
	pthread_mutex_lock(&gx_tab_mu);
	if (gx_tab_cap) {
		for (size_t i = gx_hash(key, kind) & (gx_tab_cap - 1); gx_tab[i].kind != 0; i = (i + 1) & (gx_tab_cap - 1)) {
			if (gx_tab[i].kind == kind && gx_tab[i].key == key) {
				*bytes = gx_tab[i].bytes;
				dev = gx_tab[i].dev;
				gx_tab[i].kind = -1;
				found = 0;
				break;
			}
		}
	}
	pthread_mutex_unlock(&gx_tab_mu);
	if (found == 0) {
		gx_acct_unreserve(dev, *bytes);
		atomic_fetch_add(&gx_u->slot[gx_my].frees, 1);
	}
	return found;
}

/*
 * Latency-critical activity: the tenant's work counts as pending until
 * now + its window. Stored only when that moves the deadline by an eighth of
 * the window (keeps the cache line quiet). When the deadline it replaces had
 * passed or was within window / GPUEXT_DEVRT_WAKE_AHEAD_DIV of passing, the
 * host no longer reads it by itself (gpuext_devrt_shm.h): one byte to the
 * tenant's wake FIFO tells it. The FIFO is opened at the first such wake
 * (created if the host has not yet), tried again at most once a second; a
 * full FIFO (the host is gone) drops the byte.
 */
static _Atomic int gx_wake_fd = -1;
static _Atomic uint64_t gx_wake_retry_ns;

static int gx_wake_open(uint64_t now)
{
	char path[4096];
	struct stat st;
	int fd = atomic_load_explicit(&gx_wake_fd, memory_order_acquire), expect = -1;

	if (fd >= 0 || !gx_cfg.acct_dir || !*gx_cfg.acct_dir ||
	    now < atomic_load_explicit(&gx_wake_retry_ns, memory_order_relaxed))
		return fd;
	atomic_store_explicit(&gx_wake_retry_ns, now + 1000000000ull, memory_order_relaxed);
	if (snprintf(path, sizeof(path), "%s/%s", gx_cfg.acct_dir, GPUEXT_DEVRT_WAKE_FILE) >= (int)sizeof(path))
		return -1;
	if (mkfifo(path, 0666) == 0)
		(void)chmod(path, 0666); /* the tenant's processes may run as different users */
	fd = open(path, O_RDWR | O_NONBLOCK | O_CLOEXEC | O_NOFOLLOW);
	if (fd < 0)
		return -1;
	if (fstat(fd, &st) != 0 || !S_ISFIFO(st.st_mode)) {
		close(fd);
		return -1;
	}
	if (!atomic_compare_exchange_strong(&gx_wake_fd, &expect, fd)) {
		close(fd); /* another thread was first */
		fd = expect;
	}
	GX_DEBUG("wake FIFO %s open", path);
	return fd;
}

/* The expected end of the latency-critical request that began now (priority.c); stored before its deadline. */
void gx_acct_lc_busy(uint64_t until)
{
	struct gpuext_devrt_usage *u = gx_acct_usage();

	if (u)
		atomic_store_explicit(&u->hdr.lc_busy_until_ns, until, memory_order_release);
}

void gx_acct_lc_active(uint64_t now)
{
	struct gpuext_devrt_usage *u = gx_acct_usage();
	uint64_t was, until = now + gx_cfg.lc_window_ns;
	int fd;

	if (!u)
		return;
	was = atomic_load_explicit(&u->hdr.lc_active_until_ns, memory_order_relaxed);
	if (until <= was + gx_cfg.lc_window_ns / 8)
		return;
	atomic_store_explicit(&u->hdr.lc_active_until_ns, until, memory_order_release);
	if (was > now + gx_cfg.lc_window_ns / GPUEXT_DEVRT_WAKE_AHEAD_DIV)
		return; /* the host reads it again before the old deadline */
	fd = gx_wake_open(now);
	if (fd >= 0)
		(void)!write(fd, "w", 1);
}
