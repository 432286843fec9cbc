// read_file.h - a whole file into a NUL-terminated buffer, for the GPU test
// programs that load PTX text (probe_diff.cu, probe_cost.cu, kernel_cost.c).
#pragma once
#include <stdio.h>
#include <stdlib.h>

static char *read_file(const char *path, size_t *len)
{
	FILE *f = fopen(path, "rb");
	if (!f)
		return NULL;
	fseek(f, 0, SEEK_END);
	long n = ftell(f);
	fseek(f, 0, SEEK_SET);
	char *b = (char *)malloc(n + 1);
	if (n < 0 || fread(b, 1, n, f) != (size_t)n) {
		fclose(f);
		free(b);
		return NULL;
	}
	fclose(f);
	b[n] = 0;
	if (len)
		*len = n;
	return b;
}
