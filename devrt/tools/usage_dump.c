/*
 * usage_dump.c - prints a tenant's usage file ($GPUEXT_TENANT_ACCT/usage) as
 * key=value lines, the one reader of gpuext_devrt_shm.h outside the library
 * (tests parse its output instead of mirroring the layout). Test tooling, not
 * installed: it maps the files it reads, which the host agent never does (its
 * reader is devrt/board, through lib/tenantfs).
 *
 *   usage_dump FILE
 *   header magic=ok version=1 nslots=256 tenant=3 quota=... used=... peak=... refused=... delayed=... delayed_ns=... launches=... lc_active_until_ns=... class=...
 *   slot i=0 pid=123 start_time=... live=1 bytes=... peak=... allocs=... frees=... refused=... delayed=... [dev0=... dev1=...]
 *
 * A slot's devN=BYTES are its bytes on device ordinal N, for the ordinals it holds any on.
 *
 * "used" sums the live slots; a slot is live while its owner holds the lock
 * on the slot's byte (see gpuext_devrt_shm.h). Only slots with a pid are printed.
 * With "board FILE" it prints a board instead: "board magic=ok seq=... lc_active_until_ns=... now_ns=...".
 *
 * "publish BOARD USAGE..." is the reference board publisher (one pass): it
 * takes the latest lc_active_until_ns over the latency-critical tenants'
 * usage files and writes it into BOARD in place (creating it), bumping seq.
 * The host agent does the same in a loop; tests use this one.
 */
#define _GNU_SOURCE
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "gpuext_devrt_shm.h"

static int dump_board(const char *path)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	const struct gpuext_devrt_board *b;
	struct timespec ts;

	if (fd < 0) {
		perror(path);
		return 1;
	}
	b = mmap(NULL, sizeof(*b), PROT_READ, MAP_SHARED, fd, 0);
	if (b == MAP_FAILED) {
		perror("mmap");
		return 1;
	}
	clock_gettime(CLOCK_MONOTONIC, &ts);
	printf("board magic=%s seq=%llu lc_active_until_ns=%llu now_ns=%llu\n",
	       atomic_load(&b->magic) == GPUEXT_DEVRT_BOARD_MAGIC ? "ok" : "bad", (unsigned long long)atomic_load(&b->seq),
	       (unsigned long long)atomic_load(&b->lc_active_until_ns),
	       (unsigned long long)ts.tv_sec * 1000000000ull + (unsigned long long)ts.tv_nsec);
	return 0;
}

static int publish(const char *board, int n, char **usage)
{
	unsigned long long until = 0;
	struct gpuext_devrt_board *b;
	int fd = open(board, O_RDWR | O_CREAT | O_CLOEXEC, 0644);

	if (fd < 0 || ftruncate(fd, sizeof(*b)) != 0) {
		perror(board);
		return 1;
	}
	b = mmap(NULL, sizeof(*b), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	if (b == MAP_FAILED) {
		perror("mmap");
		return 1;
	}
	for (int i = 0; i < n; i++) {
		struct gpuext_devrt_usage *u;
		int ufd = open(usage[i], O_RDONLY | O_CLOEXEC);
		struct stat st;

		if (ufd < 0 || fstat(ufd, &st) != 0 || (size_t)st.st_size < sizeof(*u)) {
			if (ufd >= 0)
				close(ufd);
			continue;
		}
		u = mmap(NULL, sizeof(*u), PROT_READ, MAP_SHARED, ufd, 0);
		close(ufd);
		if (u == MAP_FAILED)
			continue;
		if (atomic_load(&u->hdr.magic) == GPUEXT_DEVRT_USAGE_MAGIC &&
		    atomic_load(&u->hdr.priority_class) == GPUEXT_DEVRT_CLASS_LATENCY_CRITICAL &&
		    atomic_load(&u->hdr.lc_active_until_ns) > until)
			until = atomic_load(&u->hdr.lc_active_until_ns);
		munmap(u, sizeof(*u));
	}
	b->version = GPUEXT_DEVRT_SHM_VERSION;
	b->size = sizeof(*b);
	atomic_store(&b->lc_active_until_ns, until);
	atomic_fetch_add(&b->seq, 1);
	atomic_store(&b->magic, GPUEXT_DEVRT_BOARD_MAGIC);
	printf("published lc_active_until_ns=%llu seq=%llu\n", until, (unsigned long long)atomic_load(&b->seq));
	return 0;
}

int main(int argc, char **argv)
{
	struct gpuext_devrt_usage *u;
	struct stat st;
	unsigned long long used = 0;
	int fd, live[GPUEXT_DEVRT_SLOTS];

	if (argc == 3 && !strcmp(argv[1], "board"))
		return dump_board(argv[2]);
	if (argc >= 3 && !strcmp(argv[1], "publish"))
		return publish(argv[2], argc - 3, argv + 3);
	if (argc != 2) {
		fprintf(stderr, "usage: usage_dump FILE | usage_dump board FILE | usage_dump publish BOARD USAGE...\n");
		return 2;
	}
	fd = open(argv[1], O_RDONLY | O_CLOEXEC);
	if (fd < 0 || fstat(fd, &st) != 0) {
		perror(argv[1]);
		return 1;
	}
	if ((size_t)st.st_size < sizeof(*u)) {
		fprintf(stderr, "%s: %lld bytes, want %zu\n", argv[1], (long long)st.st_size, sizeof(*u));
		return 1;
	}
	u = mmap(NULL, sizeof(*u), PROT_READ, MAP_SHARED, fd, 0);
	if (u == MAP_FAILED) {
		perror("mmap");
		return 1;
	}
	if (atomic_load(&u->hdr.magic) != GPUEXT_DEVRT_USAGE_MAGIC || u->hdr.version != GPUEXT_DEVRT_SHM_VERSION ||
	    u->hdr.nslots != GPUEXT_DEVRT_SLOTS || u->hdr.header_size != sizeof(u->hdr) ||
	    u->hdr.slot_size != sizeof(u->slot[0])) {
		printf("header magic=bad\n");
		return 1;
	}
	for (unsigned i = 0; i < GPUEXT_DEVRT_SLOTS; i++) {
		struct flock fl = {.l_type = F_WRLCK, .l_whence = SEEK_SET, .l_start = GPUEXT_DEVRT_SLOT_LOCK_OFFSET(i), .l_len = 1};

		live[i] = 0;
		if (atomic_load(&u->slot[i].pid) == 0)
			continue;
		live[i] = fcntl(fd, F_GETLK, &fl) != 0 || fl.l_type != F_UNLCK;
		if (live[i])
			used += atomic_load(&u->slot[i].bytes);
	}
	printf("header magic=ok version=%u nslots=%u tenant=%llu quota=%llu used=%llu peak=%llu refused=%llu "
	       "delayed=%llu delayed_ns=%llu launches=%llu lc_active_until_ns=%llu class=%u\n",
	       u->hdr.version, u->hdr.nslots, (unsigned long long)atomic_load(&u->hdr.tenant_id),
	       (unsigned long long)atomic_load(&u->hdr.quota_bytes), used,
	       (unsigned long long)atomic_load(&u->hdr.peak_bytes), (unsigned long long)atomic_load(&u->hdr.refused_allocs),
	       (unsigned long long)atomic_load(&u->hdr.delayed_launches), (unsigned long long)atomic_load(&u->hdr.delayed_ns),
	       (unsigned long long)atomic_load(&u->hdr.launches), (unsigned long long)atomic_load(&u->hdr.lc_active_until_ns),
	       atomic_load(&u->hdr.priority_class));
	for (unsigned i = 0; i < GPUEXT_DEVRT_SLOTS; i++) {
		struct gpuext_devrt_slot *s = &u->slot[i];

		if (atomic_load(&s->pid) == 0)
			continue;
		printf("slot i=%u pid=%u start_time=%llu live=%d bytes=%llu peak=%llu allocs=%llu frees=%llu refused=%llu "
		       "delayed=%llu",
		       i, atomic_load(&s->pid), (unsigned long long)atomic_load(&s->start_time), live[i],
		       (unsigned long long)atomic_load(&s->bytes), (unsigned long long)atomic_load(&s->peak),
		       (unsigned long long)atomic_load(&s->allocs), (unsigned long long)atomic_load(&s->frees),
		       (unsigned long long)atomic_load(&s->refused), (unsigned long long)atomic_load(&s->delayed));
		for (unsigned d = 0; d < GPUEXT_DEVRT_MAX_DEVICES; d++)
			if (atomic_load(&u->slot_dev[i].bytes[d]))
				printf(" dev%u=%llu", d, (unsigned long long)atomic_load(&u->slot_dev[i].bytes[d]));
		printf("\n");
	}
	return 0;
}
