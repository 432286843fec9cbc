/*
 * gpuext_devrt_placeholder.c - stand-in for the gpuext device runtime.
 *
 * Until the real interposer exists (devrt issue), admission injects this
 * library at the final path of the contract (docs/injection.md). It proves the
 * contract end to end: when GPUEXT_DEVRT_TRACE names a writable file, the
 * constructor appends one line with the pid, tenant id and config path it was
 * given. Otherwise it does nothing and never changes the application.
 */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

__attribute__((constructor)) static void gpuext_devrt_init(void)
{
	const char *trace = getenv("GPUEXT_DEVRT_TRACE");
	const char *tenant = getenv("GPUEXT_TENANT_ID");
	const char *cfg = getenv("GPUEXT_TENANT_CONFIG");
	char line[512];
	int fd, n;

	if (!trace || !*trace)
		return;
	fd = open(trace, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
	if (fd < 0)
		return;
	n = snprintf(line, sizeof(line), "gpuext-devrt-placeholder pid=%d tenant=%s config=%s\n",
		     (int)getpid(), tenant ? tenant : "", cfg ? cfg : "");
	if (n > 0)
		(void)write(fd, line, (size_t)n < sizeof(line) ? (size_t)n : sizeof(line) - 1);
	close(fd);
}
