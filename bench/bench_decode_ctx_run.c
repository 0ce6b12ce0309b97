/*
 * bench_decode_ctx_run.c - `kvbench decode --context`: one context length
 * run through every system: the data (noise from a hash of layer, kind,
 * KV head, token and element), the in-memory arrays and the plain file,
 * the store's build and its cold reopen, the baselines' attention on
 * threads and FlexGen's page tails, and the check of every output against
 * dense kvf_attend's.  See bench_decode_ctx.c for what is measured.
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
#include "bench/bench_decode_ctx_int.h"
#include "compute/kernels.h"
#include "kvflash.h"

#define PAGE 4096u     /* the plain file's O_DIRECT unit */
#define SEQ_ID 1u      /* the store's one sequence */

/* The systems, in the order they run at each context (the first is the
 * reference the others are checked against). */
struct ctx_system ctx_systems[CTX_SYSTEMS_MAX] = {
	{ "kvflash_dense", "kvflash, dense", CTX_KVFLASH, 0, KVF_CODEC_NONE },
	{ "kvflash_sparf", "kvflash, SparF", CTX_KVFLASH, 1, KVF_CODEC_NONE },
	{ "in_memory", "in-memory cache", CTX_MEMORY, 0, KVF_CODEC_NONE },
	{ "flexgen", "FlexGen-style reader", CTX_FLEXGEN, 0, KVF_CODEC_NONE },
};
uint32_t ctx_n_systems = 4;

void decode_ctx_add_codec(kvf_codec c)
{
	static const struct ctx_system rows[] = {
		[KVF_CODEC_FP8] = { "kvflash_fp8", "kvflash, dense, fp8", CTX_KVFLASH, 0,
				    KVF_CODEC_FP8 },
		[KVF_CODEC_INT8] = { "kvflash_int8", "kvflash, dense, int8", CTX_KVFLASH, 0,
				     KVF_CODEC_INT8 },
		[KVF_CODEC_INT4] = { "kvflash_int4", "kvflash, dense, int4", CTX_KVFLASH, 0,
				     KVF_CODEC_INT4 },
	};

	ctx_systems[ctx_n_systems++] = rows[c];
}

uint64_t decode_ctx_kv_bytes(const struct ctx_args *a, uint64_t tokens)
{
	return tokens * a->model.n_layers * 2ull * a->model.n_kv_heads *
	       a->model.head_dim * 2ull;
}

/* ---- data ----------------------------------------------------------------- */

/* fill_row - row of (layer, kind, head, token): head_dim f16 values */
static void fill_row(const struct ctx *c, uint16_t *dst, uint32_t layer,
		     uint32_t kind, uint32_t head, uint64_t token)
{
	uint64_t key = bench_mix64((((uint64_t)layer * 2 + kind) << 20) + head + 1);
	uint64_t base = bench_mix64(key ^ token);
	uint32_t d = c->a->model.head_dim;

	for (uint32_t i = 0; i < d; i += 4) {
		uint64_t h = bench_mix64(base + i);

		for (uint32_t j = 0; j < 4 && i + j < d; j++)
			dst[i + j] = c->noise[(h >> (16 * j)) & 0xffff];
	}
}

/* fill_q - the query of every head for (step, layer), in [-2, 2) */
static void fill_q(struct ctx *c, uint32_t step, uint32_t layer)
{
	for (size_t i = 0; i < c->qn; i++)
		c->q[i] = (float)((double)(bench_mix64(((uint64_t)step << 40) ^
						       ((uint64_t)layer << 32) ^ i) >> 11) /
				  9007199254740992.0 * 4 - 2);
}

/* fill_token - the rows of token pos of layer into tok_k, tok_v */
static void fill_token(struct ctx *c, uint32_t layer, uint64_t pos)
{
	size_t d = c->a->model.head_dim;

	for (uint32_t h = 0; h < c->a->model.n_kv_heads; h++) {
		fill_row(c, c->tok_k + h * d, layer, 0, h, pos);
		fill_row(c, c->tok_v + h * d, layer, 1, h, pos);
	}
}

/* region_of - the array of (layer, kind, head) in mem and the file */
static size_t region_of(const struct ctx *c, uint32_t layer, uint32_t kind,
			uint32_t head)
{
	return ((size_t)layer * 2 + kind) * c->a->model.n_kv_heads + head;
}

/* fill_mem - the prompt's rows into the in-memory arrays */
static void fill_mem(struct ctx *c)
{
	const kvf_model *m = &c->a->model;

	for (uint32_t l = 0; l < m->n_layers; l++)
		for (uint32_t k = 0; k < 2; k++)
			for (uint32_t h = 0; h < m->n_kv_heads; h++) {
				unsigned char *r = c->mem + region_of(c, l, k, h) * c->region;

				for (uint64_t t = 0; t < c->n; t++)
					fill_row(c, (uint16_t *)(void *)(r + t * c->row), l, k, h, t);
			}
}

/* ---- checking ------------------------------------------------------------- */

/* check_out - c->out of step i, layer l: the reference for dense, else
 * compared with it into f */
static void check_out(struct ctx *c, uint32_t sys, uint32_t i, uint32_t l,
		      struct ctx_figs *f)
{
	const kvf_model *m = &c->a->model;
	float *ref = c->ref + ((size_t)i * m->n_layers + l) * c->qn;

	if (sys == CTX_DENSE) {
		memcpy(ref, c->out, c->qn * sizeof(float));
		return;
	}
	for (uint32_t h = 0; h < m->n_q_heads; h++) {
		const float *x = c->out + (size_t)h * m->head_dim;
		const float *y = ref + (size_t)h * m->head_dim;
		double xy = 0, xx = 0, yy = 0, cosv;

		for (uint32_t j = 0; j < m->head_dim; j++) {
			double d = fabs((double)x[j] - (double)y[j]);

			if (!(d <= f->max_err))
				f->max_err = isnan(d) ? INFINITY : d;
			xy += (double)x[j] * y[j];
			xx += (double)x[j] * x[j];
			yy += (double)y[j] * y[j];
		}
		cosv = xx > 0 && yy > 0 ? xy / sqrt(xx * yy) : (xx == yy ? 1 : 0);
		if (!(cosv >= f->min_cos))
			f->min_cos = isnan(cosv) ? -1 : cosv;
		c->cos_sum += cosv;
		c->cos_n++;
	}
}

/* ---- the baselines' attention --------------------------------------------- */

/* fg_load - FlexGen: head h's K or V region of layer with len tokens into
 * buf: the whole pages from the file, the page being filled from its tail;
 * bytes read added to w->bytes; 0, or -1 with w->err set */
static int fg_load(struct ctx_worker *w, unsigned char *buf, size_t reg,
		   uint64_t len)
{
	struct ctx *c = w->c;
	size_t end = (size_t)len * c->row, full = end / PAGE * PAGE, done = 0;
	off_t off = (off_t)(reg * c->region);

	while (done < full) {
		ssize_t n = pread(c->fd, buf + done, full - done, off + (off_t)done);

		if (n <= 0) {
			w->err = n < 0 ? errno : EIO;
			return -1;
		}
		done += (size_t)n;
	}
	w->bytes += full;
	memcpy(buf + full, c->tail + reg * 2 * PAGE, end - full);
	return 0;
}

/* worker_head - attention of KV head h of layer over len tokens into
 * c->out, from DRAM (in-memory) or the file (FlexGen) */
static int worker_head(struct ctx_worker *w, enum ctx_kind kind,
		       uint32_t layer, uint64_t len, uint32_t h)
{
	struct ctx *c = w->c;
	const kvf_model *m = &c->a->model;
	uint32_t d = m->head_dim, g = m->n_q_heads / m->n_kv_heads;
	size_t rk = region_of(c, layer, 0, h), rv = region_of(c, layer, 1, h);
	const float *q = c->q + (size_t)h * g * d;
	float scale = 1.0f / sqrtf((float)d);
	const void *k = c->mem + rk * c->region, *v = c->mem + rv * c->region;
	struct kvc_attn_state st;

	if (kind == CTX_FLEXGEN) {
		if (fg_load(w, w->k, rk, len) != 0 || fg_load(w, w->v, rv, len) != 0)
			return -1;
		k = w->k;
		v = w->v;
	}
	for (size_t j = 0; j < (size_t)g * d; j++)
		w->qs[j] = q[j] * scale;
	kvc_attn_state_init(&st, g, d, w->state);
	kvc_kernels()->attn_fold(&st, w->qs, k, v, len, m->dtype, NULL, NULL, 0);
	kvc_attn_finish(&st, c->out + (size_t)h * g * d, NULL);
	return 0;
}

struct worker_call {
	struct ctx_worker *w;
	enum ctx_kind kind;
	uint32_t layer;
	uint64_t len;
};

static void *worker_run(void *arg)
{
	struct worker_call *wc = arg;
	struct ctx_worker *w = wc->w;

	for (uint32_t h = w->first; h < w->c->a->model.n_kv_heads; h += w->c->n_threads)
		if (worker_head(w, wc->kind, wc->layer, wc->len, h) != 0)
			break;
	return NULL;
}

/* base_attend - the attention of layer over len tokens into c->out on
 * n_threads threads (the caller's is the first); *bytes gets what
 * FlexGen read; 0, or -1 with a message printed */
static int base_attend(struct ctx *c, enum ctx_kind kind, uint32_t layer,
		       uint64_t len, uint64_t *bytes)
{
	pthread_t tid[CTX_MAX_THREADS];
	struct worker_call wc[CTX_MAX_THREADS];
	uint32_t started = 1;
	int rc = 0;

	for (uint32_t i = 0; i < c->n_threads; i++) {
		c->w[i].bytes = 0;
		c->w[i].err = 0;
		wc[i] = (struct worker_call){ &c->w[i], kind, layer, len };
	}
	for (uint32_t i = 1; i < c->n_threads; i++, started++)
		if (pthread_create(&tid[i], NULL, worker_run, &wc[i]) != 0)
			break;
	worker_run(&wc[0]);
	for (uint32_t i = 1; i < started; i++)
		pthread_join(tid[i], NULL);
	if (started < c->n_threads) {
		fprintf(stderr, "kvbench decode: pthread_create failed\n");
		rc = -1;
	}
	for (uint32_t i = 0; i < started; i++) {
		*bytes += c->w[i].bytes;
		if (c->w[i].err && rc == 0) {
			fprintf(stderr, "kvbench decode: reading %s: %s\n",
				c->plain_path, strerror(c->w[i].err));
			rc = -1;
		}
	}
	return rc;
}

/* base_append - token pos of layer (tok_k, tok_v) into the in-memory
 * arrays, or FlexGen's tails, whose filled pages go to the file */
static int base_append(struct ctx *c, enum ctx_kind kind, uint32_t layer,
		       uint64_t pos)
{
	const kvf_model *m = &c->a->model;
	size_t off = (size_t)pos * c->row;

	for (uint32_t kind_kv = 0; kind_kv < 2; kind_kv++)
		for (uint32_t h = 0; h < m->n_kv_heads; h++) {
			size_t reg = region_of(c, layer, kind_kv, h);
			const uint16_t *src = (kind_kv ? c->tok_v : c->tok_k) +
					      (size_t)h * m->head_dim;
			unsigned char *t = c->tail + reg * 2 * PAGE;
			size_t page = off / PAGE;

			if (kind == CTX_MEMORY) {
				memcpy(c->mem + reg * c->region + off, src, c->row);
				continue;
			}
			memcpy(t + (off - page * PAGE), src, c->row);
			if ((off + c->row) / PAGE == page)
				continue;
			if (pwrite(c->fd, t, PAGE, (off_t)(reg * c->region + page * PAGE)) != PAGE) {
				fprintf(stderr, "kvbench decode: writing %s: %s\n",
					c->plain_path, errno ? strerror(errno) : "short write");
				return -1;
			}
			c->written += PAGE;
			memmove(t, t + PAGE, PAGE);
			memset(t + PAGE, 0, PAGE);
		}
	return 0;
}

/* ---- the plain file ------------------------------------------------------- */

/* plain_write - the prompt's arrays into a fresh plain file, whole pages
 * with O_DIRECT where allowed, synced; the fd stays open for the run */
static int plain_write(struct ctx *c)
{
	size_t used = (c->n * c->row + PAGE - 1) / PAGE * PAGE;
	uint64_t t0 = bench_now_ns();
	char sp[sizeof(c->store_path)], cp[sizeof(c->codec_path)];

	/* the context's store directories first: a refused run removes
	 * nothing, the plain file it would make included */
	snprintf(sp, sizeof(sp), "%s/context-%llu", c->a->dir,
		 (unsigned long long)c->n);
	snprintf(cp, sizeof(cp), "%s/context-%llu-%s", c->a->dir,
		 (unsigned long long)c->n, kvf_codec_name(c->a->codec));
	if (bench_store_check(sp) != 0 ||
	    (c->a->codec != KVF_CODEC_NONE && bench_store_check(cp) != 0))
		return -1;
	snprintf(c->plain_path, sizeof(c->plain_path), "%s/plain-%llu.dat",
		 c->a->dir, (unsigned long long)c->n);
	c->fd = bench_plain_create("decode", c->plain_path, c->n_regions * c->region,
				   &c->pt->plain_direct);
	if (c->fd < 0)
		return -1;
	for (size_t r = 0; r < c->n_regions; r++) {
		size_t done = 0;

		while (done < used) {
			ssize_t n = pwrite(c->fd, c->mem + r * c->region + done,
					   used - done, (off_t)(r * c->region + done));

			if (n <= 0)
				goto err;
			done += (size_t)n;
		}
	}
	if (fdatasync(c->fd) != 0)
		goto err;
	/* where O_DIRECT was refused, at least start from an empty page
	 * cache (a file system that keeps files in memory keeps them) */
	if (!c->pt->plain_direct)
		(void)posix_fadvise(c->fd, 0, 0, POSIX_FADV_DONTNEED);
	c->pt->plain_s = (double)(bench_now_ns() - t0) / 1e9;
	return 0;
err:
	fprintf(stderr, "kvbench decode: writing %s: %s\n", c->plain_path,
		errno ? strerror(errno) : "short write");
	return -1;
}

/* ---- the store ------------------------------------------------------------ */

/* ctx_store_options - the options of the store of system s: K^T pages for
 * SparF, dram_budget below the K+V, its codec */
static void ctx_store_options(struct ctx *c, const struct ctx_system *s,
			      kvf_options *o)
{
	const uint64_t seg = 1u << 20;
	uint64_t kv = decode_ctx_kv_bytes(c->a, c->cap);

	/* K and V, K^T pages, summaries and padding, and room to spare */
	bench_store_options(o, &c->a->model, 0, seg,
			    (kv * 2 + 64 * seg + seg - 1) / seg * seg);
	o->n_threads = c->n_threads;
	o->kt_pages = 1;
	o->dram_budget = c->pt->budget;
	o->codec = s->codec;
}

/* store_path - where system s's store is: a codec has a store of its own */
static const char *store_path(struct ctx *c, const struct ctx_system *s)
{
	return s->codec != KVF_CODEC_NONE ? c->codec_path : c->store_path;
}

static int store_open(struct ctx *c, const struct ctx_system *s,
		      kvf_store **st)
{
	kvf_options o;
	kvf_status rc;

	ctx_store_options(c, s, &o);
	rc = bench_open_direct(store_path(c, s), &o, st, &c->pt->store_direct);
	if (rc != KVF_OK)
		return bench_fail("decode", "kvf_open", rc);
	return 0;
}

static int store_close(kvf_store *st)
{
	kvf_status rc = kvf_close(st);

	return rc == KVF_OK ? 0 : bench_fail("decode", "kvf_close", rc);
}

/* store_build - system s's fresh store with the prompt in every layer,
 * synced and closed */
static int store_build(struct ctx *c, const struct ctx_system *s)
{
	const kvf_model *m = &c->a->model;
	size_t d = m->head_dim;
	kvf_store *st = NULL;
	uint64_t t0 = bench_now_ns();
	kvf_status rc;

	snprintf(c->store_path, sizeof(c->store_path), "%s/context-%llu",
		 c->a->dir, (unsigned long long)c->n);
	snprintf(c->codec_path, sizeof(c->codec_path), "%s/context-%llu-%s",
		 c->a->dir, (unsigned long long)c->n, kvf_codec_name(c->a->codec));
	if (bench_remove_store(store_path(c, s)) != 0 || store_open(c, s, &st) != 0)
		return -1;
	if ((rc = kvf_seq_create(st, SEQ_ID)) != KVF_OK)
		goto fail_create;
	for (uint32_t l = 0; l < m->n_layers; l++)
		for (uint64_t t = 0; t < c->n; t += CTX_PREFILL_CHUNK) {
			uint32_t n = c->n - t < CTX_PREFILL_CHUNK ? (uint32_t)(c->n - t)
								  : CTX_PREFILL_CHUNK;

			for (uint32_t i = 0; i < n; i++)
				for (uint32_t h = 0; h < m->n_kv_heads; h++) {
					size_t at = ((size_t)i * m->n_kv_heads + h) * d;

					memcpy(c->chunk_k + at,
					       c->mem + region_of(c, l, 0, h) * c->region +
						       (t + i) * c->row, c->row);
					memcpy(c->chunk_v + at,
					       c->mem + region_of(c, l, 1, h) * c->region +
						       (t + i) * c->row, c->row);
				}
			rc = kvf_append(st, SEQ_ID, l, n, c->chunk_k, c->chunk_v);
			if (rc != KVF_OK)
				goto fail_append;
		}
	if ((rc = kvf_sync(st)) != KVF_OK) {
		bench_fail("decode", "kvf_sync", rc);
		goto fail;
	}
	if (s->codec == KVF_CODEC_NONE) /* the table's build time: dense's */
		c->pt->build_s = (double)(bench_now_ns() - t0) / 1e9;
	return store_close(st);
fail_create:
	bench_fail("decode", "kvf_seq_create", rc);
	goto fail;
fail_append:
	bench_fail("decode", "kvf_append (prefill)", rc);
fail:
	(void)kvf_close(st);
	return -1;
}

static int stats(kvf_store *st, kvf_stats *s)
{
	kvf_status rc;

	memset(s, 0, sizeof(*s));
	s->struct_size = sizeof(*s);
	if ((rc = kvf_stats_get(st, s)) != KVF_OK)
		return bench_fail("decode", "kvf_stats_get", rc);
	return 0;
}

/* store_cold - the built store reopened with nothing in memory; when an
 * earlier run appended its decode tokens, first truncated back to the
 * prompt and reopened again */
static int store_cold(struct ctx *c, const struct ctx_system *s,
		      kvf_store **st)
{
	uint64_t len;
	kvf_status rc;

	if (store_open(c, s, st) != 0)
		return -1;
	if ((rc = kvf_seq_len(*st, SEQ_ID, 0, &len)) != KVF_OK) {
		bench_fail("decode", "kvf_seq_len", rc);
		goto fail;
	}
	if (len == c->n)
		return 0;
	if ((rc = kvf_seq_truncate(*st, SEQ_ID, c->n)) != KVF_OK) {
		bench_fail("decode", "kvf_seq_truncate", rc);
		goto fail;
	}
	if (store_close(*st) != 0)
		return -1;
	return store_open(c, s, st);
fail:
	(void)kvf_close(*st);
	return -1;
}

/* ---- one system ----------------------------------------------------------- */

/* one_layer - step i's append and attention of layer for system sys (its
 * store st) into c->out; their ns returned, 0 on error (printed); the CPU
 * seconds of the process meanwhile added to *cpu_s */
static double one_layer(struct ctx *c, uint32_t sys, kvf_store *st,
			const kvf_attn_opts *o, uint32_t i, uint32_t layer,
			uint64_t *bytes, double *cpu_s)
{
	const struct ctx_system *s = &ctx_systems[sys];
	uint64_t pos = c->n + i, t0;
	double cpu0;
	kvf_status rc;

	fill_q(c, i, layer);
	fill_token(c, layer, pos);
	cpu0 = bench_cpu_s();
	t0 = bench_now_ns();
	if (s->kind == CTX_KVFLASH) {
		rc = kvf_append(st, SEQ_ID, layer, 1, c->tok_k, c->tok_v);
		if (rc != KVF_OK) {
			bench_fail("decode", "kvf_append", rc);
			return 0;
		}
		rc = kvf_attend(st, SEQ_ID, layer, c->q, c->out, o);
		if (rc != KVF_OK) {
			bench_fail("decode", s->sparse ? "kvf_attend (SparF)" : "kvf_attend", rc);
			return 0;
		}
	} else if (base_append(c, s->kind, layer, pos) != 0 ||
		   base_attend(c, s->kind, layer, pos + 1, bytes) != 0) {
		return 0;
	}
	t0 = bench_now_ns() - t0;
	*cpu_s += bench_cpu_s() - cpu0;
	return t0 ? (double)t0 : 1;
}

/* run_system - the warmup and timed steps of system sys into pt->sys */
static int run_system(struct ctx *c, uint32_t sys)
{
	const struct ctx_args *a = c->a;
	const struct ctx_system *s = &ctx_systems[sys];
	struct ctx_figs *f = &c->pt->sys[sys];
	kvf_store *st = NULL;
	kvf_stats s0, s1;
	kvf_attn_opts o;
	uint64_t read = 0;
	double sum = 0, cpu_s = 0;
	int rc = -1;

	*f = (struct ctx_figs){ .min_cos = 1 };
	c->cos_sum = 0;
	c->cos_n = 0;
	c->written = 0;
	kvf_attn_opts_init(&o);
	if (s->sparse) {
		o.sparse = a->sparse;
		o.top_k = c->pt->top_k;
		o.top_r = c->pt->top_r;
	}
	if (s->kind == CTX_KVFLASH && store_cold(c, s, &st) != 0)
		return -1;
	if (s->kind == CTX_FLEXGEN) {
		/* each tail starts as the prompt's last, partial page */
		size_t page = c->n * c->row / PAGE * PAGE;

		for (size_t r = 0; r < c->n_regions; r++) {
			memcpy(c->tail + r * 2 * PAGE, c->mem + r * c->region + page, PAGE);
			memset(c->tail + r * 2 * PAGE + PAGE, 0, PAGE);
		}
	}
	for (uint32_t i = 0; i < a->warmup + a->steps; i++) {
		double t = 0, cpu = 0;
		uint64_t bytes = 0;

		if (i == a->warmup && st != NULL && stats(st, &s0) != 0)
			goto out;
		if (i == a->warmup)
			c->written = 0;
		for (uint32_t l = 0; l < a->model.n_layers; l++) {
			double ns = one_layer(c, sys, st, &o, i, l, &bytes, &cpu);

			if (ns == 0)
				goto out;
			t += ns;
			check_out(c, sys, i, l, f);
		}
		if (i >= a->warmup) {
			c->step_ns[i - a->warmup] = t;
			sum += t;
			cpu_s += cpu;
			read += bytes;
		}
	}
	f->step_mean_ns = sum / a->steps;
	f->step_med_ns = bench_median(c->step_ns, a->steps);
	f->tokens_s = 1e9 / f->step_med_ns;
	f->cpu_ns = cpu_s * 1e9 / a->steps;
	f->bytes_read = (double)read / a->steps;
	f->bytes_written = (double)c->written / a->steps;
	if (st != NULL) {
		if (stats(st, &s1) != 0)
			goto out;
		f->bytes_read = (double)(s1.bytes_read - s0.bytes_read) / a->steps;
		f->bytes_written = (double)(s1.host_bytes_written -
					    s0.host_bytes_written) / a->steps;
		f->cache_hits = s1.cache_hits - s0.cache_hits;
		f->cache_misses = s1.cache_misses - s0.cache_misses;
	}
	f->mean_cos = c->cos_n ? c->cos_sum / (double)c->cos_n : 1;
	rc = 0;
out:
	if (st != NULL && store_close(st) != 0)
		rc = -1;
	return rc;
}

/* ---- one context ---------------------------------------------------------- */

static void context_free(struct ctx *c)
{
	if (c->fd >= 0)
		close(c->fd);
	c->fd = -1;
	if (!c->a->keep) {
		if (c->plain_path[0])
			unlink(c->plain_path);
		if (c->store_path[0])
			bench_remove_store(c->store_path);
		if (c->codec_path[0])
			bench_remove_store(c->codec_path);
	}
	c->plain_path[0] = c->store_path[0] = c->codec_path[0] = '\0';
	for (uint32_t i = 0; i < c->n_threads; i++) {
		kvf_free(c->w[i].k);
		kvf_free(c->w[i].v);
		c->w[i].k = c->w[i].v = NULL;
	}
	kvf_free(c->mem);
	kvf_free(c->ref);
	kvf_free(c->tail);
	c->mem = c->tail = NULL;
	c->ref = NULL;
}

int decode_ctx_run_context(struct ctx *c, uint64_t n, uint64_t budget,
			   struct ctx_point *pt)
{
	const struct ctx_args *a = c->a;
	const kvf_model *m = &a->model;
	uint64_t phys = (uint64_t)sysconf(_SC_PHYS_PAGES) * (uint64_t)sysconf(_SC_PAGESIZE);
	size_t total;
	int rc = -1;

	c->pt = pt;
	c->n = n;
	c->cap = n + a->warmup + a->steps;
	c->region = (c->cap * c->row + PAGE - 1) / PAGE * PAGE;
	c->n_regions = (size_t)m->n_layers * 2 * m->n_kv_heads;
	total = c->n_regions * c->region;
	*pt = (struct ctx_point){ .tokens = n, .kv_bytes = decode_ctx_kv_bytes(a, c->cap) };
	pt->budget = budget;
	pt->top_k = (uint32_t)(n / a->sparf_share);
	pt->top_r = m->head_dim / a->sparf_share ? m->head_dim / a->sparf_share : 1;
	if (phys && total > phys / 2) {
		fprintf(stderr, "kvbench decode: context %llu with %u layers needs %.1f GiB for the in-memory cache, more than half of this machine's %.1f GiB: use fewer --layers or shorter contexts\n",
			(unsigned long long)n, m->n_layers, (double)total / (1 << 30),
			(double)phys / (1 << 30));
		return -1;
	}
	c->mem = kvf_aligned_alloc(PAGE, total);
	c->ref = kvf_malloc((size_t)(a->warmup + a->steps) * m->n_layers * c->qn *
			    sizeof(float));
	c->tail = kvf_aligned_alloc(PAGE, c->n_regions * 2 * PAGE);
	for (uint32_t i = 0; i < c->n_threads; i++) {
		c->w[i].k = kvf_aligned_alloc(PAGE, c->region);
		c->w[i].v = kvf_aligned_alloc(PAGE, c->region);
		if (c->w[i].k == NULL || c->w[i].v == NULL)
			goto oom;
	}
	if (c->mem == NULL || c->ref == NULL || c->tail == NULL)
		goto oom;
	memset(c->mem, 0, total);
	fill_mem(c);
	if (plain_write(c) != 0 || store_build(c, &ctx_systems[CTX_DENSE]) != 0)
		goto out;
	for (uint32_t s = 0; s < ctx_n_systems; s++)
		if (ctx_systems[s].codec != KVF_CODEC_NONE &&
		    store_build(c, &ctx_systems[s]) != 0)
			goto out;
	for (uint32_t s = 0; s < ctx_n_systems; s++)
		if (run_system(c, s) != 0)
			goto out;
	pt->agree = 1;
	/* the baselines compute what dense kvf_attend does; a codec's row
	 * differs by its rounding (its cosine is reported, not checked) */
	for (uint32_t s = 0; s < ctx_n_systems; s++)
		if (ctx_systems[s].kind != CTX_KVFLASH &&
		    !(pt->sys[s].max_err <= CTX_MAX_ERR && pt->sys[s].min_cos >= CTX_MIN_COS))
			pt->agree = 0;
	rc = 0;
	goto out;
oom:
	fprintf(stderr, "kvbench decode: out of memory for context %llu (%.1f GiB of arrays)\n",
		(unsigned long long)n, (double)total / (1 << 30));
out:
	context_free(c);
	return rc;
}
