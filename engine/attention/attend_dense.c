/*
 * attend_dense.c - the task of one (sequence, KV head): the K and V pages
 * of the head are streamed into the compute kernels' online softmax, the
 * query heads that share the KV head (GQA) folded in one pass; then the
 * outputs, and, when the call asks for them, the probabilities, the H2O
 * scores and the top-k tokens.  A sparse call hands over to SparF
 * (attend_sparf.c).  A file of its own: it is the hot path of every dense
 * call, apart from the calls' checks and locking (attend.c).
 *
 * Locking: see engine/attention/attend_int.h; the head's H2O scores belong to this
 * task alone.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "api/alloc.h"
#include "api/options.h"
#include "api/status.h"
#include "compute/kernels.h"
#include "engine/attention/attend_int.h"
#include "engine/base/pool.h"
#include "engine/reads/readpath.h"
#include "engine/sequences/dropmark.h"
#include "engine/sequences/seq_stream.h"
#include "engine/base/store_state.h"

/* One task's fold. */
struct fold_ctx {
	const struct attn_call *c;
	struct kvc_attn_state state;
	const float *q;        /* [d][head_dim], scaled */
	uint64_t t_start;      /* first token attended */
	float *scores;         /* NULL, or [d][n_tok] raw scores */
	uint64_t n_tok;        /* tokens attended */
};

static kvf_status fold_span(void *arg, uint64_t first, uint32_t n,
			    const unsigned char *k_rows,
			    const unsigned char *v_rows)
{
	struct fold_ctx *f = arg;
	const kvf_attn_opts *o = f->c->o;
	const uint8_t *mask = o && o->mask ? o->mask + first : NULL;

	f->c->k->attn_fold(&f->state, f->q, k_rows, v_rows, n,
			   (kvf_dtype)f->c->st->hdr.dtype, mask,
			   f->scores ? f->scores + (first - f->t_start) : NULL,
			   (size_t)f->n_tok);
	return KVF_OK;
}

/* fold_coded - fold_span over tokens [at, at + n) of an encoded K and V
 * group (a codec store's sealed group), decoded in registers */
static kvf_status fold_coded(void *arg, uint64_t first, uint32_t n,
			     const unsigned char *k_grp,
			     const unsigned char *v_grp, uint32_t at)
{
	struct fold_ctx *f = arg;
	const kvf_attn_opts *o = f->c->o;
	kvf_store *st = f->c->st;

	st->ck->fold(&f->state, f->q, &st->codec_lay[0], k_grp,
		     &st->codec_lay[1], v_grp, at, n,
		     o && o->mask ? o->mask + first : NULL,
		     f->scores ? f->scores + (first - f->t_start) : NULL,
		     (size_t)f->n_tok);
	return KVF_OK;
}

/* h2o_add - add probabilities p ([d][n], summed over d) of tokens
 * [t_start, t_start + n) to the head's H2O scores */
static kvf_status h2o_add(kvf_store *st, struct seq *seq, uint32_t layer,
			  uint32_t head, const float *p, uint32_t d,
			  uint64_t t_start, uint64_t n,
			  const struct kvc_kernels *k)
{
	struct h2o *h;
	uint64_t need = t_start + n;

	if (seq->h2o == NULL)
		return kvf_fail(KVF_ENOMEM, "H2O scores are not allocated");
	h = &seq->h2o[(size_t)layer * st->hdr.n_kv_heads + head];
	if (need > h->cap) {
		uint64_t cap = h->cap ? h->cap : 256;
		float *a;

		while (cap < need)
			cap *= 2;
		a = kvf_realloc(h->score, cap * sizeof(float));
		if (a == NULL)
			return kvf_fail(KVF_ENOMEM, "out of memory for H2O scores");
		memset(a + h->cap, 0, (cap - h->cap) * sizeof(float));
		h->score = a;
		h->cap = cap;
	}
	if (need > h->len)
		h->len = need;
	for (uint64_t done = 0; done < n;) {
		uint32_t m = n - done > (1u << 30) ? 1u << 30 : (uint32_t)(n - done);

		k->h2o_accumulate(h->score + t_start + done, p + done, (size_t)n,
				  d, m);
		done += m;
	}
	return KVF_OK;
}

/* attend_head_task - attention of one (sequence, KV head) */
kvf_status attend_head_task(void *arg, uint32_t i)
{
	const struct attn_call *c = arg;
	kvf_store *st = c->st;
	uint32_t H = st->hdr.n_kv_heads, Q = st->hdr.n_q_heads;
	uint32_t D = st->hdr.head_dim, d = Q / H;
	uint32_t si = i / H, head = i % H;
	struct seq *seq = c->seqs[si];
	uint64_t len = seq->len[c->layer];
	const float *q = c->q + ((size_t)si * Q + (size_t)head * d) * D;
	struct fold_ctx f = { .c = c };
	int want_probs = c->probs || c->top_tokens || (c->o && c->o->h2o);
	float *buf, *qs;
	kvf_status rc;

	f.t_start = attend_from(c->o, len);
	f.n_tok = len - f.t_start;
	buf = kvf_malloc((KVC_ATTN_STATE_FLOATS(d, D) + (size_t)d * D) *
			 sizeof(float));
	if (want_probs && f.n_tok)
		f.scores = kvf_malloc((size_t)d * f.n_tok * sizeof(float));
	if (buf == NULL || (want_probs && f.n_tok && f.scores == NULL)) {
		kvf_free(buf);
		kvf_free(f.scores);
		return kvf_fail(KVF_ENOMEM, "attention: out of memory for a task");
	}
	qs = buf + KVC_ATTN_STATE_FLOATS(d, D);
	for (size_t j = 0; j < (size_t)d * D; j++)
		qs[j] = q[j] * c->scale;
	f.q = qs;
	if (c->o && c->o->sparse && c->out) {
		rc = len ? attend_sparf_task(c, si, head, qs,
					     c->out + ((size_t)si * Q + (size_t)head * d) * D,
					     c->lse ? c->lse + (size_t)si * Q + (size_t)head * d
						    : NULL)
			 : KVF_OK;
		if (len == 0) {
			kvc_attn_state_init(&f.state, d, D, buf);
			kvc_attn_finish(&f.state,
					c->out + ((size_t)si * Q + (size_t)head * d) * D,
					c->lse ? c->lse + (size_t)si * Q + (size_t)head * d
					       : NULL);
		}
		kvf_free(buf);
		kvf_free(f.scores);
		return rc;
	}
	kvc_attn_state_init(&f.state, d, D, buf);
	/* dropped groups are read by no one: their scores stay masked */
	if (f.scores && dropmark_any(st, seq, dropmark_lane(st, c->layer, head)))
		for (size_t j = 0; j < (size_t)d * f.n_tok; j++)
			f.scores[j] = -INFINITY;
	rc = stream_read_pair_kept(st, seq, dropmark_lane(st, c->layer, head),
				   seq_kv_stream(st, seq, c->layer, KIND_K, head),
				   seq_kv_stream(st, seq, c->layer, KIND_V, head),
				   len, f.t_start, len, fold_span, fold_coded, &f);
	if (rc == KVF_OK && c->out)
		kvc_attn_finish(&f.state,
				c->out + ((size_t)si * Q + (size_t)head * d) * D,
				c->lse ? c->lse + (size_t)si * Q + (size_t)head * d
				       : NULL);
	if (rc == KVF_OK && want_probs && f.n_tok) {
		for (uint32_t h = 0; h < d; h++)
			c->k->probs(f.scores + (size_t)h * f.n_tok,
				    f.scores + (size_t)h * f.n_tok,
				    (uint32_t)f.n_tok, f.state.m[h], f.state.l[h]);
		if (c->probs)
			for (uint32_t h = 0; h < d; h++)
				memcpy(c->probs + ((size_t)head * d + h) * c->probs_cap,
				       f.scores + (size_t)h * f.n_tok,
				       f.n_tok * sizeof(float));
		/* a head with no softmax (a NaN score: its probabilities are
		 * NaN) adds nothing to the H2O scores or the top-k mass,
		 * which it would make NaN for good */
		for (uint32_t h = 0; h < d; h++)
			if (isnan(f.state.l[h]))
				memset(f.scores + (size_t)h * f.n_tok, 0,
				       f.n_tok * sizeof(float));
		if (c->o && c->o->h2o)
			rc = h2o_add(st, seq, c->layer, head, f.scores, d,
				     f.t_start, f.n_tok, c->k);
		if (rc == KVF_OK && c->top_tokens) {
			/* rank by the mass the group's heads give each token */
			float *sum = f.scores; /* reuse row 0 as the sum */
			uint32_t *idx = kvf_malloc((size_t)c->topk * sizeof(uint32_t));
			uint32_t n;

			if (idx == NULL) {
				rc = kvf_fail(KVF_ENOMEM, "kvf_topk: out of memory");
			} else {
				for (uint32_t h = 1; h < d; h++)
					for (uint64_t t = 0; t < f.n_tok; t++)
						sum[t] += f.scores[(size_t)h * f.n_tok + t];
				n = kvc_topk(sum, (uint32_t)f.n_tok, c->topk, idx);
				for (uint32_t j = 0; j < n; j++) {
					c->top_tokens[(size_t)head * c->topk + j] =
						f.t_start + idx[j];
					if (c->top_mass)
						c->top_mass[(size_t)head * c->topk + j] =
							sum[idx[j]] / (float)d;
				}
				c->top_n[head] = n;
				kvf_free(idx);
			}
		}
	} else if (rc == KVF_OK && c->top_tokens) {
		c->top_n[head] = 0;
	}
	kvf_free(buf);
	kvf_free(f.scores);
	return rc;
}
