/*
 * append_typed.c - appends that state their layout: kvf_append_tensor,
 * kvf_append_tensor_at and kvf_append_x_tensor.
 *
 * A kvf_tensor names the element type, the shape and the byte strides of
 * the caller's rows.  Everything about it is checked against the store's
 * model before anything is read or changed: dtype, heads, head_dim, the
 * token count, strides that would make rows overlap, and the buffer size
 * when the caller states it.  A dense view goes straight to kvf_append_at /
 * kvf_append_x (no copy here); a strided one is gathered into a dense
 * buffer first, one copy of its rows, then appended the same way, so the
 * all-or-nothing contract of kvf_append holds for both.
 *
 * Built on the public calls only (the model comes from
 * kvf_store_info_get), so it needs no lock of its own.
 */
#include <stddef.h>
#include <string.h>

#include "api/alloc.h"
#include "api/options.h"
#include "api/status.h"
#include "kvflash.h"

static const char *dtype_name(kvf_dtype t)
{
	switch (t) {
	case KVF_DTYPE_F16:
		return "f16";
	case KVF_DTYPE_BF16:
		return "bf16";
	case KVF_DTYPE_F32:
		return "f32";
	}
	return "unknown";
}

static uint32_t dtype_bytes(kvf_dtype t)
{
	return t == KVF_DTYPE_F32 ? 4 : 2;
}

/* One checked view, its strides made explicit. */
struct view {
	const unsigned char *data;
	uint64_t n_tokens;
	uint64_t token_stride; /* bytes */
	uint64_t head_stride;  /* bytes */
	int dense;             /* rows lie as [n_tokens][heads][head_dim] */
};

/* strides_overlap - whether rows of row bytes at t * ts + h * hs (t below
 * nt, h below nh) overlap: the smaller stride must clear a row, the larger
 * one a whole run of the smaller */
static int strides_overlap(uint64_t ts, uint64_t nt, uint64_t hs, uint64_t nh,
			   uint64_t row)
{
	uint64_t in = ts < hs ? ts : hs, n_in = ts < hs ? nt : nh;
	uint64_t out = ts < hs ? hs : ts, n_out = ts < hs ? nh : nt;

	if (n_in <= 1) {
		in = out;
		n_in = n_out;
		n_out = 1;
	}
	if (n_in > 1 && in < row)
		return 1;
	return n_out > 1 && out < (n_in - 1) * in + row;
}

/*
 * view_check - check t (named what) against heads x head_dim rows of the
 * store's dtype; fill v.
 */
static kvf_status view_check(const char *call, const char *what,
			     const kvf_tensor *t, kvf_dtype dtype,
			     uint32_t heads, uint32_t head_dim, struct view *v)
{
	uint64_t row, extent, ts, hs;
	kvf_status rc;

	if ((rc = kvf_struct_check(call, what, t, sizeof(*t))) != KVF_OK)
		return rc;
	if (t->struct_size < offsetof(kvf_tensor, data_bytes))
		return kvf_fail(KVF_EINVAL,
				"%s: %s.struct_size %zu is too small (use kvf_tensor_init)",
				call, what, t->struct_size);
	if ((unsigned)t->dtype > KVF_DTYPE_F32)
		return kvf_fail(KVF_EINVAL, "%s: %s.dtype %d is not a kvf_dtype",
				call, what, (int)t->dtype);
	if (t->dtype != dtype)
		return kvf_fail(KVF_EINVAL,
				"%s: %s has dtype %s, the store holds %s (convert it first)",
				call, what, dtype_name(t->dtype), dtype_name(dtype));
	if (t->n_heads != heads)
		return kvf_fail(KVF_EINVAL,
				"%s: %s has %u heads, the store has %u",
				call, what, t->n_heads, heads);
	if (t->head_dim != head_dim)
		return kvf_fail(KVF_EINVAL,
				"%s: %s has head_dim %u, the store has %u",
				call, what, t->head_dim, head_dim);
	if (t->n_tokens > UINT32_MAX)
		return kvf_fail(KVF_EINVAL,
				"%s: %s has %llu tokens, at most %u per call",
				call, what, (unsigned long long)t->n_tokens,
				UINT32_MAX);
	if (t->n_tokens > 0 && t->data == NULL)
		return kvf_fail(KVF_EINVAL, "%s: %s.data is NULL", call, what);
	row = (uint64_t)head_dim * dtype_bytes(dtype);
	hs = t->head_stride ? t->head_stride : row;
	ts = t->token_stride ? t->token_stride : (uint64_t)heads * row;
	if (strides_overlap(ts, t->n_tokens, hs, heads, row))
		return kvf_fail(KVF_EINVAL,
				"%s: %s.token_stride %llu and head_stride %llu make rows of %llu bytes overlap",
				call, what, (unsigned long long)ts,
				(unsigned long long)hs, (unsigned long long)row);
	extent = t->n_tokens ? (t->n_tokens - 1) * ts + (uint64_t)(heads - 1) * hs + row
			     : 0;
	if (t->data_bytes != 0 && extent > t->data_bytes)
		return kvf_fail(KVF_EINVAL,
				"%s: %s of %llu tokens reaches %llu bytes past data, data_bytes is %llu",
				call, what, (unsigned long long)t->n_tokens,
				(unsigned long long)extent,
				(unsigned long long)t->data_bytes);
	v->data = t->data;
	v->n_tokens = t->n_tokens;
	v->token_stride = ts;
	v->head_stride = hs;
	v->dense = hs == row && ts == (uint64_t)heads * row;
	return KVF_OK;
}

/* gather - the rows of v as a dense [n][heads][row] buffer (kvf_free it) */
static kvf_status gather(const char *call, const struct view *v,
			 uint32_t heads, uint64_t row, unsigned char **out)
{
	size_t bytes = (size_t)v->n_tokens * heads * row;
	unsigned char *buf = kvf_malloc(bytes ? bytes : 1);

	if (buf == NULL)
		return kvf_fail(KVF_ENOMEM,
				"%s: out of memory for %zu bytes to gather a strided view",
				call, bytes);
	for (uint64_t t = 0; t < v->n_tokens; t++)
		for (uint32_t h = 0; h < heads; h++)
			memcpy(buf + ((size_t)t * heads + h) * row,
			       v->data + t * v->token_stride + h * v->head_stride,
			       (size_t)row);
	*out = buf;
	return KVF_OK;
}

static kvf_status append_tensor(kvf_store *st, const char *call, uint64_t seq,
				uint32_t layer, uint64_t pos,
				const kvf_tensor *k, const kvf_tensor *v);

/* model_of - the store's model (kvf_store_info_get) */
static kvf_status model_of(kvf_store *st, const char *call, kvf_model *m)
{
	kvf_store_info info;
	kvf_status rc;

	if (st == NULL)
		return kvf_fail(KVF_EINVAL, "%s: store is NULL", call);
	memset(&info, 0, sizeof(info));
	info.struct_size = sizeof(info);
	if ((rc = kvf_store_info_get(st, &info)) != KVF_OK)
		return rc;
	*m = info.model;
	return KVF_OK;
}

kvf_status kvf_append_tensor(kvf_store *st, uint64_t seq, uint32_t layer,
			     const kvf_tensor *k, const kvf_tensor *v)
{
	return append_tensor(st, "kvf_append_tensor", seq, layer, KVF_POS_ANY,
			     k, v);
}

kvf_status kvf_append_tensor_at(kvf_store *st, uint64_t seq, uint32_t layer,
				uint64_t pos, const kvf_tensor *k,
				const kvf_tensor *v)
{
	return append_tensor(st, "kvf_append_tensor_at", seq, layer, pos, k, v);
}

static kvf_status append_tensor(kvf_store *st, const char *call, uint64_t seq,
				uint32_t layer, uint64_t pos,
				const kvf_tensor *k, const kvf_tensor *v)
{
	unsigned char *kb = NULL, *vb = NULL;
	struct view kv, vv;
	kvf_model m;
	uint64_t row;
	kvf_status rc;

	if ((rc = model_of(st, call, &m)) != KVF_OK)
		return rc;
	if ((rc = view_check(call, "k", k, m.dtype, m.n_kv_heads, m.head_dim,
			     &kv)) != KVF_OK ||
	    (rc = view_check(call, "v", v, m.dtype, m.n_kv_heads, m.head_dim,
			     &vv)) != KVF_OK)
		return rc;
	if (kv.n_tokens != vv.n_tokens)
		return kvf_fail(KVF_EINVAL,
				"%s: k has %llu tokens, v has %llu",
				call, (unsigned long long)kv.n_tokens,
				(unsigned long long)vv.n_tokens);
	row = (uint64_t)m.head_dim * dtype_bytes(m.dtype);
	if (!kv.dense && (rc = gather(call, &kv, m.n_kv_heads, row, &kb)) != KVF_OK)
		return rc;
	if (!vv.dense && (rc = gather(call, &vv, m.n_kv_heads, row, &vb)) != KVF_OK)
		goto out;
	rc = kvf_append_at(st, seq, layer, pos, (uint32_t)kv.n_tokens,
			   kb ? kb : kv.data, vb ? vb : vv.data);
out:
	kvf_free(kb);
	kvf_free(vb);
	return rc;
}

kvf_status kvf_append_x_tensor(kvf_store *st, uint64_t seq, uint32_t layer,
			       const kvf_tensor *x)
{
	const char *call = "kvf_append_x_tensor";
	unsigned char *xb = NULL;
	struct view xv;
	kvf_model m;
	kvf_status rc;

	if ((rc = model_of(st, call, &m)) != KVF_OK)
		return rc;
	if ((rc = view_check(call, "x", x, m.dtype, m.n_q_heads, m.head_dim,
			     &xv)) != KVF_OK)
		return rc;
	if (!xv.dense &&
	    (rc = gather(call, &xv, m.n_q_heads,
			 (uint64_t)m.head_dim * dtype_bytes(m.dtype), &xb)) != KVF_OK)
		return rc;
	rc = kvf_append_x(st, seq, layer, (uint32_t)xv.n_tokens,
			  xb ? xb : xv.data);
	kvf_free(xb);
	return rc;
}
