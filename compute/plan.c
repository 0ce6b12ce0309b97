/*
 * plan.c - the planners (compute/plan.h): KVPR's split point, HILOS's
 * X-cache share and HillInfer's beta, as pure functions of a kvf_profile
 * and a model shape.  The public kvf_plan_* calls check their arguments,
 * turn rates into per-token costs, and call the cost models here.
 *
 * Per-token work, for a layer of d = n_q_heads * head_dim inputs and
 * c = n_kv_heads * head_dim K (and V) columns:
 *	X bytes      d * elt            K+V bytes   2 * c * elt
 *	recompute    2 * d * 2c flops   (X W_k and X W_v; RoPE is noise)
 *	attention    4 * d flops        (q.k and p*v for every query head)
 */
#include "compute/plan.h"

#include <math.h>
#include <string.h>

#include "api/options.h"
#include "api/status.h"
#include "kvflash.h"

double kvc_kvpr_time(const struct kvc_kvpr_costs *c, uint64_t s, uint64_t l)
{
	double rc = (double)l * c->rc_s, kv = (double)(s - l) * c->kv_s;

	return (double)l * c->x_s + (rc > kv ? rc : kv);
}

uint64_t kvc_kvpr_split(const struct kvc_kvpr_costs *c, uint64_t s,
			uint64_t l_max)
{
	uint64_t hi = l_max < s ? l_max : s, lo;
	double star;

	if (hi == 0 || c->x_s >= c->kv_s || c->rc_s + c->kv_s <= 0)
		return 0; /* moving a token to recomputation never pays */
	star = (double)s * c->kv_s / (c->rc_s + c->kv_s);
	if (star >= (double)hi)
		return hi;
	lo = (uint64_t)floor(star);
	if (lo + 1 <= hi &&
	    kvc_kvpr_time(c, s, lo + 1) < kvc_kvpr_time(c, s, lo))
		return lo + 1;
	return lo;
}

double kvc_xcache_time(double cs, double cc, uint64_t s, double alpha)
{
	double a = alpha * (double)s * cs, b = (1.0 - alpha) * (double)s * cc;

	return a > b ? a : b;
}

double kvc_xcache_alpha(double cs, double cc, double alpha_max)
{
	double a = cs + cc > 0 ? cc / (cs + cc) : 0.0;

	return a < alpha_max ? a : alpha_max;
}

/* ---- the public calls --------------------------------------------------- */

static kvf_status rate_check(const char *call, const char *name, double v)
{
	if (!isfinite(v) || !(v > 0))
		return kvf_fail(KVF_EINVAL,
				"%s: profile.%s %g must be a finite rate > 0%s",
				call, name, v,
				v == 0 ? " (measure it with kvf_profile_run, or state it)" : "");
	return KVF_OK;
}

static kvf_status model_check(const char *call, const kvf_model *m)
{
	if (m == NULL)
		return kvf_fail(KVF_EINVAL, "%s: model is NULL", call);
	/* n_layers is not used: a plan is per layer */
	if (m->n_q_heads == 0 || m->n_kv_heads == 0 || m->head_dim == 0)
		return kvf_fail(KVF_EINVAL,
				"%s: model has %u query heads, %u kv heads, head_dim %u (each must be > 0)",
				call, m->n_q_heads, m->n_kv_heads, m->head_dim);
	if (m->head_dim > KVF_HEAD_DIM_MAX)
		return kvf_fail(KVF_EINVAL,
				"%s: model.head_dim %u out of range (1..%u)",
				call, m->head_dim, KVF_HEAD_DIM_MAX);
	if (m->n_q_heads % m->n_kv_heads)
		return kvf_fail(KVF_EINVAL,
				"%s: model's %u query heads are not a multiple of its %u kv heads",
				call, m->n_q_heads, m->n_kv_heads);
	if ((unsigned)m->dtype > KVF_DTYPE_F32)
		return kvf_fail(KVF_EINVAL, "%s: model dtype %d is unknown",
				call, (int)m->dtype);
	return KVF_OK;
}

/* profile_take - the caller's profile into *q, the fields past its
 * struct_size zero (an older caller's struct holds fewer rates: a rate it
 * lacks is then refused as 0, never read from past its end) */
static kvf_status profile_take(const char *call, const kvf_profile *p,
			       kvf_profile *q)
{
	kvf_status rc;
	size_t sz;

	if ((rc = kvf_struct_check(call, "profile", p, sizeof(*p))) != KVF_OK)
		return rc;
	memcpy(&sz, p, sizeof(sz));
	memset(q, 0, sizeof(*q));
	memcpy(q, p, sz < sizeof(*q) ? sz : sizeof(*q));
	q->struct_size = sizeof(*q);
	return KVF_OK;
}

/* common_check - the rates named in need (a NULL-ended list
 * of field names, in the order of vals), the model and the output size */
static kvf_status common_check(const char *call, const kvf_model *m,
			       const void *out,
			       size_t out_size, const char *const *need,
			       const double *vals)
{
	kvf_status rc;

	if ((rc = model_check(call, m)) != KVF_OK)
		return rc;
	if (out == NULL)
		return kvf_fail(KVF_EINVAL, "%s: %s is NULL", call,
				out_size ? "out" : "beta");
	if (out_size) {
		size_t sz;

		memcpy(&sz, out, sizeof(sz));
		if (sz < out_size)
			return kvf_fail(KVF_EINVAL,
					"%s: out.struct_size %zu is smaller than %zu",
					call, sz, out_size);
	}
	for (size_t i = 0; need[i]; i++)
		if ((rc = rate_check(call, need[i], vals[i])) != KVF_OK)
			return rc;
	return KVF_OK;
}

static kvf_status latency_check(const char *call, const kvf_profile *p)
{
	if (!isfinite(p->x_latency_s) || p->x_latency_s < 0)
		return kvf_fail(KVF_EINVAL,
				"%s: profile.x_latency_s %g must be finite and >= 0",
				call, p->x_latency_s);
	return KVF_OK;
}

struct shape {
	double x_bytes, kv_bytes; /* per token */
	double rc_flops, attn_flops;
};

static struct shape shape_of(const kvf_model *m)
{
	double elt = m->dtype == KVF_DTYPE_F32 ? 4 : 2;
	double d = (double)m->n_q_heads * m->head_dim;
	double c = (double)m->n_kv_heads * m->head_dim;

	return (struct shape){ .x_bytes = d * elt, .kv_bytes = 2 * c * elt,
			       .rc_flops = 4 * d * c, .attn_flops = 4 * d };
}

static double min2(double a, double b)
{
	return a < b ? a : b;
}

kvf_status kvf_plan_kvpr(const kvf_profile *p, const kvf_model *m,
			 uint64_t n_tokens, uint64_t x_tokens,
			 kvf_kvpr_plan *out)
{
	static const char *const need[] = { "caller_flops", "link_bytes_per_s",
					     "read_cold_bytes_per_s",
					     "read_x_bytes_per_s", NULL };
	struct kvc_kvpr_costs c;
	kvf_profile q;
	struct shape sh;
	double lat;
	uint64_t l;
	kvf_status rc;

	if ((rc = profile_take("kvf_plan_kvpr", p, &q)) != KVF_OK)
		return rc;
	p = &q;
	{
		double vals[] = { p->caller_flops, p->link_bytes_per_s,
				  p->read_cold_bytes_per_s,
				  p->read_x_bytes_per_s };

		if ((rc = common_check("kvf_plan_kvpr", m, out,
				       sizeof(*out), need, vals)) != KVF_OK ||
		    (rc = latency_check("kvf_plan_kvpr", p)) != KVF_OK)
			return rc;
	}
	sh = shape_of(m);
	lat = p->x_latency_s;
	c.x_s = sh.x_bytes / min2(p->read_x_bytes_per_s, p->link_bytes_per_s);
	c.kv_s = sh.kv_bytes / min2(p->read_cold_bytes_per_s, p->link_bytes_per_s);
	c.rc_s = sh.rc_flops / p->caller_flops;
	l = kvc_kvpr_split(&c, n_tokens, x_tokens);
	/* the split must win back the fixed cost of reading X at all, and
	 * then some: a predicted gain inside the model's error is not worth
	 * a second path */
	if (l && kvc_kvpr_time(&c, n_tokens, l) + lat >=
		 (1 - KVF_PLAN_MIN_GAIN) * kvc_kvpr_time(&c, n_tokens, 0))
		l = 0;
	out->l = l;
	out->t_x_s = l ? lat + (double)l * c.x_s : 0.0;
	out->t_recompute_s = (double)l * c.rc_s;
	out->t_transfer_s = (double)(n_tokens - l) * c.kv_s;
	out->t_step_s = kvc_kvpr_time(&c, n_tokens, l) + (l ? lat : 0.0) +
			(double)n_tokens * sh.attn_flops / p->caller_flops;
	return KVF_OK;
}

/* xcache_step - the X-cache step's time with xt tokens kept as X: the
 * slower side, the store's starting late by lat; the caller alone at 0 */
static double xcache_step(double lat, double cs, double cc, double s,
			  uint64_t xt)
{
	return xt ? fmax(lat + (double)xt * cs, (s - (double)xt) * cc) : s * cc;
}

kvf_status kvf_plan_xcache(const kvf_profile *p, const kvf_model *m,
			   uint64_t n_tokens, uint64_t x_tokens,
			   kvf_xcache_plan *out)
{
	static const char *const need[] = {
		"caller_flops", "link_bytes_per_s", "read_cold_bytes_per_s",
		"store_flops", NULL };
	kvf_profile q;
	struct shape sh;
	double cs, cc, amax, alpha, lat, s = (double)n_tokens;
	uint64_t xt;
	kvf_status rc;

	if ((rc = profile_take("kvf_plan_xcache", p, &q)) != KVF_OK)
		return rc;
	p = &q;
	{
		double vals[] = { p->caller_flops, p->link_bytes_per_s,
				  p->read_cold_bytes_per_s, p->store_flops };

		if ((rc = common_check("kvf_plan_xcache", m, out,
				       sizeof(*out), need, vals)) != KVF_OK ||
		    (rc = latency_check("kvf_plan_xcache", p)) != KVF_OK)
			return rc;
	}
	sh = shape_of(m);
	lat = p->x_latency_s;
	/* store_flops is measured over the whole near-data path (X read,
	 * projection, attention) */
	cs = sh.rc_flops / p->store_flops;
	cc = sh.kv_bytes / min2(p->read_cold_bytes_per_s, p->link_bytes_per_s) +
	     sh.attn_flops / p->caller_flops;
	amax = n_tokens ? min2(1.0, (double)x_tokens / s) : 0.0;
	/* the store's side starts late by the fixed cost of reading X:
	 * balance lat + alpha s cs = (1 - alpha) s cc */
	alpha = n_tokens ? (cc - lat / s) / (cs + cc) : 0.0;
	alpha = alpha < 0 ? 0 : alpha > amax ? amax : alpha;
	/* the better of the two whole token counts around alpha s (as
	 * kvc_kvpr_split takes): rounding alone could land on the one that
	 * misses the gain the other makes */
	{
		uint64_t lo = (uint64_t)floor(alpha * s), hi = lo + 1;

		if (lo > x_tokens)
			lo = x_tokens;
		if (hi > x_tokens || hi > n_tokens)
			hi = lo;
		xt = xcache_step(lat, cs, cc, s, hi) < xcache_step(lat, cs, cc, s, lo)
			     ? hi : lo;
	}
	if (xt && xcache_step(lat, cs, cc, s, xt) >= (1 - KVF_PLAN_MIN_GAIN) * s * cc)
		xt = 0; /* not clearly better than the caller alone */
	if (xt == 0)
		alpha = 0;
	out->alpha = alpha;
	out->x_tokens = xt;
	out->t_store_s = xt ? lat + (double)xt * cs : 0.0;
	out->t_caller_s = (double)(n_tokens - xt) * cc;
	out->t_step_s = out->t_store_s > out->t_caller_s ? out->t_store_s
							 : out->t_caller_s;
	out->x_smaller = sh.x_bytes < sh.kv_bytes;
	return KVF_OK;
}

kvf_status kvf_plan_beta(const kvf_profile *p, const kvf_model *m,
			 double *beta, double *near_share)
{
	static const char *const need[] = { "caller_flops",
					     "attend_tokens_per_s", NULL };
	kvf_profile q;
	double f_s;
	kvf_status rc;

	if ((rc = profile_take("kvf_plan_beta", p, &q)) != KVF_OK)
		return rc;
	p = &q;
	{
		double vals[] = { p->caller_flops, p->attend_tokens_per_s };

		if ((rc = common_check("kvf_plan_beta", m, beta, 0, need,
				       vals)) != KVF_OK)
			return rc;
	}
	/* near-data attention's flop rate; scoring is the same work per
	 * flop on either side */
	f_s = p->attend_tokens_per_s * shape_of(m).attn_flops;
	if (near_share)
		*near_share = f_s / (p->caller_flops + f_s);
	*beta = p->caller_flops / f_s;
	return KVF_OK;
}
