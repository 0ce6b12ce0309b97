/*
 * kvpr.c - kvf_kvpr_start: KVPR's two ranges handed out at once.  X of
 * [0, l) is read on the caller's thread (the caller needs it first, to
 * recompute), then a background job (engine/base/jobs.h) reads K,V of
 * [l, s) head by head while the caller computes.
 */
#include <string.h>

#include "api/alloc.h"
#include "api/status.h"
#include "engine/base/jobs.h"
#include "engine/base/fatal.h"
#include "engine/base/store_state.h"

struct kvpr_job {
	kvf_store *st;
	uint64_t seq, l, s;
	uint32_t layer;
	unsigned char *k, *v; /* the caller's [n_kv][s - l][head_dim] */
};

static kvf_status kvpr_run(void *arg)
{
	struct kvpr_job *j = arg;
	size_t head_bytes = (size_t)(j->s - j->l) * j->st->row_bytes;
	kvf_status rc = KVF_OK;

	for (uint32_t h = 0; h < j->st->hdr.n_kv_heads && rc == KVF_OK; h++)
		rc = kvf_read(j->st, j->seq, j->layer, h, j->l, j->s,
			      j->k + h * head_bytes, j->v + h * head_bytes);
	if (rc != KVF_OK)
		kvf_fail_wrap(rc, "kvf_kvpr_start");
	return rc;
}

static void kvpr_release(void *arg)
{
	kvf_free(arg);
}

kvf_status kvf_kvpr_start(kvf_store *st, uint64_t seq, uint32_t layer,
			  uint64_t l, uint64_t s, void *x_out, void *k_out,
			  void *v_out, kvf_job **job)
{
	const char *call = "kvf_kvpr_start";
	uint64_t len, x_len;
	struct kvpr_job *j;
	kvf_status rc;

	if (job == NULL)
		return kvf_fail(KVF_EINVAL, "%s: job is NULL", call);
	*job = NULL;
	if (st == NULL)
		return kvf_fail(KVF_EINVAL, "%s: store is NULL", call);
	if ((rc = store_check(st, call)) != KVF_OK)
		return rc;
	if (l > s)
		return kvf_fail(KVF_EINVAL, "%s: split l %llu is past s %llu",
				call, (unsigned long long)l, (unsigned long long)s);
	if ((l && x_out == NULL) || (s > l && (k_out == NULL || v_out == NULL)))
		return kvf_fail(KVF_EINVAL, "%s: %s is NULL", call,
				l && x_out == NULL ? "x_out"
				: k_out == NULL ? "k_out" : "v_out");
	if ((rc = kvf_seq_len(st, seq, layer, &len)) != KVF_OK ||
	    (rc = kvf_seq_x_len(st, seq, layer, &x_len)) != KVF_OK)
		return kvf_fail_wrap(rc, call);
	if (s > len)
		return kvf_fail(KVF_ERANGE,
				"%s: s %llu is past the end of sequence %llu layer %u (%llu tokens)",
				call, (unsigned long long)s, (unsigned long long)seq,
				layer, (unsigned long long)len);
	if (l > x_len)
		return kvf_fail(KVF_ERANGE,
				"%s: l %llu is past the X of sequence %llu layer %u (%llu tokens)",
				call, (unsigned long long)l, (unsigned long long)seq,
				layer, (unsigned long long)x_len);
	if (l && (rc = kvf_read_x(st, seq, layer, 0, l, x_out)) != KVF_OK)
		return kvf_fail_wrap(rc, call);
	j = kvf_calloc(1, sizeof(*j));
	if (j == NULL)
		return kvf_fail(KVF_ENOMEM, "%s: out of memory", call);
	*j = (struct kvpr_job){ .st = st, .seq = seq, .l = l, .s = s,
				.layer = layer, .k = k_out, .v = v_out };
	if ((rc = async_submit(st, call, kvpr_run, kvpr_release, j, job)) != KVF_OK)
		kvf_free(j);
	return rc;
}
