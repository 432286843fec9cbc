/*
 * probe_files.c - the names of this process's files in the tenant's
 * probes directory ($GPUEXT_TENANT_ACCT/probes), and the removal of the
 * files of processes that are gone.
 *
 * A process's files are <key>.status, <key>.launches and
 * <key>-<image>[-<ctxn>].maps (with their ".<name>.tmp" temps). The key is
 * claimed by linking a file of our own, already holding an
 * open-file-description write lock on its first byte, to <key>.status:
 * the lock lives as long as the process (the descriptor is never closed;
 * a killed process cannot leave it held), and a name is never there
 * without its lock. The files of a process that exited or was killed (its
 * status file locked by nobody) stay: their counts are part of the
 * tenant's totals (gpuextctl probes, /metrics). At the claim, when more
 * than GX_KEEP_GONE processes are gone, the process removes the files of
 * the oldest (by their status file's time) beyond that many. Only the tenant's own processes share the directory, so what
 * this removes is the tenant's own; the directory is bounded anyway (a
 * tmpfs per tenant, docs/host-agent.md).
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "probe_state.h"

/* The lock that says the process lives: never closed. */
static int gx_claim_fd = -1;

/* the most dead keys one sweep looks at (the rest: the next process's) */
#define GX_SWEEP_MAX 1024
/* gone processes whose files are kept (GPUEXT_DEVRT_PROBE_KEEP_GONE) */
#define GX_KEEP_GONE 64

static int gx_locked_byte0(int fd, short type, int cmd)
{
	struct flock fl = {.l_type = type, .l_whence = SEEK_SET, .l_start = 0, .l_len = 1, .l_pid = 0};

	if (fcntl(fd, cmd, &fl) != 0)
		return -1;
	return cmd == F_OFD_GETLK ? fl.l_type != F_UNLCK : 1;
}

/* The key a file name belongs to: "[.]<key>" followed by '.' or '-'; 0: none. */
static int gx_name_key(const char *name)
{
	char *end;
	long k;

	if (*name == '.')
		name++;
	if (*name < '0' || *name > '9')
		return 0;
	k = strtol(name, &end, 10);
	if (k <= 0 || k > 0x7fffffff || (*end != '.' && *end != '-'))
		return 0;
	return (int)k;
}

static int gx_int_cmp(const void *a, const void *b)
{
	int x = *(const int *)a, y = *(const int *)b;

	return (x > y) - (x < y);
}

struct gx_gone {
	long long mtime_ns;
	int key;
};

static int gx_gone_cmp(const void *a, const void *b) /* oldest first */
{
	const struct gx_gone *x = a, *y = b;

	if (x->mtime_ns != y->mtime_ns)
		return (x->mtime_ns > y->mtime_ns) - (x->mtime_ns < y->mtime_ns);
	return (x->key > y->key) - (x->key < y->key);
}

/* How many gone processes' files a tenant keeps: the tenant's own choice
 * (its directory is its own, bounded tmpfs), default GX_KEEP_GONE. */
static int gx_keep_gone(void)
{
	const char *s = getenv(GPUEXT_ENV_DEVRT_PROBE_KEEP_GONE);
	char *end;
	long v;

	if (!s || !*s)
		return GX_KEEP_GONE;
	v = strtol(s, &end, 10);
	return *end || v < 0 || v > GX_SWEEP_MAX ? GX_KEEP_GONE : (int)v;
}

/*
 * Removes the files of keys whose <key>.status is not locked, and claim
 * files left by processes killed while claiming. self is ours.
 */
static void gx_sweep_dead(int self)
{
	static int dead[GX_SWEEP_MAX];
	static struct gx_gone gone[GX_SWEEP_MAX];
	int ndead = 0, ngone = 0, keep = gx_keep_gone(), dfd;
	DIR *d = opendir(gx_pr.dir);
	struct dirent *e;

	if (!d)
		return;
	dfd = dirfd(d);
	while ((e = readdir(d)) && ngone < GX_SWEEP_MAX) {
		int k = gx_name_key(e->d_name), fd, held;
		int claim = !strncmp(e->d_name, ".claim-", 7);
		struct stat st;
		char want[32];

		if (!claim) {
			snprintf(want, sizeof(want), "%d" GPUEXT_DEVRT_PROBES_STATUS_SUFFIX, k);
			if (!k || k == self || strcmp(e->d_name, want) != 0)
				continue;
		}
		fd = openat(dfd, e->d_name, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
		if (fd < 0)
			continue;
		held = fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) ? 1 : gx_locked_byte0(fd, F_WRLCK, F_OFD_GETLK);
		close(fd);
		if (held != 0)
			continue; /* alive, or cannot tell: kept */
		if (claim) {
			(void)unlinkat(dfd, e->d_name, 0);
		} else {
			gone[ngone].key = k;
			gone[ngone].mtime_ns = (long long)st.st_mtim.tv_sec * 1000000000LL + st.st_mtim.tv_nsec;
			ngone++;
		}
	}
	if (ngone > keep) { /* the oldest beyond keep go */
		qsort(gone, (size_t)ngone, sizeof(gone[0]), gx_gone_cmp);
		for (int i = 0; i < ngone - keep; i++)
			dead[ndead++] = gone[i].key;
	}
	if (ndead) {
		qsort(dead, (size_t)ndead, sizeof(dead[0]), gx_int_cmp);
		/* every file of a dead key but its status, which goes last: while
		 * it is there no new process can claim the key */
		rewinddir(d);
		while ((e = readdir(d))) {
			int k = gx_name_key(e->d_name);
			char want[32];

			snprintf(want, sizeof(want), "%d" GPUEXT_DEVRT_PROBES_STATUS_SUFFIX, k);
			if (k && strcmp(e->d_name, want) != 0 && bsearch(&k, dead, (size_t)ndead, sizeof(int), gx_int_cmp))
				(void)unlinkat(dfd, e->d_name, 0);
		}
		for (int i = 0; i < ndead; i++) {
			char name[32];

			snprintf(name, sizeof(name), "%d" GPUEXT_DEVRT_PROBES_STATUS_SUFFIX, dead[i]);
			(void)unlinkat(dfd, name, 0);
		}
		GX_DEBUG("probes: removed the files of %d of the %d processes that are gone (keeping %d)", ndead, ngone, keep);
	}
	closedir(d);
}

/*
 * The number naming this process's files. Containers of a pod share the
 * directory but not a pid namespace (each has a pid 1), and a restarted
 * process may reuse a pid: the first free name among pid, pid + 1 << 22,
 * pid + 2 << 22, ... is claimed (pids are below 1 << 22).
 */
int gx_key(void)
{
	int key = atomic_load(&gx_pr.key), expected = 0, claimed = 0, fd;
	char path[PATH_MAX + 32], tmp[PATH_MAX + 64];
	struct timespec ts;

	if (key)
		return key;
	if (!gx_pr.dir[0])
		return (int)getpid();
	clock_gettime(CLOCK_MONOTONIC, &ts);
	snprintf(tmp, sizeof(tmp), "%s/.claim-%d-%ld%09ld", gx_pr.dir, (int)getpid(), (long)ts.tv_sec, ts.tv_nsec);
	fd = open(tmp, O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
	if (fd >= 0 && gx_locked_byte0(fd, F_WRLCK, F_OFD_SETLK) != 1) {
		close(fd);
		unlink(tmp);
		fd = -1;
	}
	key = (int)getpid();
	for (int n = 0; fd >= 0 && n < 256; n++) {
		key = (int)getpid() + (n << 22);
		snprintf(path, sizeof(path), "%s/%d" GPUEXT_DEVRT_PROBES_STATUS_SUFFIX, gx_pr.dir, key);
		if (link(tmp, path) == 0) {
			claimed = 1;
			break;
		}
		if (errno != EEXIST)
			break; /* an error the writes will meet too */
	}
	if (fd >= 0)
		unlink(tmp);
	if (!atomic_compare_exchange_strong(&gx_pr.key, &expected, key)) {
		if (claimed)
			unlink(path); /* another thread claimed one first: give ours back */
		if (fd >= 0)
			close(fd);
		return expected;
	}
	if (claimed) {
		gx_claim_fd = fd;
		gx_sweep_dead(key);
	} else if (fd >= 0) {
		close(fd);
	}
	return key;
}
