/*
 * read_calls.c - kvf_read and kvf_read_x: the caller's checks, then the
 * stream iterators of readpath.c copying rows into the caller's buffers.
 * Holds the sequence's lock for the call (world shared).
 */
#include "engine/calls/read_calls.h"

#include <string.h>

#include "api/alloc.h"
#include "api/status.h"
#include "engine/base/fatal.h"
#include "engine/reads/prefetch.h"
#include "engine/reads/readpath.h"
#include "engine/sequences/dropmark.h"
#include "engine/sequences/seq.h"
#include "engine/sequences/seq_stream.h"
#include "engine/base/store_state.h"

struct copy_out {
	unsigned char *dst; /* caller buffer */
	uint64_t t0;        /* token at dst */
	size_t row;         /* bytes per token in dst */
	size_t src_row;     /* bytes per token in the span */
	size_t offset;      /* byte offset of this slice in a dst row */
};

static kvf_status copy_rows(void *arg, uint64_t first, uint32_t n,
			    const unsigned char *rows)
{
	struct copy_out *c = arg;

	if (c->row == c->src_row) {
		memcpy(c->dst + (first - c->t0) * c->row, rows, (size_t)n * c->row);
		return KVF_OK;
	}
	for (uint32_t i = 0; i < n; i++)
		memcpy(c->dst + (first - c->t0 + i) * c->row + c->offset,
		       rows + (size_t)i * c->src_row, c->src_row);
	return KVF_OK;
}

kvf_status read_args_check(kvf_store *st, const char *call, uint32_t layer,
			   const uint32_t *kv_head, uint64_t t0, uint64_t t1)
{
	kvf_status rc;

	if ((rc = store_check(st, call)) != KVF_OK)
		return rc;
	if (layer >= st->hdr.n_layers)
		return kvf_fail(KVF_ERANGE, "%s: layer %u out of range (store has %u layers)",
				call, layer, st->hdr.n_layers);
	if (kv_head && *kv_head >= st->hdr.n_kv_heads)
		return kvf_fail(KVF_ERANGE, "%s: kv_head %u out of range (store has %u kv heads)",
				call, *kv_head, st->hdr.n_kv_heads);
	if (t0 > t1)
		return kvf_fail(KVF_EINVAL, "%s: token range [%llu, %llu) is reversed",
				call, (unsigned long long)t0, (unsigned long long)t1);
	return KVF_OK;
}

kvf_status read_past_end(const char *call, uint64_t t0, uint64_t t1,
			 uint64_t seq_id, const char *what, uint32_t layer,
			 uint64_t len)
{
	return kvf_fail(KVF_ERANGE,
			"%s: token range [%llu, %llu) past the end of %ssequence %llu layer %u (%llu tokens)",
			call, (unsigned long long)t0, (unsigned long long)t1, what,
			(unsigned long long)seq_id, layer, (unsigned long long)len);
}

static kvf_status copy_pair(void *arg, uint64_t first, uint32_t n,
			    const unsigned char *k_rows,
			    const unsigned char *v_rows)
{
	struct copy_out *c = arg;

	copy_rows(&c[0], first, n, k_rows);
	return copy_rows(&c[1], first, n, v_rows);
}

kvf_status kvf_read(kvf_store *st, uint64_t seq_id, uint32_t layer,
		    uint32_t kv_head, uint64_t t0, uint64_t t1, void *k_out,
		    void *v_out)
{
	return read_kv_as(st, "kvf_read", seq_id, layer, kv_head, t0, t1,
			  k_out, v_out);
}

kvf_status read_kv_as(kvf_store *st, const char *call, uint64_t seq_id,
		      uint32_t layer, uint32_t kv_head, uint64_t t0,
		      uint64_t t1, void *k_out, void *v_out)
{
	void *outs[2] = { k_out, v_out };
	struct seq *seq;
	uint64_t t;
	kvf_status rc;

	if (st == NULL)
		return kvf_fail(KVF_EINVAL, "%s: store is NULL", call);
	if ((rc = read_args_check(st, call, layer, &kv_head, t0, t1)) != KVF_OK)
		return rc;
	if (k_out == NULL && v_out == NULL && t1 > t0)
		return kvf_fail(KVF_EINVAL, "%s: k_out and v_out are both NULL", call);
	pthread_rwlock_rdlock(&st->world);
	if ((rc = seq_get_locked(st, call, seq_id, &seq)) != KVF_OK)
		goto out;
	if (t1 > seq->len[layer]) {
		rc = read_past_end(call, t0, t1, seq_id, "", layer, seq->len[layer]);
		goto out_seq;
	}
	if ((t = dropmark_first(st, seq, dropmark_lane(st, layer, kv_head), t0,
				t1)) != UINT64_MAX) {
		rc = kvf_fail(KVF_ENOENT,
			      "%s: token %llu of sequence %llu layer %u KV head %u was dropped by kvf_h2o_evict (token group %llu); read around it",
			      call, (unsigned long long)t,
			      (unsigned long long)seq_id, layer, kv_head,
			      (unsigned long long)(t / st->group_tokens));
		goto out_seq;
	}
	if (k_out && v_out) {
		/* K and V in one batch: a prefilled head's two runs lie side
		 * by side and merge into large requests */
		struct copy_out c[2] = {
			{ .dst = k_out, .t0 = t0, .row = st->row_bytes,
			  .src_row = st->row_bytes },
			{ .dst = v_out, .t0 = t0, .row = st->row_bytes,
			  .src_row = st->row_bytes } };

		rc = stream_read_pair(st, seq,
				      seq_kv_stream(st, seq, layer, KIND_K, kv_head),
				      seq_kv_stream(st, seq, layer, KIND_V, kv_head),
				      seq->len[layer], t0, t1, copy_pair, c);
		goto out_seq;
	}
	for (int kind = 0; kind < 2 && rc == KVF_OK; kind++) {
		struct copy_out c = { .dst = outs[kind], .t0 = t0,
				      .row = st->row_bytes,
				      .src_row = st->row_bytes };

		if (outs[kind] == NULL)
			continue;
		rc = stream_read_spans(st, seq,
				       seq_kv_stream(st, seq, layer,
						     (enum kv_kind)kind, kv_head),
				       seq->len[layer], t0, t1, copy_rows, &c);
	}
out_seq:
	seq_unlock_put(st, seq);
out:
	pthread_rwlock_unlock(&st->world);
	return rc;
}

kvf_status kvf_prefetch(kvf_store *st, uint64_t seq_id, uint32_t layer)
{
	const char *call = "kvf_prefetch";
	struct seq *seq;
	kvf_status rc;

	if (st == NULL)
		return kvf_fail(KVF_EINVAL, "%s: store is NULL", call);
	if ((rc = read_args_check(st, call, layer, NULL, 0, 0)) != KVF_OK)
		return rc;
	pthread_rwlock_rdlock(&st->world);
	if ((rc = seq_get_locked(st, call, seq_id, &seq)) == KVF_OK) {
		if ((rc = prefetch_locked(st, seq, layer, 0, NULL)) != KVF_OK)
			kvf_fail_wrap(rc, call);
		seq_unlock_put(st, seq);
	}
	pthread_rwlock_unlock(&st->world);
	return rc;
}

kvf_status kvf_read_x(kvf_store *st, uint64_t seq_id, uint32_t layer,
		      uint64_t t0, uint64_t t1, void *x_out)
{
	return read_x_as(st, "kvf_read_x", seq_id, layer, t0, t1, x_out);
}

kvf_status read_x_as(kvf_store *st, const char *call, uint64_t seq_id,
		     uint32_t layer, uint64_t t0, uint64_t t1, void *x_out)
{
	struct seq *seq;
	kvf_status rc;

	if (st == NULL || (x_out == NULL && t1 > t0))
		return kvf_fail(KVF_EINVAL, "%s: %s is NULL", call,
				st ? "x_out" : "store");
	if ((rc = read_args_check(st, call, layer, NULL, t0, t1)) != KVF_OK)
		return rc;
	pthread_rwlock_rdlock(&st->world);
	if ((rc = seq_get_locked(st, call, seq_id, &seq)) != KVF_OK)
		goto out;
	if (t1 > seq->x_len[layer]) {
		rc = read_past_end(call, t0, t1, seq_id, "the X of ", layer,
				   seq->x_len[layer]);
		goto out_seq;
	}
	for (uint32_t q = 0; q < st->hdr.n_q_heads && rc == KVF_OK && t1 > t0; q++) {
		struct copy_out c = { .dst = x_out, .t0 = t0,
				      .row = (size_t)st->row_bytes * st->hdr.n_q_heads,
				      .src_row = st->row_bytes,
				      .offset = (size_t)q * st->row_bytes };

		rc = stream_read_spans(st, seq, seq_x_stream(st, seq, layer, q),
				       seq->x_len[layer], t0, t1, copy_rows, &c);
	}
out_seq:
	seq_unlock_put(st, seq);
out:
	pthread_rwlock_unlock(&st->world);
	return rc;
}
