/*
 * bench_attend_codec.c - `kvbench attend --codec NAME`: dense decode
 * attention over a store whose K and V are encoded (kvf_options.codec,
 * docs/compression.md) against the same tokens in an uncompressed store,
 * side by side in one run.
 *
 * Two file stores in DIR, "none" and the codec's, one layer of the shape
 * the flags give (default 32K tokens, 32 q heads, 8 KV heads, head_dim
 * 128, f16), the same values appended to both (noise from a hash, K in
 * [-0.5, 0.5), V in [-1, 1), and one token in 128 a heavy hitter whose K
 * points along q's first 8 dims, so attention is not flat).  Per pass,
 * each store in turn (which goes first alternates):
 *  - cold: the store is reopened with no memory tier (dram_budget 0, the
 *    file read with O_DIRECT where the file system allows), then one
 *    kvf_attend timed; bytes from kvf_stats bytes_read;
 *  - warm: reopened with a memory tier of --budget (default 1 GiB), one
 *    untimed call fills it, then WARM_CALLS calls back to back, the mean
 *    taken; bytes read by them (none once the tier holds the layer; with
 *    a budget smaller than the layer, what the tier could not keep).
 * Medians over the passes; tokens/s is the layer's tokens over the time
 * of one call (every head).  The cosine of the codec store's output to
 * the uncompressed store's, per query head, says what the codec costs in
 * accuracy on these heads (kvbench codec measures the codecs alone on the
 * issue's workloads).  Benchmarks print figures and never pass or fail.
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api/alloc.h"
#include "bench/bench_attend_int.h"
#include "bench/bench_common.h"
#include "compute/half.h"
#include "kvflash.h"

#define WARM_CALLS 3u   /* warm calls per pass, the mean taken */
#define CHUNK 1024u     /* tokens per kvf_append */
#define HH_EVERY 128u   /* one heavy hitter in this many tokens */

/* The figures of one store. */
struct codec_side {
	kvf_codec codec;
	char *dir;
	uint32_t group_tokens;
	double cold_ns[MAX_REPEAT], warm_ns[MAX_REPEAT];
	uint64_t cold_bytes, warm_bytes; /* of the last pass */
	float *out;                      /* [n_q_heads][head_dim] */
};

static uint64_t hmix(uint64_t z)
{
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

/* unit - a value in [-1, 1) from a hash of (kind, token, head, dim) */
static float unit(uint32_t kind, uint64_t t, uint32_t h, uint32_t d)
{
	uint64_t x = hmix(hmix(hmix(kind * 0x9e3779b97f4a7c15ull + t) + h) + d);

	return (float)(x >> 40) / (float)(1ull << 23) - 1.0f;
}

static kvf_options side_opts(const struct attend_args *a, kvf_codec codec,
			     uint64_t budget)
{
	kvf_model m = a->model;
	kvf_options o;
	uint64_t seg = 1u << 20;
	uint64_t kv = (uint64_t)a->n_tokens * m.n_kv_heads * m.head_dim * 2 * 2;

	m.n_layers = 1;
	kvf_options_init(&o, &m);
	o.codec = codec;
	o.n_threads = a->n_threads;
	o.segment_size = seg;
	o.capacity_bytes = (2 * kv + (64u << 20)) / seg * seg;
	o.dram_budget = budget;
	return o;
}

/* fill - the side's store made afresh with the run's tokens */
static int fill(const struct attend_args *a, struct codec_side *s)
{
	kvf_options o = side_opts(a, s->codec, 0);
	uint32_t H = a->model.n_kv_heads, D = a->model.head_dim;
	size_t n = (size_t)CHUNK * H * D;
	uint16_t *k = kvf_malloc(n * 2), *v = kvf_malloc(n * 2);
	kvf_store_info si = { .struct_size = sizeof(si) };
	kvf_store *st;
	kvf_status rc;
	int ret = -1;

	if (k == NULL || v == NULL) {
		fprintf(stderr, "kvbench attend: out of memory\n");
		goto out;
	}
	if (bench_remove_store(s->dir) != 0)
		goto out;
	if ((rc = kvf_open(s->dir, &o, &st)) != KVF_OK) {
		ret = bench_fail("attend", "kvf_open", rc);
		goto out;
	}
	rc = kvf_seq_create(st, SEQ_ID);
	for (uint64_t t0 = 0; t0 < a->n_tokens && rc == KVF_OK; t0 += CHUNK) {
		uint32_t m = a->n_tokens - t0 < CHUNK ? (uint32_t)(a->n_tokens - t0)
						      : CHUNK;

		for (uint32_t t = 0; t < m; t++)
			for (uint32_t h = 0; h < H; h++)
				for (uint32_t d = 0; d < D; d++) {
					size_t i = ((size_t)t * H + h) * D + d;
					float kx = 0.5f * unit(0, t0 + t, h, d);

					if ((t0 + t) % HH_EVERY == 0 && d < ALIGN_DIMS)
						kx += HH_K;
					k[i] = kvf_f32_to_f16(kx);
					v[i] = kvf_f32_to_f16(unit(1, t0 + t, h, d));
				}
		rc = kvf_append(st, SEQ_ID, 0, m, k, v);
	}
	if (rc == KVF_OK)
		rc = kvf_store_info_get(st, &si);
	s->group_tokens = si.group_tokens;
	if (rc != KVF_OK) {
		ret = bench_fail("attend", "filling the store", rc);
		kvf_close(st);
		goto out;
	}
	if ((rc = kvf_close(st)) != KVF_OK) {
		ret = bench_fail("attend", "kvf_close", rc);
		goto out;
	}
	ret = 0;
out:
	kvf_free(k);
	kvf_free(v);
	return ret;
}

/* bytes_read - kvf_stats bytes_read of st */
static uint64_t bytes_read(kvf_store *st)
{
	kvf_stats s = { .struct_size = sizeof(s) };

	return kvf_stats_get(st, &s) == KVF_OK ? s.bytes_read : 0;
}

/* pass_side - one pass over one store: cold, then warm */
static int pass_side(const struct attend_args *a, struct codec_side *s,
		     const float *q, uint32_t i)
{
	kvf_options o = side_opts(a, s->codec, 0);
	kvf_store *st;
	uint64_t t0, b0;
	kvf_status rc;

	if ((rc = kvf_open(s->dir, &o, &st)) != KVF_OK)
		return bench_fail("attend", "kvf_open (cold)", rc);
	t0 = bench_now_ns();
	rc = kvf_attend(st, SEQ_ID, 0, q, s->out, NULL);
	s->cold_ns[i] = (double)(bench_now_ns() - t0);
	s->cold_bytes = bytes_read(st);
	kvf_close(st);
	if (rc != KVF_OK)
		return bench_fail("attend", "kvf_attend (cold)", rc);
	o = side_opts(a, s->codec, a->budget);
	if ((rc = kvf_open(s->dir, &o, &st)) != KVF_OK)
		return bench_fail("attend", "kvf_open (warm)", rc);
	rc = kvf_attend(st, SEQ_ID, 0, q, s->out, NULL); /* fills the tier */
	b0 = bytes_read(st);
	t0 = bench_now_ns();
	for (uint32_t c = 0; c < WARM_CALLS && rc == KVF_OK; c++)
		rc = kvf_attend(st, SEQ_ID, 0, q, s->out, NULL);
	s->warm_ns[i] = (double)(bench_now_ns() - t0) / WARM_CALLS;
	s->warm_bytes = (bytes_read(st) - b0) / WARM_CALLS;
	kvf_close(st);
	if (rc != KVF_OK)
		return bench_fail("attend", "kvf_attend (warm)", rc);
	return 0;
}

static double cosine(const float *x, const float *y, uint32_t n)
{
	double xy = 0, xx = 0, yy = 0;

	for (uint32_t i = 0; i < n; i++) {
		xy += (double)x[i] * y[i];
		xx += (double)x[i] * x[i];
		yy += (double)y[i] * y[i];
	}
	return xx > 0 && yy > 0 ? xy / sqrt(xx * yy) : (xx == yy ? 1 : 0);
}

static void report(const struct attend_args *a, struct codec_side *s,
		   double cos_mean, double cos_min)
{
	const kvf_model *m = &a->model;
	double cold[2], warm[2];
	char rbuf[32];
	const char *name = kvf_codec_name(s[1].codec);

	for (int i = 0; i < 2; i++) {
		cold[i] = bench_median(s[i].cold_ns, a->repeat);
		warm[i] = bench_median(s[i].warm_ns, a->repeat);
	}
	if (a->json) {
		struct bench_json j = { .f = stdout };

		bench_json_begin(&j, NULL);
		bench_json_str(&j, "benchmark", "attend-codec");
		{
			kvf_model one = *m; /* the stores hold one layer */

			one.n_layers = 1;
			bench_json_model(&j, &one);
		}
		bench_json_u64(&j, "tokens", a->n_tokens);
		bench_json_u64(&j, "repeat", a->repeat);
		for (int i = 0; i < 2; i++) {
			bench_json_begin(&j, kvf_codec_name(s[i].codec));
			bench_json_u64(&j, "group_tokens", s[i].group_tokens);
			bench_json_u64(&j, "cold_bytes", s[i].cold_bytes);
			bench_json_double(&j, "cold_bytes_per_token",
					  (double)s[i].cold_bytes / a->n_tokens);
			bench_json_double(&j, "cold_ms", cold[i] / 1e6);
			bench_json_double(&j, "cold_tokens_per_s",
					  a->n_tokens / (cold[i] / 1e9));
			bench_json_u64(&j, "warm_bytes", s[i].warm_bytes);
			bench_json_double(&j, "warm_ms", warm[i] / 1e6);
			bench_json_double(&j, "warm_tokens_per_s",
					  a->n_tokens / (warm[i] / 1e9));
			bench_json_end(&j);
		}
		bench_json_double(&j, "bytes_vs_none",
				  (double)s[1].cold_bytes / (double)s[0].cold_bytes);
		bench_json_double(&j, "cold_speed_vs_none", cold[0] / cold[1]);
		bench_json_double(&j, "warm_speed_vs_none", warm[0] / warm[1]);
		bench_json_double(&j, "cosine_mean", cos_mean);
		bench_json_double(&j, "cosine_min", cos_min);
		bench_json_end(&j);
		printf("\n");
		return;
	}
	printf("kvbench attend --codec %s: %u tokens, %u q heads, %u KV heads, head_dim %u, %s; "
	       "file stores, median of %u passes\n",
	       name, a->n_tokens, m->n_q_heads, m->n_kv_heads, m->head_dim,
	       kvf_dtype_name(m->dtype), a->repeat);
	printf("%-34s %14s %14s %10s\n", "", "none", name, "vs none");
	printf("%-34s %14u %14u\n", "tokens of a group", s[0].group_tokens,
	       s[1].group_tokens);
	printf("%-34s %14.1f %14.1f %10s\n", "cold: bytes read per token",
	       (double)s[0].cold_bytes / a->n_tokens,
	       (double)s[1].cold_bytes / a->n_tokens,
	       bench_ratio(rbuf, sizeof(rbuf), (double)s[1].cold_bytes,
			   (double)s[0].cold_bytes, 3));
	printf("%-34s %14.2f %14.2f %9.2fx\n", "cold: ms a call", cold[0] / 1e6,
	       cold[1] / 1e6, cold[0] / cold[1]);
	printf("%-34s %14.2f %14.2f\n", "cold: Mtoken/s", a->n_tokens / (cold[0] / 1e3),
	       a->n_tokens / (cold[1] / 1e3));
	printf("%-34s %14.2f %14.2f %9.2fx\n", "warm (memory tier): ms a call",
	       warm[0] / 1e6, warm[1] / 1e6, warm[0] / warm[1]);
	printf("%-34s %14.2f %14.2f\n", "warm: Mtoken/s", a->n_tokens / (warm[0] / 1e3),
	       a->n_tokens / (warm[1] / 1e3));
	printf("%-34s %14llu %14llu\n", "warm: bytes read a call",
	       (unsigned long long)s[0].warm_bytes,
	       (unsigned long long)s[1].warm_bytes);
	printf("output cosine to none's, per q head: mean %.6f, min %.6f\n",
	       cos_mean, cos_min);
	printf("(speed: none's time over %s's, above 1 = %s faster)\n", name, name);
}

int attend_codec_main(const struct attend_args *a)
{
	struct codec_side s[2] = { { .codec = KVF_CODEC_NONE },
				   { .codec = a->codec } };
	uint32_t Q = a->model.n_q_heads, D = a->model.head_dim;
	float *q = kvf_malloc((size_t)Q * D * sizeof(float));
	double cmean = 0, cmin = 1;
	int rc = 1;

	if (q == NULL || bench_make_dir("attend", a->dir, NULL) != 0)
		goto out;
	for (int i = 0; i < 2; i++) {
		size_t n = strlen(a->dir) + 16;

		s[i].dir = malloc(n);
		s[i].out = kvf_malloc((size_t)Q * D * sizeof(float));
		if (s[i].dir == NULL || s[i].out == NULL)
			goto out;
		snprintf(s[i].dir, n, "%s/%s", a->dir, kvf_codec_name(s[i].codec));
		if (fill(a, &s[i]) != 0)
			goto out;
	}
	for (uint32_t h = 0; h < Q; h++)
		for (uint32_t d = 0; d < D; d++)
			q[(size_t)h * D + d] = (d < ALIGN_DIMS ? 1.0f : 0.0f) +
					       0.3f * unit(2, 0, h, d);
	for (uint32_t i = 0; i < a->repeat; i++)
		for (int j = 0; j < 2; j++)
			if (pass_side(a, &s[(i + j) % 2], q, i) != 0)
				goto out;
	for (uint32_t h = 0; h < Q; h++) {
		double c = cosine(s[1].out + (size_t)h * D, s[0].out + (size_t)h * D, D);

		cmean += c / Q;
		cmin = c < cmin ? c : cmin;
	}
	report(a, s, cmean, cmin);
	rc = 0;
out:
	for (int i = 0; i < 2; i++) {
		if (s[i].dir && !a->keep)
			bench_remove_store(s[i].dir);
		free(s[i].dir);
		kvf_free(s[i].out);
	}
	kvf_free(q);
	return rc;
}
