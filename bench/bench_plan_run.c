/*
 * bench_plan_run.c - the stores and decode steps of `kvbench plan`: the
 * bench's own CPU reference recomputation (X W_k with RoPE, X W_v), the
 * data made with it, the profile, and one timed step of each split.
 *
 * A KVPR step for split l: kvf_kvpr_start hands out X[0, l) and starts
 * reading K,V of [l, s); X crosses the link (paced); the caller recomputes
 * K,V of [0, l) with the reference; it waits for the job and for K,V of
 * [l, s) to cross the link; then it attends over all s tokens.
 * An X-cache step for a tokens kept as X: kvf_attend_x_start attends
 * [0, a) near the data in the background while the caller reads K,V of
 * [a, s) (paced by the link) and attends them; the two merge by LSE.
 * The link: bytes "cross" it at link_bytes_per_s, counted from when the
 * transfer may start; the caller sleeps for what the store's read did
 * not already take.  The host link is the machine's memcpy rate, so it
 * never slows anything; the slow link makes this CPU's caller look like
 * a GPU behind PCIe (far more FLOP/s than link bytes/s).
 */
#include <math.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "api/alloc.h"
#include "bench/bench_common.h"
#include "bench/bench_plan_int.h"
#include "compute/half.h"
#include "compute/kernels.h"

#define THETA 10000.0f
#define FILL_CHUNK 256u

struct shape_run {
	const struct plan_args *a;
	kvf_store *st;
	kvf_model m;
	uint32_t s, d, cols, nkv, hd, g;
	double link;            /* bytes/s of the case */
	uint64_t rc_ns;         /* the last KVPR step's recomputation */
	float *w_k, *w_v;       /* [d][cols] */
	uint16_t *x;            /* [s][d] f16, the bench's X */
	float *krec, *vrec;     /* [s][cols], the caller's recomputation */
	uint16_t *xo;           /* [s][d] from kvf_kvpr_start */
	uint16_t *ko, *vo;      /* [nkv][s][hd] */
	float *xrow, *kh, *vh;  /* [d]; [s][hd] one head's rows */
	float *q, *qs, *out, *lse, *out2, *lse2, *dense; /* [nq][hd] */
	float *state;           /* one KV head's attention state */
};

/* ---- the reference recomputation ---------------------------------------- */

static void axpy(float *restrict o, float a, const float *restrict w,
		 uint32_t n)
{
	for (uint32_t c = 0; c < n; c++)
		o[c] += a * w[c];
}

static void ref_project(const uint16_t *x, uint32_t n, uint32_t d,
			const float *w, uint32_t cols, float *out, float *xrow)
{
	for (uint32_t t = 0; t < n; t++) {
		float *o = out + (size_t)t * cols;

		for (uint32_t j = 0; j < d; j++)
			xrow[j] = kvf_f16_to_f32(x[(size_t)t * d + j]);
		memset(o, 0, (size_t)cols * sizeof(float));
		for (uint32_t j = 0; j < d; j++)
			axpy(o, xrow[j], w + (size_t)j * cols, cols);
	}
}

static void ref_rope(float *rows, uint32_t n, uint32_t heads, uint32_t hd,
		     uint64_t pos0)
{
	for (uint32_t i = 0; i < hd / 2; i++) {
		double freq = pow(THETA, -2.0 * i / hd);

		for (uint32_t t = 0; t < n; t++) {
			double ang = (double)(pos0 + t) * freq;
			float c = (float)cos(ang), s = (float)sin(ang);

			for (uint32_t h = 0; h < heads; h++) {
				float *r = rows + ((size_t)t * heads + h) * hd;
				float a = r[i], b = r[i + hd / 2];

				r[i] = a * c - b * s;
				r[i + hd / 2] = a * s + b * c;
			}
		}
	}
}

static float noise(uint64_t i)
{
	return (float)((double)(bench_mix64(i) >> 11) / 9007199254740992.0 * 2 - 1);
}

/* ---- host rates ----------------------------------------------------------- */

void plan_measure_host(struct plan_ctx *c)
{
	size_t n = 32u << 20;
	char *a = kvf_malloc(n), *b = kvf_malloc(n);

	c->host_bps = 10e9; /* if memory is short: a DDR4 channel or so */
	if (a && b) {
		memset(a, 1, n);
		memset(b, 2, n);
		for (int i = 0; i < 3; i++) {
			uint64_t t0 = bench_now_ns(), dt;

			memcpy(b, a, n);
			dt = bench_now_ns() - t0;
			c->host_bps = i ? fmax(c->host_bps, n / (dt * 1e-9))
					: n / (dt * 1e-9);
		}
	}
	kvf_free(a);
	kvf_free(b);
}

/* ---- setup -------------------------------------------------------------------- */

static void run_free(struct shape_run *r)
{
	void *p[] = { r->w_k, r->w_v, r->x, r->krec, r->vrec, r->xo, r->ko,
		      r->vo, r->xrow, r->kh, r->vh, r->q, r->qs, r->out, r->lse,
		      r->out2, r->lse2, r->dense, r->state };

	for (size_t i = 0; i < sizeof(p) / sizeof(p[0]); i++)
		kvf_free(p[i]);
}

static int run_alloc(struct shape_run *r)
{
	size_t s = r->s, qn = (size_t)r->m.n_q_heads * r->hd;

	r->w_k = kvf_malloc((size_t)r->d * r->cols * sizeof(float));
	r->w_v = kvf_malloc((size_t)r->d * r->cols * sizeof(float));
	r->x = kvf_malloc(s * r->d * 2);
	r->krec = kvf_malloc(s * r->cols * sizeof(float));
	r->vrec = kvf_malloc(s * r->cols * sizeof(float));
	r->xo = kvf_malloc(s * r->d * 2);
	r->ko = kvf_malloc(s * r->cols * 2);
	r->vo = kvf_malloc(s * r->cols * 2);
	r->xrow = kvf_malloc(r->d * sizeof(float));
	r->kh = kvf_malloc(s * r->hd * sizeof(float));
	r->vh = kvf_malloc(s * r->hd * sizeof(float));
	r->q = kvf_malloc(qn * sizeof(float));
	r->qs = kvf_malloc(qn * sizeof(float));
	r->out = kvf_malloc(qn * sizeof(float));
	r->out2 = kvf_malloc(qn * sizeof(float));
	r->dense = kvf_malloc(qn * sizeof(float));
	r->lse = kvf_malloc(r->m.n_q_heads * sizeof(float));
	r->lse2 = kvf_malloc(r->m.n_q_heads * sizeof(float));
	r->state = kvf_malloc(KVC_ATTN_STATE_FLOATS(r->g, r->hd) * sizeof(float));
	return r->w_k && r->w_v && r->x && r->krec && r->vrec && r->xo &&
	       r->ko && r->vo && r->xrow && r->kh && r->vh && r->q && r->qs &&
	       r->out && r->out2 && r->dense && r->lse && r->lse2 && r->state;
}

/* fill - X noise; K,V by the reference; appended with X; weights
 * registered */
static kvf_status fill(struct shape_run *r)
{
	float scale = 1.0f / sqrtf((float)r->d);
	uint16_t *k16 = (uint16_t *)r->ko, *v16 = (uint16_t *)r->vo;
	kvf_status rc = KVF_OK;

	for (size_t i = 0; i < (size_t)r->d * r->cols; i++) {
		r->w_k[i] = noise(3 * i + 1) * scale;
		r->w_v[i] = noise(3 * i + 2) * scale;
	}
	for (size_t i = 0; i < (size_t)r->s * r->d; i++)
		r->x[i] = kvf_f32_to_f16(noise(i * 7 + 5));
	for (size_t i = 0; i < (size_t)r->m.n_q_heads * r->hd; i++)
		r->q[i] = noise(i * 11 + 3);
	if ((rc = kvf_seq_create(r->st, 1)) != KVF_OK)
		return rc;
	for (uint32_t t = 0; t < r->s && rc == KVF_OK; t += FILL_CHUNK) {
		uint32_t n = r->s - t < FILL_CHUNK ? r->s - t : FILL_CHUNK;
		const uint16_t *x = r->x + (size_t)t * r->d;

		ref_project(x, n, r->d, r->w_k, r->cols, r->krec, r->xrow);
		ref_project(x, n, r->d, r->w_v, r->cols, r->vrec, r->xrow);
		ref_rope(r->krec, n, r->nkv, r->hd, t);
		for (size_t i = 0; i < (size_t)n * r->cols; i++) {
			k16[i] = kvf_f32_to_f16(r->krec[i]);
			v16[i] = kvf_f32_to_f16(r->vrec[i]);
		}
		if ((rc = kvf_append(r->st, 1, 0, n, k16, v16)) == KVF_OK)
			rc = kvf_append_x(r->st, 1, 0, n, x);
	}
	if (rc == KVF_OK)
		rc = kvf_sync(r->st);
	if (rc == KVF_OK)
		rc = kvf_kv_weights_set(r->st, 0, r->w_k, r->w_v, THETA);
	if (rc == KVF_OK)
		rc = kvf_attend(r->st, 1, 0, r->q, r->dense, NULL);
	return rc;
}

/* ---- one step ------------------------------------------------------------------ */

/* pace - sleep until `bytes` have crossed the link since t0_ns */
static void pace(const struct shape_run *r, uint64_t t0_ns, double bytes)
{
	uint64_t until = t0_ns + (uint64_t)(bytes / r->link * 1e9), now;

	now = bench_now_ns();
	if (now < until) {
		struct timespec ts = { (time_t)((until - now) / 1000000000u),
				       (long)((until - now) % 1000000000u) };

		nanosleep(&ts, NULL);
	}
}

/* attend_head - fold f32 rows [n1] then f16 rows [n2] of head h; finish */
static void attend_head(struct shape_run *r, uint32_t h, const float *k1,
			const float *v1, uint32_t n1, const uint16_t *k2,
			const uint16_t *v2, uint32_t n2, float *out, float *lse)
{
	const struct kvc_kernels *kern = kvc_kernels();
	struct kvc_attn_state st;
	const float *q = r->qs + (size_t)h * r->g * r->hd;

	kvc_attn_state_init(&st, r->g, r->hd, r->state);
	if (n1)
		kern->attn_fold(&st, q, k1, v1, n1, KVF_DTYPE_F32, NULL, NULL, 0);
	if (n2)
		kern->attn_fold(&st, q, k2, v2, n2, KVF_DTYPE_F16, NULL, NULL, 0);
	kvc_attn_finish(&st, out + (size_t)h * r->g * r->hd,
			lse ? lse + (size_t)h * r->g : NULL);
}

static void gather(float *dst, const float *src, uint32_t n, uint32_t heads,
		   uint32_t hd, uint32_t h)
{
	for (uint32_t t = 0; t < n; t++)
		memcpy(dst + (size_t)t * hd, src + ((size_t)t * heads + h) * hd,
		       hd * sizeof(float));
}

static kvf_status step_kvpr(struct shape_run *r, uint32_t l, double *sec)
{
	double xb = (double)r->d * 2, kvb = 2.0 * r->cols * 2;
	uint64_t t0 = bench_now_ns(), t1;
	kvf_job *job;
	kvf_status rc;

	if ((rc = kvf_kvpr_start(r->st, 1, 0, l, r->s, r->xo, r->ko, r->vo,
				 &job)) != KVF_OK)
		return rc;
	pace(r, t0, l * xb);
	t1 = bench_now_ns();
	ref_project(r->xo, l, r->d, r->w_k, r->cols, r->krec, r->xrow);
	ref_project(r->xo, l, r->d, r->w_v, r->cols, r->vrec, r->xrow);
	ref_rope(r->krec, l, r->nkv, r->hd, 0);
	r->rc_ns = bench_now_ns() - t1;
	if ((rc = kvf_job_wait(job)) != KVF_OK)
		return rc;
	pace(r, t1, (r->s - l) * kvb);
	for (uint32_t h = 0; h < r->nkv; h++) {
		size_t off = (size_t)h * (r->s - l) * r->hd;

		gather(r->kh, r->krec, l, r->nkv, r->hd, h);
		gather(r->vh, r->vrec, l, r->nkv, r->hd, h);
		attend_head(r, h, r->kh, r->vh, l, r->ko + off, r->vo + off,
			    r->s - l, r->out, NULL);
	}
	*sec = (bench_now_ns() - t0) * 1e-9;
	return KVF_OK;
}

/* caller_flops_of - the caller's FLOP/s as a caller would time its own
 * recomputation kernel in production: the recomputation part of three
 * KVPR steps that recompute every token (the store streaming nothing
 * beside them), the median.  A short burst of the same loop outside a
 * step ran up to three times faster on this shared machine than the
 * steps did, so the rate is taken where the work runs.  0 on failure. */
static double caller_flops_of(struct shape_run *r, double link)
{
	double rc_s[3], sec;

	r->link = link;
	for (int i = 0; i < 3; i++) {
		if (step_kvpr(r, r->s, &sec) != KVF_OK)
			return 0;
		rc_s[i] = r->rc_ns * 1e-9;
	}
	return 4.0 * r->d * r->cols * r->s / fmax(bench_median(rc_s, 3), 1e-9);
}

static kvf_status step_xcache(struct shape_run *r, uint32_t a, double *sec)
{
	double kvb = 2.0 * r->cols * 2;
	uint64_t t0 = bench_now_ns();
	kvf_attn_opts o;
	kvf_job *job;
	kvf_status rc, wrc;

	kvf_attn_opts_init(&o);
	o.lse = r->lse2;
	if ((rc = kvf_attend_x_start(r->st, 1, 0, 0, a, r->q, r->out2, &o,
				     &job)) != KVF_OK)
		return rc;
	for (uint32_t h = 0; h < r->nkv && rc == KVF_OK; h++) {
		size_t off = (size_t)h * (r->s - a) * r->hd;

		rc = kvf_read(r->st, 1, 0, h, a, r->s, r->ko + off, r->vo + off);
	}
	pace(r, t0, (r->s - a) * kvb);
	for (uint32_t h = 0; h < r->nkv && rc == KVF_OK; h++) {
		size_t off = (size_t)h * (r->s - a) * r->hd;

		attend_head(r, h, NULL, NULL, 0, r->ko + off, r->vo + off,
			    r->s - a, r->out, r->lse);
	}
	wrc = kvf_job_wait(job);
	if (rc != KVF_OK || (rc = wrc) != KVF_OK)
		return rc;
	rc = kvf_attn_merge(r->m.n_q_heads, r->hd, r->out2, r->lse2, r->out,
			    r->lse, r->out, r->lse);
	*sec = (bench_now_ns() - t0) * 1e-9;
	return rc;
}

/* ---- sweeps ---------------------------------------------------------------------- */

static double rel_err(const float *a, const float *b, size_t n)
{
	double num = 0, den = 0;

	for (size_t i = 0; i < n; i++) {
		num = fmax(num, fabs((double)a[i] - b[i]));
		den = fmax(den, fabs((double)b[i]));
	}
	return den > 0 ? num / den : num;
}

/* sweep - the grid and the pick n_pick (tokens), each point the median of
 * a->repeat steps; the points take turns (one step of each, then the next
 * round), so a change of the machine's load meanwhile touches them alike */
static kvf_status sweep(struct shape_run *r, struct plan_sweep *sw,
			uint64_t n_pick, int kvpr)
{
	double t[PLAN_POINTS][32], warm;
	kvf_status rc = KVF_OK;

	sw->n_pt = 0;
	for (uint32_t i = 0; i <= PLAN_GRID; i++) {
		uint64_t n = (uint64_t)llround((double)i * r->s / PLAN_GRID);

		if (sw->n_pt && n_pick > sw->pt[sw->n_pt - 1].n && n_pick < n)
			sw->pt[sw->n_pt++].n = n_pick;
		sw->pt[sw->n_pt++].n = n;
	}
	for (uint32_t i = 0; i < sw->n_pt; i++)
		if (sw->pt[i].n == n_pick)
			sw->pick = i;
	rc = kvpr ? step_kvpr(r, 0, &warm) : step_xcache(r, 0, &warm);
	for (uint32_t k = 0; k < r->a->repeat && rc == KVF_OK; k++)
		for (uint32_t i = 0; i < sw->n_pt && rc == KVF_OK; i++) {
			uint32_t n = (uint32_t)sw->pt[i].n;

			rc = kvpr ? step_kvpr(r, n, &t[i][k])
				  : step_xcache(r, n, &t[i][k]);
		}
	for (uint32_t i = 0; i < sw->n_pt && rc == KVF_OK; i++) {
		sw->pt[i].x = (double)sw->pt[i].n / r->s;
		sw->pt[i].t_s = bench_median(t[i], r->a->repeat);
	}
	if (rc != KVF_OK)
		return rc;
	sw->best = 0;
	for (uint32_t i = 1; i < sw->n_pt; i++)
		if (sw->pt[i].t_s < sw->pt[sw->best].t_s)
			sw->best = i;
	sw->ratio = sw->pt[sw->pick].t_s / sw->pt[sw->best].t_s;
	/* the checks, untimed: the pick's output against dense attention;
	 * KVPR's recomputation of every token against K read back */
	rc = kvpr ? step_kvpr(r, (uint32_t)n_pick, &warm)
		  : step_xcache(r, (uint32_t)n_pick, &warm);
	if (rc != KVF_OK)
		return rc;
	sw->out_err = rel_err(r->out, r->dense, (size_t)r->m.n_q_heads * r->hd);
	sw->kv_err = 0;
	if (kvpr && (rc = step_kvpr(r, r->s, &warm)) == KVF_OK) {
		uint16_t *k16 = r->ko;

		for (uint32_t h = 0; h < r->nkv && rc == KVF_OK; h++) {
			rc = kvf_read(r->st, 1, 0, h, 0, r->s, k16, NULL);
			gather(r->kh, r->krec, r->s, r->nkv, r->hd, h);
			for (size_t i = 0; i < (size_t)r->s * r->hd; i++)
				r->vh[i] = kvf_f16_to_f32(k16[i]);
			sw->kv_err = fmax(sw->kv_err,
					  rel_err(r->kh, r->vh, (size_t)r->s * r->hd));
		}
	}
	return rc;
}

static kvf_status run_case(struct shape_run *r, struct plan_case *pc)
{
	kvf_kvpr_plan kp = { .struct_size = sizeof(kp) };
	kvf_xcache_plan xp = { .struct_size = sizeof(xp) };
	kvf_status rc;

	r->link = pc->prof.link_bytes_per_s;
	if ((rc = kvf_plan_kvpr(&pc->prof, &pc->m, r->s, r->s, &kp)) != KVF_OK ||
	    (rc = kvf_plan_xcache(&pc->prof, &pc->m, r->s, r->s, &xp)) != KVF_OK ||
	    (rc = kvf_plan_beta(&pc->prof, &pc->m, &pc->beta, &pc->near_share)) != KVF_OK)
		return rc;
	pc->kvpr.pred_s = kp.t_step_s;
	pc->x_smaller = xp.x_smaller;
	if ((rc = sweep(r, &pc->kvpr, kp.l, 1)) != KVF_OK)
		return rc;
	/* the KVPR sweep took seconds, in which the machine's load moves:
	 * profile the store again, as a caller planning now would, and
	 * plan the X-cache from that (the caller's rates stay as stated) */
	{
		kvf_profile p = pc->prof;

		if ((rc = kvf_profile_run(r->st, 2, r->s < 4096 ? r->s : 4096,
					  &p)) != KVF_OK ||
		    (rc = kvf_profile_get(r->st, &pc->prof_x)) != KVF_OK ||
		    (rc = kvf_plan_xcache(&pc->prof_x, &pc->m, r->s, r->s, &xp)) != KVF_OK)
			return rc;
	}
	pc->xcache.pred_s = xp.t_step_s;
	return sweep(r, &pc->xcache, xp.x_tokens, 0);
}

int plan_run_shape(struct plan_ctx *c, uint32_t i, const char *shape,
		   const kvf_model *m)
{
	const struct plan_args *a = c->a;
	struct shape_run r = { .a = a, .m = *m, .s = a->tokens,
			       .d = m->n_q_heads * m->head_dim,
			       .cols = m->n_kv_heads * m->head_dim,
			       .nkv = m->n_kv_heads, .hd = m->head_dim,
			       .g = m->n_q_heads / m->n_kv_heads };
	char path[4096];
	kvf_options o;
	kvf_profile p;
	kvf_status rc;
	int direct = 0, ret = 1;

	snprintf(path, sizeof(path), "%s/%s", a->dir, shape);
	bench_remove_store(path);
	if (!run_alloc(&r)) {
		fprintf(stderr, "kvbench plan: out of memory\n");
		goto out;
	}
	bench_store_options(&o, m, 1, 1u << 20, 1ull << 30);
	o.dram_budget = 0; /* every read goes to the media, as profiled */
	if ((rc = bench_open_direct(path, &o, &r.st, &direct)) != KVF_OK) {
		bench_fail("plan", "kvf_open", rc);
		goto out;
	}
	for (size_t k = 0; k < (size_t)m->n_q_heads * r.hd; k++)
		r.qs[k] = noise(k * 11 + 3) / sqrtf((float)r.hd);
	if ((rc = fill(&r)) != KVF_OK) {
		bench_fail("plan", "filling the store", rc);
		goto out;
	}
	for (uint32_t k = 0; k < 2; k++) {
		struct plan_case *pc = &c->c[i + k];

		pc->shape = shape;
		pc->link = k ? "slow" : "host";
		pc->m = *m;
		pc->direct_io = direct;
		/* as a caller would: state its rates, profile the store, and
		 * plan from the profile kept with it, right before the steps */
		kvf_profile_init(&p);
		p.caller_flops = caller_flops_of(&r, c->host_bps);
		p.link_bytes_per_s = k ? p.caller_flops / a->slow_ratio : c->host_bps;
		c->caller_flops = p.caller_flops;
		if ((rc = kvf_profile_run(r.st, 2, a->tokens < 4096 ? a->tokens : 4096,
					  &p)) != KVF_OK) {
			bench_fail("plan", "kvf_profile_run", rc);
			goto out;
		}
		kvf_profile_init(&pc->prof);
		kvf_profile_init(&pc->prof_x);
		if ((rc = kvf_profile_get(r.st, &pc->prof)) != KVF_OK) {
			bench_fail("plan", "kvf_profile_get", rc);
			goto out;
		}
		if ((rc = run_case(&r, pc)) != KVF_OK) {
			bench_fail("plan", "a decode step", rc);
			goto out;
		}
	}
	ret = 0;
out:
	if (r.st && (rc = kvf_close(r.st)) != KVF_OK && ret == 0) {
		bench_fail("plan", "kvf_close", rc);
		ret = 1;
	}
	if (!a->keep)
		bench_remove_store(path);
	run_free(&r);
	return ret;
}
