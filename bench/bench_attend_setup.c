/*
 * bench_attend_setup.c - `kvbench attend`: the data (every row made again
 * from a hash, heavy hitters placed by layer), the two stores and the
 * plain file built from it, and the untimed checks: rows read back, a
 * double-precision reference, the cosine of SparF to dense.  A file of
 * its own: nothing here is timed, and the reference must make the same
 * rows the prefill appended.
 */
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "api/alloc.h"
#include "bench/bench_attend_int.h"
#include "bench/bench_common.h"
#include "compute/half.h"
#include "kvflash.h"

/* ---- data ---------------------------------------------------------------- */

/* urand - uniform in [-1, 1) from a hash */
static float urand(uint64_t x)
{
	return (float)((double)(bench_mix64(x) >> 11) / 9007199254740992.0 * 2 - 1);
}

/* align_dim0 - the first of the ALIGN_DIMS dims q points along for KV head
 * h of a layer: one K^T dim group (8 dims) */
static uint32_t align_dim0(const struct attend_ctx *c, uint32_t layer,
			   uint32_t h)
{
	return (h * 3 + layer) % (c->a->model.head_dim / ALIGN_DIMS) *
	       ALIGN_DIMS;
}

/* hh_weight - the heavy-hitter strength of token t of KV head h of a
 * layer; 0 for an ordinary token */
static float hh_weight(uint32_t layer, uint32_t h, uint64_t t)
{
	uint64_t base = ((uint64_t)layer << 56) ^ ((uint64_t)h << 40);
	uint64_t start, i = t % RUN_BLOCK;

	if (layer % 2 == 0)
		return bench_mix64(base ^ t ^ 0x68687431ull) % SCATTER_EVERY == 0 ?
			       1.0f :
			       0.0f;
	start = bench_mix64(base ^ (t / RUN_BLOCK) ^ 0x72756e73ull) %
		(RUN_BLOCK - RUN_TOKENS);
	if (i < start || i >= start + RUN_TOKENS)
		return 0.0f;
	return 0.5f + sinf(3.14159265f * ((float)(i - start) + 0.5f) /
			   (float)RUN_TOKENS);
}

/* row_fill - the row (head_dim f16 values) of K (kind 0) or V (kind 1) of
 * token t, KV head h, layer layer */
static void row_fill(const struct attend_ctx *c, uint32_t layer, int kind,
		     uint32_t h, uint64_t t, uint16_t *row)
{
	uint32_t D = c->a->model.head_dim;
	const uint16_t *tab = kind ? c->noise_v : c->noise_k;
	uint64_t s = bench_mix64(((uint64_t)layer << 56) ^ ((uint64_t)kind << 55) ^
			   ((uint64_t)h << 40) ^ t);
	float w;

	for (uint32_t d = 0; d < D; d += 4) {
		uint64_t r = bench_mix64(s + d);

		row[d] = tab[r & 0xffff];
		row[d + 1] = tab[(r >> 16) & 0xffff];
		row[d + 2] = tab[(r >> 32) & 0xffff];
		row[d + 3] = tab[r >> 48];
	}
	if (kind == 0 && (w = hh_weight(layer, h, t)) > 0) {
		uint16_t x = kvf_f32_to_f16(HH_K * w);
		uint32_t d0 = align_dim0(c, layer, h);

		for (uint32_t e = 0; e < ALIGN_DIMS; e++)
			row[d0 + e] = x;
	}
}

/* q_fill - q of a layer: each query head points along its KV head's
 * aligned dims (4 +- 0.2), with small noise (+-0.1) elsewhere */
static void q_fill(const struct attend_ctx *c, uint32_t layer, float *q)
{
	const kvf_model *m = &c->a->model;
	uint32_t D = m->head_dim, group = m->n_q_heads / m->n_kv_heads;

	for (uint32_t qh = 0; qh < m->n_q_heads; qh++) {
		uint32_t d0 = align_dim0(c, layer, qh / group);

		for (uint32_t d = 0; d < D; d++) {
			float u =
				urand(((uint64_t)layer << 48) ^
				      ((uint64_t)qh << 24) ^ d ^ 0x71ull << 56);

			q[(size_t)qh * D + d] = d >= d0 && d < d0 + ALIGN_DIMS ?
							4.0f + 0.2f * u :
							0.1f * u;
		}
	}
}

/* ---- building the context ------------------------------------------------ */

/* prefill - append both layers to both stores, PREFILL_CHUNK tokens per
 * kvf_append, then sync both */
static int prefill(struct attend_ctx *c)
{
	const kvf_model *m = &c->a->model;
	uint32_t H = m->n_kv_heads, D = m->head_dim;
	size_t tok_elts = (size_t)H * D;
	uint16_t *k = malloc(PREFILL_CHUNK * tok_elts * sizeof(uint16_t));
	uint16_t *v = malloc(PREFILL_CHUNK * tok_elts * sizeof(uint16_t));
	kvf_status rc = KVF_OK;
	int ret = -1;

	if (k == NULL || v == NULL) {
		fprintf(stderr, "kvbench attend: out of memory\n");
		goto out;
	}
	if ((rc = kvf_seq_create(c->file, SEQ_ID)) != KVF_OK ||
	    (rc = kvf_seq_create(c->mem, SEQ_ID)) != KVF_OK) {
		bench_fail("attend", "kvf_seq_create", rc);
		goto out;
	}
	for (uint32_t l = 0; l < N_LAYERS; l++)
		for (uint32_t t0 = 0; t0 < c->a->n_tokens;
		     t0 += PREFILL_CHUNK) {
			uint32_t n = c->a->n_tokens - t0 < PREFILL_CHUNK ?
					     c->a->n_tokens - t0 :
					     PREFILL_CHUNK;

			for (uint32_t i = 0; i < n; i++)
				for (uint32_t h = 0; h < H; h++) {
					size_t at = (size_t)i * tok_elts +
						    (size_t)h * D;

					row_fill(c, l, 0, h, t0 + i, k + at);
					row_fill(c, l, 1, h, t0 + i, v + at);
				}
			if ((rc = kvf_append(c->file, SEQ_ID, l, n, k, v)) !=
			    KVF_OK) {
				bench_fail("attend",
					   "kvf_append (file store)", rc);
				goto out;
			}
			if ((rc = kvf_append(c->mem, SEQ_ID, l, n, k, v)) !=
			    KVF_OK) {
				bench_fail("attend",
					   "kvf_append (memory store)", rc);
				goto out;
			}
		}
	if ((rc = kvf_sync(c->file)) != KVF_OK ||
	    (rc = kvf_sync(c->mem)) != KVF_OK) {
		bench_fail("attend", "kvf_sync", rc);
		goto out;
	}
	ret = 0;
out:
	free(k);
	free(v);
	return ret;
}

/* plain_create - the plain file: plain_file_bytes of noise written with
 * O_DIRECT (where the file system allows it, as the store does), synced */
static int plain_create(struct attend_ctx *c)
{
	uint64_t done = 0;
	int fd;

	unlink(c->plain_path);
	fd = open(c->plain_path, O_RDWR | O_CREAT | O_TRUNC | O_DIRECT, 0644);
	c->plain_direct = fd >= 0;
	if (fd < 0)
		fd = open(c->plain_path, O_RDWR | O_CREAT | O_TRUNC, 0644);
	if (fd < 0)
		goto err;
	for (size_t i = 0; i < PLAIN_CHUNK / 2; i++)
		((uint16_t *)(void *)c->chunk)[i] =
			c->noise_v[bench_mix64(i) & 0xffff];
	while (done < c->plain_file_bytes) {
		if (pwrite(fd, c->chunk, PLAIN_CHUNK, (off_t)done) !=
		    (ssize_t)PLAIN_CHUNK)
			goto err;
		done += PLAIN_CHUNK;
	}
	if (fdatasync(fd) != 0)
		goto err;
	close(fd);
	return 0;
err:
	fprintf(stderr, "kvbench attend: %s: %s\n", c->plain_path,
		strerror(errno));
	if (fd >= 0)
		close(fd);
	return -1;
}

int attend_setup(struct attend_ctx *c)
{
	const struct attend_args *a = c->a;
	const kvf_model *m = &a->model;
	size_t plen = strlen(a->dir) + 16,
	       qe = (size_t)m->n_q_heads * m->head_dim;
	uint64_t seg = 1u << 20, need;
	kvf_store_info info;
	kvf_options mo;
	kvf_status rc;

	c->n_threads = a->n_threads ? a->n_threads :
				      (uint32_t)sysconf(_SC_NPROCESSORS_ONLN);
	if (c->n_threads < 1)
		c->n_threads = 1;
	if (c->n_threads > MAX_THREADS)
		c->n_threads = MAX_THREADS;
	c->top_r = a->top_r ? a->top_r : m->head_dim / 8;
	c->top_k = a->top_k ? a->top_k : (a->n_tokens + 7) / 8;
	c->kv_bytes = 2ull * a->n_tokens * m->n_kv_heads * m->head_dim * 2;
	c->plain_file_bytes =
		(c->kv_bytes + PLAIN_CHUNK - 1) / PLAIN_CHUNK * PLAIN_CHUNK;
	c->mem_dir = malloc(plen);
	c->file_dir = malloc(plen);
	c->plain_path = malloc(plen);
	c->noise_k = malloc(65536 * sizeof(uint16_t));
	c->noise_v = malloc(65536 * sizeof(uint16_t));
	c->out = malloc(qe * sizeof(float));
	c->membuf = kvf_aligned_alloc(4096, c->kv_bytes);
	c->chunk = kvf_aligned_alloc(4096, PLAIN_CHUNK);
	for (uint32_t l = 0; l < N_LAYERS; l++) {
		c->q[l] = malloc(qe * sizeof(float));
		c->dense[l] = malloc(qe * sizeof(float));
		if (!c->q[l] || !c->dense[l])
			goto oom;
	}
	if (!c->mem_dir || !c->file_dir || !c->plain_path || !c->noise_k ||
	    !c->noise_v || !c->out || !c->membuf || !c->chunk)
		goto oom;
	snprintf(c->mem_dir, plen, "%s/mem", a->dir);
	snprintf(c->file_dir, plen, "%s/file", a->dir);
	snprintf(c->plain_path, plen, "%s/plain.dat", a->dir);
	for (uint32_t i = 0; i < 65536; i++) {
		c->noise_k[i] =
			kvf_f32_to_f16(0.5f * urand(i ^ 0x6b00000000ull));
		c->noise_v[i] = kvf_f32_to_f16(urand(i ^ 0x7600000000ull));
	}
	for (uint32_t l = 0; l < N_LAYERS; l++)
		q_fill(c, l, c->q[l]);
	/* the plain read's buffer holds the same kind of bytes, all touched */
	for (uint64_t i = 0; i < c->kv_bytes / 8; i++)
		c->membuf[i] = bench_mix64(i);
	if (bench_store_check(c->mem_dir) != 0 ||
	    bench_store_check(c->file_dir) != 0 ||
	    bench_make_dir("attend", a->dir, &c->made_dir) != 0)
		return -1;
	c->claimed = 1; /* from here the run's files are its own */
	if (bench_remove_store(c->mem_dir) != 0 ||
	    bench_remove_store(c->file_dir) != 0)
		return -1;

	/* each store: K+V and K^T (as many bytes as K) of both layers,
	 * summaries and slack: +25%, and some whole segments */
	need = N_LAYERS * c->kv_bytes / 2 * 3 / 4 * 5 + 32 * seg;
	kvf_options_init(&c->opts, m);
	c->opts.kt_pages = 1;
	c->opts.n_threads = c->n_threads;
	c->opts.segment_size = seg;
	c->opts.capacity_bytes = (need + seg - 1) / seg * seg;
	/* cold means from the media: no memory tier (kvbench decode measures
	 * the tier) */
	c->opts.dram_budget = 0;
	rc = bench_open_direct(c->file_dir, &c->opts, &c->file, &c->direct_io);
	if (rc != KVF_OK)
		return bench_fail("attend", "kvf_open (file store)", rc);
	mo = c->opts;
	mo.media = KVF_MEDIA_MEMORY;
	mo.direct_io = 0;
	if ((rc = kvf_open(c->mem_dir, &mo, &c->mem)) != KVF_OK)
		return bench_fail("attend", "kvf_open (memory store)", rc);
	info.struct_size = sizeof(info);
	if ((rc = kvf_store_info_get(c->file, &info)) != KVF_OK)
		return bench_fail("attend", "kvf_store_info_get", rc);
	c->group_tokens = info.group_tokens;
	if (prefill(c) != 0 || plain_create(c) != 0)
		return -1;
	return 0;
oom:
	fprintf(stderr, "kvbench attend: out of memory\n");
	return -1;
}

void attend_teardown(struct attend_ctx *c)
{
	kvf_close(c->file);
	kvf_close(c->mem);
	if (c->claimed && !c->a->keep && c->file_dir) {
		bench_remove_store(c->file_dir);
		bench_remove_store(c->mem_dir);
		unlink(c->plain_path);
		if (c->made_dir)
			rmdir(c->a->dir);
	}
	for (uint32_t l = 0; l < N_LAYERS; l++) {
		free(c->q[l]);
		free(c->dense[l]);
	}
	free(c->mem_dir);
	free(c->file_dir);
	free(c->plain_path);
	free(c->noise_k);
	free(c->noise_v);
	free(c->out);
	kvf_free(c->membuf);
	kvf_free(c->chunk);
}

/* ---- checks -------------------------------------------------------------- */

double attend_max_diff(const float *a, const float *b, size_t n)
{
	double m = 0;

	for (size_t i = 0; i < n; i++) {
		double d = fabs((double)a[i] - (double)b[i]);

		if (!(d <= m)) /* NaN counts as the largest */
			m = isnan(d) ? INFINITY : d;
	}
	return m;
}

static double cosine(const float *a, const float *b, size_t n)
{
	double ab = 0, aa = 0, bb = 0;

	for (size_t i = 0; i < n; i++) {
		ab += (double)a[i] * b[i];
		aa += (double)a[i] * a[i];
		bb += (double)b[i] * b[i];
	}
	return ab / sqrt(aa * bb + 1e-300);
}

/* attend_sparf_cosine - min and mean over the q heads of cos(SparF, dense) */
void attend_sparf_cosine(const struct attend_ctx *c, const float *sparse,
			 const float *dense, struct sparf_figs *f)
{
	uint32_t D = c->a->model.head_dim, Q = c->a->model.n_q_heads;

	f->cos_min = 1;
	f->cos_mean = 0;
	for (uint32_t h = 0; h < Q; h++) {
		double x = cosine(sparse + (size_t)h * D, dense + (size_t)h * D,
				  D);

		f->cos_min = x < f->cos_min ? x : f->cos_min;
		f->cos_mean += x / Q;
	}
}

/* ref_head - double-precision attention of the query heads of KV head h
 * over rows k, v (f16) into out; the attention mass on heavy hitters of
 * layer `layer` is added to *hh */
static void ref_head(const struct attend_ctx *c, uint32_t layer, uint32_t h,
		     const uint16_t *k, const uint16_t *v, double *s,
		     double *acc, float *out, double *hh)
{
	const kvf_model *m = &c->a->model;
	uint32_t D = m->head_dim, g = m->n_q_heads / m->n_kv_heads;
	uint64_t n = c->a->n_tokens;
	double scale = 1.0 / sqrt((double)D);

	for (uint32_t j = 0; j < g; j++) {
		const float *q = c->q[layer] + ((size_t)h * g + j) * D;
		double mx = -INFINITY, l = 0, mass = 0;

		for (uint64_t t = 0; t < n; t++) {
			double x = 0;

			for (uint32_t d = 0; d < D; d++)
				x += (double)q[d] *
				     kvf_f16_to_f32(k[t * D + d]);
			s[t] = x * scale;
			mx = s[t] > mx ? s[t] : mx;
		}
		memset(acc, 0, D * sizeof(double));
		for (uint64_t t = 0; t < n; t++) {
			double p = exp(s[t] - mx);

			l += p;
			if (hh_weight(layer, h, t) > 0)
				mass += p;
			for (uint32_t d = 0; d < D; d++)
				acc[d] += p * kvf_f16_to_f32(v[t * D + d]);
		}
		for (uint32_t d = 0; d < D; d++)
			out[((size_t)h * g + j) * D + d] = (float)(acc[d] / l);
		*hh += mass / l / m->n_q_heads;
	}
}

/* attend_check_layer - untimed: read every head of a layer back with kvf_read,
 * compare each row with the row appended, and compute the double
 * reference; its max |difference| to dense kvf_attend (c->dense[layer])
 * goes to c->diff_ref, the heavy-hitter mass to the layer's figures */
int attend_check_layer(struct attend_ctx *c, struct flex_worker *w,
		       uint32_t layer)
{
	const kvf_model *m = &c->a->model;
	uint32_t D = m->head_dim;
	uint64_t n = c->a->n_tokens;
	double *s = malloc(n * sizeof(double)),
	       *acc = malloc(D * sizeof(double));
	uint16_t *row = malloc(D * sizeof(uint16_t));
	double hh = 0, d;
	int ret = -1;

	if (!s || !acc || !row) {
		fprintf(stderr, "kvbench attend: out of memory\n");
		goto out;
	}
	for (uint32_t h = 0; h < m->n_kv_heads; h++) {
		kvf_status rc =
			kvf_read(c->file, SEQ_ID, layer, h, 0, n, w->k, w->v);

		if (rc != KVF_OK) {
			bench_fail("attend", "kvf_read", rc);
			goto out;
		}
		for (uint64_t t = 0; t < n; t++)
			for (int kind = 0; kind < 2; kind++) {
				const unsigned char *got = kind ? w->v : w->k;

				row_fill(c, layer, kind, h, t, row);
				if (memcmp(got + t * D * 2, row,
					   (size_t)D * 2)) {
					fprintf(stderr,
						"kvbench attend: layer %u head %u %s token %llu read back wrong data\n",
						layer, h, kind ? "V" : "K",
						(unsigned long long)t);
					goto out;
				}
				c->verified_rows++;
			}
		ref_head(c, layer, h, (const uint16_t *)(void *)w->k,
			 (const uint16_t *)(void *)w->v, s, acc, c->out, &hh);
	}
	d = attend_max_diff(c->out, c->dense[layer], (size_t)m->n_q_heads * D);
	c->diff_ref = d > c->diff_ref ? d : c->diff_ref;
	c->fig[layer].hh_mass = hh;
	ret = 0;
out:
	free(s);
	free(acc);
	free(row);
	return ret;
}
