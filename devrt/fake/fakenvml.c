/*
 * fakenvml.c - a fake libnvidia-ml.so.1 for CI: FAKECUDA_DEVICES devices
 * (default 1) with 80 GiB each (FAKECUDA_TOTAL_BYTES overrides) of which
 * FAKENVML_USED_BYTES are in use. Enough for the device runtime's NVML
 * memory-info clamp to be tested. Device i's handle is 0x4000 + i.
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
	if (index >= fake_env("FAKECUDA_DEVICES", 1) || !device)
		return 2; /* NVML_ERROR_INVALID_ARGUMENT */
	*device = (nvmlDevice_t)(0x4000 + (unsigned long)index);
	return NVML_SUCCESS;
}

FAKE_API nvmlReturn_t nvmlDeviceGetIndex(nvmlDevice_t device, unsigned int *index)
{
	unsigned long h = (unsigned long)device;

	if (!index || h < 0x4000 || h - 0x4000 >= fake_env("FAKECUDA_DEVICES", 1))
		return 2;
	*index = (unsigned int)(h - 0x4000);
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
