/*
 * optim.c - the optimizer kernels of optim.h: the scalar variant (the
 * reference the AVX2 variant is tested against), the block driver every
 * variant runs under, and the step constants, configuration check and
 * gradient helpers.  The choice between variants is optim_dispatch.c's,
 * above this file and optim_avx2.c.
 *
 * Compiled with baseline flags (and -ffp-contract=off, see optim_impl.h).
 */
#include <assert.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "compute/optim.h"
#include "compute/optim_impl.h"

/* ---- the scalar variant -------------------------------------------------- */

static void widen_scalar(float *dst, const void *src, size_t n, kvf_dtype dtype,
			 float scale)
{
	for (size_t i = 0; i < n; i++)
		dst[i] = kvc_elt(src, i, dtype) * scale;
}

static void update_scalar(const struct kvc_optim_step *s,
			  const struct kvc_optim_chunk *c, const float *g,
			  size_t n)
{
	optim_update_elts(s, c, g, 0, n);
}

static void narrow_scalar(void *dst, const float *src, size_t n,
			  kvf_dtype dtype)
{
	for (size_t i = 0; i < n; i++)
		optim_elt_store(dst, i, dtype, src[i]);
}

static double sumsq_scalar(const void *g, size_t n, kvf_dtype dtype)
{
	double sum = 0.0;

	for (size_t i = 0; i < n; i++) {
		double x = kvc_elt(g, i, dtype);

		sum += x * x;
	}
	return sum;
}

/* nonfinite_scalar - any element with all exponent bits set. */
static bool nonfinite_scalar(const void *g, size_t n, kvf_dtype dtype)
{
	const unsigned char *b = (const unsigned char *)g;
	uint32_t u;
	uint16_t h;
	uint16_t mask = dtype == KVF_DTYPE_F16 ? 0x7c00u : 0x7f80u;

	for (size_t i = 0; i < n; i++) {
		if (dtype == KVF_DTYPE_F32) {
			memcpy(&u, b + i * 4, sizeof(u));
			if ((u & 0x7f800000u) == 0x7f800000u)
				return true;
		} else {
			memcpy(&h, b + i * 2, sizeof(h));
			if ((h & mask) == mask)
				return true;
		}
	}
	return false;
}

const struct kvc_optim kvc_optim_scalar_table = {
	.name = "scalar",
	.widen = widen_scalar,
	.update = update_scalar,
	.narrow = narrow_scalar,
	.sumsq = sumsq_scalar,
	.nonfinite = nonfinite_scalar,
};

/* ---- configuration ------------------------------------------------------- */

/*
 * short_decimal - f as the shortest decimal (up to 9 significant digits,
 * which always suffice) that reads back as f: "0.999" for 0.999f.
 * Return: buf.
 */
static const char *short_decimal(char *buf, size_t cap, float f)
{
	for (int digits = 1; digits < 9; digits++) {
		snprintf(buf, cap, "%.*g", digits, (double)f);
		if (strtof(buf, NULL) == f)
			return buf;
	}
	snprintf(buf, cap, "%.9g", (double)f);
	return buf;
}

/* bad - write the reason into why (if given) and say "not usable". */
static bool bad(char *why, size_t why_cap, const char *field, float value,
		const char *rule)
{
	char num[32];

	if (why && why_cap)
		snprintf(why, why_cap, "%s %s %s", field,
			 short_decimal(num, sizeof(num), value), rule);
	return false;
}

/* check_min - value is finite and >= 0 (> 0 when strict). */
static bool check_min(char *why, size_t why_cap, const char *field, float value)
{
	if (!isfinite(value) || !(value >= 0.0f))
		return bad(why, why_cap, field, value,
			   "must be finite and >= 0");
	return true;
}

/* check_beta - value in [0, 1). */
static bool check_beta(char *why, size_t why_cap, const char *field,
		       float value)
{
	if (!(value >= 0.0f && value < 1.0f))
		return bad(why, why_cap, field, value, "out of range [0, 1)");
	return true;
}

static bool check_adam(const kvf_opt_config *c, char *why, size_t cap)
{
	return check_beta(why, cap, "beta1", c->beta1) &&
	       check_beta(why, cap, "beta2", c->beta2) &&
	       check_min(why, cap, "eps", c->eps) &&
	       check_min(why, cap, "weight_decay", c->weight_decay);
}

static bool check_sgd(const kvf_opt_config *c, char *why, size_t cap)
{
	if (!check_min(why, cap, "momentum", c->momentum) ||
	    !check_min(why, cap, "weight_decay", c->weight_decay))
		return false;
	if (!isfinite(c->dampening))
		return bad(why, cap, "dampening", c->dampening,
			   "must be finite");
	if (c->nesterov > 1)
		return bad(why, cap, "nesterov", (float)c->nesterov,
			   "must be 0 or 1");
	if (c->nesterov && !(c->momentum > 0.0f))
		return bad(why, cap, "momentum", c->momentum,
			   "must be > 0 for Nesterov momentum");
	if (c->nesterov && c->dampening != 0.0f)
		return bad(why, cap, "dampening", c->dampening,
			   "must be 0 for Nesterov momentum");
	return true;
}

static bool check_adagrad(const kvf_opt_config *c, char *why, size_t cap)
{
	return check_min(why, cap, "lr_decay", c->lr_decay) &&
	       check_min(why, cap, "weight_decay", c->weight_decay) &&
	       check_min(why, cap, "initial_accumulator_value",
			 c->initial_accumulator_value) &&
	       check_min(why, cap, "eps", c->eps);
}

bool kvc_optim_config_check(const kvf_opt_config *cfg, char *why,
			    size_t why_cap)
{
	if (cfg->out_dtype != KVF_DTYPE_F16 &&
	    cfg->out_dtype != KVF_DTYPE_BF16 && cfg->out_dtype != KVF_DTYPE_F32)
		return bad(why, why_cap, "out_dtype", (float)cfg->out_dtype,
			   "is not a dtype");
	if (!check_min(why, why_cap, "lr", cfg->lr))
		return false;
	switch (cfg->kind) {
	case KVF_OPT_ADAM:
	case KVF_OPT_ADAMW:
		return check_adam(cfg, why, why_cap);
	case KVF_OPT_SGD:
		return check_sgd(cfg, why, why_cap);
	case KVF_OPT_ADAGRAD:
		return check_adagrad(cfg, why, why_cap);
	}
	return bad(why, why_cap, "kind", (float)cfg->kind,
		   "is not an optimizer");
}

unsigned kvc_optim_states(const kvf_opt_config *cfg)
{
	switch (cfg->kind) {
	case KVF_OPT_ADAM:
	case KVF_OPT_ADAMW:
		return KVC_OPTIM_M | KVC_OPTIM_V;
	case KVF_OPT_SGD:
		return cfg->momentum != 0.0f ? KVC_OPTIM_M : 0;
	case KVF_OPT_ADAGRAD:
		return KVC_OPTIM_V;
	}
	return 0;
}

void kvc_optim_state_init(const kvf_opt_config *cfg, float *m, float *v,
			  size_t n)
{
	unsigned states = kvc_optim_states(cfg);
	float v0 = cfg->kind == KVF_OPT_ADAGRAD ?
			   cfg->initial_accumulator_value :
			   0.0f;

	for (size_t i = 0; i < n; i++) {
		if (states & KVC_OPTIM_M)
			m[i] = 0.0f;
		if (states & KVC_OPTIM_V)
			v[i] = v0;
	}
}

/* ---- one step ------------------------------------------------------------ */

/*
 * hp - the double a caller most likely wrote for the float f: the shortest
 * decimal that reads back as f (short_decimal), read as a double.
 * 0.999f gives 0.999 (PyTorch's beta2), not 0.99900001287.
 */
static double hp(float f)
{
	char buf[32];

	if (!isfinite(f) || f == 0.0f)
		return (double)f;
	return strtod(short_decimal(buf, sizeof(buf), f), NULL);
}

/* prepare_adam - bias corrections and moment weights of step t. */
static void prepare_adam(struct kvc_optim_step *s, const kvf_opt_config *cfg,
			 double lr, double wd)
{
	double b1 = hp(cfg->beta1), b2 = hp(cfg->beta2);
	double bc1 = 1.0 - pow(b1, (double)s->t);
	double bc2 = 1.0 - pow(b2, (double)s->t);

	if (cfg->kind == KVF_OPT_ADAMW && wd != 0.0)
		s->decay = (float)(1.0 - lr * wd);
	else if (wd != 0.0)
		s->l2 = (float)wd;
	s->beta2 = (float)b2;
	s->one_minus_beta2 = (float)(1.0 - b2);
	s->lerp_w = (float)(1.0 - b1);
	s->lerp_w_c = 1.0f - s->lerp_w;
	s->lerp_small = fabsf(s->lerp_w) < 0.5f;
	s->step_size = (float)(lr / bc1);
	s->bc2_sqrt = (float)sqrt(bc2);
	s->eps = (float)hp(cfg->eps);
}

void kvc_optim_step_prepare(struct kvc_optim_step *s, const kvf_opt_config *cfg,
			    uint64_t t, float grad_scale)
{
	double lr = hp(cfg->lr), wd = hp(cfg->weight_decay);

	assert(t >= 1);
	assert(isfinite(grad_scale) && grad_scale > 0.0f);
	memset(s, 0, sizeof(*s));
	s->kind = cfg->kind;
	s->out_dtype = cfg->out_dtype;
	s->t = t;
	s->grad_scale = grad_scale;
	s->decay = 1.0f;
	switch (cfg->kind) {
	case KVF_OPT_ADAM:
	case KVF_OPT_ADAMW:
		prepare_adam(s, cfg, lr, wd);
		break;
	case KVF_OPT_SGD:
		s->l2 = (float)wd;
		s->lr = (float)lr;
		s->momentum = cfg->momentum;
		s->one_minus_damp = (float)(1.0 - hp(cfg->dampening));
		s->nesterov = cfg->nesterov != 0;
		s->first = t == 1;
		break;
	case KVF_OPT_ADAGRAD:
		s->l2 = (float)wd;
		s->clr = (float)(lr /
				 (1.0 + (double)(t - 1) * hp(cfg->lr_decay)));
		s->eps = (float)hp(cfg->eps);
		break;
	}
}

/* block - elements [b, ...) of chunk c (arrays it lacks stay NULL) */
static struct kvc_optim_chunk block(const struct kvc_optim_chunk *c, size_t b)
{
	struct kvc_optim_chunk r;

	for (int a = 0; a < 3; a++) {
		r.in[a] = c->in[a] ? c->in[a] + b : NULL;
		r.out[a] = c->out[a] ? c->out[a] + b : NULL;
	}
	return r;
}

/* in_place - chunk c for the arrays p, m, v updated where they are */
static struct kvc_optim_chunk in_place(float *p, float *m, float *v)
{
	return (struct kvc_optim_chunk){ { p, m, v }, { p, m, v } };
}

/* check_state - the arrays the rule keeps are there, in and out. */
static inline bool check_state(const struct kvc_optim_step *s,
			       const struct kvc_optim_chunk *c)
{
	bool m = c->in[KVC_CHUNK_M] && c->out[KVC_CHUNK_M];
	bool v = c->in[KVC_CHUNK_V] && c->out[KVC_CHUNK_V];

	if (c->in[KVC_CHUNK_P] == NULL || c->out[KVC_CHUNK_P] == NULL)
		return false;
	switch (s->kind) {
	case KVF_OPT_ADAM:
	case KVF_OPT_ADAMW:
		return m && v;
	case KVF_OPT_SGD:
		return m || s->momentum == 0.0f;
	case KVF_OPT_ADAGRAD:
		return v;
	}
	return false;
}

void kvc_optim_dense_from(const struct kvc_optim *k,
			  const struct kvc_optim_step *s,
			  const struct kvc_optim_chunk *c, size_t n,
			  const void *grad, kvf_dtype grad_dtype,
			  void *params_out)
{
	float g[KVC_OPTIM_BLOCK];
	const unsigned char *gb = (const unsigned char *)grad;
	unsigned char *ob = (unsigned char *)params_out;
	size_t ge = kvc_elt_bytes(grad_dtype),
	       oe = kvc_elt_bytes(s->out_dtype);

	assert(n == 0 || (grad && check_state(s, c)));
	for (size_t b = 0, len; b < n; b += len) {
		struct kvc_optim_chunk blk = block(c, b);

		len = n - b < KVC_OPTIM_BLOCK ? n - b : KVC_OPTIM_BLOCK;
		k->widen(g, gb + b * ge, len, grad_dtype, s->grad_scale);
		k->update(s, &blk, g, len);
		if (ob)
			k->narrow(ob + b * oe, blk.out[KVC_CHUNK_P], len,
				  s->out_dtype);
	}
}

void kvc_optim_dense(const struct kvc_optim *k, const struct kvc_optim_step *s,
		     float *param, float *m, float *v, size_t n,
		     const void *grad, kvf_dtype grad_dtype, void *params_out)
{
	struct kvc_optim_chunk c = in_place(param, m, v);

	kvc_optim_dense_from(k, s, &c, n, grad, grad_dtype, params_out);
}

/*
 * scatter_block - the gradient block [b, b + len) of the chunk: zero (times
 * grad_scale, as a zero of a dense gradient would give) where the list has
 * no entry, val[j] * grad_scale at idx[j] - i0.  Consumes the entries from
 * *j on that fall in the block; stops at the first that does not.
 */
static void scatter_block(float *g, const struct kvc_optim_step *s, size_t b,
			  size_t len, uint64_t i0, const uint32_t *idx,
			  const void *val, size_t nnz, kvf_dtype dtype,
			  size_t *j)
{
	float zero = 0.0f * s->grad_scale;

	for (size_t i = 0; i < len; i++)
		g[i] = zero;
	for (; *j < nnz; (*j)++) {
		uint64_t r = (uint64_t)idx[*j] - i0; /* huge if below i0 */

		if (r < b || r - b >= len)
			break;
		assert(*j == 0 || idx[*j] > idx[*j - 1]);
		g[r - b] = kvc_elt(val, *j, dtype) * s->grad_scale;
	}
}

void kvc_optim_sparse_from(const struct kvc_optim *k,
			   const struct kvc_optim_step *s,
			   const struct kvc_optim_chunk *c, size_t n,
			   uint64_t i0, const uint32_t *idx, const void *val,
			   size_t nnz, kvf_dtype grad_dtype, void *params_out)
{
	float g[KVC_OPTIM_BLOCK];
	unsigned char *ob = (unsigned char *)params_out;
	size_t oe = kvc_elt_bytes(s->out_dtype), j = 0;

	assert(n == 0 || check_state(s, c));
	assert(nnz == 0 || (idx && val));
	for (size_t b = 0, len; b < n; b += len) {
		struct kvc_optim_chunk blk = block(c, b);

		len = n - b < KVC_OPTIM_BLOCK ? n - b : KVC_OPTIM_BLOCK;
		scatter_block(g, s, b, len, i0, idx, val, nnz, grad_dtype, &j);
		k->update(s, &blk, g, len);
		if (ob)
			k->narrow(ob + b * oe, blk.out[KVC_CHUNK_P], len,
				  s->out_dtype);
	}
	assert(j == nnz); /* every entry was in the chunk, ascending */
}

void kvc_optim_sparse(const struct kvc_optim *k, const struct kvc_optim_step *s,
		      float *param, float *m, float *v, size_t n, uint64_t i0,
		      const uint32_t *idx, const void *val, size_t nnz,
		      kvf_dtype grad_dtype, void *params_out)
{
	struct kvc_optim_chunk c = in_place(param, m, v);

	kvc_optim_sparse_from(k, s, &c, n, i0, idx, val, nnz, grad_dtype,
			      params_out);
}

/* ---- gradient checks ----------------------------------------------------- */

size_t kvc_optim_grad_check(const uint32_t *idx, size_t nnz, uint64_t n_params)
{
	for (size_t j = 0; j < nnz; j++) {
		if (idx[j] >= n_params || (j > 0 && idx[j] <= idx[j - 1]))
			return j;
	}
	return nnz;
}

/* lower_bound - the first position whose index is >= key. */
static size_t lower_bound(const uint32_t *idx, size_t nnz, uint64_t key)
{
	size_t lo = 0, hi = nnz;

	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;

		if (idx[mid] < key)
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo;
}

void kvc_optim_grad_span(const uint32_t *idx, size_t nnz, uint64_t i0,
			 uint64_t n, size_t *first, size_t *count)
{
	size_t lo = lower_bound(idx, nnz, i0);
	size_t hi = lower_bound(idx, nnz,
				n > UINT64_MAX - i0 ? UINT64_MAX : i0 + n);

	*first = lo;
	*count = hi - lo;
}

double kvc_optim_grad_sumsq(const struct kvc_optim *k, const void *g, size_t n,
			    kvf_dtype dtype)
{
	return n ? k->sumsq(g, n, dtype) : 0.0;
}

bool kvc_optim_grad_nonfinite(const struct kvc_optim *k, const void *g,
			      size_t n, kvf_dtype dtype)
{
	return n ? k->nonfinite(g, n, dtype) : false;
}

float kvc_optim_clip_coef(double total_norm, double max_norm)
{
	float coef = (float)max_norm / ((float)total_norm + 1e-6f);

	return coef < 1.0f ? coef : 1.0f;
}
