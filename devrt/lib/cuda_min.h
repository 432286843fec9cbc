/*
 * cuda_min.h - the few CUDA driver and NVML types the device runtime, the fake
 * libcuda and the test apps need, declared from the documented ABI (x86-64,
 * aarch64: 64-bit device pointers). Handles are opaque pointers; structs the
 * interposer never looks into are incomplete types.
 */
#ifndef GPUEXT_CUDA_MIN_H
#define GPUEXT_CUDA_MIN_H

#include <stddef.h>
#include <stdint.h>

typedef int CUresult;
#define CUDA_SUCCESS 0
#define CUDA_ERROR_INVALID_VALUE 1
#define CUDA_ERROR_OUT_OF_MEMORY 2
#define CUDA_ERROR_NOT_INITIALIZED 3
#define CUDA_ERROR_NOT_FOUND 500

typedef uint64_t cuuint64_t;
typedef unsigned long long CUdeviceptr;
typedef unsigned long long CUmemGenericAllocationHandle;
typedef int CUdevice;

typedef struct gx_CUstream_st *CUstream;
typedef struct gx_CUevent_st *CUevent;
typedef struct gx_CUfunc_st *CUfunction;
typedef struct gx_CUmemPool_st *CUmemoryPool;
typedef struct gx_CUgraphExec_st *CUgraphExec;
typedef struct gx_CUgraph_st *CUgraph;
typedef struct gx_CUlib_st *CUlibrary;
typedef struct gx_CUmod_st *CUmodule;
typedef struct gx_CUmemAllocationProp_st CUmemAllocationProp; /* used through pointers only */
typedef struct gx_CUlaunchConfig_st CUlaunchConfig;           /* used through pointers only */
typedef int CUjit_option;
typedef int CUlibraryOption;

/* device probes: what the interposer calls around a patched image load */
typedef struct gx_CUctx_st *CUcontext;
typedef struct gx_CUkern_st *CUkernel;
#define GX_CU_STREAM_PER_THREAD ((CUstream)0x2) /* CU_STREAM_PER_THREAD */
#define CU_JIT_ERROR_LOG_BUFFER 5
#define CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES 6
#define CU_STREAM_NON_BLOCKING 1
#define CU_MEMHOSTALLOC_PORTABLE 0x01
#define CU_MEMHOSTALLOC_DEVICEMAP 0x02
#define CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR 75
#define CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR 76

/* cuGetProcAddress flags */
#define CU_GET_PROC_ADDRESS_DEFAULT 0
#define CU_GET_PROC_ADDRESS_LEGACY_STREAM 1
#define CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM 2

/* cuGetProcAddress_v2 symbolStatus */
typedef int CUdriverProcAddressQueryResult;
#define CU_GET_PROC_ADDRESS_SUCCESS 0
#define CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND 1
#define CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT 2

/* NVML */
typedef int nvmlReturn_t;
#define NVML_SUCCESS 0
typedef struct gx_nvmlDevice_st *nvmlDevice_t;
typedef struct {
	unsigned long long total;
	unsigned long long free;
	unsigned long long used;
} nvmlMemory_t;
typedef struct {
	unsigned int version;
	unsigned long long total;
	unsigned long long reserved;
	unsigned long long free;
	unsigned long long used;
} nvmlMemory_v2_t;

#endif /* GPUEXT_CUDA_MIN_H */
