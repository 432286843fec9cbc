/*
 * devrt.c - the device runtime library's start (docs/devrt.md): the
 * constructor every process of the container runs (the checks that disable
 * the interposer, a secure-execution process first; settings from the env;
 * the trace line), the one-time
 * init at the first CUDA call (settings file, usage file, board), the fork
 * handler, and the log and clock helpers. The other jobs: resolve.c (real
 * entry points), lookup.c (dlsym, cuGetProcAddress), settings.c, wrappers.c,
 * acct.c (quota across processes), priority.c (launch gate, MPS share) and
 * the device probes (probe_state.h).
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <fcntl.h>
#include <link.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/auxv.h>
#include <time.h>
#include <unistd.h>

#include "devrt.h"

void gx_log(const char *fmt, ...)
{
	char line[512];
	int n = snprintf(line, sizeof(line), "gpuext-devrt[%d]: ", (int)getpid());
	va_list ap;

	va_start(ap, fmt);
	n += vsnprintf(line + n, sizeof(line) - (size_t)n - 1, fmt, ap);
	va_end(ap);
	if (n > (int)sizeof(line) - 2)
		n = (int)sizeof(line) - 2;
	line[n++] = '\n';
	(void)!write(2, line, (size_t)n);
}

uint64_t gx_now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/*
 * A secure-execution process (setuid, setgid or file capabilities: the
 * kernel's AT_SECURE) runs with the environment of whoever started it, so
 * the interposer opens and writes nothing from a path the env names (trace
 * file, settings, usage file, board, probes) and passes everything through.
 */
static int gx_secure_exec(void)
{
	return getauxval(AT_SECURE) != 0;
}

static pthread_once_t gx_once = PTHREAD_ONCE_INIT;

static void gx_runtime_init_once(void)
{
	if (!gx_cfg.enabled)
		return;
	if (gx_secure_exec()) { /* a CUDA call before our constructor ran (another library's constructor) */
		gx_cfg.enabled = 0;
		return;
	}
	gx_settings_load();
	gx_acct_open();
	gx_priority_open();
	GX_DEBUG("tenant=%llu quota=%llu class=%u window_ns=%llu acct=%s board=%s",
		 (unsigned long long)gx_cfg.tenant_id, (unsigned long long)atomic_load(&gx_cfg.quota_bytes),
		 gx_cfg.priority_class, (unsigned long long)gx_cfg.lc_window_ns,
		 gx_cfg.acct_dir ? gx_cfg.acct_dir : "(process-local)", gx_cfg.board_path ? gx_cfg.board_path : "-");
}

void gx_runtime_init(void)
{
	pthread_once(&gx_once, gx_runtime_init_once);
}

static void gx_trace_line(void)
{
	const char *trace = getenv(GPUEXT_ENV_DEVRT_TRACE);
	const char *tenant = getenv(GPUEXT_ENV_TENANT_ID);
	char line[512];
	int fd, n;

	if (!trace || !*trace)
		return;
	fd = open(trace, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
	if (fd < 0)
		return;
	n = snprintf(line, sizeof(line), "gpuext-devrt pid=%d tenant=%s settings=%s\n", (int)getpid(),
		     tenant ? tenant : "", gx_cfg.settings_path ? gx_cfg.settings_path : "");
	if (n > 0)
		(void)!write(fd, line, (size_t)n < sizeof(line) ? (size_t)n : sizeof(line) - 1);
	close(fd);
}

static void gx_child_after_fork(void)
{
	gx_acct_after_fork();
	gx_probe_after_fork();
}

/*
 * The table must hold our own functions, not whatever an earlier preload
 * exports under the same name: the library is linked -Bsymbolic-functions.
 */
static int gx_table_is_ours(void)
{
	Dl_info di;
	struct link_map *self = NULL, *owner;

	if (!dladdr1((void *)gx_table_is_ours, &di, (void **)&self, RTLD_DL_LINKMAP) || !self)
		return 0;
	for (int i = 0; i < GX_NHOOKS; i++) {
		owner = NULL;
		if (!dladdr1(gx_hooks[i].wrapper, &di, (void **)&owner, RTLD_DL_LINKMAP) || owner != self)
			return 0;
	}
	return 1;
}

/*
 * Cheap: every process of the container runs this; the real work waits for
 * the first CUDA call. The secure-execution check comes first: before it
 * nothing is read from the env but the debug flag.
 */
__attribute__((constructor)) static void gx_constructor(void)
{
	if (gx_secure_exec()) {
		gx_cfg.enabled = 0;
		gx_debug_from_env();
		GX_DEBUG("secure-execution (setuid/setgid/capabilities) process: interposer disabled, no trace line");
		return;
	}
	gx_settings_from_env();
	gx_trace_line();
	if (!gx_table_is_ours()) {
		gx_cfg.enabled = 0;
		gx_log("hook table resolves to another object (built without -Bsymbolic-functions?): interposer disabled");
		return;
	}
	pthread_atfork(NULL, NULL, gx_child_after_fork);
}
