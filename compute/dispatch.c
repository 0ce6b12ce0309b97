/*
 * dispatch.c - the kernel tables and the choice between them (STYLE rule
 * 17).  Compiled with baseline flags: it only reads CPU features and hands
 * out pointers, and never runs an AVX2 instruction itself.
 *
 * The choice is made on the first kvc_kernels() call and cached in an
 * atomic pointer; two threads racing on the first call both compute the
 * same answer, so the race is harmless.  KVC_HAVE_AVX2 (0 or 1) comes from
 * compute/CMakeLists.txt: 1 when the AVX2 files are part of the build.
 */
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "compute/codec.h"
#include "compute/codec_impl.h"
#include "compute/kern_impl.h"
#include "compute/kernels.h"

static const struct kvc_kernels scalar_table = {
	.name = "scalar",
	.attn_fold = kvc_attn_fold_scalar,
	.scores = kvc_scores_scalar,
	.probs = kvc_probs_scalar,
	.h2o_accumulate = kvc_h2o_accumulate_scalar,
	.softmax_stats = kvc_softmax_stats_scalar,
	.softmax_mass = kvc_softmax_mass_scalar,
	.sparf_scores = kvc_sparf_scores_scalar,
	.vmean_fold = kvc_vmean_fold_scalar,
};

#if KVC_HAVE_AVX2
static const struct kvc_kernels avx2_table = {
	.name = "avx2",
	.attn_fold = kvc_attn_fold_avx2,
	.scores = kvc_scores_avx2,
	.probs = kvc_probs_avx2,
	.h2o_accumulate = kvc_h2o_accumulate_avx2,
	.softmax_stats = kvc_softmax_stats_avx2,
	.softmax_mass = kvc_softmax_mass_avx2,
	.sparf_scores = kvc_sparf_scores_avx2,
	.vmean_fold = kvc_vmean_fold_avx2,
};

/* avx2_usable - the CPU (and OS, for the YMM state) has AVX2, FMA, F16C */
static const struct kvc_kernels *avx2_usable(void)
{
	__builtin_cpu_init();
	if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
	    __builtin_cpu_supports("f16c"))
		return &avx2_table;
	return NULL;
}
#else
static const struct kvc_kernels *avx2_usable(void)
{
	return NULL;
}
#endif

static _Atomic(const struct kvc_kernels *) chosen;

const struct kvc_kernels *kvc_kernels_scalar(void)
{
	return &scalar_table;
}

const struct kvc_kernels *kvc_kernels_avx2(void)
{
	return avx2_usable();
}

/* choose - KVF_SIMD=scalar forces scalar; else the best the CPU runs. */
static const struct kvc_kernels *choose(void)
{
	const char *env = getenv("KVF_SIMD");
	const struct kvc_kernels *k;

	if (env && strcmp(env, "scalar") == 0)
		return &scalar_table;
	k = avx2_usable();
	return k ? k : &scalar_table;
}

const struct kvc_kernels *kvc_kernels(void)
{
	const struct kvc_kernels *k =
		atomic_load_explicit(&chosen, memory_order_acquire);

	if (!k) {
		k = choose();
		atomic_store_explicit(&chosen, k, memory_order_release);
	}
	return k;
}

/* ---- the codec kernels (codec.h): they follow the choice above ----------- */

static const struct kvc_codec_kernels codec_scalar_table = {
	.name = "scalar",
	.encode = kvc_codec_encode_scalar,
	.decode = kvc_codec_decode_scalar,
	.scores = kvc_codec_scores_scalar,
	.fold = kvc_codec_fold_scalar,
	.in_range = kvc_codec_in_range_scalar,
};

#if KVC_HAVE_AVX2
static const struct kvc_codec_kernels codec_avx2_table = {
	.name = "avx2",
	.encode = kvc_codec_encode_avx2,
	.decode = kvc_codec_decode_avx2,
	.scores = kvc_codec_scores_avx2,
	.fold = kvc_codec_fold_avx2,
	.in_range = kvc_codec_in_range_avx2,
};
#endif

const struct kvc_codec_kernels *kvc_codec_kernels_scalar(void)
{
	return &codec_scalar_table;
}

const struct kvc_codec_kernels *kvc_codec_kernels_avx2(void)
{
#if KVC_HAVE_AVX2
	return avx2_usable() ? &codec_avx2_table : NULL;
#else
	return NULL;
#endif
}

const struct kvc_codec_kernels *kvc_codec_kernels(void)
{
#if KVC_HAVE_AVX2
	if (kvc_kernels() != &scalar_table)
		return &codec_avx2_table;
#endif
	return &codec_scalar_table;
}
