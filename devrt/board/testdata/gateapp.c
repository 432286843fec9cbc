/*
 * gateapp.c - a CUDA process for the launch-gate timeline test
 * (devrt/board/gate_test.go), linked with -lcuda: its launches reach the
 * preloaded interposer's cuLaunchKernel (the launch gate), then the fake
 * libcuda. It prints one line per event, CLOCK_MONOTONIC nanoseconds (the
 * clock of the interposer and the publisher), then "done".
 *
 *   lc N K GAP_US   N requests of K launches each, GAP_US of sleep after
 *                   each: "lc FIRST LAST", when the request's first launch
 *                   began and its last launch returned
 *   lcsync N K GAP_US  the same, each request ending in cuCtxSynchronize
 *                   (the fake's FAKECUDA_SYNC_US is the request's work):
 *                   LAST is when the wait returned
 *   be MS GAP_US    launches for MS milliseconds, GAP_US of sleep after
 *                   each (the kernel's time): "be ENTER ADMITTED", when the
 *                   launch was called and when it returned (admitted)
 */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cuda_min.h"

CUresult cuInit(unsigned int);
CUresult cuCtxSynchronize(void);
CUresult cuLaunchKernel(CUfunction, unsigned int, unsigned int, unsigned int, unsigned int, unsigned int,
			unsigned int, unsigned int, CUstream, void **, void **);

static unsigned long long now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (unsigned long long)ts.tv_sec * 1000000000ull + (unsigned long long)ts.tv_nsec;
}

static int launch(void)
{
	return cuLaunchKernel((CUfunction)0x5000, 1, 1, 1, 32, 1, 1, 0, NULL, NULL, NULL) == CUDA_SUCCESS ? 0 : -1;
}

int main(int argc, char **argv)
{
	static char buf[1 << 20];

	setvbuf(stdout, buf, _IOFBF, sizeof(buf)); /* printing stays off the timeline */
	if (cuInit(0) != CUDA_SUCCESS) {
		printf("init failed\n");
		return 1;
	}
	if (argc == 5 && (!strcmp(argv[1], "lc") || !strcmp(argv[1], "lcsync"))) {
		int n = atoi(argv[2]), k = atoi(argv[3]), gap = atoi(argv[4]), wait = !strcmp(argv[1], "lcsync");

		for (int i = 0; i < n; i++) {
			unsigned long long first = now_ns();

			for (int j = 0; j < k; j++)
				if (launch() < 0) {
					printf("launch failed\n");
					return 1;
				}
			if (wait && cuCtxSynchronize() != CUDA_SUCCESS) {
				printf("sync failed\n");
				return 1;
			}
			printf("lc %llu %llu\n", first, now_ns());
			usleep((useconds_t)gap);
		}
	} else if (argc == 4 && !strcmp(argv[1], "be")) {
		unsigned long long end = now_ns() + strtoull(argv[2], NULL, 10) * 1000000ull;
		int gap = atoi(argv[3]);

		while (now_ns() < end) {
			unsigned long long enter = now_ns();

			if (launch() < 0) {
				printf("launch failed\n");
				return 1;
			}
			printf("be %llu %llu\n", enter, now_ns());
			usleep((useconds_t)gap);
		}
	} else {
		printf("usage: gateapp lc|lcsync N K GAP_US | be MS GAP_US\n");
		return 2;
	}
	printf("done\n");
	return 0;
}
