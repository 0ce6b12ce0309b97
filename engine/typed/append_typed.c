/*
 * append_typed.c - appends and reads that state their layout and element
 * type: kvf_append_tensor, kvf_append_tensor_at, kvf_append_x_tensor,
 * kvf_read_as and kvf_read_x_as.
 *
 * A kvf_tensor names the element type, the shape and the byte strides of
 * the caller's rows.  Everything about it is checked against the store's
 * model before anything is read or changed: heads, head_dim, the token
 * count, strides that would make rows overlap, and the buffer size when
 * the caller states it.  Its dtype may be any of f16, bf16 and f32: rows
 * of another dtype than the store's are converted (narrowing rounds to
 * nearest even, NaN stays NaN, infinities and signed zeros are kept;
 * compute/half.h).  A dense view of the store's dtype goes straight to
 * the append (no copy here); any other is gathered (and
 * converted) into a dense buffer first, one pass over its rows, then
 * appended the same way, so the all-or-nothing contract of kvf_append
 * holds for all.  The typed reads read in the store's dtype and convert
 * into the caller's buffers.
 *
 * Built on the public calls (the model comes from kvf_store_info_get) and
 * the write path's appends for a named call (append_kv_as, append_x_as),
 * so that a refusal names the typed call; it needs no lock of its own.
 */
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "api/alloc.h"
#include "api/options.h"
#include "api/status.h"
#include "compute/half.h"
#include "engine/calls/read_calls.h"
#include "engine/writes/append.h"
#include "kvflash.h"

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
	kvf_dtype dtype;       /* of its elements */
};

/* strides_overlap - whether rows of row bytes at t * ts + h * hs (t below
 * nt, h below nh) overlap: the smaller stride must clear a row, the larger
 * one a whole run of the smaller */
static int strides_overlap(uint64_t ts, uint64_t nt, uint64_t hs, uint64_t nh,
			   uint64_t row)
{
	uint64_t in = ts < hs ? ts : hs, n_in = ts < hs ? nt : nh;
	uint64_t out = ts < hs ? hs : ts, n_out = ts < hs ? nh : nt, span;

	if (n_in <= 1) {
		in = out;
		n_in = n_out;
		n_out = 1;
	}
	if (n_in > 1 && in < row)
		return 1;
	/* (n_in - 1) * in + row past 2^64: out is below it */
	if (n_out > 1 && (__builtin_mul_overflow(n_in - 1, in, &span) ||
			  __builtin_add_overflow(span, row, &span)))
		return 1;
	return n_out > 1 && out < span;
}

/* view_extent - bytes from data to the end of the last row of a view of
 * nt tokens of nh heads; 0 when that passes the address space after data
 * (strides past 2^64 wrapped onto earlier rows, or before data) */
static uint64_t view_extent(const void *data, uint64_t nt, uint64_t ts,
			    uint64_t nh, uint64_t hs, uint64_t row)
{
	uint64_t a, b, e;

	if (nt == 0)
		return 0;
	if (__builtin_mul_overflow(nt - 1, ts, &a) ||
	    __builtin_mul_overflow(nh - 1, hs, &b) ||
	    __builtin_add_overflow(a, b, &e) || __builtin_add_overflow(e, row, &e) ||
	    e > UINTPTR_MAX - (uintptr_t)data)
		return 0;
	return e;
}

/*
 * view_check - check t (named what) against heads x head_dim rows; fill
 * v.  Its dtype is any kvf_dtype (converted to the store's later).
 */
static kvf_status view_check(const char *call, const char *what,
			     const kvf_tensor *t, uint32_t heads,
			     uint32_t head_dim, struct view *v)
{
	uint64_t row, extent, ts, hs;
	kvf_status rc;

	memset(v, 0, sizeof(*v)); /* set on every path (for -O3's warnings) */
	if ((rc = kvf_struct_check(call, what, t, sizeof(*t))) != KVF_OK)
		return rc;
	if (t->struct_size < offsetof(kvf_tensor, data_bytes))
		return kvf_fail(KVF_EINVAL,
				"%s: %s.struct_size %zu is too small (use kvf_tensor_init)",
				call, what, t->struct_size);
	if ((unsigned)t->dtype > KVF_DTYPE_F32)
		return kvf_fail(KVF_EINVAL, "%s: %s.dtype %d is not a kvf_dtype",
				call, what, (int)t->dtype);
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
	row = (uint64_t)head_dim * dtype_bytes(t->dtype);
	hs = t->head_stride ? t->head_stride : row;
	ts = t->token_stride ? t->token_stride : (uint64_t)heads * row;
	if (strides_overlap(ts, t->n_tokens, hs, heads, row))
		return kvf_fail(KVF_EINVAL,
				"%s: %s.token_stride %llu and head_stride %llu make rows of %llu bytes overlap",
				call, what, (unsigned long long)ts,
				(unsigned long long)hs, (unsigned long long)row);
	extent = view_extent(t->data, t->n_tokens, ts, heads, hs, row);
	if (t->n_tokens && extent == 0)
		return kvf_fail(KVF_EINVAL,
				"%s: %s.token_stride %llu and head_stride %llu over %llu tokens reach past the address space after data",
				call, what, (unsigned long long)ts,
				(unsigned long long)hs,
				(unsigned long long)t->n_tokens);
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
	v->dtype = t->dtype;
	return KVF_OK;
}

/* convert - n elements of src (dtype from) as dtype to into dst; one
 * rounding (to nearest even) when narrowing: a 16-bit value widens to
 * f32 exactly first */
static void convert(void *dst, kvf_dtype to, const void *src, kvf_dtype from,
		    size_t n)
{
	unsigned char *d = dst;

	if (to == from) {
		memcpy(dst, src, n * dtype_bytes(to));
		return;
	}
	for (size_t i = 0; i < n; i++) {
		float f = kvc_elt(src, i, from);
		uint16_t h;

		if (to == KVF_DTYPE_F32) {
			memcpy(d + i * 4, &f, 4);
			continue;
		}
		h = to == KVF_DTYPE_F16 ? kvf_f32_to_f16(f) : kvf_f32_to_bf16(f);
		memcpy(d + i * 2, &h, 2);
	}
}

/* gather - the rows of v as a dense [n][heads][head_dim] buffer of dtype
 * to (kvf_free it) */
static kvf_status gather(const char *call, const struct view *v,
			 uint32_t heads, uint32_t head_dim, kvf_dtype to,
			 unsigned char **out)
{
	uint64_t row = (uint64_t)head_dim * dtype_bytes(to);
	size_t bytes = (size_t)v->n_tokens * heads * row;
	unsigned char *buf = kvf_malloc(bytes ? bytes : 1);

	if (buf == NULL)
		return kvf_fail(KVF_ENOMEM,
				"%s: out of memory for %zu bytes to gather a view",
				call, bytes);
	for (uint64_t t = 0; t < v->n_tokens; t++)
		for (uint32_t h = 0; h < heads; h++)
			convert(buf + ((size_t)t * heads + h) * row, to,
				v->data + t * v->token_stride + h * v->head_stride,
				v->dtype, head_dim);
	*out = buf;
	return KVF_OK;
}

/* direct - whether v can be appended as it lies */
static int direct(const struct view *v, kvf_dtype store)
{
	return v->dense && v->dtype == store;
}

/* model_of - the store's model (kvf_store_info_get) */
static kvf_status model_of(kvf_store *st, const char *call, kvf_model *m)
{
	kvf_store_info info;
	kvf_status rc;

	memset(m, 0, sizeof(*m)); /* set on every path (for -O3's warnings) */
	if (st == NULL)
		return kvf_fail(KVF_EINVAL, "%s: store is NULL", call);
	memset(&info, 0, sizeof(info));
	info.struct_size = sizeof(info);
	if ((rc = kvf_store_info_get(st, &info)) != KVF_OK)
		return rc;
	*m = info.model;
	return KVF_OK;
}

/* append_tensor - kvf_append_tensor(_at) for call */
static kvf_status append_tensor(kvf_store *st, const char *call, uint64_t seq,
				uint32_t layer, uint64_t pos,
				const kvf_tensor *k, const kvf_tensor *v)
{
	unsigned char *kb = NULL, *vb = NULL;
	struct view kv, vv;
	kvf_model m;
	kvf_status rc;

	if ((rc = model_of(st, call, &m)) != KVF_OK)
		return rc;
	if ((rc = view_check(call, "k", k, m.n_kv_heads, m.head_dim,
			     &kv)) != KVF_OK ||
	    (rc = view_check(call, "v", v, m.n_kv_heads, m.head_dim,
			     &vv)) != KVF_OK)
		return rc;
	if (kv.n_tokens != vv.n_tokens)
		return kvf_fail(KVF_EINVAL,
				"%s: k has %llu tokens, v has %llu",
				call, (unsigned long long)kv.n_tokens,
				(unsigned long long)vv.n_tokens);
	if (!direct(&kv, m.dtype) &&
	    (rc = gather(call, &kv, m.n_kv_heads, m.head_dim, m.dtype, &kb)) != KVF_OK)
		return rc;
	if (!direct(&vv, m.dtype) &&
	    (rc = gather(call, &vv, m.n_kv_heads, m.head_dim, m.dtype, &vb)) != KVF_OK)
		goto out;
	rc = append_kv_as(st, call, seq, layer, pos, (uint32_t)kv.n_tokens,
			  kb ? kb : kv.data, vb ? vb : vv.data);
out:
	kvf_free(kb);
	kvf_free(vb);
	return rc;
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
	if ((rc = view_check(call, "x", x, m.n_q_heads, m.head_dim,
			     &xv)) != KVF_OK)
		return rc;
	if (!direct(&xv, m.dtype) &&
	    (rc = gather(call, &xv, m.n_q_heads, m.head_dim, m.dtype, &xb)) != KVF_OK)
		return rc;
	rc = append_x_as(st, call, seq, layer, (uint32_t)xv.n_tokens,
			 xb ? xb : xv.data);
	kvf_free(xb);
	return rc;
}

/* read_as - rows read in the store's dtype (n elements at each of a, b;
 * either NULL) converted to dtype into out_a, out_b */
static kvf_status read_as(const char *call, kvf_store *st, kvf_dtype dtype,
			  size_t n, kvf_dtype store,
			  kvf_status (*rd)(kvf_store *, const void *, void *, void *),
			  const void *arg, void *out_a, void *out_b)
{
	unsigned char *a = NULL, *b = NULL;
	kvf_status rc;

	if (dtype == store) /* nothing to convert: straight in */
		return rd(st, arg, out_a, out_b);
	if ((out_a && (a = kvf_malloc(n * dtype_bytes(store) + 1)) == NULL) ||
	    (out_b && (b = kvf_malloc(n * dtype_bytes(store) + 1)) == NULL)) {
		kvf_free(a);
		return kvf_fail(KVF_ENOMEM, "%s: out of memory for %zu elements",
				call, n);
	}
	rc = rd(st, arg, a, b);
	if (rc == KVF_OK && out_a)
		convert(out_a, dtype, a, store, n);
	if (rc == KVF_OK && out_b)
		convert(out_b, dtype, b, store, n);
	kvf_free(a);
	kvf_free(b);
	return rc;
}

struct read_args {
	const char *call;
	uint64_t seq, t0, t1;
	uint32_t layer, kv_head;
};

static kvf_status rd_kv(kvf_store *st, const void *arg, void *k, void *v)
{
	const struct read_args *r = arg;

	return read_kv_as(st, r->call, r->seq, r->layer, r->kv_head, r->t0,
			  r->t1, k, v);
}

static kvf_status rd_x(kvf_store *st, const void *arg, void *x, void *unused)
{
	const struct read_args *r = arg;

	(void)unused;
	return read_x_as(st, r->call, r->seq, r->layer, r->t0, r->t1, x);
}

/* typed_checks - the checks kvf_read_as and kvf_read_x_as make before
 * they allocate: the dtype, and a range within the layer's len tokens
 * (x: of X); kvf_read checks the rest */
static kvf_status typed_checks(const char *call, kvf_store *st, uint64_t seq,
			       uint32_t layer, int x, kvf_dtype dtype,
			       uint64_t t0, uint64_t t1, kvf_model *m)
{
	uint64_t len;
	kvf_status rc;

	if ((rc = model_of(st, call, m)) != KVF_OK)
		return rc;
	rc = x ? kvf_seq_x_len(st, seq, layer, &len)
	       : kvf_seq_len(st, seq, layer, &len);
	if (rc != KVF_OK)
		return kvf_fail_wrap(rc, call);
	if (t1 > len)
		return kvf_fail(KVF_ERANGE,
				"%s: tokens [%llu, %llu) past the end of sequence %llu (layer %u has %llu%s)",
				call, (unsigned long long)t0,
				(unsigned long long)t1,
				(unsigned long long)seq, layer,
				(unsigned long long)len, x ? " X rows" : " tokens");
	if ((unsigned)dtype > KVF_DTYPE_F32)
		return kvf_fail(KVF_EINVAL, "%s: dtype %d is not a kvf_dtype",
				call, (int)dtype);
	if (t0 > t1)
		return kvf_fail(KVF_EINVAL, "%s: reversed range [%llu, %llu)",
				call, (unsigned long long)t0,
				(unsigned long long)t1);
	return KVF_OK;
}

kvf_status kvf_read_as(kvf_store *st, uint64_t seq, uint32_t layer,
		       uint32_t kv_head, uint64_t t0, uint64_t t1,
		       kvf_dtype dtype, void *k_out, void *v_out)
{
	const char *call = "kvf_read_as";
	struct read_args r = { call, seq, t0, t1, layer, kv_head };
	kvf_model m;
	kvf_status rc;

	if ((rc = typed_checks(call, st, seq, layer, 0, dtype, t0, t1, &m)) != KVF_OK)
		return rc;
	return read_as(call, st, dtype, (size_t)(t1 - t0) * m.head_dim, m.dtype,
		       rd_kv, &r, k_out, v_out);
}

kvf_status kvf_read_x_as(kvf_store *st, uint64_t seq, uint32_t layer,
			 uint64_t t0, uint64_t t1, kvf_dtype dtype,
			 void *x_out)
{
	const char *call = "kvf_read_x_as";
	struct read_args r = { call, seq, t0, t1, layer, 0 };
	kvf_model m;
	kvf_status rc;

	if ((rc = typed_checks(call, st, seq, layer, 1, dtype, t0, t1, &m)) != KVF_OK)
		return rc;
	if (x_out == NULL)
		return kvf_fail(KVF_EINVAL, "%s: x_out is NULL", call);
	return read_as(call, st, dtype,
		       (size_t)(t1 - t0) * m.n_q_heads * m.head_dim, m.dtype,
		       rd_x, &r, x_out, NULL);
}
