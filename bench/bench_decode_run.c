/*
 * bench_decode_run.c - `kvbench decode`: the timed side: the data (noise
 * from a hash of sequence, layer, kind, token and element), the baselines
 * (the plain memory-read loop on threads, the plain O_DIRECT file read),
 * and one run: a fresh store, the prefill, the untimed and the timed
 * decode steps and their figures.  See bench_decode.c for what is
 * measured.
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
#include "bench/bench_decode_int.h"
#include "compute/half.h"
#include "kvflash.h"

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
uint64_t decode_ws_of(const struct decode_ctx *c, uint32_t i)
{
	return ((uint64_t)prompt_of(c, i) + c->a->warmup + c->a->steps) *
	       c->token_bytes * c->a->batch;
}

/* ---- baselines ------------------------------------------------------------ */

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

/* baselines - both plain reads of bytes, BASE_REPEAT times each, medians */
int decode_baselines(struct decode_ctx *c, uint64_t bytes, struct base_figs *b)
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
		mem[i] = bench_read_words("decode", buf, rounded, c->n_threads, &c->sink);
		dir[i] = bench_read_file("decode", path, chunk, PLAIN_CHUNK, rounded, b->direct, &c->sink);
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
	/* the data, summaries and padding, and room to spare */
	bench_store_options(&o, &c->a->model, 0, seg,
			    (ws / 2 * 3 + 64 * seg + seg - 1) / seg * seg);
	o.n_threads = c->n_threads;
	o.dram_budget = tier_on ? c->a->budget : 0;
	rc = bench_open_direct(path, &o, st, direct);
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
int decode_run_one(struct decode_ctx *c, uint32_t r, struct run_bufs *b)
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
	f->ws_bytes = decode_ws_of(c, r / 2);
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

