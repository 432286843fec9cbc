/*
 * gpuext_devrt_env.h - the names of the environment variables of the
 * injection contract (docs/injection.md), defined once.
 *
 * Admission sets them in every container (internal/admission, through
 * devrt/tenantcfg, whose Go constants are generated from GPUEXT_DEVRT_ENV
 * below); the interposer reads them with getenv(GPUEXT_ENV_...). A name
 * exists here and nowhere else: renaming one renames it on both sides.
 */
#ifndef GPUEXT_DEVRT_ENV_H
#define GPUEXT_DEVRT_ENV_H

/* Set by admission. */
#define GPUEXT_ENV_TENANT_ID "GPUEXT_TENANT_ID"         /* the tenant id, decimal */
#define GPUEXT_ENV_TENANT_DIR "GPUEXT_TENANT_DIR"       /* the tenant dir (ro): settings.bin, config.json, probes/ */
#define GPUEXT_ENV_TENANT_CONFIG "GPUEXT_TENANT_CONFIG" /* its config.json: for people and tools, not read by the interposer */
#define GPUEXT_ENV_TENANT_ACCT "GPUEXT_TENANT_ACCT"     /* the tenant's accounting dir (rw): usage, probes/ */
#define GPUEXT_ENV_BOARD "GPUEXT_BOARD"                 /* the host's priority board (ro) */
#define GPUEXT_ENV_DEVRT_DIR "GPUEXT_DEVRT_DIR"         /* where libgpuext-devrt.so is mounted */
#define GPUEXT_ENV_POLICY "GPUEXT_POLICY"               /* the effective policy name, for the container's own use */
/* Set by a user or a test, never by admission. */
#define GPUEXT_ENV_DEVRT_DEBUG "GPUEXT_DEVRT_DEBUG"     /* non-empty, not "0": one stderr line per decision */
#define GPUEXT_ENV_DEVRT_TRACE "GPUEXT_DEVRT_TRACE"     /* a file: each process appends one line at load */
/* how many gone processes' probe files a tenant keeps (default 64): their
 * counts stay in the tenant's totals until more than that many are gone */
#define GPUEXT_ENV_DEVRT_PROBE_KEEP_GONE "GPUEXT_DEVRT_PROBE_KEEP_GONE"
/* CUDA's own: admission sets the pipe directory when the host runs MPS; the interposer sets the share. */
#define GPUEXT_ENV_MPS_PIPE_DIRECTORY "CUDA_MPS_PIPE_DIRECTORY"
#define GPUEXT_ENV_MPS_ACTIVE_THREAD_PERCENTAGE "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"
#define GPUEXT_ENV_MPS_CLIENT_PRIORITY "CUDA_MPS_CLIENT_PRIORITY"
/* CUDA's own, set by the device plugin's Allocate: the interposer numbers NVML's GPUs as CUDA does. */
#define GPUEXT_ENV_CUDA_VISIBLE_DEVICES "CUDA_VISIBLE_DEVICES"

/* X(Go constant name, macro): every name above, for devrt/tenantcfg's generator. */
#define GPUEXT_DEVRT_ENV(X)                                                \
	X(EnvTenantID, GPUEXT_ENV_TENANT_ID)                               \
	X(EnvTenantDir, GPUEXT_ENV_TENANT_DIR)                             \
	X(EnvTenantConfig, GPUEXT_ENV_TENANT_CONFIG)                       \
	X(EnvTenantAcct, GPUEXT_ENV_TENANT_ACCT)                           \
	X(EnvBoard, GPUEXT_ENV_BOARD)                                      \
	X(EnvDevrtDir, GPUEXT_ENV_DEVRT_DIR)                               \
	X(EnvPolicy, GPUEXT_ENV_POLICY)                                    \
	X(EnvDevrtDebug, GPUEXT_ENV_DEVRT_DEBUG)                           \
	X(EnvDevrtTrace, GPUEXT_ENV_DEVRT_TRACE)                           \
	X(EnvDevrtProbeKeepGone, GPUEXT_ENV_DEVRT_PROBE_KEEP_GONE)         \
	X(EnvMPSPipeDir, GPUEXT_ENV_MPS_PIPE_DIRECTORY)                    \
	X(EnvMPSActiveThreadPercentage, GPUEXT_ENV_MPS_ACTIVE_THREAD_PERCENTAGE) \
	X(EnvMPSClientPriority, GPUEXT_ENV_MPS_CLIENT_PRIORITY)            \
	X(EnvCUDAVisibleDevices, GPUEXT_ENV_CUDA_VISIBLE_DEVICES)

#endif /* GPUEXT_DEVRT_ENV_H */
