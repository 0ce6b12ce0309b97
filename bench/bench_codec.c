/*
 * bench_codec.c - `kvbench codec`: the compressed-KV codecs (compute/
 * codec.h) against the uncompressed computation, in one run.
 *
 *  - Accuracy, per codec (none, fp8, int8, int4) and workload (flat,
 *    peaky, mixed, outliers; bench_codec_int.h): attention-output cosine
 *    and relative error against attention in double over the f16 values,
 *    mean and worst over every query head; and the bytes per token of K
 *    and V, scales included, over f16's.
 *  - Speed (warm: every group already in memory), per codec: the
 *    dispatched attention over encoded groups, one call per group, and
 *    the dense f16 kernel over the same tokens in calls of the same
 *    group size, side by side, median of the passes: tokens per second
 *    of the thread's CPU time (so that waiting for a core on a shared
 *    machine is not counted) and the ratio to f16.
 * Figures only; never pass/fail (tests/unit/bench/test_codec_accuracy.c
 * holds the codecs to their documented accuracy).
 */
#include <stdint.h>
#include <stdio.h>
#include <time.h>
#include <stdlib.h>
#include <string.h>

#include "api/alloc.h"
#include "bench/bench_codec_int.h"
#include "bench/bench_common.h"
#include "compute/codec.h"
#include "compute/half.h"
#include "compute/kernels.h"

#define N_CODECS 4 /* none, fp8, int8, int4 */

struct codec_args {
	struct codec_eval_cfg cfg; /* the accuracy runs */
	uint32_t speed_tokens;     /* tokens per KV head, speed runs */
	uint32_t repeat;           /* speed passes; medians */
	int no_speed;              /* accuracy only */
	int json;
};

/* The speed run's data: per KV head, f16 rows and encoded groups. */
struct speed_data {
	uint16_t **k, **v;      /* [heads] rows of tokens * D f16 */
	uint8_t **enc[N_CODECS]; /* [codec][heads] K groups then V groups */
	size_t kb[N_CODECS], vb[N_CODECS]; /* group bytes of K, V */
	struct kvc_codec_layout kl[N_CODECS], vl[N_CODECS];
	float *q, *state, *out;
	double sink;
};

static void usage(FILE *f)
{
	fprintf(f,
		"usage: kvbench codec [--head-dim N] [--group N] [--tokens N]\n"
		"                     [--heads N] [--q-heads N] [--seed N]\n"
		"                     [--speed-tokens N] [--repeat N] [--layout N]\n"
		"                     [--no-speed] [--json]\n"
		"  --head-dim N      elements per head vector (default 128)\n"
		"  --group N         tokens per encoded group (default 64)\n"
		"  --tokens N        context per KV head, accuracy (default 4096)\n"
		"  --heads N         KV heads (default 8)\n"
		"  --q-heads N       query heads per KV head, GQA (default 4)\n"
		"  --seed N          of the synthetic data (default 1)\n"
		"  --speed-tokens N  context per KV head, speed (default 16K)\n"
		"  --repeat N        speed passes; medians (default 5)\n"
		"  --layout N        encoded layout version: 1 f16 scales, 2 K's\n"
		"                    INT8/INT4 scales of a byte (default 2)\n"
		"  --no-speed        accuracy only\n"
		"  --json            JSON instead of a table\n");
}

static int parse_args(int argc, char **argv, struct codec_args *a)
{
	const struct bench_opt opts[] = {
		BENCH_U32("--head-dim", a->cfg.head_dim, 1, KVC_CODEC_MAX_DIM),
		BENCH_U32("--group", a->cfg.group_tokens, 1, 4096),
		BENCH_U32("--tokens", a->cfg.n_tokens, 1, 1u << 20),
		BENCH_U32("--heads", a->cfg.n_kv_heads, 1, 256),
		BENCH_U32("--q-heads", a->cfg.n_q, 1, 64),
		BENCH_U64("--seed", a->cfg.seed, 0, UINT64_MAX),
		BENCH_U32("--speed-tokens", a->speed_tokens, 1, 1u << 22),
		BENCH_U32("--repeat", a->repeat, 1, 100),
		BENCH_U32("--layout", a->cfg.layout, KVC_LAYOUT_F16,
			  KVC_LAYOUT_KBYTE),
		BENCH_BOOL("--no-speed", a->no_speed),
		BENCH_BOOL("--json", a->json),
		{ 0 }
	};
	int rc;

	*a = (struct codec_args){
		.cfg = { .head_dim = 128, .group_tokens = 64, .n_tokens = 4096,
			 .n_kv_heads = 8, .n_q = 4, .seed = 1,
			 .layout = KVC_LAYOUT_KBYTE },
		.speed_tokens = 16384,
		.repeat = 5,
	};
	if ((rc = bench_parse_opts("codec", usage, opts, argc, argv)) != 0)
		return rc;
	if (a->cfg.n_tokens % a->cfg.group_tokens ||
	    a->speed_tokens % a->cfg.group_tokens)
		return bench_usage_error("codec",
					 "--tokens %u and --speed-tokens %u must "
					 "be multiples of --group %u",
					 a->cfg.n_tokens, a->speed_tokens,
					 a->cfg.group_tokens);
	return 0;
}

/* ---- speed ---------------------------------------------------------------- */

static void speed_free(const struct codec_args *a, struct speed_data *d)
{
	for (uint32_t h = 0; h < a->cfg.n_kv_heads; h++) {
		kvf_free(d->k ? d->k[h] : NULL);
		kvf_free(d->v ? d->v[h] : NULL);
		for (int c = 1; c < N_CODECS; c++)
			kvf_free(d->enc[c] ? d->enc[c][h] : NULL);
	}
	kvf_free(d->k);
	kvf_free(d->v);
	for (int c = 1; c < N_CODECS; c++)
		kvf_free(d->enc[c]);
	kvf_free(d->q);
	kvf_free(d->state);
	kvf_free(d->out);
}

/* speed_alloc - every head's rows (values in [-2, 2]) and their encoded
 * groups in each codec; -1 on failure (message printed). */
static int speed_alloc(const struct codec_args *a, struct speed_data *d)
{
	uint32_t D = a->cfg.head_dim, G = a->cfg.group_tokens;
	uint32_t H = a->cfg.n_kv_heads, n = a->speed_tokens;
	const struct kvc_codec_kernels *ck = kvc_codec_kernels();
	size_t elts = (size_t)n * D;
	uint64_t x = a->cfg.seed;

	memset(d, 0, sizeof(*d));
	d->k = kvf_calloc(H, sizeof(*d->k));
	d->v = kvf_calloc(H, sizeof(*d->v));
	d->q = kvf_malloc((size_t)a->cfg.n_q * D * sizeof(float));
	d->state = kvf_malloc(KVC_ATTN_STATE_FLOATS(a->cfg.n_q, D) *
			      sizeof(float));
	d->out = kvf_malloc((size_t)a->cfg.n_q * D * sizeof(float));
	if (!d->k || !d->v || !d->q || !d->state || !d->out)
		goto out_nomem;
	for (uint32_t i = 0; i < a->cfg.n_q * D; i++)
		d->q[i] = (float)((double)(i % 17) / 17.0 - 0.5) / 11.3f;
	for (int c = 1; c < N_CODECS; c++) {
		if (kvc_codec_layout((kvf_codec)c, KVF_KIND_K, G, D,
				     a->cfg.layout,
				     &d->kl[c]) != KVF_OK ||
		    kvc_codec_layout((kvf_codec)c, KVF_KIND_V, G, D,
				     a->cfg.layout,
				     &d->vl[c]) != KVF_OK) {
			fprintf(stderr, "kvbench codec: %s\n", kvf_last_error());
			return -1;
		}
		d->kb[c] = d->kl[c].group_bytes;
		d->vb[c] = d->vl[c].group_bytes;
		d->enc[c] = kvf_calloc(H, sizeof(*d->enc[c]));
		if (!d->enc[c])
			goto out_nomem;
	}
	for (uint32_t h = 0; h < H; h++) {
		d->k[h] = kvf_aligned_alloc(4096, elts * 2);
		d->v[h] = kvf_aligned_alloc(4096, elts * 2);
		if (!d->k[h] || !d->v[h])
			goto out_nomem;
		for (size_t i = 0; i < elts; i++) {
			x = bench_mix64(x + 0x9e3779b97f4a7c15ull);
			d->k[h][i] = kvf_f32_to_f16(
				(float)((double)(x >> 40) / (1u << 22) - 2.0));
			d->v[h][i] = kvf_f32_to_f16(
				(float)((double)(x & 0xffffff) / (1u << 22) - 2.0));
		}
		for (int c = 1; c < N_CODECS; c++) {
			size_t ng = n / G, gb = d->kb[c] + d->vb[c];
			uint8_t *e = kvf_aligned_alloc(4096, ng * gb);

			if (!(d->enc[c][h] = e))
				goto out_nomem;
			/* per group: the K group, then the V group */
			for (size_t g = 0; g < ng; g++)
				if (ck->encode(&d->kl[c], d->k[h] + g * G * D,
					       KVF_DTYPE_F16, e + g * gb) ||
				    ck->encode(&d->vl[c], d->v[h] + g * G * D,
					       KVF_DTYPE_F16,
					       e + g * gb + d->kb[c])) {
					fprintf(stderr, "kvbench codec: %s\n",
						kvf_last_error());
					return -1;
				}
		}
	}
	return 0;
out_nomem:
	fprintf(stderr, "kvbench codec: out of memory for %u heads of %u tokens\n",
		H, n);
	return -1;
}

/* thread_ns - this thread's CPU time: a pass preempted by other work on
 * a shared machine is not charged for the time it waited. */
static uint64_t thread_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* speed_pass - attention over every head with codec c (0: dense f16 in
 * calls of G tokens); ns taken. */
static uint64_t speed_pass(const struct codec_args *a, struct speed_data *d,
			   int c)
{
	uint32_t D = a->cfg.head_dim, G = a->cfg.group_tokens;
	const struct kvc_codec_kernels *ck = kvc_codec_kernels();
	const struct kvc_kernels *kk = kvc_kernels();
	uint64_t t0 = thread_ns();
	struct kvc_attn_state st;

	for (uint32_t h = 0; h < a->cfg.n_kv_heads; h++) {
		kvc_attn_state_init(&st, a->cfg.n_q, D, d->state);
		for (uint32_t t = 0, g = 0; t < a->speed_tokens; t += G, g++) {
			const uint8_t *e;

			if (c == 0) {
				kk->attn_fold(&st, d->q, d->k[h] + (size_t)t * D,
					      d->v[h] + (size_t)t * D, G,
					      KVF_DTYPE_F16, NULL, NULL, 0);
				continue;
			}
			e = d->enc[c][h] + (size_t)g * (d->kb[c] + d->vb[c]);
			ck->fold(&st, d->q, &d->kl[c], e, &d->vl[c],
				 e + d->kb[c], 0, G, NULL, NULL, 0);
		}
		kvc_attn_finish(&st, d->out, NULL);
		d->sink += d->out[0];
	}
	return thread_ns() - t0;
}

/* run_speed - Mtoken/s per codec (median of the passes) into mts. */
static int run_speed(const struct codec_args *a, double *mts)
{
	struct speed_data d = { 0 };
	double *v = kvf_calloc((size_t)N_CODECS * a->repeat, sizeof(double));
	double tokens = (double)a->speed_tokens * a->cfg.n_kv_heads;

	if (!v || speed_alloc(a, &d) != 0) {
		kvf_free(v);
		speed_free(a, &d);
		return -1;
	}
	speed_pass(a, &d, 0); /* warm: every page touched once */
	for (int c = 1; c < N_CODECS; c++)
		speed_pass(a, &d, c);
	for (uint32_t p = 0; p < a->repeat; p++)
		for (int r = 0; r < N_CODECS; r++) {
			/* alternate the order, so no row always runs first */
			int c = p % 2 ? N_CODECS - 1 - r : r;
			uint64_t ns = speed_pass(a, &d, c);

			v[(size_t)c * a->repeat + p] =
				ns ? tokens / ((double)ns / 1e3) : 0;
		}
	for (int c = 0; c < N_CODECS; c++)
		mts[c] = bench_median(v + (size_t)c * a->repeat, a->repeat);
	if (d.sink == 42.4242)
		fprintf(stderr, "(sink)\n");
	kvf_free(v);
	speed_free(a, &d);
	return 0;
}

/* ---- report --------------------------------------------------------------- */

static void print_table(const struct codec_args *a,
			struct codec_eval_result r[N_CODECS][CODEC_WL_COUNT],
			const double *mts)
{
	const struct codec_eval_cfg *c = &a->cfg;

	printf("kvbench codec: attention over encoded KV groups vs the uncompressed (f16) computation\n");
	printf("  head_dim %u, groups of %u tokens, layout version %u; accuracy: %u KV heads x %u tokens, %u query heads each, seed %llu;\n"
	       "  kernels %s; reference: attention in double over the f16 values\n\n",
	       c->head_dim, c->group_tokens, c->layout, c->n_kv_heads,
	       c->n_tokens, c->n_q, (unsigned long long)c->seed,
	       kvc_codec_kernels()->name);
	printf("  %-6s %8s %7s  %-11s %10s %10s %12s %12s\n", "codec",
	       "B/token", "x f16", "workload", "cos mean", "cos min",
	       "rel err mean", "rel err max");
	for (int k = 0; k < N_CODECS; k++)
		for (int w = 0; w < CODEC_WL_COUNT; w++) {
			const struct codec_eval_result *x = &r[k][w];

			if (w == 0)
				printf("  %-6s %8.1f %7.4f", kvf_codec_name((kvf_codec)k),
				       x->bytes_ratio * 4.0 * c->head_dim,
				       x->bytes_ratio);
			else
				printf("  %-6s %8s %7s", "", "", "");
			printf("  %-11s %10.6f %10.6f %12.3e %12.3e\n",
			       codec_workload_name((enum codec_workload)w),
			       x->cos_mean, x->cos_min, x->rel_mean, x->rel_max);
		}
	printf("\n  (targets, issue #25: cosine int8 >= 0.999, fp8 >= 0.998, int4 >= 0.98;\n"
	       "   bytes per token int8 <= 0.53 x f16, int4 <= 0.28 x f16, scales included)\n");
	if (!mts)
		return;
	printf("\n  attention over groups in memory (warm), %u KV heads x %u tokens, GQA %u,\n"
	       "  one call per group of %u tokens, median of %u passes, one thread, per CPU second:\n\n",
	       c->n_kv_heads, a->speed_tokens, c->n_q, c->group_tokens,
	       a->repeat);
	printf("  %-6s %12s %8s\n", "codec", "Mtoken/s", "x f16");
	for (int k = 0; k < N_CODECS; k++)
		printf("  %-6s %12.2f %8.2f\n", k ? kvf_codec_name((kvf_codec)k) : "f16",
		       mts[k], mts[0] > 0 ? mts[k] / mts[0] : 0);
}

static void print_json(const struct codec_args *a,
		       struct codec_eval_result r[N_CODECS][CODEC_WL_COUNT],
		       const double *mts)
{
	const struct codec_eval_cfg *c = &a->cfg;
	struct bench_json j = { .f = stdout };

	bench_json_begin(&j, NULL);
	bench_json_str(&j, "bench", "codec");
	bench_json_u64(&j, "head_dim", c->head_dim);
	bench_json_u64(&j, "group_tokens", c->group_tokens);
	bench_json_u64(&j, "layout", c->layout);
	bench_json_u64(&j, "tokens", c->n_tokens);
	bench_json_u64(&j, "kv_heads", c->n_kv_heads);
	bench_json_u64(&j, "q_heads_per_kv", c->n_q);
	bench_json_u64(&j, "seed", c->seed);
	bench_json_str(&j, "kernels", kvc_codec_kernels()->name);
	bench_json_begin(&j, "accuracy");
	for (int k = 0; k < N_CODECS; k++) {
		bench_json_begin(&j, kvf_codec_name((kvf_codec)k));
		bench_json_double(&j, "bytes_ratio", r[k][0].bytes_ratio);
		bench_json_double(&j, "bytes_per_token",
				  r[k][0].bytes_ratio * 4.0 * c->head_dim);
		for (int w = 0; w < CODEC_WL_COUNT; w++) {
			bench_json_begin(&j, codec_workload_name(
						     (enum codec_workload)w));
			bench_json_double(&j, "cos_mean", r[k][w].cos_mean);
			bench_json_double(&j, "cos_min", r[k][w].cos_min);
			bench_json_double(&j, "rel_err_mean", r[k][w].rel_mean);
			bench_json_double(&j, "rel_err_max", r[k][w].rel_max);
			bench_json_u64(&j, "q_heads", r[k][w].n_heads);
			bench_json_end(&j);
		}
		bench_json_end(&j);
	}
	bench_json_end(&j);
	if (mts) {
		bench_json_begin(&j, "speed");
		bench_json_u64(&j, "tokens", a->speed_tokens);
		bench_json_u64(&j, "repeat", a->repeat);
		for (int k = 0; k < N_CODECS; k++) {
			bench_json_begin(&j, k ? kvf_codec_name((kvf_codec)k) :
						 "f16");
			bench_json_double(&j, "mtoken_s", mts[k]);
			bench_json_double(&j, "ratio_to_f16",
					  mts[0] > 0 ? mts[k] / mts[0] : 0);
			bench_json_end(&j);
		}
		bench_json_end(&j);
	}
	bench_json_end(&j);
	fputc('\n', stdout);
}

int bench_codec_main(int argc, char **argv)
{
	static struct codec_eval_result r[N_CODECS][CODEC_WL_COUNT];
	struct codec_args a;
	double mts[N_CODECS];
	int rc;

	if ((rc = parse_args(argc, argv, &a)) != 0)
		return rc == 1 ? 0 : rc;
	for (int k = 0; k < N_CODECS; k++)
		for (int w = 0; w < CODEC_WL_COUNT; w++)
			if (codec_eval(&a.cfg, (kvf_codec)k,
				       (enum codec_workload)w,
				       &r[k][w]) != KVF_OK) {
				fprintf(stderr, "kvbench codec: %s\n",
					kvf_last_error());
				return 1;
			}
	if (!a.no_speed && run_speed(&a, mts) != 0)
		return 1;
	if (a.json)
		print_json(&a, r, a.no_speed ? NULL : mts);
	else
		print_table(&a, r, a.no_speed ? NULL : mts);
	return 0;
}
