/*
 * bench_codec_int.h - the accuracy measurement of `kvbench codec`, in a
 * library of its own (kvf_bench_codec) so that a unit test holds the
 * codecs to their documented figures with the same code.
 *
 * One measurement: synthetic K and V of one workload (below) for
 * n_kv_heads heads of n_tokens tokens of head_dim f16 values, n_q query
 * heads per KV head; the reference is the attention in double over the
 * f16 values (what the uncompressed store holds); the codec's result is
 * the dispatched codec fold (compute/codec.h) over the encoded groups.
 * Per query head: the cosine of the two outputs and the relative error
 * |o - o_ref| / |o_ref|; reported as mean and worst over all heads.
 * KVF_CODEC_NONE measures the dense f16 kernel (attn_fold) the same way.
 */
#ifndef KVF_BENCH_CODEC_INT_H
#define KVF_BENCH_CODEC_INT_H

#include <stdint.h>

#include "kvflash.h"

/*
 * The workloads.  Scores are q . k with q drawn so that their standard
 * deviation over the tokens is tau (q's direction random):
 *  FLAT      tau 0.3: attention nearly uniform over the context;
 *  PEAKY     tau 3, and 4 tokens 8 above the rest: a few tokens hold
 *            almost all the mass;
 *  MIXED     tau 1.5, an attention sink at token 0 (+6) and 1% heavy
 *            hitters (+3), the rest a long tail;
 *  OUTLIERS  MIXED's scores on K with 4 channels 10, 20, 35 and 50 times
 *            larger (and offset by as much): the per-channel outliers
 *            real keys have (KIVI, KVQuant);
 *  OUTLIERS_KV  OUTLIERS, and V with 2 channels 10 and 30 times larger,
 *            which real values do not show: the case per-token V scales
 *            (INT8, INT4) handle worst.
 */
enum codec_workload {
	CODEC_WL_FLAT,
	CODEC_WL_PEAKY,
	CODEC_WL_MIXED,
	CODEC_WL_OUTLIERS,
	CODEC_WL_OUTLIERS_KV,
	CODEC_WL_COUNT
};

/* codec_workload_name - "flat", "peaky", "mixed", "outliers",
 * "outliers_kv". */
const char *codec_workload_name(enum codec_workload w);

struct codec_eval_cfg {
	uint32_t head_dim;     /* elements per head vector (1..1024) */
	uint32_t group_tokens; /* G: tokens per encoded group */
	uint32_t n_tokens;     /* context per KV head; a multiple of G */
	uint32_t n_kv_heads;   /* independent heads (trials) */
	uint32_t n_q;          /* query heads per KV head (1..64) */
	uint64_t seed;         /* of the synthetic data */
	uint32_t layout;       /* KVC_LAYOUT_F16 or KVC_LAYOUT_KBYTE */
};

struct codec_eval_result {
	double cos_mean, cos_min; /* cosine of output vs reference */
	double rel_mean, rel_max; /* |o - o_ref| / |o_ref| */
	double bytes_ratio;       /* K + V bytes per token over f16's */
	uint32_t n_heads;         /* query heads measured */
};

/*
 * codec_eval - measure codec on workload w.
 * Return: KVF_OK with *out filled; KVF_EINVAL for a configuration the
 * codec's layout refuses or n_tokens not a multiple of G; KVF_ENOMEM.
 */
kvf_status codec_eval(const struct codec_eval_cfg *cfg, kvf_codec codec,
		      enum codec_workload w, struct codec_eval_result *out);

#endif /* KVF_BENCH_CODEC_INT_H */
