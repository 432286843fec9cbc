/* SPDX-License-Identifier: (GPL-2.0 OR Apache-2.0) */
/*
 * shim.h - lets g++ compile helpers.cu for the host differential test
 * (helpers_diff_test.go): the CUDA qualifiers become nothing, the device
 * atomics and fences become the GCC builtins with the same effect on one
 * thread.  Force-included before helpers.cu with -DGPUEXT_HELPERS_HOST_TEST.
 */
#define __device__
#define __noinline__ __attribute__((noinline))
#define __forceinline__ inline

static inline unsigned int atomicCAS(unsigned int *p, unsigned int cmp, unsigned int val)
{
	__atomic_compare_exchange_n(p, &cmp, val, false, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST);
	return cmp;
}

static inline unsigned long long atomicCAS(unsigned long long *p, unsigned long long cmp, unsigned long long val)
{
	__atomic_compare_exchange_n(p, &cmp, val, false, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST);
	return cmp;
}

static inline unsigned int atomicExch(unsigned int *p, unsigned int val)
{
	return __atomic_exchange_n(p, val, __ATOMIC_SEQ_CST);
}

static inline unsigned long long atomicExch(unsigned long long *p, unsigned long long val)
{
	return __atomic_exchange_n(p, val, __ATOMIC_SEQ_CST);
}

static inline unsigned long long atomicAdd(unsigned long long *p, unsigned long long val)
{
	return __atomic_fetch_add(p, val, __ATOMIC_SEQ_CST);
}

static inline void __threadfence(void)
{
	__atomic_thread_fence(__ATOMIC_SEQ_CST);
}

/* the stress test (testdata/hoststress): yield where a race can happen */
#ifdef GX_HOST_STRESS
void gx_test_race_point(void);
#define GX_TEST_RACE_POINT() gx_test_race_point()
#endif
