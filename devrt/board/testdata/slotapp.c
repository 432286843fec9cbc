/*
 * slotapp.c - a CUDA process for the usage-file liveness tests
 * (devrt/board/slot_test.go), linked with -lcuda: its driver calls reach the
 * preloaded interposer's exports, then the fake libcuda. Each step prints one
 * line; after the last it prints "hold" and waits to be killed.
 *
 *   alloc SIZE   cuMemAlloc_v2 of SIZE bytes (MiB/GiB suffix)   -> "alloc N ok" | "alloc N rc=R"
 *   reopen       opens and closes $GPUEXT_TENANT_ACCT/usage, as any
 *                library of the process might                   -> "reopen ok"
 *   fork SIZE    a child allocates SIZE and waits to be killed  -> "fork child=PID", then the
 *                                                                  child's "child alloc N ok"
 */
#define _GNU_SOURCE
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cuda_min.h"

CUresult cuInit(unsigned int);
CUresult cuMemAlloc_v2(CUdeviceptr *, size_t);

static unsigned long long size_of(const char *s)
{
	char *end;
	unsigned long long n = strtoull(s, &end, 10);

	if (!strcmp(end, "MiB"))
		n <<= 20;
	else if (!strcmp(end, "GiB"))
		n <<= 30;
	return n;
}

static void alloc(const char *who, unsigned long long n)
{
	CUdeviceptr p;
	CUresult r = cuMemAlloc_v2(&p, n);

	if (r == CUDA_SUCCESS)
		printf("%salloc %llu ok\n", who, n);
	else
		printf("%salloc %llu rc=%d\n", who, n, r);
}

int main(int argc, char **argv)
{
	setvbuf(stdout, NULL, _IOLBF, 0);
	if (cuInit(0) != CUDA_SUCCESS) {
		printf("init failed\n");
		return 1;
	}
	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "alloc") && i + 1 < argc) {
			alloc("", size_of(argv[++i]));
		} else if (!strcmp(argv[i], "reopen")) {
			char path[4096];
			const char *acct = getenv("GPUEXT_TENANT_ACCT");
			int fd;

			snprintf(path, sizeof(path), "%s/usage", acct ? acct : ".");
			fd = open(path, O_RDONLY | O_CLOEXEC);
			if (fd < 0) {
				printf("reopen failed\n");
				return 1;
			}
			close(fd); /* drops every POSIX record lock this process holds on the file */
			printf("reopen ok\n");
		} else if (!strcmp(argv[i], "fork") && i + 1 < argc) {
			unsigned long long n = size_of(argv[++i]);
			int go[2];
			char c = 0;
			pid_t pid;

			/* The child allocates only after the parent has printed its
			 * pid, so "fork child=PID" always comes before the child's
			 * line, which is the one the test waits for. */
			if (pipe(go) < 0) {
				printf("pipe failed\n");
				return 1;
			}
			pid = fork();
			if (pid < 0) {
				printf("fork failed\n");
				return 1;
			}
			if (pid == 0) {
				close(go[1]);
				if (read(go[0], &c, 1) != 1)
					_exit(1);
				close(go[0]);
				alloc("child ", n);
				for (;;)
					pause();
			}
			close(go[0]);
			printf("fork child=%d\n", (int)pid);
			if (write(go[1], &c, 1) != 1) {
				printf("pipe write failed\n");
				return 1;
			}
			close(go[1]);
		} else {
			printf("unknown step %s\n", argv[i]);
			return 2;
		}
	}
	printf("hold\n");
	for (;;)
		pause();
}
