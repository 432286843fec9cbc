/*
 * fakenvml.c - a fake libnvidia-ml.so.1 for CI: FAKECUDA_DEVICES devices
 * (default 1) with 80 GiB each (FAKECUDA_TOTAL_BYTES overrides) of which
 * FAKENVML_USED_BYTES are in use. Enough for the device runtime's NVML
 * memory-info clamp to be tested. Device i's handle is 0x4000 + i.
 * FAKENVML_PROCESSES lists the compute processes gpuext-gpuview reads,
 * "GPU:PID:BYTES" separated by commas; device i's UUID is GPU-00000000-0000-0000-0000-fa4e0000000<i>
 * (shaped like a real one, so discovery's UUID check holds).
 * FAKENVML_LEDGER_DIR also lists the processes the fake libcuda recorded
 * there (FAKECUDA_LEDGER_DIR: <pid> files of "GPU BYTES" lines), each while
 * its pid lives, with FAKENVML_CONTEXT_BYTES added for the driver's own
 * context memory, as the real driver reports a process whether or not the
 * interposer saw its allocations.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

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

FAKE_API nvmlReturn_t nvmlShutdown(void)
{
	return NVML_SUCCESS;
}

FAKE_API const char *nvmlErrorString(nvmlReturn_t result)
{
	(void)result;
	return "fake NVML error";
}

FAKE_API nvmlReturn_t nvmlDeviceGetCount_v2(unsigned int *count)
{
	if (!count)
		return 2;
	*count = (unsigned int)fake_env("FAKECUDA_DEVICES", 1);
	return NVML_SUCCESS;
}

FAKE_API nvmlReturn_t nvmlDeviceGetUUID(nvmlDevice_t device, char *uuid, unsigned int length)
{
	unsigned int i;

	if (!uuid || nvmlDeviceGetIndex(device, &i) != NVML_SUCCESS)
		return 2;
	if ((unsigned int)snprintf(uuid, length, "GPU-00000000-0000-0000-0000-fa4e%08x", i) >= length)
		return 7; /* NVML_ERROR_INSUFFICIENT_SIZE */
	return NVML_SUCCESS;
}

/* nvmlPciInfo_t (NVML's layout). */
typedef struct {
	char busIdLegacy[16];
	unsigned int domain;
	unsigned int bus;
	unsigned int device;
	unsigned int pciDeviceId;
	unsigned int pciSubSystemId;
	char busId[32];
} fake_pci_info;

/* Device i sits at the made-up PCI bus id 00000000:(0x10+i):00.0, written
 * the way NVML writes it (eight domain digits, uppercase hex). */
FAKE_API nvmlReturn_t nvmlDeviceGetPciInfo_v3(nvmlDevice_t device, fake_pci_info *pci)
{
	unsigned int i;

	if (!pci || nvmlDeviceGetIndex(device, &i) != NVML_SUCCESS)
		return 2;
	memset(pci, 0, sizeof(*pci));
	pci->bus = 0x10 + i;
	pci->pciDeviceId = 0x233010de; /* an H100's device and vendor ids */
	snprintf(pci->busIdLegacy, sizeof(pci->busIdLegacy), "0000:%02X:00.0", pci->bus);
	snprintf(pci->busId, sizeof(pci->busId), "00000000:%02X:00.0", pci->bus);
	return NVML_SUCCESS;
}

/* nvmlProcessInfo_v2_t */
typedef struct {
	unsigned int pid;
	unsigned long long usedGpuMemory;
	unsigned int gpuInstanceId;
	unsigned int computeInstanceId;
} fake_process_info;

/* fake_ledger_procs adds the live ledger processes on GPU gpu after the n
 * already listed; returns the new count (infos filled up to cap). */
static unsigned int fake_ledger_procs(unsigned int gpu, unsigned int n, unsigned int cap, fake_process_info *infos)
{
	const char *dir = getenv("FAKENVML_LEDGER_DIR");
	unsigned long long ctx = fake_env("FAKENVML_CONTEXT_BYTES", 0);
	struct dirent *e;
	DIR *d;

	if (!dir || !*dir || !(d = opendir(dir)))
		return n;
	while ((e = readdir(d))) {
		char path[512], buf[1024], *p, *end;
		unsigned long pid = strtoul(e->d_name, &end, 10);
		ssize_t k;
		int fd;

		if (*end || !pid || (kill((pid_t)pid, 0) && errno == ESRCH))
			continue; /* not a pid file, or its process is gone: the driver freed it */
		snprintf(path, sizeof(path), "%s/%s", dir, e->d_name);
		fd = open(path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
		if (fd < 0)
			continue;
		k = read(fd, buf, sizeof(buf) - 1);
		close(fd);
		if (k <= 0)
			continue;
		buf[k] = 0;
		for (p = buf; *p;) {
			unsigned long g = strtoul(p, &end, 10);
			unsigned long long used = strtoull(end, &end, 10);

			if (g == gpu) {
				if (n < cap && infos) {
					infos[n].pid = (unsigned int)pid;
					infos[n].usedGpuMemory = used + ctx;
					infos[n].gpuInstanceId = infos[n].computeInstanceId = 0xFFFFFFFFu;
				}
				n++;
			}
			p = strchr(end, '\n');
			if (!p)
				break;
			p++;
		}
	}
	closedir(d);
	return n;
}

FAKE_API nvmlReturn_t nvmlDeviceGetComputeRunningProcesses_v3(nvmlDevice_t device, unsigned int *count,
							      fake_process_info *infos)
{
	const char *s = getenv("FAKENVML_PROCESSES");
	unsigned int i, n = 0;

	if (!count || nvmlDeviceGetIndex(device, &i) != NVML_SUCCESS)
		return 2;
	while (s && *s) {
		char *end;
		unsigned long gpu = strtoul(s, &end, 10);
		unsigned long pid = *end == ':' ? strtoul(end + 1, &end, 10) : 0;
		unsigned long long used = *end == ':' ? strtoull(end + 1, &end, 10) : 0;

		if (gpu == i) {
			if (n < *count && infos) {
				infos[n].pid = (unsigned int)pid;
				infos[n].usedGpuMemory = used;
				infos[n].gpuInstanceId = infos[n].computeInstanceId = 0xFFFFFFFFu;
			}
			n++;
		}
		s = *end == ',' ? end + 1 : "";
	}
	n = fake_ledger_procs(i, n, *count, infos);
	if (n > *count) {
		*count = n;
		return 7; /* NVML_ERROR_INSUFFICIENT_SIZE */
	}
	*count = n;
	return NVML_SUCCESS;
}
