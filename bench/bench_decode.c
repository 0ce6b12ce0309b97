/*
 * bench_decode.c - `kvbench decode`: a batch of sequences decoding step by
 * step through the store, with the memory tier on and off, for a working
 * set that fits the tier's budget and one --scale times larger, side by
 * side in one run.
 *
 * Each of the four runs (fits / larger, tier on / off) has a fresh file
 * store (O_DIRECT where the file system allows it) in DIR, with
 * kvf_options.dram_budget = --budget (on) or 0 (off).  Its --batch
 * sequences are prefilled with as many tokens each as make the working set
 * (K+V of every layer), then kvf_sync'd; then each decode step does, layer
 * by layer, what an inference engine does: kvf_append of one token to each
 * sequence, then kvf_attend_batch of the batch (dense).  --warmup steps go
 * first, untimed; then --steps steps are timed one by one.  Reported per
 * run:
 *  - per-step latency (median and mean), and its append and attention
 *    parts (medians);
 *  - bytes read from media per step: kvf_stats bytes_read, and of it
 *    attend_bytes_read (the tier's figure; 0 until the tier counts it),
 *    deltas over the timed steps, and cache hits and misses over them;
 *  - attention throughput: the K+V bytes the attention covers per step
 *    (every token of every sequence and layer, wherever it lies) over the
 *    time of the kvf_attend_batch calls, against two baselines over as
 *    many bytes: a plain memory-read loop (the sum of every 64-bit word of
 *    a buffer, on as many threads as the store computes with; the warm
 *    target is 0.8x) and a plain sequential read of a file in DIR with
 *    O_DIRECT, 1 MiB a request, one thread (the cold target is 0.8x);
 *  - the tier's DRAM peak and the store's host write amplification.
 * The outputs of the last step with the tier on and off are compared (the
 * data are the same: dense attention should not see the tier).
 * The figures measure whatever the store does: until the memory tier is
 * in, on and off come out alike.  Benchmarks never pass or fail.
 *
 * Data: K, V and q are noise from a hash of (sequence, layer, kind, token,
 * element), so every run appends the same bytes.  One thread drives the
 * store; the baselines' threads share nothing but read-only data.
 */
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "api/alloc.h"
#include "bench/bench_common.h"
#include "compute/half.h"
#include "kvflash.h"

#define MAX_THREADS 64u
#define MAX_STEPS 4096u
#define PLAIN_CHUNK (1u << 20)  /* bytes per plain O_DIRECT pread */
#define PREFILL_CHUNK 1024u     /* tokens per prefill kvf_append */
#define BASE_REPEAT 3u          /* baseline reads per size; median */
#define N_RUNS 4u               /* fits on, fits off, larger on, larger off */

struct decode_args {
	const char *dir;     /* where the stores and the plain file go */
	kvf_model model;     /* the shape; f16 */
	uint32_t batch;      /* sequences decoding together */
	uint32_t steps;      /* timed decode steps */
	uint32_t warmup;     /* untimed steps before them */
	uint32_t n_threads;  /* store threads and memory-loop threads */
	uint64_t budget;     /* dram_budget of the "on" runs, bytes */
	uint64_t fit_bytes;  /* working set that fits; 0 = budget / 2 */
	uint32_t scale;      /* the larger working set, times fit_bytes */
	int json;            /* JSON instead of a table */
	int keep;            /* leave the stores in DIR */
};

/* The figures of one run. */
struct run_figs {
	uint32_t prompt;          /* tokens prefilled per sequence */
	uint64_t ws_bytes;        /* K+V of the batch after the last step */
	double prefill_s;         /* prefill appends and the sync */
	double step_med, step_mean; /* ns a timed step */
	double append_med, attend_med; /* ns of its appends, its attention */
	double bytes_read;        /* per timed step: kvf_stats bytes_read */
	double attend_bytes_read; /* per timed step: attend_bytes_read */
	double attended;          /* per timed step: K+V bytes attended */
	double attend_gbs;        /* attended bytes over attention time */
	uint64_t cache_hits, cache_misses; /* over the timed steps */
	uint64_t dram_peak, dram_budget;   /* kvf_stats, after the run */
	double host_wa;           /* kvf_stats, after the run */
	int direct_io;            /* the store opened with O_DIRECT */
};

/* The baselines for one working-set size. */
struct base_figs {
	uint64_t bytes;    /* bytes read */
	double mem_gbs;    /* plain memory-read loop, n_threads threads */
	double direct_gbs; /* plain sequential O_DIRECT reads, one thread */
	int direct;        /* the plain file was read with O_DIRECT */
};

struct decode_ctx {
	const struct decode_args *a;
	uint32_t n_threads;
	uint64_t token_bytes;     /* K+V of one token, every layer */
	uint16_t noise[65536];    /* f16 noise in [-1, 1) */
	struct run_figs run[N_RUNS];
	struct base_figs base[2];
	float *last_out[N_RUNS];  /* outputs of the last step, last layer */
	double diff[2];           /* max |on - off| of those, per size */
	volatile uint64_t sink;   /* sums of the plain reads, kept */
};

static const char *const size_name[2] = { "fit", "large" };

/* ---- data ---------------------------------------------------------------- */

/* fill_rows - n tokens from t0 of (seq, layer, kind): [n][kv_heads][dim] */
static void fill_rows(const struct decode_ctx *c, uint16_t *dst, uint64_t seq,
		      uint32_t layer, uint32_t kind, uint64_t t0, uint32_t n)
{
	size_t row = (size_t)c->a->model.n_kv_heads * c->a->model.head_dim;
	uint64_t key = bench_mix64(((seq * 1024 + layer) * 2 + kind) + 1);

	for (uint32_t t = 0; t < n; t++) {
		uint64_t base = bench_mix64(key ^ (t0 + t));

		for (size_t i = 0; i < row; i += 4) {
			uint64_t h = bench_mix64(base + i);

			for (size_t j = 0; j < 4 && i + j < row; j++)
				dst[(size_t)t * row + i + j] = c->noise[(h >> (16 * j)) & 0xffff];
		}
	}
}

/* fill_q - the queries of every sequence of the batch for (step, layer) */
static void fill_q(const struct decode_ctx *c, float *q, uint32_t step,
		   uint32_t layer)
{
	size_t n = (size_t)c->a->batch * c->a->model.n_q_heads * c->a->model.head_dim;

	for (size_t i = 0; i < n; i++)
		q[i] = (float)((double)(bench_mix64(((uint64_t)step << 40) ^
						    ((uint64_t)layer << 32) ^ i) >> 11) /
				       9007199254740992.0 * 4 - 2);
}

/* prompt_of - tokens prefilled per sequence for working-set size i */
static uint32_t prompt_of(const struct decode_ctx *c, uint32_t i)
{
	uint64_t ws = c->a->fit_bytes * (i ? c->a->scale : 1);
	uint64_t n = ws / (c->token_bytes * c->a->batch);

	return (uint32_t)(n > 1 ? (n < UINT32_MAX / 2 ? n : UINT32_MAX / 2) : 1);
}

/* ws_of - K+V bytes of the batch after the last step, size i */
static uint64_t ws_of(const struct decode_ctx *c, uint32_t i)
{
	return ((uint64_t)prompt_of(c, i) + c->a->warmup + c->a->steps) *
	       c->token_bytes * c->a->batch;
}

/* ---- baselines ------------------------------------------------------------ */

struct sum_part {
	const uint64_t *w; /* words to read */
	size_t n;          /* how many */
	uint64_t sum;      /* their sum */
};

/* sum_words - four independent sums, so the loop runs at load speed */
static void *sum_words(void *arg)
{
	struct sum_part *p = arg;
	uint64_t s0 = 0, s1 = 0, s2 = 0, s3 = 0;
	size_t i;

	for (i = 0; i + 4 <= p->n; i += 4) {
		s0 += p->w[i];
		s1 += p->w[i + 1];
		s2 += p->w[i + 2];
		s3 += p->w[i + 3];
	}
	for (; i < p->n; i++)
		s0 += p->w[i];
	p->sum = s0 + s1 + s2 + s3;
	return NULL;
}

/* plain_mem - ns to read every word of buf (bytes) on n threads; 0 on
 * error */
static double plain_mem(struct decode_ctx *c, const uint64_t *buf,
			uint64_t bytes, uint32_t n)
{
	struct sum_part part[MAX_THREADS];
	pthread_t tid[MAX_THREADS];
	size_t words = bytes / 8, each = (words + n - 1) / n;
	uint64_t t0 = bench_now_ns(), sum = 0;
	uint32_t started = 1;

	for (uint32_t i = 0; i < n; i++) {
		size_t lo = (size_t)i * each < words ? (size_t)i * each : words;
		size_t hi = lo + each < words ? lo + each : words;

		part[i] = (struct sum_part){ .w = buf + lo, .n = hi - lo };
	}
	for (uint32_t i = 1; i < n; i++, started++)
		if (pthread_create(&tid[i], NULL, sum_words, &part[i]) != 0)
			break;
	sum_words(&part[0]);
	for (uint32_t i = 1; i < started; i++)
		pthread_join(tid[i], NULL);
	t0 = bench_now_ns() - t0;
	for (uint32_t i = 0; i < started; i++)
		sum += part[i].sum;
	c->sink += sum;
	if (started < n) {
		fprintf(stderr, "kvbench decode: pthread_create failed\n");
		return 0;
	}
	return (double)t0;
}

/* plain_file - write bytes (rounded up to PLAIN_CHUNK) of noise to path
 * with O_DIRECT where allowed, synced; *direct says whether it was */
static int plain_file(const char *path, unsigned char *chunk, uint64_t bytes,
		      int *direct)
{
	uint64_t done = 0;
	int fd;

	unlink(path);
	fd = open(path, O_RDWR | O_CREAT | O_TRUNC | O_DIRECT, 0644);
	*direct = fd >= 0;
	if (fd < 0)
		fd = open(path, O_RDWR | O_CREAT | O_TRUNC, 0644);
	if (fd < 0)
		goto err;
	for (size_t i = 0; i < PLAIN_CHUNK / 8; i++)
		((uint64_t *)(void *)chunk)[i] = bench_mix64(i);
	while (done < bytes) {
		if (pwrite(fd, chunk, PLAIN_CHUNK, (off_t)done) != (ssize_t)PLAIN_CHUNK)
			goto err;
		done += PLAIN_CHUNK;
	}
	if (fdatasync(fd) != 0)
		goto err;
	close(fd);
	return 0;
err:
	fprintf(stderr, "kvbench decode: %s: %s\n", path, strerror(errno));
	if (fd >= 0)
		close(fd);
	return -1;
}

/* plain_direct - ns to read bytes (rounded up to PLAIN_CHUNK) of path in
 * sequential PLAIN_CHUNK preads, one thread; 0 on error */
static double plain_direct(struct decode_ctx *c, const char *path,
			   unsigned char *chunk, uint64_t bytes, int direct)
{
	int fd = open(path, O_RDONLY | (direct ? O_DIRECT : 0));
	uint64_t t0, done = 0;

	if (fd < 0)
		goto err;
	t0 = bench_now_ns();
	while (done < bytes) {
		if (pread(fd, chunk, PLAIN_CHUNK, (off_t)done) != (ssize_t)PLAIN_CHUNK)
			goto err;
		done += PLAIN_CHUNK;
	}
	t0 = bench_now_ns() - t0;
	c->sink += chunk[4095];
	close(fd);
	return (double)t0;
err:
	fprintf(stderr, "kvbench decode: reading %s: %s\n", path, strerror(errno));
	if (fd >= 0)
		close(fd);
	return 0;
}

/* baselines - both plain reads of bytes, BASE_REPEAT times each, medians */
static int baselines(struct decode_ctx *c, uint64_t bytes, struct base_figs *b)
{
	uint64_t rounded = (bytes + PLAIN_CHUNK - 1) / PLAIN_CHUNK * PLAIN_CHUNK;
	uint64_t *buf = kvf_malloc(rounded);
	unsigned char *chunk = kvf_aligned_alloc(4096, PLAIN_CHUNK);
	char path[4096];
	double mem[BASE_REPEAT], dir[BASE_REPEAT];
	int rc = -1;

	snprintf(path, sizeof(path), "%s/plain.dat", c->a->dir);
	if (buf == NULL || chunk == NULL) {
		fprintf(stderr, "kvbench decode: out of memory for the baselines\n");
		goto out;
	}
	for (uint64_t i = 0; i < rounded / 8; i++)
		buf[i] = bench_mix64(i);
	if (plain_file(path, (unsigned char *)chunk, rounded, &b->direct) != 0)
		goto out;
	for (uint32_t i = 0; i < BASE_REPEAT; i++) {
		mem[i] = plain_mem(c, buf, rounded, c->n_threads);
		dir[i] = plain_direct(c, path, chunk, rounded, b->direct);
		if (mem[i] == 0 || dir[i] == 0)
			goto out;
	}
	b->bytes = rounded;
	b->mem_gbs = (double)rounded / bench_median(mem, BASE_REPEAT);
	b->direct_gbs = (double)rounded / bench_median(dir, BASE_REPEAT);
	rc = 0;
out:
	unlink(path);
	kvf_free(buf);
	kvf_free(chunk);
	return rc;
}

/* ---- one run -------------------------------------------------------------- */

struct run_bufs {
	uint16_t *k, *v;  /* [max(PREFILL_CHUNK, 1)][kv_heads][dim] */
	float *q, *out;   /* [batch][q_heads][dim] */
	uint64_t *ids;    /* [batch] */
	double *step, *app, *att; /* [steps] ns */
};

static int stats(kvf_store *st, kvf_stats *s)
{
	kvf_status rc;

	memset(s, 0, sizeof(*s));
	s->struct_size = sizeof(*s);
	if ((rc = kvf_stats_get(st, s)) != KVF_OK)
		return bench_fail("decode", "kvf_stats_get", rc);
	return 0;
}

/* open_store - a fresh store at path, tier on or off, for ws bytes */
static int open_store(struct decode_ctx *c, const char *path, int tier_on,
		      uint64_t ws, kvf_store **st, int *direct)
{
	const uint64_t seg = 1u << 20;
	kvf_options o;
	kvf_status rc;

	if (bench_remove_store(path) != 0)
		return -1;
	kvf_options_init(&o, &c->a->model);
	o.n_threads = c->n_threads;
	o.segment_size = seg;
	/* the data, summaries and padding, and room to spare */
	o.capacity_bytes = (ws / 2 * 3 + 64 * seg + seg - 1) / seg * seg;
	o.dram_budget = tier_on ? c->a->budget : 0;
	o.direct_io = 1;
	rc = kvf_open(path, &o, st);
	*direct = rc == KVF_OK;
	if (rc == KVF_ENOTSUP) { /* no O_DIRECT here: say so, go on */
		o.direct_io = 0;
		rc = kvf_open(path, &o, st);
	}
	if (rc != KVF_OK)
		return bench_fail("decode", "kvf_open", rc);
	return 0;
}

/* prefill - prompt tokens into every layer of every sequence, then sync */
static int prefill(struct decode_ctx *c, kvf_store *st, struct run_bufs *b,
		   uint32_t prompt)
{
	const struct decode_args *a = c->a;
	kvf_status rc;

	for (uint32_t s = 0; s < a->batch; s++) {
		if ((rc = kvf_seq_create(st, b->ids[s])) != KVF_OK)
			return bench_fail("decode", "kvf_seq_create", rc);
		for (uint32_t l = 0; l < a->model.n_layers; l++)
			for (uint32_t t = 0; t < prompt; t += PREFILL_CHUNK) {
				uint32_t n = prompt - t < PREFILL_CHUNK ? prompt - t
									: PREFILL_CHUNK;

				fill_rows(c, b->k, b->ids[s], l, 0, t, n);
				fill_rows(c, b->v, b->ids[s], l, 1, t, n);
				rc = kvf_append(st, b->ids[s], l, n, b->k, b->v);
				if (rc != KVF_OK)
					return bench_fail("decode", "kvf_append (prefill)", rc);
			}
	}
	if ((rc = kvf_sync(st)) != KVF_OK)
		return bench_fail("decode", "kvf_sync", rc);
	return 0;
}

/* step - one decode step (token pos of every sequence): per layer, the
 * appends, then the batch's attention; their ns added to *app, *att */
static int step(struct decode_ctx *c, kvf_store *st, struct run_bufs *b,
		uint32_t n_step, uint64_t pos, double *app, double *att)
{
	const struct decode_args *a = c->a;
	size_t row = (size_t)a->model.n_kv_heads * a->model.head_dim;
	kvf_status rc;

	for (uint32_t l = 0; l < a->model.n_layers; l++) {
		uint64_t t0, t1;

		fill_q(c, b->q, n_step, l);
		for (uint32_t s = 0; s < a->batch; s++) {
			fill_rows(c, b->k + s * row, b->ids[s], l, 0, pos, 1);
			fill_rows(c, b->v + s * row, b->ids[s], l, 1, pos, 1);
		}
		t0 = bench_now_ns();
		for (uint32_t s = 0; s < a->batch; s++)
			if ((rc = kvf_append(st, b->ids[s], l, 1, b->k + s * row,
					     b->v + s * row)) != KVF_OK)
				return bench_fail("decode", "kvf_append", rc);
		t1 = bench_now_ns();
		rc = kvf_attend_batch(st, a->batch, b->ids, l, b->q, b->out, NULL);
		if (rc != KVF_OK)
			return bench_fail("decode", "kvf_attend_batch", rc);
		*app += (double)(t1 - t0);
		*att += (double)(bench_now_ns() - t1);
	}
	return 0;
}

/* run_one - run r: size r / 2, tier on when r is even */
static int run_one(struct decode_ctx *c, uint32_t r, struct run_bufs *b)
{
	const struct decode_args *a = c->a;
	struct run_figs *f = &c->run[r];
	uint64_t batch_token = c->token_bytes * a->batch; /* K+V a step adds */
	size_t qn = (size_t)a->batch * a->model.n_q_heads * a->model.head_dim;
	char path[4096];
	kvf_store *st = NULL;
	kvf_stats s0, s1;
	double att_sum = 0, attended = 0, sum = 0;
	uint64_t t0;
	int rc = -1;

	f->prompt = prompt_of(c, r / 2);
	f->ws_bytes = ws_of(c, r / 2);
	snprintf(path, sizeof(path), "%s/%s-%s", a->dir, size_name[r / 2],
		 r % 2 ? "off" : "on");
	if (open_store(c, path, r % 2 == 0, f->ws_bytes, &st, &f->direct_io) != 0)
		goto out;
	t0 = bench_now_ns();
	if (prefill(c, st, b, f->prompt) != 0)
		goto out;
	f->prefill_s = (double)(bench_now_ns() - t0) / 1e9;
	for (uint32_t i = 0; i < a->warmup; i++) {
		double x = 0, y = 0;

		if (step(c, st, b, i, f->prompt + i, &x, &y) != 0)
			goto out;
	}
	if (stats(st, &s0) != 0)
		goto out;
	for (uint32_t i = 0; i < a->steps; i++) {
		uint64_t pos = (uint64_t)f->prompt + a->warmup + i;

		b->app[i] = b->att[i] = 0;
		t0 = bench_now_ns();
		if (step(c, st, b, a->warmup + i, pos, &b->app[i], &b->att[i]) != 0)
			goto out;
		b->step[i] = (double)(bench_now_ns() - t0);
		sum += b->step[i];
		att_sum += b->att[i];
		attended += (double)(pos + 1) * (double)batch_token;
	}
	if (stats(st, &s1) != 0)
		goto out;
	memcpy(c->last_out[r], b->out, qn * sizeof(float));
	f->step_mean = sum / a->steps;
	f->step_med = bench_median(b->step, a->steps);
	f->append_med = bench_median(b->app, a->steps);
	f->attend_med = bench_median(b->att, a->steps);
	f->bytes_read = (double)(s1.bytes_read - s0.bytes_read) / a->steps;
	f->attend_bytes_read =
		(double)(s1.attend_bytes_read - s0.attend_bytes_read) / a->steps;
	f->attended = attended / a->steps;
	f->attend_gbs = att_sum > 0 ? attended / att_sum : 0;
	f->cache_hits = s1.cache_hits - s0.cache_hits;
	f->cache_misses = s1.cache_misses - s0.cache_misses;
	f->dram_peak = s1.dram_peak;
	f->dram_budget = s1.dram_budget;
	f->host_wa = s1.host_wa;
	rc = 0;
out:
	if (st != NULL) {
		kvf_status crc = kvf_close(st);

		if (crc != KVF_OK && rc == 0)
			rc = bench_fail("decode", "kvf_close", crc);
	}
	if (!a->keep)
		bench_remove_store(path);
	return rc;
}

/* ---- output --------------------------------------------------------------- */

static double mib(double bytes)
{
	return bytes / (1024.0 * 1024.0);
}

static double max_diff(const float *x, const float *y, size_t n)
{
	double m = 0;

	for (size_t i = 0; i < n; i++) {
		double d = fabs((double)x[i] - (double)y[i]);

		if (!(d <= m))
			m = isnan(d) ? INFINITY : d;
	}
	return m;
}

/* row - one line of the table: a label and a figure per run, with dec
 * decimals and "x" after it when ratio */
static void row(const char *label, int dec, int ratio, const double *v)
{
	printf("%-38s", label);
	for (uint32_t r = 0; r < N_RUNS; r++) {
		char cell[32];

		snprintf(cell, sizeof(cell), "%.*f%s", dec, v[r], ratio ? "x" : "");
		printf(" %14s", cell);
	}
	printf("\n");
}

/* ROW - row() of expr evaluated for each run r, with f its figures and b
 * the baselines of its size */
#define ROW(label, dec, ratio, expr)                                 \
	do {                                                         \
		double v_[N_RUNS];                                   \
		for (uint32_t r = 0; r < N_RUNS; r++) {              \
			const struct run_figs *f = &c->run[r];       \
			const struct base_figs *b = &c->base[r / 2]; \
			(void)f;                                     \
			(void)b;                                     \
			v_[r] = (expr);                              \
		}                                                    \
		row(label, dec, ratio, v_);                          \
	} while (0)

static void print_table(const struct decode_ctx *c)
{
	const struct decode_args *a = c->a;
	const kvf_model *m = &a->model;

	printf("kvbench decode: batch of %u sequences, %u layers, %u q heads / %u kv heads x %u dims f16\n"
	       "  (K+V %.1f KiB a token over the layers); %u threads; dram_budget %.1f MiB when on;\n"
	       "  %u decode steps timed after %u untimed; per step and layer: kvf_append of one token\n"
	       "  to each sequence, then kvf_attend_batch (dense)\n\n",
	       a->batch, m->n_layers, m->n_q_heads, m->n_kv_heads, m->head_dim,
	       (double)c->token_bytes / 1024, c->n_threads, mib((double)a->budget),
	       a->steps, a->warmup);
	printf("%-38s %14s %14s %14s %14s\n", "", "fits, on", "fits, off",
	       "larger, on", "larger, off");
	ROW("prompt tokens a sequence", 0, 0, (double)f->prompt);
	ROW("working set, K+V (MiB)", 1, 0, mib((double)f->ws_bytes));
	ROW("prefill and sync (s)", 2, 0, f->prefill_s);
	ROW("step latency, median (ms)", 2, 0, f->step_med / 1e6);
	ROW("step latency, mean (ms)", 2, 0, f->step_mean / 1e6);
	ROW("  appends of a step, median (ms)", 3, 0, f->append_med / 1e6);
	ROW("  attention of a step, median (ms)", 2, 0, f->attend_med / 1e6);
	ROW("bytes read from media a step (MiB)", 2, 0, mib(f->bytes_read));
	ROW("  of them by attention (MiB)", 2, 0, mib(f->attend_bytes_read));
	ROW("bytes attended a step (MiB)", 2, 0, mib(f->attended));
	ROW("attention throughput (GB/s)", 2, 0, f->attend_gbs);
	ROW("memory-read loop, same bytes (GB/s)", 2, 0, b->mem_gbs);
	ROW("  attention vs it (warm; >= 0.8x)", 2, 1, f->attend_gbs / b->mem_gbs);
	ROW("O_DIRECT sequential read (GB/s)", 2, 0, b->direct_gbs);
	ROW("  attention vs it (cold; >= 0.8x)", 2, 1, f->attend_gbs / b->direct_gbs);
	ROW("dram_budget in kvf_stats (MiB)", 1, 0, mib((double)f->dram_budget));
	ROW("cache hits over the timed steps", 0, 0, (double)f->cache_hits);
	ROW("cache misses over the timed steps", 0, 0, (double)f->cache_misses);
	ROW("DRAM peak (MiB)", 1, 0, mib((double)f->dram_peak));
	ROW("host write amplification", 3, 0, f->host_wa);
	printf("\n(\"larger\" is %ux the working set that fits.)  Outputs of the last step, tier on vs off:\n"
	       "max |difference| %.3g (fits), %.3g (larger); 0 expected (dense attention).\n",
	       a->scale, c->diff[0], c->diff[1]);
	if (!c->run[0].direct_io || !c->base[0].direct)
		printf("note: O_DIRECT was refused here (store %s, plain file %s): reads may come from the page cache\n",
		       c->run[0].direct_io ? "on" : "off", c->base[0].direct ? "on" : "off");
}

static void print_json(const struct decode_ctx *c)
{
	static const char *const run_name[N_RUNS] = { "fit_on", "fit_off", "large_on",
						      "large_off" };
	const struct decode_args *a = c->a;
	struct bench_json j = { .f = stdout };

	bench_json_begin(&j, NULL);
	bench_json_str(&j, "bench", "decode");
	bench_json_model(&j, &a->model);
	bench_json_u64(&j, "batch", a->batch);
	bench_json_u64(&j, "steps", a->steps);
	bench_json_u64(&j, "warmup", a->warmup);
	bench_json_u64(&j, "threads", c->n_threads);
	bench_json_u64(&j, "dram_budget", a->budget);
	bench_json_u64(&j, "scale", a->scale);
	for (uint32_t r = 0; r < N_RUNS; r++) {
		const struct run_figs *f = &c->run[r];
		const struct base_figs *b = &c->base[r / 2];

		bench_json_begin(&j, run_name[r]);
		bench_json_u64(&j, "tier_budget", f->dram_budget);
		bench_json_u64(&j, "prompt_tokens", f->prompt);
		bench_json_u64(&j, "working_set_bytes", f->ws_bytes);
		bench_json_double(&j, "prefill_s", f->prefill_s);
		bench_json_double(&j, "step_ms_median", f->step_med / 1e6);
		bench_json_double(&j, "step_ms_mean", f->step_mean / 1e6);
		bench_json_double(&j, "append_ms_median", f->append_med / 1e6);
		bench_json_double(&j, "attend_ms_median", f->attend_med / 1e6);
		bench_json_double(&j, "bytes_read_per_step", f->bytes_read);
		bench_json_double(&j, "attend_bytes_read_per_step", f->attend_bytes_read);
		bench_json_double(&j, "attended_bytes_per_step", f->attended);
		bench_json_double(&j, "attend_gbs", f->attend_gbs);
		bench_json_double(&j, "mem_read_gbs", b->mem_gbs);
		bench_json_double(&j, "vs_mem_read", f->attend_gbs / b->mem_gbs);
		bench_json_double(&j, "direct_read_gbs", b->direct_gbs);
		bench_json_double(&j, "vs_direct_read", f->attend_gbs / b->direct_gbs);
		bench_json_u64(&j, "cache_hits", f->cache_hits);
		bench_json_u64(&j, "cache_misses", f->cache_misses);
		bench_json_u64(&j, "dram_peak", f->dram_peak);
		bench_json_double(&j, "host_wa", f->host_wa);
		bench_json_u64(&j, "direct_io", (uint64_t)f->direct_io);
		bench_json_end(&j);
	}
	bench_json_double(&j, "max_diff_on_off_fit", c->diff[0]);
	bench_json_double(&j, "max_diff_on_off_large", c->diff[1]);
	bench_json_u64(&j, "plain_direct_io", (uint64_t)c->base[0].direct);
	bench_json_end(&j);
	printf("\n");
}

/* ---- main ----------------------------------------------------------------- */

static void usage(FILE *f)
{
	fprintf(f,
		"usage: kvbench decode [--dir DIR] [--batch N] [--steps N] [--warmup N]\n"
		"                      [--budget BYTES] [--fit BYTES] [--scale N]\n"
		"                      [--layers N] [--q-heads N] [--kv-heads N] [--head-dim N]\n"
		"                      [--threads N] [--json] [--keep]\n"
		"  --dir DIR        directory for the stores and the plain file\n"
		"                   (default ./kvbench-decode)\n"
		"  --batch N        sequences decoding together (default 4)\n"
		"  --steps N        timed decode steps (default 16)\n"
		"  --warmup N       untimed steps before them (default 2)\n"
		"  --budget BYTES   dram_budget with the tier on, K/M/G (default 64M)\n"
		"  --fit BYTES      the working set that fits (default budget / 2)\n"
		"  --scale N        the larger working set, times --fit (default 4)\n"
		"  --layers N       layers (default 4)\n"
		"  --q-heads N      query heads (default 32; a multiple of --kv-heads)\n"
		"  --kv-heads N     kv heads (default 8)\n"
		"  --head-dim N     elements per head, f16, a multiple of 8 (default 128)\n"
		"  --threads N      threads the store computes with, and the memory\n"
		"                   loop's (default: online CPUs)\n"
		"  --json           one JSON object instead of a table\n"
		"  --keep           leave the stores in DIR\n");
}

static int parse_args(int argc, char **argv, struct decode_args *a)
{
	const struct bench_opt opts[] = {
		BENCH_STR("--dir", a->dir),
		BENCH_U32("--batch", a->batch, 1, 1024),
		BENCH_U32("--steps", a->steps, 1, MAX_STEPS),
		BENCH_U32("--warmup", a->warmup, 0, MAX_STEPS),
		BENCH_U64("--budget", a->budget, 1u << 20, 1ull << 40),
		BENCH_U64("--fit", a->fit_bytes, 1u << 16, 1ull << 40),
		BENCH_U32("--scale", a->scale, 1, 64),
		BENCH_U32("--layers", a->model.n_layers, 1, 1024),
		BENCH_U32("--q-heads", a->model.n_q_heads, 1, 1024),
		BENCH_U32("--kv-heads", a->model.n_kv_heads, 1, 1024),
		BENCH_U32("--head-dim", a->model.head_dim, 8, 512),
		BENCH_U32("--threads", a->n_threads, 1, MAX_THREADS),
		BENCH_BOOL("--json", a->json),
		BENCH_BOOL("--keep", a->keep),
		{ 0 }
	};
	int rc;

	*a = (struct decode_args){ .dir = "kvbench-decode",
				   .model = { .n_layers = 4,
					      .n_q_heads = 32,
					      .n_kv_heads = 8,
					      .head_dim = 128,
					      .dtype = KVF_DTYPE_F16 },
				   .batch = 4,
				   .steps = 16,
				   .warmup = 2,
				   .budget = 64ull << 20,
				   .scale = 4 };
	rc = bench_parse_opts("decode", usage, opts, argc, argv);
	if (rc != 0)
		return rc;
	if (bench_check_heads("decode", &a->model) != 0)
		return 2;
	if (a->model.head_dim % 8 != 0)
		return bench_usage_error("decode", "--head-dim %u is not a multiple of 8",
					 a->model.head_dim);
	if (a->fit_bytes == 0)
		a->fit_bytes = a->budget / 2;
	return 0;
}

int bench_decode_main(int argc, char **argv)
{
	struct decode_args a;
	struct decode_ctx *c = NULL;
	struct run_bufs b = { 0 };
	size_t qn, row;
	uint32_t max_rows;
	int rc, made = 0;

	if ((rc = parse_args(argc, argv, &a)) != 0)
		return rc == 1 ? 0 : rc;
	rc = 1;
	c = kvf_calloc(1, sizeof(*c));
	if (c == NULL)
		goto oom;
	c->a = &a;
	c->n_threads = a.n_threads ? a.n_threads : (uint32_t)sysconf(_SC_NPROCESSORS_ONLN);
	if (c->n_threads < 1)
		c->n_threads = 1;
	if (c->n_threads > MAX_THREADS)
		c->n_threads = MAX_THREADS;
	row = (size_t)a.model.n_kv_heads * a.model.head_dim;
	c->token_bytes = (uint64_t)a.model.n_layers * 2 * row * 2;
	for (uint32_t i = 0; i < 65536; i++)
		c->noise[i] = kvf_f32_to_f16((float)((double)(bench_mix64(i) >> 11) /
						     9007199254740992.0 * 2 - 1));
	qn = (size_t)a.batch * a.model.n_q_heads * a.model.head_dim;
	max_rows = a.batch > PREFILL_CHUNK ? a.batch : PREFILL_CHUNK;
	b.k = kvf_malloc((size_t)max_rows * row * 2);
	b.v = kvf_malloc((size_t)max_rows * row * 2);
	b.q = kvf_malloc(qn * sizeof(float));
	b.out = kvf_malloc(qn * sizeof(float));
	b.ids = kvf_malloc(a.batch * sizeof(uint64_t));
	b.step = kvf_malloc(3 * (size_t)a.steps * sizeof(double));
	for (uint32_t r = 0; r < N_RUNS; r++)
		if ((c->last_out[r] = kvf_calloc(qn, sizeof(float))) == NULL)
			goto oom;
	if (!b.k || !b.v || !b.q || !b.out || !b.ids || !b.step)
		goto oom;
	b.app = b.step + a.steps;
	b.att = b.app + a.steps;
	for (uint32_t s = 0; s < a.batch; s++)
		b.ids[s] = s + 1;
	if (bench_make_dir("decode", a.dir, &made) != 0)
		goto out;
	for (uint32_t r = 0; r < N_RUNS; r++) {
		if (r % 2 == 0 && baselines(c, ws_of(c, r / 2), &c->base[r / 2]) != 0)
			goto out;
		if (run_one(c, r, &b) != 0)
			goto out;
	}
	for (uint32_t i = 0; i < 2; i++)
		c->diff[i] = max_diff(c->last_out[2 * i], c->last_out[2 * i + 1], qn);
	if (a.json)
		print_json(c);
	else
		print_table(c);
	rc = 0;
	goto out;
oom:
	fprintf(stderr, "kvbench decode: out of memory\n");
out:
	if (made && !a.keep)
		rmdir(a.dir);
	for (uint32_t r = 0; c && r < N_RUNS; r++)
		kvf_free(c->last_out[r]);
	kvf_free(b.k);
	kvf_free(b.v);
	kvf_free(b.q);
	kvf_free(b.out);
	kvf_free(b.ids);
	kvf_free(b.step);
	kvf_free(c);
	return rc;
}
