/*
 * mpi_attend.c - decode attention over the ranks.  Only q goes out and
 * only outputs (and log-sum-exps) come back; K and V stay where they are.
 *
 * HEAD: rank r receives the query heads of its KV heads (a contiguous
 * slice of q), attends them on its store, and the root gathers the
 * output slices straight into out.
 * TOKEN: every rank receives the whole q, attends its tokens, and sends
 * [out | lse] back; the root merges the parts in rank order with
 * kvf_attn_merge, which is exact: softmax over a union of disjoint token
 * sets is the LSE-weighted mix of the parts.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "mpi_int.h"

/* The root's options in the header; refused ones set h->status. */
static void take_opts(struct kvf_mpi_store *s, struct op_hdr *h,
		      const kvf_attn_opts *o, const char *call)
{
	if (!o)
		return;
	if (o->struct_size < offsetof(kvf_attn_opts, h2o) + sizeof(o->h2o) ||
	    o->struct_size > sizeof(*o)) {
		h->status = mpi_fail(o->struct_size > sizeof(*o) ?
					     KVF_EVERSION :
					     KVF_EINVAL,
				     "%s: opts->struct_size %zu not "
				     "supported (this library's is %zu)",
				     call, o->struct_size, sizeof(*o));
		return;
	}
	if (o->mask) {
		h->status =
			mpi_fail(KVF_ENOTSUP,
				 "%s: a mask is not supported "
				 "over MPI (it would move a byte per token); "
				 "use window",
				 call);
		return;
	}
	if (s->shard == KVF_MPI_SHARD_TOKEN && (o->sparse || o->h2o)) {
		h->status =
			mpi_fail(KVF_ENOTSUP,
				 "%s: %s with token sharding: "
				 "each rank would choose its top tokens or "
				 "normalize its probabilities alone; use head "
				 "sharding",
				 call, o->sparse ? "sparse" : "h2o");
		return;
	}
	if (!(o->scale >= 0.0f) || isinf(o->scale)) {
		h->status = mpi_fail(KVF_EINVAL,
				     "%s: scale %g is not a finite "
				     "number >= 0",
				     call, (double)o->scale);
		return;
	}
	h->scale = o->scale;
	h->window = o->window;
	h->want = o->lse ? 1u : 0u;
	h->sparse = o->sparse;
	h->top_r = o->top_r;
	h->top_k = o->top_k;
	if (o->struct_size >=
	    offsetof(kvf_attn_opts, recent_tokens) + sizeof(o->recent_tokens)) {
		h->sink = o->sink_tokens;
		h->recent = o->recent_tokens;
	}
	h->h2o = o->h2o;
}

static void local_opts(const struct op_hdr *h, kvf_attn_opts *o, float *lse)
{
	kvf_attn_opts_init(o);
	o->scale = h->scale;
	o->window = h->window;
	o->sparse = h->sparse;
	o->top_r = h->top_r;
	o->top_k = h->top_k;
	o->sink_tokens = h->sink;
	o->recent_tokens = h->recent;
	o->h2o = h->h2o;
	o->lse = lse;
}

/* Work space of one call, allocated before the ranks agree to go on. */
struct work {
	int *cnt, *dsp, *lcnt, *ldsp; /* [n_ranks] each: HEAD's byte counts */
	float *f; /* q and out here, [2 * qn + nq]; at the root of
			 * TOKEN then [n_ranks][qn + nq] of the parts */
};

static kvf_status work_alloc(struct kvf_mpi_store *s, struct work *w,
			     const char *call)
{
	size_t qn = (size_t)s->model.n_q_heads * s->model.head_dim;
	size_t part = qn + s->model.n_q_heads;
	size_t nf = qn + part;

	if (s->rank == s->root && s->shard == KVF_MPI_SHARD_TOKEN)
		nf += part * (size_t)s->n_ranks;
	w->cnt = calloc(4 * (size_t)s->n_ranks, sizeof(int));
	w->f = malloc(nf * sizeof(float));
	if (!w->cnt || !w->f)
		return mpi_fail(KVF_ENOMEM, "%s: out of memory", call);
	w->dsp = w->cnt + s->n_ranks;
	w->lcnt = w->cnt + 2 * s->n_ranks;
	w->ldsp = w->cnt + 3 * s->n_ranks;
	return KVF_OK;
}

static kvf_status attend_head(struct kvf_mpi_store *s, const struct op_hdr *h,
			      struct work *w, const float *q, float *out,
			      float *lse_out, const char *call)
{
	uint32_t hd = s->model.head_dim, g = s->group;
	size_t mine_q = (size_t)s->nkv[s->rank] * g;
	int *cnt = w->cnt, *dsp = w->dsp, *lcnt = w->lcnt, *ldsp = w->ldsp;
	float *lq = w->f, *lout = lq + mine_q * hd, *llse = lout + mine_q * hd;
	kvf_attn_opts o;
	kvf_status rc, local;

	for (int r = 0; r < s->n_ranks; r++) {
		cnt[r] = (int)((size_t)s->nkv[r] * g * hd * sizeof(float));
		dsp[r] = (int)((size_t)s->kv0[r] * g * hd * sizeof(float));
		lcnt[r] = (int)((size_t)s->nkv[r] * g * sizeof(float));
		ldsp[r] = (int)((size_t)s->kv0[r] * g * sizeof(float));
	}
	rc = c_scatterv(s, q, cnt, dsp, lq, cnt[s->rank], CAT_Q);
	if (rc != KVF_OK)
		return rc;
	local_opts(h, &o, h->want ? llse : NULL);
	local = kvf_attend(s->local, h->seq, h->layer, lq, lout, &o);
	if (local != KVF_OK)
		mpi_fail_store(s, local, call);
	rc = agree(s, local, call);
	if (rc == KVF_OK)
		rc = c_gatherv(s, lout, cnt[s->rank], out, cnt, dsp, CAT_OUT);
	if (rc == KVF_OK && h->want)
		rc = c_gatherv(s, llse, lcnt[s->rank], lse_out, lcnt, ldsp,
			       CAT_OUT);
	return rc;
}

static kvf_status attend_token(struct kvf_mpi_store *s, const struct op_hdr *h,
			       struct work *wk, const uint64_t *lens,
			       const float *q_root, float *out, float *lse_out,
			       const char *call)
{
	uint32_t nq = s->model.n_q_heads, hd = s->model.head_dim;
	size_t qn = (size_t)nq * hd, part = qn + nq;
	float *q = wk->f, *mine = q + qn, *all = mine + part;
	uint64_t L = 0, w = 0, len = lens[s->rank];
	kvf_attn_opts o;
	kvf_status rc, local = KVF_OK;
	int mrc;

	for (int r = 0; r < s->n_ranks; r++)
		L += lens[r];
	if (s->rank == s->root)
		memcpy(q, q_root, qn * sizeof(float));
	rc = c_bcast(s, q, (int)(qn * sizeof(float)), CAT_Q);
	if (rc != KVF_OK)
		return rc;
	/* window: this rank's tokens among the last h->window of L */
	if (h->window && h->window < L)
		w = len - token_share(s, s->rank, L - h->window);
	local_opts(h, &o, mine + qn);
	o.window = w;
	if (h->window && h->window < L && w == 0) {
		memset(mine, 0, qn * sizeof(float));
		for (uint32_t i = 0; i < nq; i++)
			mine[qn + i] = -INFINITY;
	} else {
		local = kvf_attend(s->local, h->seq, h->layer, q, mine, &o);
		if (local != KVF_OK)
			mpi_fail_store(s, local, call);
	}
	rc = agree(s, local, call);
	if (rc != KVF_OK)
		return rc;
	mrc = MPI_Gather(mine, (int)(part * sizeof(float)), MPI_BYTE, all,
			 (int)(part * sizeof(float)), MPI_BYTE, s->root,
			 s->comm);
	if (s->rank == s->root)
		s->stats.out_bytes_recv +=
			part * sizeof(float) * (uint64_t)(s->n_ranks - 1);
	else
		s->stats.out_bytes_sent += part * sizeof(float);
	if (mrc != MPI_SUCCESS) {
		s->fatal = 1;
		return mpi_call_failed(mrc, "MPI_Gather");
	}
	if (s->rank != s->root)
		return KVF_OK;
	/* merge in rank order, so the result does not depend on timing */
	for (int r = 1; r < s->n_ranks; r++) {
		float *p = all + (size_t)r * part;
		kvf_attn_merge(nq, hd, all, all + qn, p, p + qn, all, all + qn);
	}
	memcpy(out, all, qn * sizeof(float));
	if (lse_out)
		memcpy(lse_out, all + qn, nq * sizeof(float));
	return KVF_OK;
}

kvf_status kvf_mpi_attend(kvf_mpi_store *s, uint64_t seq, uint32_t layer,
			  const float *q, float *out, const kvf_attn_opts *opts)
{
	const char *call = "kvf_mpi_attend";
	struct op_hdr h;
	struct work w = { 0 };
	uint64_t *lens;
	kvf_status rc, local;

	if (!s)
		return mpi_fail(KVF_EINVAL, "%s: NULL store", call);
	memset(&h, 0, sizeof(h));
	h.op = OP_ATTEND;
	h.seq = seq;
	h.layer = layer;
	if (s->rank == s->root) {
		if (layer >= s->model.n_layers)
			h.status = mpi_fail(KVF_ERANGE,
					    "%s: layer %u out of "
					    "range (the store has %u layers)",
					    call, layer, s->model.n_layers);
		else if (!q || !out)
			h.status = mpi_fail(KVF_EINVAL,
					    "%s: NULL %s on the root", call,
					    !q ? "q" : "out");
		else
			take_opts(s, &h, opts, call);
	}
	rc = start_op(s, &h, OP_ATTEND, call, &local);
	if (rc != KVF_OK)
		return rc;
	s->stats.attend_calls++;
	lens = malloc(sizeof(*lens) * (size_t)s->n_ranks);
	if (local == KVF_OK)
		local = lens ? work_alloc(s, &w, call) :
			       mpi_fail(KVF_ENOMEM, "%s: out of memory", call);
	rc = lookup_lens(s, &h, lens, local, call);
	if (rc == KVF_OK && s->shard == KVF_MPI_SHARD_HEAD)
		rc = attend_head(s, &h, &w, q, out, opts ? opts->lse : NULL,
				 call);
	else if (rc == KVF_OK)
		rc = attend_token(s, &h, &w, lens, q, out,
				  s->rank == s->root && opts ? opts->lse : NULL,
				  call);
	free(w.cnt);
	free(w.f);
	free(lens);
	return rc;
}
