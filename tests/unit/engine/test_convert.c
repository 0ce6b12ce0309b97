/*
 * test_convert.c - typed appends and reads convert between f16, bf16 and
 * f32, whatever the store's dtype: every pair, checked against a
 * reference written apart from compute/half.h (the nearest value of the
 * target type found among all its values, ties to the even one; NaN
 * stays NaN, infinities and signed zeros are kept, f16 overflows to
 * infinity), on random values and on the hard ones (ties, subnormals,
 * the edges of f16's range), through strided views too; and the reads'
 * refusals.
 */
#include <criterion/criterion.h>
#include <criterion/new/assert.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "store_fixture.h"
#include "testutil.h"

TestSuite(convert, .init = fx_setup_dir, .fini = fx_teardown, .timeout = 60);

#define CH 2   /* KV heads */
#define CD 16  /* head_dim */
#define CT 300 /* tokens */
#define CN (CT * CH * CD)

/* ---- the reference ------------------------------------------------------ */

static double f16_value(uint16_t h)
{
	int s = h >> 15, e = (h >> 10) & 31, m = h & 1023;
	double v;

	if (e == 31)
		v = m ? NAN : INFINITY;
	else if (e == 0)
		v = ldexp(m, -24);
	else
		v = ldexp(1024 + m, e - 25);
	return s ? -v : v;
}

static double bf16_value(uint16_t h)
{
	uint32_t u = (uint32_t)h << 16;
	float f;

	memcpy(&f, &u, 4);
	return f;
}

/* nearest - the 16-bit pattern of type `value` nearest to x (finite
 * positive patterns 0..top), ties to the even pattern */
static uint16_t nearest(double x, double (*value)(uint16_t), uint16_t top,
			uint16_t inf)
{
	double a = fabs(x), big = value(top), ulp = big - value(top - 1);
	uint16_t lo = 0, hi = top, sign = signbit(x) ? 0x8000 : 0;

	if (isnan(x))
		return 0x7fff; /* any NaN: compared as NaN */
	if (a >= big + ulp / 2)
		return sign | inf;
	while (hi - lo > 1) { /* value(lo) <= a <= value(hi) */
		uint16_t mid = (uint16_t)((lo + hi) / 2);

		if (value(mid) <= a)
			lo = mid;
		else
			hi = mid;
	}
	if (value(hi) <= a)
		lo = hi;
	if (lo < top && a - value(lo) > value(lo + 1) - a)
		lo++;
	else if (lo < top && a - value(lo) == value(lo + 1) - a && (lo & 1))
		lo++;
	return sign | lo;
}

/* ref_elt - element i of src (dtype from) as dtype to, into dst */
static void ref_elt(void *dst, kvf_dtype to, const void *src, kvf_dtype from,
		    size_t i)
{
	const unsigned char *s = src;
	unsigned char *d = dst;
	uint16_t h;
	double x;
	float f;

	if (from == KVF_DTYPE_F32) {
		memcpy(&f, s + i * 4, 4);
		x = f;
	} else {
		memcpy(&h, s + i * 2, 2);
		x = from == KVF_DTYPE_F16 ? f16_value(h) : bf16_value(h);
		if (isnan(x)) /* keep the sign apart from the value */
			x = (h & 0x8000) ? -NAN : NAN;
	}
	if (to == KVF_DTYPE_F32) {
		f = (float)x;
		memcpy(d + i * 4, &f, 4);
		return;
	}
	h = to == KVF_DTYPE_F16 ? nearest(x, f16_value, 0x7bff, 0x7c00)
				: nearest(x, bf16_value, 0x7f7f, 0x7f80);
	memcpy(d + i * 2, &h, 2);
}

static size_t bytes_of(kvf_dtype t)
{
	return t == KVF_DTYPE_F32 ? 4 : 2;
}

static int is_nan(const void *p, kvf_dtype t, size_t i)
{
	const unsigned char *b = p;
	uint16_t h;
	float f;

	if (t == KVF_DTYPE_F32) {
		memcpy(&f, b + i * 4, 4);
		return isnan(f);
	}
	memcpy(&h, b + i * 2, 2);
	return t == KVF_DTYPE_F16 ? (h & 0x7fff) > 0x7c00 : (h & 0x7fff) > 0x7f80;
}

/* same - a and b (n elements of t) are the same bits, or both NaN */
static void same(const void *a, const void *b, kvf_dtype t, size_t n,
		 const char *what)
{
	size_t eb = bytes_of(t);

	for (size_t i = 0; i < n; i++) {
		if (is_nan(a, t, i) || is_nan(b, t, i)) {
			cr_assert(is_nan(a, t, i) && is_nan(b, t, i),
				  "%s: element %zu: NaN on one side only", what, i);
			continue;
		}
		cr_assert(eq(int, memcmp((const char *)a + i * eb,
					 (const char *)b + i * eb, eb), 0),
			  "%s: element %zu differs", what, i);
	}
}

/* ---- the values --------------------------------------------------------- */

static const float hard[] = {
	0.0f, -0.0f, INFINITY, -INFINITY, NAN, 1.0f, -1.0f,
	65504.0f, 65519.99f, 65520.0f, -65520.0f, 70000.0f, 1e30f, -3e38f,
	6.1035156e-05f, 6.0e-05f, 5.9604645e-08f, 2.9802322e-08f, 2.98e-08f,
	8.9406967e-08f, 1e-40f, -1e-45f, 1.00048828125f, 1.00146484375f,
	1.00390625f, 1.01171875f, 3.1415927f, -2.7182817f, 0.33333334f,
};

/* fill - CN values of dtype t: the hard ones, then random ones of every
 * magnitude; as f16 or bf16, the hard ones are narrowed by the reference */
static void fill(void *dst, kvf_dtype t, uint64_t seed)
{
	static float f[CN];

	for (size_t i = 0; i < CN; i++) {
		seed = seed * 6364136223846793005ull + 1442695040888963407ull;
		if (i < sizeof(hard) / sizeof(hard[0])) {
			f[i] = hard[i];
		} else {
			uint32_t u = (uint32_t)(seed >> 32);

			/* exponents around f16's range, random mantissa */
			u = (u & 0x807fffffu) | ((100u + (u >> 23) % 60u) << 23);
			memcpy(&f[i], &u, 4);
		}
	}
	for (size_t i = 0; i < CN; i++)
		ref_elt(dst, t, f, KVF_DTYPE_F32, i);
}

static kvf_store *open_dtype(kvf_dtype t)
{
	kvf_model m = { 1, CH, CH, CD, t };
	kvf_options o;
	kvf_store *st = NULL;
	char path[512];

	kvf_options_init(&o, &m);
	o.media = KVF_MEDIA_MEMORY;
	o.capacity_bytes = 16u << 20;
	o.segment_size = 64 * 1024;
	snprintf(path, sizeof(path), "%s/%s", fx.dir, kvf_dtype_name(t));
	OK(kvf_open(path, &o, &st));
	return st;
}

static kvf_tensor view(const void *data, kvf_dtype t, uint64_t n,
		       uint64_t token_stride)
{
	kvf_tensor v;

	kvf_tensor_init(&v);
	v.dtype = t;
	v.data = data;
	v.n_tokens = n;
	v.n_heads = CH;
	v.head_dim = CD;
	v.token_stride = token_stride;
	return v;
}

/* every (input, store, output) dtype: appended as a dense view, then as
 * every other token of a buffer twice as long; read back in the store's
 * dtype, then as each dtype */
Test(convert, every_pair)
{
	static unsigned char in[2 * CN * 4], wide[2 * CN * 4];
	static unsigned char want[CN * 4], got_k[CT * CD * 4], got_v[CT * CD * 4];
	static unsigned char head[CT * CD * 4], want_out[CT * CD * 4];
	char what[96];

	for (int s = 0; s <= KVF_DTYPE_F32; s++) {
		kvf_store *st = open_dtype((kvf_dtype)s);

		fx.st = st;
		for (int a = 0; a <= KVF_DTYPE_F32; a++) {
			size_t eb = bytes_of((kvf_dtype)a), row = CH * CD * eb;
			uint64_t id = (uint64_t)a + 1;
			kvf_tensor tk, tv;

			fill(in, (kvf_dtype)a, 77 + (uint64_t)a);
			for (size_t t = 0; t < CT; t++)
				memcpy(wide + 2 * t * row, in + t * row, row);
			OK(kvf_seq_create(st, id));
			tk = view(in, (kvf_dtype)a, CT / 2, 0);
			tv = view(wide, (kvf_dtype)a, CT / 2, 2 * row);
			OK(kvf_append_tensor(st, id, 0, &tk, &tv));
			tk = view(in + CT / 2 * row, (kvf_dtype)a, CT - CT / 2, 0);
			tv = view(wide + CT / 2 * 2 * row, (kvf_dtype)a,
				  CT - CT / 2, 2 * row);
			OK(kvf_append_tensor_at(st, id, 0, CT / 2, &tk, &tv));
			for (size_t i = 0; i < CN; i++)
				ref_elt(want, (kvf_dtype)s, in, (kvf_dtype)a, i);
			for (uint32_t h = 0; h < CH; h++) {
				size_t sb = bytes_of((kvf_dtype)s);

				OK(kvf_read(st, id, 0, h, 0, CT, got_k, got_v));
				for (size_t t = 0; t < CT; t++)
					memcpy(head + t * CD * sb,
					       want + (t * CH + h) * CD * sb, CD * sb);
				snprintf(what, sizeof(what), "%s into %s, head %u",
					 kvf_dtype_name((kvf_dtype)a),
					 kvf_dtype_name((kvf_dtype)s), h);
				same(got_k, head, (kvf_dtype)s, CT * CD, what);
				same(got_v, head, (kvf_dtype)s, CT * CD, what);
				for (int o = 0; o <= KVF_DTYPE_F32; o++) {
					OK(kvf_read_as(st, id, 0, h, 7, CT,
						       (kvf_dtype)o, got_k, got_v));
					for (size_t i = 0; i < CT * CD; i++)
						ref_elt(want_out, (kvf_dtype)o, head,
							(kvf_dtype)s, i);
					snprintf(what, sizeof(what),
						 "%s into %s read as %s, head %u",
						 kvf_dtype_name((kvf_dtype)a),
						 kvf_dtype_name((kvf_dtype)s),
						 kvf_dtype_name((kvf_dtype)o), h);
					same(got_k, want_out + 7 * CD * bytes_of((kvf_dtype)o),
					     (kvf_dtype)o, (CT - 7) * CD, what);
					same(got_v, want_out + 7 * CD * bytes_of((kvf_dtype)o),
					     (kvf_dtype)o, (CT - 7) * CD, what);
				}
			}
		}
		OK(kvf_close(st));
		fx.st = NULL;
	}
}

/* X rows: f32 into an f16 store, read back as f32 */
Test(convert, x_rows)
{
	static float x[40 * CH * CD], got[40 * CH * CD];
	static uint16_t half[40 * CH * CD];
	kvf_store *st = open_dtype(KVF_DTYPE_F16);
	kvf_tensor tx;

	fx.st = st;
	for (size_t i = 0; i < 40 * CH * CD; i++)
		x[i] = (float)i / 7.0f - 100.0f;
	OK(kvf_seq_create(st, 1));
	tx = view(x, KVF_DTYPE_F32, 40, 0);
	OK(kvf_append_x_tensor(st, 1, 0, &tx));
	OK(kvf_read_x_as(st, 1, 0, 0, 40, KVF_DTYPE_F32, got));
	for (size_t i = 0; i < 40 * CH * CD; i++) {
		ref_elt(half, KVF_DTYPE_F16, x, KVF_DTYPE_F32, i);
		cr_assert(eq(flt, got[i], (float)f16_value(half[i])),
			  "element %zu", i);
	}
}

Test(convert, read_refusals)
{
	static uint16_t buf[64 * CD];
	kvf_store *st = open_dtype(KVF_DTYPE_BF16);
	kvf_tensor tk;

	fx.st = st;
	OK(kvf_seq_create(st, 1));
	tk = view(buf, KVF_DTYPE_BF16, 10, 0);
	OK(kvf_append_tensor(st, 1, 0, &tk, &tk));
	cr_assert(eq(int, kvf_read_as(st, 1, 0, 0, 0, 11, KVF_DTYPE_F32, buf,
				      buf), KVF_ERANGE));
	fx_has("kvf_read_as: tokens [0, 11) past the end of sequence 1 (layer 0 has 10 tokens)");
	cr_assert(eq(int, kvf_read_as(st, 1, 0, 0, 0, 5, (kvf_dtype)9, buf,
				      buf), KVF_EINVAL));
	fx_has("kvf_read_as: dtype 9 is not a kvf_dtype");
	cr_assert(eq(int, kvf_read_as(st, 1, 0, 0, 6, 5, KVF_DTYPE_F32, buf,
				      buf), KVF_EINVAL));
	fx_has("reversed range [6, 5)");
	cr_assert(eq(int, kvf_read_as(st, 2, 0, 0, 0, 5, KVF_DTYPE_F32, buf,
				      buf), KVF_ENOENT));
	cr_assert(eq(int, kvf_read_as(st, 1, 0, 2, 0, 5, KVF_DTYPE_F32, buf,
				      buf), KVF_ERANGE));
	cr_assert(eq(int, kvf_read_x_as(st, 1, 0, 0, 1, KVF_DTYPE_F32, buf),
		     KVF_ERANGE));
	fx_has("layer 0 has 0 X rows");
	cr_assert(eq(int, kvf_read_x_as(st, 1, 0, 0, 0, KVF_DTYPE_F32, NULL),
		     KVF_EINVAL));
	cr_assert(eq(int, kvf_read_as(NULL, 1, 0, 0, 0, 5, KVF_DTYPE_F32, buf,
				      buf), KVF_EINVAL));
}
