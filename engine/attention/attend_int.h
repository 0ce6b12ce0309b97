/*
 * attend_int.h - what the attention files of engine/ share (attend.c, the
 * public calls, their checks and locking; attend_dense.c, the task of one
 * (sequence, KV head); attend_sparf.c, its SparF variant): the call every
 * task reads, the first token a call attends, and the two tasks.  The
 * public calls are in kvflash.h.
 *
 * Locking: the caller's thread holds world shared and the lock of every
 * sequence of the call (engine/attention/attend.c); tasks only read their sequence,
 * except for per-(layer, head) state that belongs to exactly one task.
 */
#ifndef KVF_ENGINE_ATTEND_INT_H
#define KVF_ENGINE_ATTEND_INT_H

#include "compute/kernels.h"
#include "engine/sequences/seq.h"
#include "engine/base/store_state.h"

/* What every task of one call shares. */
struct attn_call {
	kvf_store *st;
	const struct kvc_kernels *k;
	struct seq **seqs;     /* [n_seqs], locked by the caller */
	uint32_t n_seqs;
	uint32_t layer;
	const float *q;        /* [n_seqs][n_q_heads][head_dim] */
	float *out;            /* [n_seqs][n_q_heads][head_dim] or NULL */
	float *lse;            /* [n_seqs][n_q_heads] or NULL */
	float scale;           /* softmax scale */
	const kvf_attn_opts *o; /* &opts, or NULL when the caller gave none */
	kvf_attn_opts opts;    /* the caller's, defaults past its size */
	float *probs;          /* kvf_scores: [n_q_heads][probs_cap] */
	uint64_t probs_cap;
	uint32_t topk;         /* kvf_topk: tokens per KV head */
	uint64_t *top_tokens;  /* [n_kv_heads][topk] */
	float *top_mass;       /* [n_kv_heads][topk] or NULL */
	uint32_t *top_n;       /* tokens selected per head */
	int ahead;             /* kvf_attend_batch: read the next layer
				* ahead for a sequence that misses */
};

/* attend_from - the first token one call looks at: it attends the tokens
 * [attend_from, len) */
static inline uint64_t attend_from(const kvf_attn_opts *o, uint64_t len)
{
	if (o && o->window && o->window < len)
		return len - o->window;
	return 0;
}

/* attend_head_task - attention of one (sequence, KV head): task i of the
 * call's pool run (sequence i / n_kv_heads, head i % n_kv_heads) */
kvf_status attend_head_task(void *arg, uint32_t i);

/* attend_sparf_task - SparF attention of sequence si's KV head head, its
 * query heads' scaled queries qs, into out and lse (may be NULL); the
 * sequence is not empty */
kvf_status attend_sparf_task(const struct attn_call *c, uint32_t si,
			     uint32_t head, const float *qs, float *out,
			     float *lse);

#endif /* KVF_ENGINE_ATTEND_INT_H */
