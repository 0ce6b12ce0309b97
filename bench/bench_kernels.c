/*
 * bench_kernels.c - `kvbench kernels`: the dense decode-attention kernel
 * (attn_fold of compute/kernels.h) against a plain memory-read loop over
 * the same bytes, in one run, for every kernel variant this CPU runs.
 *
 * The context is one layer's K and V already in memory: n_kv_heads heads
 * of n_tokens rows of head_dim elements in the dtype (default 8 x 32768 x
 * 128 f16, 128 MiB of K+V, well past the caches), each KV head serving a
 * GQA group of query heads.  Measured, one thread, median of the passes:
 *  - plain: the sum of every 64-bit word of the same K and V buffers (the
 *    fastest a core reads those bytes; the compiler vectorizes it);
 *  - per variant (scalar, avx2), the whole dense kernel per KV head:
 *    state init, attn_fold, finish; once with one call per head and once
 *    with one call per 4 KiB page of K (and of V), as the engine streams
 *    pages.
 * Figures are bytes of K+V per second (MB/s, 10^6) as the median and the
 * best of the passes, each with its ratio to the plain read, and (KV
 * head, token) pairs folded per second for the whole group; never
 * pass/fail.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api/alloc.h"
#include "bench/bench_common.h"
#include "compute/half.h"
#include "compute/kernels.h"

struct kern_args {
	uint64_t n_tokens;   /* tokens per KV head */
	uint32_t n_kv_heads; /* KV heads (buffers) */
	uint32_t group;      /* query heads per KV head */
	uint32_t head_dim;   /* elements per row */
	kvf_dtype dtype;     /* of K and V */
	uint32_t repeat;     /* passes; medians are reported */
	int json;            /* print JSON instead of a table */
};

/* One measured configuration. */
struct kern_row {
	const char *name;             /* for the table */
	const struct kvc_kernels *kk; /* NULL: the plain read */
	uint32_t chunk_tokens;        /* tokens per attn_fold call */
	double mbs;                   /* median MB/s of K+V */
	double best_mbs;              /* fastest pass, MB/s of K+V */
};

/* The data and scratch of a run, allocated once. */
struct kern_data {
	unsigned char **k, **v; /* [n_kv_heads] rows of n_tokens * head_dim */
	float *q;               /* [group][head_dim] */
	float *state;           /* KVC_ATTN_STATE_FLOATS(group, head_dim) */
	float *out, *lse;       /* [group][head_dim], [group] */
	size_t head_bytes;      /* bytes of K (or V) of one head */
	double sink;            /* results, so nothing is optimized away */
};

static void usage(FILE *f)
{
	fprintf(f,
		"usage: kvbench kernels [--tokens N] [--heads N] [--group N]\n"
		"                       [--head-dim N] [--dtype f16|bf16|f32]\n"
		"                       [--repeat N] [--json]\n"
		"  --tokens N     tokens per KV head, K/M suffixes (default 32K)\n"
		"  --heads N      KV heads of the layer (default 8)\n"
		"  --group N      query heads per KV head, GQA (default 4)\n"
		"  --head-dim N   elements per head vector (default 128)\n"
		"  --dtype T      element type of K and V (default f16)\n"
		"  --repeat N     passes per measurement; medians (default 5)\n"
		"  --json         JSON instead of a table\n");
}

/* parse_dtype - --dtype f16|bf16|f32 */
static int parse_dtype(const char *flag, const char *text, void *out)
{
	kvf_dtype *dt = out;

	(void)flag;
	if (strcmp(text, "f16") == 0)
		*dt = KVF_DTYPE_F16;
	else if (strcmp(text, "bf16") == 0)
		*dt = KVF_DTYPE_BF16;
	else if (strcmp(text, "f32") == 0)
		*dt = KVF_DTYPE_F32;
	else
		return bench_usage_error("kernels",
					 "--dtype %s: use f16, bf16 or f32",
					 text);
	return 0;
}

static int parse_args(int argc, char **argv, struct kern_args *a)
{
	const struct bench_opt opts[] = {
		BENCH_U64("--tokens", a->n_tokens, 1, 1u << 30),
		BENCH_U32("--heads", a->n_kv_heads, 1, 1024),
		BENCH_U32("--group", a->group, 1, 64),
		BENCH_U32("--head-dim", a->head_dim, 1, 1024),
		BENCH_FUNC("--dtype", parse_dtype, &a->dtype),
		BENCH_U32("--repeat", a->repeat, 1, 100),
		BENCH_BOOL("--json", a->json),
		{ 0 }
	};

	*a = (struct kern_args){ .n_tokens = 32768,
				 .n_kv_heads = 8,
				 .group = 4,
				 .head_dim = 128,
				 .dtype = KVF_DTYPE_F16,
				 .repeat = 5 };
	return bench_parse_opts("kernels", usage, opts, argc, argv);
}

/* data_alloc - K and V of every head, filled with values in [-1, 1]. */
static int data_alloc(const struct kern_args *a, struct kern_data *d)
{
	size_t eb = a->dtype == KVF_DTYPE_F32 ? 4 : 2;
	size_t elts = (size_t)a->n_tokens * a->head_dim;
	uint64_t x = 0x9e3779b97f4a7c15ull;

	memset(d, 0, sizeof(*d));
	d->head_bytes = elts * eb;
	d->k = kvf_calloc(a->n_kv_heads, sizeof(*d->k));
	d->v = kvf_calloc(a->n_kv_heads, sizeof(*d->v));
	d->q = kvf_malloc((size_t)a->group * a->head_dim * sizeof(float));
	d->state = kvf_malloc(KVC_ATTN_STATE_FLOATS(a->group, a->head_dim) *
			      sizeof(float));
	d->out = kvf_malloc((size_t)a->group * a->head_dim * sizeof(float));
	d->lse = kvf_malloc(a->group * sizeof(float));
	if (!d->k || !d->v || !d->q || !d->state || !d->out || !d->lse)
		return -1;
	for (uint32_t h = 0; h < a->n_kv_heads; h++) {
		d->k[h] = kvf_aligned_alloc(4096, d->head_bytes);
		d->v[h] = kvf_aligned_alloc(4096, d->head_bytes);
		if (!d->k[h] || !d->v[h])
			return -1;
		for (int kv = 0; kv < 2; kv++) {
			unsigned char *b = kv ? d->v[h] : d->k[h];

			for (size_t i = 0; i < elts; i++) {
				float f;
				uint16_t u;

				x = x * 6364136223846793005ull +
				    1442695040888963407ull;
				f = (float)((double)(x >> 40) /
						    (double)(1u << 23) -
					    1.0);
				if (a->dtype == KVF_DTYPE_F32) {
					memcpy(b + i * 4, &f, 4);
					continue;
				}
				u = a->dtype == KVF_DTYPE_F16 ?
					    kvf_f32_to_f16(f) :
					    kvf_f32_to_bf16(f);
				memcpy(b + i * 2, &u, 2);
			}
		}
	}
	for (size_t i = 0; i < (size_t)a->group * a->head_dim; i++)
		d->q[i] = (float)((double)(i % 17) / 17.0 - 0.5) / 11.3f;
	return 0;
}

static void data_free(const struct kern_args *a, struct kern_data *d)
{
	for (uint32_t h = 0; d->k && h < a->n_kv_heads; h++) {
		kvf_free(d->k[h]);
		kvf_free(d->v[h]);
	}
	kvf_free(d->k);
	kvf_free(d->v);
	kvf_free(d->q);
	kvf_free(d->state);
	kvf_free(d->out);
	kvf_free(d->lse);
}

/* plain_pass - sum every 64-bit word of K and V; ns taken. */
static uint64_t plain_pass(const struct kern_args *a, struct kern_data *d)
{
	uint64_t t0 = bench_now_ns(), sum = 0;
	size_t words = d->head_bytes / 8;

	for (uint32_t h = 0; h < a->n_kv_heads; h++) {
		const uint64_t *k = (const uint64_t *)(void *)d->k[h];
		const uint64_t *v = (const uint64_t *)(void *)d->v[h];

		for (size_t i = 0; i < words; i++)
			sum += k[i];
		for (size_t i = 0; i < words; i++)
			sum += v[i];
	}
	t0 = bench_now_ns() - t0;
	d->sink += (double)sum;
	return t0;
}

/* kernel_pass - dense attention over every head, chunk tokens per call. */
static uint64_t kernel_pass(const struct kern_args *a, struct kern_data *d,
			    const struct kvc_kernels *kk, uint32_t chunk)
{
	size_t row = d->head_bytes / a->n_tokens;
	uint64_t t0 = bench_now_ns();
	struct kvc_attn_state st;

	for (uint32_t h = 0; h < a->n_kv_heads; h++) {
		kvc_attn_state_init(&st, a->group, a->head_dim, d->state);
		for (uint64_t t = 0; t < a->n_tokens; t += chunk) {
			uint32_t n = (uint32_t)(a->n_tokens - t < chunk ?
							a->n_tokens - t :
							chunk);

			kk->attn_fold(&st, d->q, d->k[h] + t * row,
				      d->v[h] + t * row, n, a->dtype, NULL,
				      NULL, 0);
		}
		kvc_attn_finish(&st, d->out, d->lse);
		d->sink += d->out[0] + d->lse[0];
	}
	return bench_now_ns() - t0;
}

static void print_table(const struct kern_args *a, const struct kern_data *d,
			const struct kern_row *rows, uint32_t n_rows)
{
	double total = 2.0 * (double)d->head_bytes * a->n_kv_heads;

	printf("kvbench kernels: dense decode attention vs a plain read of the same bytes\n");
	printf("  %u KV heads x %llu tokens x %u dims, %s, GQA group %u: %.1f MiB of K+V per pass, median of %u, one thread\n\n",
	       a->n_kv_heads, (unsigned long long)a->n_tokens, a->head_dim,
	       kvf_dtype_name(a->dtype), a->group, total / (1 << 20), a->repeat);
	printf("  %-32s %10s %10s %10s %10s %10s\n", "", "MB/s", "x plain",
	       "best MB/s", "x plain", "Mtoken/s");
	for (uint32_t i = 0; i < n_rows; i++)
		printf("  %-32s %10.0f %10.2f %10.0f %10.2f %10.2f\n",
		       rows[i].name, rows[i].mbs, rows[i].mbs / rows[0].mbs,
		       rows[i].best_mbs, rows[i].best_mbs / rows[0].best_mbs,
		       rows[i].mbs * (double)a->n_tokens * a->n_kv_heads /
			       total);
	printf("\n  (medians, and the best pass: on a shared machine other work only\n   slows a pass down, so the best is the cleaner figure)\n");
	printf("\n  (issue #5's target for dense attention over an in-memory context,\n   measured end to end by kvbench attend: >= 0.6 x plain)\n");
}

static void print_json(const struct kern_args *a, const struct kern_row *rows,
		       uint32_t n_rows)
{
	struct bench_json j = { .f = stdout };

	bench_json_begin(&j, NULL);
	bench_json_str(&j, "bench", "kernels");
	bench_json_u64(&j, "tokens", a->n_tokens);
	bench_json_u64(&j, "kv_heads", a->n_kv_heads);
	bench_json_u64(&j, "group", a->group);
	bench_json_u64(&j, "head_dim", a->head_dim);
	bench_json_str(&j, "dtype", kvf_dtype_name(a->dtype));
	bench_json_u64(&j, "repeat", a->repeat);
	bench_json_double(&j, "plain_mb_s", rows[0].mbs);
	bench_json_double(&j, "plain_best_mb_s", rows[0].best_mbs);
	for (uint32_t i = 1; i < n_rows; i++) {
		char key[64];

		snprintf(key, sizeof(key), "%s_%s", rows[i].kk->name,
			 rows[i].chunk_tokens == a->n_tokens ? "head" : "page");
		bench_json_begin(&j, key);
		bench_json_u64(&j, "chunk_tokens", rows[i].chunk_tokens);
		bench_json_double(&j, "mb_s", rows[i].mbs);
		bench_json_double(&j, "best_mb_s", rows[i].best_mbs);
		bench_json_double(&j, "ratio_to_plain",
				  rows[i].mbs / rows[0].mbs);
		bench_json_end(&j);
	}
	bench_json_end(&j);
	fputc('\n', stdout);
}

int bench_kernels_main(int argc, char **argv)
{
	struct kern_args a;
	struct kern_data d;
	struct kern_row rows[5];
	const struct kvc_kernels *vars[2] = { kvc_kernels_scalar(),
					      kvc_kernels_avx2() };
	static char names[4][48];
	uint32_t n_rows = 0, page_tokens;
	double *mbs;
	int rc;

	if ((rc = parse_args(argc, argv, &a)) != 0)
		return rc == 1 ? 0 : rc;
	if (data_alloc(&a, &d) != 0) {
		fprintf(stderr,
			"kvbench kernels: out of memory for %u heads of %llu tokens\n",
			a.n_kv_heads, (unsigned long long)a.n_tokens);
		data_free(&a, &d);
		return 1;
	}
	page_tokens = (uint32_t)(4096 / (d.head_bytes / a.n_tokens));
	if (page_tokens == 0)
		page_tokens = 1;
	rows[n_rows++] = (struct kern_row){ .name = "plain read (sum of u64)" };
	for (int i = 0; i < 2; i++) {
		if (!vars[i])
			continue;
		for (int pg = 0; pg < 2; pg++) {
			char *name = names[n_rows - 1];

			snprintf(name, sizeof(names[0]), "%s attn_fold, %s",
				 vars[i]->name,
				 pg ? "4 KiB pages" : "one call per head");
			rows[n_rows] = (struct kern_row){
				.name = name,
				.kk = vars[i],
				.chunk_tokens = pg ? page_tokens :
						     (uint32_t)a.n_tokens
			};
			n_rows++;
		}
	}
	mbs = kvf_calloc((size_t)n_rows * a.repeat, sizeof(double));
	if (!mbs) {
		data_free(&a, &d);
		return 1;
	}
	for (uint32_t p = 0; p < a.repeat; p++)
		for (uint32_t r = 0; r < n_rows; r++) {
			/* alternate the order, so no row always runs first */
			uint32_t x = p % 2 ? n_rows - 1 - r : r;
			uint64_t ns =
				rows[x].kk ? kernel_pass(&a, &d, rows[x].kk,
							 rows[x].chunk_tokens) :
					     plain_pass(&a, &d);

			mbs[(size_t)x * a.repeat + p] =
				bench_mbs(2 * d.head_bytes * a.n_kv_heads, ns);
		}
	for (uint32_t r = 0; r < n_rows; r++) {
		double *v = mbs + (size_t)r * a.repeat;

		rows[r].best_mbs = 0;
		for (uint32_t p = 0; p < a.repeat; p++)
			if (v[p] > rows[r].best_mbs)
				rows[r].best_mbs = v[p];
		rows[r].mbs = bench_median(v, a.repeat);
	}
	if (a.json)
		print_json(&a, rows, n_rows);
	else
		print_table(&a, &d, rows, n_rows);
	if (d.sink == 42.4242)
		fprintf(stderr, "(sink)\n");
	kvf_free(mbs);
	data_free(&a, &d);
	return 0;
}
