/*
 * bench_attend_run.c - `kvbench attend`: the timed side: one kvf_attend
 * call (dense or a SparF mode) with its byte and page counts, the reopen
 * that makes a call cold, the baselines (the plain memory read, the plain
 * O_DIRECT file read, the FlexGen way on worker threads), and one pass of
 * them all, alternating which side goes first.  A file of its own: these
 * are the calls whose times the report gives.
 */
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <pthread.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "api/alloc.h"
#include "bench/bench_attend_int.h"
#include "bench/bench_common.h"
#include "compute/kernels.h"
#include "kvflash.h"

/* ---- plain loops --------------------------------------------------------- */

/* ---- the store's calls --------------------------------------------------- */

/* reopen - close and open the file store, so no page of it is in memory;
 * ns, 0 on error */
static double reopen(struct attend_ctx *c)
{
	uint64_t t0 = bench_now_ns();
	kvf_status rc = kvf_close(c->file);

	c->file = NULL;
	if (rc != KVF_OK) {
		bench_fail("attend", "kvf_close", rc);
		return 0;
	}
	if ((rc = kvf_open(c->file_dir, &c->opts, &c->file)) != KVF_OK) {
		bench_fail("attend", "kvf_open (reopen)", rc);
		return 0;
	}
	return (double)(bench_now_ns() - t0);
}

static int stats(kvf_store *st, kvf_stats *s)
{
	kvf_status rc;

	s->struct_size = sizeof(*s);
	if ((rc = kvf_stats_get(st, s)) != KVF_OK)
		return bench_fail("attend", "kvf_stats_get", rc);
	return 0;
}

/* attend_call - one timed kvf_attend of a layer into out (sparse: 0 dense, else
 * that SparF mode at the run's top_r and top_k); ns, 0 on error; *bytes
 * gets the bytes_read delta, *pr / *ps (may be NULL) the SparF page
 * deltas, c->last_cpu the CPU time of the process meanwhile */
double attend_call(struct attend_ctx *c, kvf_store *st, uint32_t layer,
		   uint32_t sparse, float *out, uint64_t *bytes,
		   uint64_t *pr, uint64_t *ps)
{
	kvf_stats s0, s1;
	kvf_attn_opts o;
	uint64_t t0;
	double cpu0;
	kvf_status rc;

	kvf_attn_opts_init(&o);
	if (sparse) {
		o.sparse = sparse;
		o.top_r = c->top_r;
		o.top_k = c->top_k;
	}
	if (stats(st, &s0) != 0)
		return 0;
	cpu0 = bench_cpu_s();
	t0 = bench_now_ns();
	rc = kvf_attend(st, SEQ_ID, layer, c->q[layer], out, &o);
	t0 = bench_now_ns() - t0;
	c->last_cpu = (bench_cpu_s() - cpu0) * 1e9;
	if (rc != KVF_OK) {
		bench_fail("attend",
			   sparse ? "kvf_attend (sparse)" : "kvf_attend", rc);
		return 0;
	}
	if (stats(st, &s1) != 0)
		return 0;
	*bytes = s1.bytes_read - s0.bytes_read;
	if (pr)
		*pr = s1.sparf_pages_read - s0.sparf_pages_read;
	if (ps)
		*ps = s1.sparf_pages_skipped - s0.sparf_pages_skipped;
	return t0 ? (double)t0 : 1;
}

/* ---- the FlexGen way ----------------------------------------------------- */

/* flex_head - kvf_read one head's K and V, then the dense kernel on them
 * (one attn_fold call over all tokens) into c->out */
static kvf_status flex_head(struct flex_worker *w, uint32_t h)
{
	struct attend_ctx *c = w->c;
	const kvf_model *m = &c->a->model;
	uint32_t D = m->head_dim, g = m->n_q_heads / m->n_kv_heads;
	const float *q = c->q[w->layer] + (size_t)h * g * D;
	float scale = 1.0f / sqrtf((float)D);
	struct kvc_attn_state st;
	kvf_status rc;

	rc = kvf_read(c->file, SEQ_ID, w->layer, h, 0, c->a->n_tokens, w->k,
		      w->v);
	if (rc != KVF_OK)
		return rc;
	for (size_t j = 0; j < (size_t)g * D; j++)
		w->qs[j] = q[j] * scale;
	kvc_attn_state_init(&st, g, D, w->state);
	kvc_kernels()->attn_fold(&st, w->qs, w->k, w->v, c->a->n_tokens,
				 m->dtype, NULL, NULL, 0);
	kvc_attn_finish(&st, c->out + (size_t)h * g * D, NULL);
	return KVF_OK;
}

static void *flex_thread(void *arg)
{
	struct flex_worker *w = arg;

	for (uint32_t h = w->first; h < w->c->a->model.n_kv_heads; h += w->step)
		if ((w->rc = flex_head(w, h)) != KVF_OK) {
			snprintf(w->msg, sizeof(w->msg), "%s",
				 kvf_last_error());
			break;
		}
	return NULL;
}

/* flex_pass - the FlexGen way over one layer into c->out, on n_threads
 * threads (the calling thread is the first); ns, 0 on error */
static double flex_pass(struct attend_ctx *c, struct flex_worker *w,
			uint32_t layer, uint64_t *bytes)
{
	pthread_t tid[MAX_THREADS];
	uint32_t n = c->n_threads, started = 1;
	kvf_stats s0, s1;
	uint64_t t0;
	double cpu0;
	int ret = 0;

	if (stats(c->file, &s0) != 0)
		return 0;
	cpu0 = bench_cpu_s();
	t0 = bench_now_ns();
	for (uint32_t i = 0; i < n; i++) {
		w[i].layer = layer;
		w[i].rc = KVF_OK;
	}
	for (uint32_t i = 1; i < n; i++, started++)
		if (pthread_create(&tid[i], NULL, flex_thread, &w[i]) != 0)
			break;
	flex_thread(&w[0]);
	for (uint32_t i = 1; i < started; i++)
		pthread_join(tid[i], NULL);
	t0 = bench_now_ns() - t0;
	c->last_cpu = (bench_cpu_s() - cpu0) * 1e9;
	for (uint32_t i = 0; i < started && ret == 0; i++)
		if (w[i].rc != KVF_OK) {
			fprintf(stderr, "kvbench attend: kvf_read: %s (%s)\n",
				w[i].msg, kvf_strerror(w[i].rc));
			ret = -1;
		}
	if (started < n) {
		fprintf(stderr, "kvbench attend: pthread_create failed\n");
		ret = -1;
	}
	if (ret != 0 || stats(c->file, &s1) != 0)
		return 0;
	*bytes = s1.bytes_read - s0.bytes_read;
	return (double)t0;
}

void attend_flex_free(struct flex_worker *w, uint32_t n)
{
	for (uint32_t i = 0; i < n; i++) {
		kvf_free(w[i].k);
		kvf_free(w[i].v);
		kvf_free(w[i].state);
		kvf_free(w[i].qs);
	}
}

int attend_flex_alloc(struct attend_ctx *c, struct flex_worker *w)
{
	const kvf_model *m = &c->a->model;
	uint32_t g = m->n_q_heads / m->n_kv_heads;
	size_t head = (size_t)c->a->n_tokens * m->head_dim * 2;

	for (uint32_t i = 0; i < c->n_threads; i++) {
		w[i] = (struct flex_worker){ .c = c,
					     .first = i,
					     .step = c->n_threads };
		w[i].k = kvf_aligned_alloc(64, head);
		w[i].v = kvf_aligned_alloc(64, head);
		w[i].state = kvf_malloc(KVC_ATTN_STATE_FLOATS(g, m->head_dim) *
					sizeof(float));
		w[i].qs = kvf_malloc((size_t)g * m->head_dim * sizeof(float));
		if (!w[i].k || !w[i].v || !w[i].state || !w[i].qs) {
			attend_flex_free(w, i + 1);
			fprintf(stderr, "kvbench attend: out of memory\n");
			return -1;
		}
	}
	return 0;
}

/* ---- one pass ------------------------------------------------------------ */

/* attend_pass_memory - dense kvf_attend on the memory store and the plain read
 * (MEM_CALLS of each, the mean taken), `first` choosing which goes first;
 * then SparF (each mode) on the memory store */
int attend_pass_memory(struct attend_ctx *c, int first,
		       struct attend_pass *p)
{
	uint64_t bytes;

	p->mem_attend = p->mem_plain = p->mem_plain1 = 0;
	for (int i = 0; i < 2; i++)
		for (uint32_t j = 0; j < MEM_CALLS; j++) {
			double x, y;

			if ((first ^ i) == 0) {
				x = attend_call(c, c->mem, 0, 0, c->out,
						&bytes, NULL, NULL);
				if (x == 0)
					return -1;
				p->mem_attend += x / MEM_CALLS;
				continue;
			}
			x = bench_read_words("attend", c->membuf, c->kv_bytes, c->n_threads, &c->sink);
			y = bench_read_words("attend", c->membuf, c->kv_bytes, 1, &c->sink);
			if (x == 0 || y == 0)
				return -1;
			p->mem_plain += x / MEM_CALLS;
			p->mem_plain1 += y / MEM_CALLS;
		}
	for (uint32_t s = 0; s < N_MODES; s++)
		for (uint32_t l = 0; l < N_LAYERS; l++) {
			p->mem_sparf[s][l] =
				attend_call(c, c->mem, l, sparf_mode[s].sparse,
					    c->out, &bytes, NULL, NULL);
			if (p->mem_sparf[s][l] == 0)
				return -1;
		}
	return 0;
}

/* cold_sparf - SparF mode s on layer l of the file store after a reopen:
 * a first call, which catches the mean of V up if behind, then the timed
 * call */
static int cold_sparf(struct attend_ctx *c, uint32_t s, uint32_t l,
		      struct attend_pass *p)
{
	struct sparf_figs *f = &c->fig[l].sp[s];
	uint32_t sparse = sparf_mode[s].sparse;

	if (reopen(c) == 0)
		return -1;
	p->sparf_first[s][l] = attend_call(c, c->file, l, sparse, c->out,
					   &f->first_bytes, NULL, NULL);
	if (p->sparf_first[s][l] == 0)
		return -1;
	p->sparf[s][l] = attend_call(c, c->file, l, sparse, c->out,
				     &f->bytes, &f->pages_read,
				     &f->pages_skipped);
	if (p->sparf[s][l] == 0)
		return -1;
	p->sparf_cpu[s][l] = c->last_cpu;
	attend_sparf_cosine(c, c->out, c->dense[l], f);
	return 0;
}

/* attend_pass_cold - dense, SparF (each mode) and the FlexGen way on the file
 * store, each after a reopen, and the plain O_DIRECT read */
int attend_pass_cold(struct attend_ctx *c, struct flex_worker *w, int first,
		     struct attend_pass *p)
{
	size_t qe = (size_t)c->a->model.n_q_heads * c->a->model.head_dim;
	double diff;

	for (int i = 0; i < 2; i++) {
		if ((first ^ i) == 1) {
			if ((p->plain_direct = bench_read_file("attend", c->plain_path, c->chunk, PLAIN_CHUNK, c->plain_file_bytes, c->plain_direct, &c->sink)) == 0)
				return -1;
			continue;
		}
		for (uint32_t l = 0; l < N_LAYERS; l++) {
			struct layer_figs *f = &c->fig[l];

			if ((p->reopen = reopen(c)) == 0)
				return -1;
			p->cold_dense[l] = attend_call(c, c->file, l, 0,
						       c->dense[l],
						       &f->dense_bytes, NULL,
						       NULL);
			if (p->cold_dense[l] == 0)
				return -1;
			p->cold_dense_cpu[l] = c->last_cpu;
		}
	}
	for (uint32_t s = 0; s < N_MODES; s++)
		for (uint32_t l = 0; l < N_LAYERS; l++)
			if (cold_sparf(c, s, l, p) != 0)
				return -1;
	if (reopen(c) == 0)
		return -1;
	if ((p->flex = flex_pass(c, w, 0, &c->flex_bytes)) == 0)
		return -1;
	p->flex_cpu = c->last_cpu;
	diff = attend_max_diff(c->out, c->dense[0], qe);
	c->diff_flex = diff > c->diff_flex ? diff : c->diff_flex;
	return 0;
}

/* ---- H2O eviction (kvf_h2o_evict) --------------------------------------- */

static const double h2o_keep[N_H2O] = { 0.5, 0.25 };

/* near_q - query i of the scoring: the layer's q, each element scaled by a
 * factor in [0.5, 1.5) from a hash (decode steps asking about the same
 * thing, not the same query) */
static void near_q(const struct attend_ctx *c, uint32_t layer, uint32_t i,
		   float *q)
{
	size_t n = (size_t)c->a->model.n_q_heads * c->a->model.head_dim;

	for (size_t j = 0; j < n; j++) {
		uint64_t z = (j * 0x9e3779b97f4a7c15ull) ^ ((uint64_t)(i + 1) << 40) ^
			     ((uint64_t)layer << 56);

		z ^= z >> 31;
		z *= 0xbf58476d1ce4e5b9ull;
		z ^= z >> 29;
		q[j] = c->q[layer][j] * (0.5f + (float)(z >> 40) / (float)(1u << 24));
	}
}

int attend_h2o(struct attend_ctx *c)
{
	size_t qe = (size_t)c->a->model.n_q_heads * c->a->model.head_dim;
	float *dense = kvf_malloc(2 * qe * sizeof(float)), *q = dense + qe;
	kvf_h2o_evict_opts eo;
	kvf_attn_opts ao;
	kvf_status rc = KVF_OK;
	const char *what = "";

	if (dense == NULL) {
		fprintf(stderr, "kvbench attend: out of memory\n");
		return -1;
	}
	kvf_attn_opts_init(&ao);
	ao.h2o = 1;
	for (uint32_t l = 0; l < N_LAYERS && rc == KVF_OK; l++)
		for (uint32_t b = 0; b < N_H2O && rc == KVF_OK; b++) {
			struct layer_figs *f = &c->fig[l];
			uint64_t dropped = 0, t0;

			what = "kvf_attend (full)";
			if ((rc = kvf_attend(c->mem, SEQ_ID, l, c->q[l], dense,
					     NULL)) != KVF_OK)
				break;
			what = "kvf_seq_fork";
			if ((rc = kvf_seq_fork(c->mem, SEQ_ID, H2O_SEQ,
					       c->a->n_tokens)) != KVF_OK)
				break;
			what = "kvf_attend (h2o)";
			for (uint32_t i = 0; i < H2O_QUERIES && rc == KVF_OK; i++) {
				near_q(c, l, i, q);
				rc = kvf_attend(c->mem, H2O_SEQ, l, q, c->out, &ao);
			}
			kvf_h2o_evict_opts_init(&eo);
			eo.keep = h2o_keep[b];
			t0 = bench_now_ns();
			if (rc == KVF_OK) {
				what = "kvf_h2o_evict";
				rc = kvf_h2o_evict(c->mem, H2O_SEQ, l, &eo, &dropped);
			}
			f->h2o_ms[b] = (double)(bench_now_ns() - t0) / 1e6;
			if (rc == KVF_OK) {
				what = "kvf_attend (after the drop)";
				rc = kvf_attend(c->mem, H2O_SEQ, l, c->q[l], c->out, NULL);
			}
			if (rc == KVF_OK) {
				attend_sparf_cosine(c, c->out, dense, &f->h2o[b]);
				/* dropped is summed over the KV heads */
				f->h2o_kept[b] = c->a->n_tokens -
						 dropped / c->a->model.n_kv_heads;
			}
			if (kvf_seq_free(c->mem, H2O_SEQ) != KVF_OK && rc == KVF_OK) {
				what = "kvf_seq_free";
				rc = KVF_EIO;
			}
		}
	kvf_free(dense);
	if (rc != KVF_OK) {
		bench_fail("attend", what, rc);
		return -1;
	}
	return 0;
}
