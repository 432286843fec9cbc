/*
 * fakenvml.c - a fake libnvidia-ml.so.1 for CI: one device with 80 GiB
 * (FAKECUDA_TOTAL_BYTES overrides) of which FAKENVML_USED_BYTES are in use.
 * Enough for the device runtime's NVML memory-info clamp to be tested.
 */
#include <stdlib.h>

#include "cuda_min.h"

#define FAKE_API __attribute__((visibility("default")))

static unsigned long long fake_env(const char *name, unsigned long long dflt)
{
	const char *s = getenv(name);

	return s && *s ? strtoull(s, NULL, 10) : dflt;
}

FAKE_API nvmlReturn_t nvmlInit_v2(void)
{
	return NVML_SUCCESS;
}

FAKE_API nvmlReturn_t nvmlDeviceGetHandleByIndex_v2(unsigned int index, nvmlDevice_t *device)
{
	if (index != 0 || !device)
		return 2; /* NVML_ERROR_INVALID_ARGUMENT */
	*device = (nvmlDevice_t)0x4000;
	return NVML_SUCCESS;
}

FAKE_API nvmlReturn_t nvmlDeviceGetMemoryInfo(nvmlDevice_t device, nvmlMemory_t *memory)
{
	(void)device;
	if (!memory)
		return 2;
	memory->total = fake_env("FAKECUDA_TOTAL_BYTES", 80ull << 30);
	memory->used = fake_env("FAKENVML_USED_BYTES", 0);
	memory->free = memory->total - memory->used;
	return NVML_SUCCESS;
}

FAKE_API nvmlReturn_t nvmlDeviceGetMemoryInfo_v2(nvmlDevice_t device, nvmlMemory_v2_t *memory)
{
	(void)device;
	if (!memory)
		return 2;
	memory->total = fake_env("FAKECUDA_TOTAL_BYTES", 80ull << 30);
	memory->used = fake_env("FAKENVML_USED_BYTES", 0);
	memory->reserved = 0;
	memory->free = memory->total - memory->used;
	return NVML_SUCCESS;
}
