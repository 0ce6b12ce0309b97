/*
 * optim_dispatch.c - the choice between the optimizer variants: the
 * scalar one (optim.c) and the AVX2 one (optim_avx2.c), both below it.
 *
 * Compiled with baseline flags: it only reads CPU features and hands out
 * the AVX2 table, and never runs an AVX2 instruction itself.  The choice
 * of variant is made on the first kvc_optim() call and cached in an
 * atomic pointer; two threads racing on the first call compute the same
 * answer, so the race is harmless.  KVC_OPTIM_HAVE_AVX2 (0 or 1) comes
 * from compute/CMakeLists.txt: 1 when optim_avx2.c is part of the build.
 */
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "compute/optim.h"
#include "compute/optim_impl.h"

#ifndef KVC_OPTIM_HAVE_AVX2
#define KVC_OPTIM_HAVE_AVX2 0
#endif

/* ---- dispatch ------------------------------------------------------------ */

#if KVC_OPTIM_HAVE_AVX2
/* avx2_usable - the CPU (and OS, for the YMM state) has AVX2, FMA, F16C. */
static const struct kvc_optim *avx2_usable(void)
{
	__builtin_cpu_init();
	if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
	    __builtin_cpu_supports("f16c"))
		return &kvc_optim_avx2_table;
	return NULL;
}
#else
static const struct kvc_optim *avx2_usable(void)
{
	return NULL;
}
#endif

static _Atomic(const struct kvc_optim *) chosen;

/* choose - KVF_SIMD=scalar forces scalar; else the best the CPU runs. */
static const struct kvc_optim *choose(void)
{
	const char *env = getenv("KVF_SIMD");
	const struct kvc_optim *k;

	if (env && strcmp(env, "scalar") == 0)
		return &kvc_optim_scalar_table;
	k = avx2_usable();
	return k ? k : &kvc_optim_scalar_table;
}

const struct kvc_optim *kvc_optim(void)
{
	const struct kvc_optim *k =
		atomic_load_explicit(&chosen, memory_order_acquire);

	if (!k) {
		k = choose();
		atomic_store_explicit(&chosen, k, memory_order_release);
	}
	return k;
}

const struct kvc_optim *kvc_optim_scalar(void)
{
	return &kvc_optim_scalar_table;
}

const struct kvc_optim *kvc_optim_avx2(void)
{
	return avx2_usable();
}

const char *kvc_optim_name(const struct kvc_optim *k)
{
	return k->name;
}
