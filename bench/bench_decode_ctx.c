/*
 * bench_decode_ctx.c - `kvbench decode --context N`: one sequence decoding
 * at long context through the store, against the same attention over an
 * in-memory cache and against a FlexGen-style reader, in one run.
 *
 * For each context length N (4K to 128K tokens and more) of a Llama-8B-
 * shaped stack (--layers of 32 query and 8 KV heads of 128 dims, f16):
 * the prompt's K and V are made once (noise from a hash of layer, kind,
 * KV head, token and element) and every system starts from them:
 *  - kvflash, dense: a file store (O_DIRECT where the file system allows
 *    it, K^T pages kept) built with the N tokens and synced, closed, and
 *    reopened with dram_budget below the K+V bytes (--budget, by default
 *    a quarter of them): the run starts with nothing in memory and the KV
 *    cannot all be held there;
 *  - kvflash, SparF: the same store, truncated back to N tokens
 *    (kvf_seq_truncate: the dense run appended its decode tokens), closed
 *    and reopened, attending with SparF
 *    (--sparse: 2 by whole token groups, 1 by tokens; top_k = N /
 *    --sparf-share, top_r = head_dim / --sparf-share);
 *  - in-memory: every token's K and V in DRAM, one array per (layer, kind,
 *    KV head), attended by the same dense kernel the store runs
 *    (kvc_kernels()->attn_fold), KV heads spread over the threads;
 *  - FlexGen-style: the same arrays in a plain file, read back whole with
 *    O_DIRECT preads each step (no cache: as cold as the store's media),
 *    then the same kernel; a thread reads a head and computes it, so the
 *    threads overlap reading with computing.  A decode token's rows go
 *    into a page-sized tail in DRAM per (layer, kind, head), written with
 *    O_DIRECT when the page fills.
 * Each decode step does, layer by layer, what an inference engine does:
 * append the new token's K and V, then attend with a fresh q (made before
 * the clock starts).  --warmup steps go first, untimed, then --steps are
 * timed one by one.  Per system: tokens/s of the sequence (1 / median
 * step), the process's CPU time per step (every thread: the store's
 * workers, the baselines' threads), bytes read from and written to media
 * per step (kvf_stats deltas for kvflash, counted for the others), the
 * memory tier's hits and misses.
 * Every output of every step and layer of the in-memory and FlexGen runs
 * is compared with dense kvf_attend's (max |difference| and cosine per
 * query head): the three compute the same attention, and a run where they
 * disagree says so and exits 1.  SparF's cosine to dense is printed; on
 * noise data it says little about quality (kvbench attend measures that).
 *
 * The systems are a table (ctx_systems): compressed KV plugs in as one
 * more kvflash row with its codec once kvf_options.codec exists
 * (ctx_store_options is where it is set).
 *
 * The files: bench_decode.c hands `kvbench decode` here when --context is
 * given; this one parses the arguments and runs the systems;
 * bench_decode_ctx_report.c prints the table, the JSON and the plot.
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
#include "compute/half.h"
#include "compute/kernels.h"
#include "kvflash.h"

#define PAGE 4096u     /* the plain file's O_DIRECT unit */
#define SEQ_ID 1u      /* the store's one sequence */

const struct ctx_system ctx_systems[CTX_SYSTEMS] = {
	{ "kvflash_dense", "kvflash, dense", CTX_KVFLASH, 0, KVF_CODEC_NONE },
	{ "kvflash_sparf", "kvflash, SparF", CTX_KVFLASH, 1, KVF_CODEC_NONE },
	{ "in_memory", "in-memory cache", CTX_MEMORY, 0, KVF_CODEC_NONE },
	{ "flexgen", "FlexGen-style reader", CTX_FLEXGEN, 0, KVF_CODEC_NONE },
};

struct ctx;

/* One baseline thread: KV heads first, first + n_threads, ... */
struct ctx_worker {
	struct ctx *c;
	uint32_t first;
	unsigned char *k, *v; /* FlexGen: one region each, page-aligned */
	float *state;         /* KVC_ATTN_STATE_FLOATS(group, head_dim) */
	float *qs;            /* [group][head_dim], scaled */
	uint64_t bytes;       /* FlexGen: bytes pread this call */
	int err;              /* errno of a failed pread, else 0 */
};

/* The run, and the context length being measured. */
struct ctx {
	const struct ctx_args *a;
	uint32_t n_threads;
	size_t row;             /* bytes of one head's row of a token */
	size_t qn;              /* floats of q and out */
	uint64_t token_bytes;   /* K+V of one token, every layer */
	uint16_t noise[65536];  /* f16 noise in [-1, 1) */
	/* the context being measured */
	struct ctx_point *pt;
	uint64_t n, cap;        /* prompt tokens; with the decode tokens */
	size_t region;          /* bytes of one (layer, kind, head) array:
				 * cap rows in whole pages */
	size_t n_regions;       /* layers * 2 * kv_heads */
	unsigned char *mem;     /* [n_regions][region]: the in-memory cache,
				 * and the plain file's image */
	float *ref;             /* [warmup + steps][layers][qn] dense
				 * kvf_attend's outputs */
	float *q, *out;         /* [qn] */
	uint16_t *tok_k, *tok_v; /* [kv_heads][head_dim]: a step's token */
	uint16_t *chunk_k, *chunk_v; /* [CTX_PREFILL_CHUNK][kv_heads][dim] */
	double *step_ns;        /* [steps] */
	double cos_sum;         /* cosines to dense summed, and how many */
	uint64_t cos_n;
	char store_path[4096], plain_path[4096];
	/* the FlexGen reader */
	int fd;                 /* the plain file */
	unsigned char *tail;    /* [n_regions][2 pages]: the page being
				 * filled by decode tokens, and its spill */
	uint64_t written;       /* bytes pwritten during the timed steps */
	struct ctx_worker w[CTX_MAX_THREADS];
};

/* ---- arguments ------------------------------------------------------------ */

int decode_ctx_wanted(int argc, char **argv)
{
	for (int i = 1; i < argc; i++)
		if (strcmp(argv[i], "--context") == 0)
			return 1;
	return 0;
}

static void usage(FILE *f)
{
	fprintf(f,
		"usage: kvbench decode --context N[,N...] [--context N ...] [--dir DIR]\n"
		"                      [--layers N] [--q-heads N] [--kv-heads N] [--head-dim N]\n"
		"                      [--steps N] [--warmup N] [--budget BYTES] [--threads N]\n"
		"                      [--sparse 1|2] [--sparf-share N] [--json] [--plot DIR]\n"
		"                      [--keep]\n"
		"  --context N,...  prompt tokens, K/M suffixes (4K = 4096); a list or the\n"
		"                   flag again; up to %u lengths, run in the order given\n"
		"  --dir DIR        directory for the stores and the plain file\n"
		"                   (default ./kvbench-decode)\n"
		"  --layers N       layers (default 2; Llama-8B has 32: the time of a step\n"
		"                   grows with them, tokens/s falls as 1 / layers)\n"
		"  --q-heads N      query heads (default 32; a multiple of --kv-heads)\n"
		"  --kv-heads N     KV heads (default 8)\n"
		"  --head-dim N     elements per head, f16, 8..512 (default 128)\n"
		"  --steps N        timed decode steps (default 4)\n"
		"  --warmup N       untimed steps before them (default 1)\n"
		"  --budget BYTES   the store's dram_budget, K/M/G, at least 1M and below the\n"
		"                   K+V of the shortest context (default: a quarter of each\n"
		"                   context's K+V, at least 1M)\n"
		"  --threads N      threads the store computes with, and each baseline's\n"
		"                   (default: online CPUs)\n"
		"  --sparse 1|2     SparF by tokens (1) or by whole token groups (2, the\n"
		"                   default)\n"
		"  --sparf-share N  SparF attends 1/N of the tokens using 1/N of the dims\n"
		"                   for its scores (default 8)\n"
		"  --json           one JSON document instead of a table\n"
		"  --plot DIR       DIR/decode_context.dat, .gp and, through gnuplot,\n"
		"                   .png: tokens/s against context length, a line a system\n"
		"  --keep           leave the stores and the plain files in DIR\n"
		"Systems: kvflash dense and SparF on a file store that does not fit its\n"
		"dram_budget, reopened before each run; the same attention over an\n"
		"in-memory cache; a FlexGen-style reader (O_DIRECT pread of K and V from\n"
		"a plain file, then the same kernel).  Their outputs must agree.\n",
		CTX_MAX);
}

/* parse_contexts - "4096,16K" appended to the list in out */
static int parse_contexts(const char *flag, const char *text, void *out)
{
	struct ctx_args *a = out;
	const char *p = text;

	for (;;) {
		const char *comma = strchr(p, ',');
		size_t len = comma ? (size_t)(comma - p) : strlen(p);
		char one[32];
		uint64_t v;

		if (len == 0 || len >= sizeof(one)) {
			fprintf(stderr, "kvbench decode: %s '%s': expected numbers separated by commas\n",
				flag, text);
			return 2;
		}
		memcpy(one, p, len);
		one[len] = '\0';
		if (bench_parse_u64(flag, one, &v) != 0)
			return 2;
		if (v < 64 || v > (1ull << 24)) {
			fprintf(stderr, "kvbench decode: %s %s: a context is 64 to 16M tokens\n",
				flag, one);
			return 2;
		}
		if (a->n_context == CTX_MAX) {
			fprintf(stderr, "kvbench decode: %s: at most %u context lengths\n",
				flag, CTX_MAX);
			return 2;
		}
		a->context[a->n_context++] = v;
		if (comma == NULL)
			return 0;
		p = comma + 1;
	}
}

/* kv_bytes_at - K+V of every layer for tokens tokens */
static uint64_t kv_bytes_at(const struct ctx_args *a, uint64_t tokens)
{
	return tokens * a->model.n_layers * 2ull * a->model.n_kv_heads *
	       a->model.head_dim * 2ull;
}

/* budget_of - the store's dram_budget at a prompt of tokens: --budget, or
 * a quarter of the K+V, and never under the least kvf_open takes */
static uint64_t budget_of(const struct ctx_args *a, uint64_t tokens)
{
	uint64_t b = a->budget ? a->budget : kv_bytes_at(a, tokens) / 4;

	return b > CTX_MIN_BUDGET ? b : CTX_MIN_BUDGET;
}

static int parse_args(int argc, char **argv, struct ctx_args *a)
{
	const struct bench_opt opts[] = {
		BENCH_FUNC("--context", parse_contexts, a),
		BENCH_STR("--dir", a->dir),
		BENCH_U32("--layers", a->model.n_layers, 1, 1024),
		BENCH_U32("--q-heads", a->model.n_q_heads, 1, 1024),
		BENCH_U32("--kv-heads", a->model.n_kv_heads, 1, 1024),
		BENCH_U32("--head-dim", a->model.head_dim, 8, 512),
		BENCH_U32("--steps", a->steps, 1, CTX_MAX_STEPS),
		BENCH_U32("--warmup", a->warmup, 0, CTX_MAX_STEPS),
		BENCH_U64("--budget", a->budget, CTX_MIN_BUDGET, 1ull << 40),
		BENCH_U32("--threads", a->n_threads, 1, CTX_MAX_THREADS),
		BENCH_U32("--sparse", a->sparse, 1, 2),
		BENCH_U32("--sparf-share", a->sparf_share, 1, 1024),
		/* --codec NAME goes here once kvf_options.codec exists: it
		 * adds a kvflash row of that codec to ctx_systems' runs */
		BENCH_BOOL("--json", a->json),
		BENCH_STR("--plot", a->plot_dir),
		BENCH_BOOL("--keep", a->keep),
		{ 0 }
	};
	int rc;

	*a = (struct ctx_args){ .dir = "kvbench-decode",
				.model = { .n_layers = 2,
					   .n_q_heads = 32,
					   .n_kv_heads = 8,
					   .head_dim = 128,
					   .dtype = KVF_DTYPE_F16 },
				.steps = 4,
				.warmup = 1,
				.sparse = 2,
				.sparf_share = 8 };
	rc = bench_parse_opts("decode", usage, opts, argc, argv);
	if (rc != 0)
		return rc;
	if (bench_check_heads("decode", &a->model) != 0)
		return 2;
	if (a->model.head_dim % 8 != 0)
		return bench_usage_error("decode", "--head-dim %u is not a multiple of 8",
					 a->model.head_dim);
	for (uint32_t i = 0; i < a->n_context; i++) {
		uint64_t kv = kv_bytes_at(a, a->context[i]);

		if (budget_of(a, a->context[i]) >= kv)
			return bench_usage_error("decode",
						 "dram_budget %llu holds the whole K+V of context %llu (%llu bytes): the store must not fit it (a longer context, more layers or heads, or a smaller --budget; a tier takes at least %u bytes)",
						 (unsigned long long)budget_of(a, a->context[i]),
						 (unsigned long long)a->context[i],
						 (unsigned long long)kv, CTX_MIN_BUDGET);
		if (a->context[i] / a->sparf_share == 0)
			return bench_usage_error("decode",
						 "--sparf-share %u leaves SparF no token of context %llu",
						 a->sparf_share,
						 (unsigned long long)a->context[i]);
	}
	return 0;
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
 * SparF, dram_budget below the K+V.  The one place a codec goes in
 * (kvf_options.codec = s->codec once the store takes one; until then
 * every system in ctx_systems is KVF_CODEC_NONE). */
static void ctx_store_options(struct ctx *c, const struct ctx_system *s,
			      kvf_options *o)
{
	const uint64_t seg = 1u << 20;
	uint64_t kv = kv_bytes_at(c->a, c->cap);

	(void)s;
	/* K and V, K^T pages, summaries and padding, and room to spare */
	bench_store_options(o, &c->a->model, 0, seg,
			    (kv * 2 + 64 * seg + seg - 1) / seg * seg);
	o->n_threads = c->n_threads;
	o->kt_pages = 1;
	o->dram_budget = c->pt->budget;
}

static int store_open(struct ctx *c, const struct ctx_system *s,
		      kvf_store **st)
{
	kvf_options o;
	kvf_status rc;

	ctx_store_options(c, s, &o);
	rc = bench_open_direct(c->store_path, &o, st, &c->pt->store_direct);
	if (rc != KVF_OK)
		return bench_fail("decode", "kvf_open", rc);
	return 0;
}

static int store_close(kvf_store *st)
{
	kvf_status rc = kvf_close(st);

	return rc == KVF_OK ? 0 : bench_fail("decode", "kvf_close", rc);
}

/* store_build - a fresh store with the prompt in every layer, synced and
 * closed */
static int store_build(struct ctx *c)
{
	const kvf_model *m = &c->a->model;
	size_t d = m->head_dim;
	kvf_store *st = NULL;
	uint64_t t0 = bench_now_ns();
	kvf_status rc;

	snprintf(c->store_path, sizeof(c->store_path), "%s/context-%llu",
		 c->a->dir, (unsigned long long)c->n);
	if (bench_remove_store(c->store_path) != 0 ||
	    store_open(c, &ctx_systems[CTX_DENSE], &st) != 0)
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
	}
	c->plain_path[0] = c->store_path[0] = '\0';
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

/* run_context - every system at prompt length n into *pt */
static int run_context(struct ctx *c, uint64_t n, struct ctx_point *pt)
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
	*pt = (struct ctx_point){ .tokens = n, .kv_bytes = kv_bytes_at(a, c->cap) };
	pt->budget = budget_of(a, n);
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
	if (plain_write(c) != 0 || store_build(c) != 0)
		goto out;
	for (uint32_t s = 0; s < CTX_SYSTEMS; s++)
		if (run_system(c, s) != 0)
			goto out;
	pt->agree = 1;
	for (uint32_t s = 0; s < CTX_SYSTEMS; s++)
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

/* ---- main ----------------------------------------------------------------- */

int decode_ctx_main(int argc, char **argv)
{
	struct ctx_args a;
	struct ctx_result *r = NULL;
	struct ctx *c = NULL;
	const kvf_model *m;
	int rc, made = 0;

	if ((rc = parse_args(argc, argv, &a)) != 0)
		return rc == 1 ? 0 : rc;
	m = &a.model;
	rc = 1;
	c = kvf_calloc(1, sizeof(*c));
	r = kvf_calloc(1, sizeof(*r));
	if (c == NULL || r == NULL)
		goto oom;
	c->a = r->a = &a;
	c->fd = -1;
	c->n_threads = a.n_threads ? a.n_threads : (uint32_t)sysconf(_SC_NPROCESSORS_ONLN);
	if (c->n_threads < 1)
		c->n_threads = 1;
	if (c->n_threads > CTX_MAX_THREADS)
		c->n_threads = CTX_MAX_THREADS;
	r->n_threads = c->n_threads;
	c->row = (size_t)m->head_dim * 2;
	c->qn = (size_t)m->n_q_heads * m->head_dim;
	c->token_bytes = kv_bytes_at(&a, 1);
	for (uint32_t i = 0; i < 65536; i++)
		c->noise[i] = kvf_f32_to_f16((float)((double)(bench_mix64(i) >> 11) /
						     9007199254740992.0 * 2 - 1));
	c->q = kvf_malloc(c->qn * sizeof(float));
	c->out = kvf_malloc(c->qn * sizeof(float));
	c->tok_k = kvf_malloc(c->row * m->n_kv_heads);
	c->tok_v = kvf_malloc(c->row * m->n_kv_heads);
	c->chunk_k = kvf_malloc(c->row * m->n_kv_heads * CTX_PREFILL_CHUNK);
	c->chunk_v = kvf_malloc(c->row * m->n_kv_heads * CTX_PREFILL_CHUNK);
	c->step_ns = kvf_malloc(a.steps * sizeof(double));
	if (!c->q || !c->out || !c->tok_k || !c->tok_v || !c->chunk_k ||
	    !c->chunk_v || !c->step_ns)
		goto oom;
	for (uint32_t i = 0; i < c->n_threads; i++) {
		uint32_t g = m->n_q_heads / m->n_kv_heads;

		c->w[i].c = c;
		c->w[i].first = i;
		c->w[i].state = kvf_malloc(KVC_ATTN_STATE_FLOATS(g, m->head_dim) *
					   sizeof(float));
		c->w[i].qs = kvf_malloc((size_t)g * m->head_dim * sizeof(float));
		if (c->w[i].state == NULL || c->w[i].qs == NULL)
			goto oom;
	}
	if (bench_make_dir("decode", a.dir, &made) != 0)
		goto out;
	for (uint32_t i = 0; i < a.n_context; i++) {
		if (!a.json)
			fprintf(stderr, "kvbench decode: context %llu ...\n",
				(unsigned long long)a.context[i]);
		if (run_context(c, a.context[i], &r->pt[i]) != 0)
			goto out;
		r->n_pt++;
	}
	if (a.json)
		decode_ctx_print_json(r);
	else
		decode_ctx_print_table(r);
	rc = 0;
	for (uint32_t i = 0; i < r->n_pt; i++)
		if (!r->pt[i].agree)
			rc = 1;
	if (rc != 0)
		fprintf(stderr, "kvbench decode: the systems DISAGREE: the in-memory or FlexGen attention differs from kvf_attend's by more than %g (or a cosine below %g)\n",
			CTX_MAX_ERR, CTX_MIN_COS);
	if (a.plot_dir && decode_ctx_plot(r, a.plot_dir) != 0)
		rc = 1;
	goto out;
oom:
	fprintf(stderr, "kvbench decode: out of memory\n");
out:
	if (made && !a.keep)
		rmdir(a.dir);
	if (c != NULL) {
		for (uint32_t i = 0; i < CTX_MAX_THREADS; i++) {
			kvf_free(c->w[i].state);
			kvf_free(c->w[i].qs);
		}
		kvf_free(c->q);
		kvf_free(c->out);
		kvf_free(c->tok_k);
		kvf_free(c->tok_v);
		kvf_free(c->chunk_k);
		kvf_free(c->chunk_v);
		kvf_free(c->step_ns);
	}
	kvf_free(c);
	kvf_free(r);
	return rc;
}
