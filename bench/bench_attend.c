/*
 * bench_attend.c - `kvbench attend`: decode attention computed in the
 * store (kvf_attend) against plain loops over the same bytes, and against
 * reading K and V out and computing outside, side by side in one run.
 *
 * The context is one sequence of n_tokens tokens (default 32K) of a
 * Llama-8B-like layer (32 q heads, 8 kv heads, head_dim 128, f16), in two
 * stores built from the same data in DIR, both with K^T pages (kt_pages =
 * 1): a memory store (KVF_MEDIA_MEMORY) and a file store (O_DIRECT).
 * Attention is per layer, so the stores hold two layers only, which differ
 * in where attention goes (q is aligned with 8 dims of each KV head; a
 * token is a "heavy hitter" when its K points the same way):
 *  - layer 0, scattered: one token in 128, at random, is a heavy hitter
 *    (about 70% of dense attention's mass is on them);
 *  - layer 1, clustered: heavy hitters come in runs of 80 tokens, one run
 *    at a random place in every 512 tokens, strongest in the middle (the
 *    tokens of a passage the query is about).
 * Measured each pass (every call timed alone but in 1), medians over the
 * passes:
 *  1. dense kvf_attend of layer 0 on the memory store, against a plain
 *     read loop (sum of every 64-bit word) over a buffer of the same K+V
 *     bytes, on as many threads as the store computes with, and on one;
 *     each side MEM_CALLS times back to back, the mean taken (one call is
 *     some 20 ms: too short to time alone on a shared machine);
 *  2. dense kvf_attend of each layer of the file store, cold: the store
 *     is closed and reopened before each timed call (the file backend
 *     reads with O_DIRECT, so neither the store nor the page cache holds
 *     a page), against one thread of sequential 1 MiB O_DIRECT preads of
 *     the same number of bytes from a plain file in DIR;
 *  3. SparF (top_r = head_dim / 8, top_k = tokens / 8 unless --top-r and
 *     --top-k say otherwise) in its two modes, one after the other:
 *     3a. by tokens (sparse = 1): the top_k tokens of each query head;
 *     3b. by groups (sparse = 2): the ceil(top_k / G) token groups (G
 *     tokens a page) of most approximate mass, attended whole;
 *     each on each layer, cold: after a reopen, a first call, which also
 *     catches the running mean of V up where it is behind (reading the V
 *     it has not seen), then the timed call; bytes from kvf_stats
 *     bytes_read deltas, against the dense call of the same layer; SparF
 *     pages read and skipped; and the cosine of its output to dense
 *     attention's, per query head.  SparF on the memory store (warm mean
 *     of V) gives the time of its computing alone, without I/O;
 *  4. the FlexGen way on layer 0, cold: kvf_read of every head's K and V
 *     into caller buffers, then the same dense kernel the store runs
 *     (kvc_kernels()->attn_fold, one call per head) outside the store, on
 *     as many threads as the store computes with (each reads a head, then
 *     computes it, so reading and computing overlap across threads).
 * Checked once, untimed: every row kvf_read gives back equals the row
 * appended; a double-precision reference over those rows, dense
 * kvf_attend (memory and file) and the FlexGen result agree within 1e-4.
 * Benchmarks print figures and never pass or fail on them.
 *
 * Data: a row of (layer, kind, head, token) is noise drawn from a hash of
 * the four (so any row can be made again to check it), plus, for a heavy
 * hitter's K, HH_K * strength on the head's aligned dims.  One thread drives
 * the stores; the baselines' threads share nothing but read-only data.
 */
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <pthread.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "api/alloc.h"
#include "bench/bench_common.h"
#include "compute/half.h"
#include "compute/kernels.h"
#include "kvflash.h"

#define N_LAYERS 2u            /* layer 0 scattered, layer 1 clustered */
#define SEQ_ID 1u              /* the one sequence */
#define PREFILL_CHUNK 2048u    /* tokens per kvf_append (chunked prefill) */
#define PLAIN_CHUNK (1u << 20) /* bytes per plain O_DIRECT pread */
#define MAX_REPEAT 32u
#define MAX_THREADS 64u
#define ALIGN_DIMS 8u      /* dims of a head that q points along */
#define SCATTER_EVERY 128u /* layer 0: one heavy hitter in this many */
#define RUN_BLOCK 512u     /* layer 1: one run in every RUN_BLOCK */
#define RUN_TOKENS 80u     /* tokens per run */
#define HH_K 2.0f          /* a heavy hitter's K on the aligned dims */
#define CHECK_TOL 1e-4     /* max |difference| the checks accept */
#define MEM_CALLS 3u       /* in-memory calls (and reads) per pass */
#define N_MODES 2u         /* SparF modes measured: sparse = 1, 2 */

/* The SparF modes of section 3, in the order they are printed. */
static const struct sparf_mode {
	uint32_t sparse;   /* kvf_attn_opts.sparse */
	const char *title; /* the table's heading */
	const char *json;  /* JSON key prefix (then _layer<l>) */
	const char *name;  /* JSON "mode" */
} sparf_mode[N_MODES] = {
	{ 1, "3a. SparF by tokens (sparse = 1)", "sparf", "tokens" },
	{ 2, "3b. SparF by groups (sparse = 2)", "sparf_groups", "groups" },
};

struct attend_args {
	const char *dir;    /* where the stores and the plain file go */
	kvf_model model;    /* the layer shape (n_layers fixed at 2) */
	uint32_t n_tokens;  /* tokens of the sequence */
	uint32_t top_r;     /* SparF dims; 0 = head_dim / 8 */
	uint32_t top_k;     /* SparF tokens; 0 = n_tokens / 8 */
	uint32_t n_threads; /* store threads (and baseline threads); 0 = CPUs */
	uint32_t repeat;    /* passes; medians are reported */
	int json;           /* JSON instead of a table */
	int keep;           /* leave the stores and the plain file */
};

/* One pass's times, ns; [l] is layer l, [s][l] SparF mode s on layer l.
 * Only doubles: medians are taken member by member. */
struct attend_pass {
	double mem_attend;           /* dense kvf_attend, memory store */
	double mem_plain;            /* plain read, n_threads threads */
	double mem_plain1;           /* plain read, one thread */
	double cold_dense[N_LAYERS]; /* dense kvf_attend, file store, cold */
	double plain_direct;         /* O_DIRECT preads of the same bytes */
	double flex;                 /* kvf_read + kernel outside, cold */
	double mem_sparf[N_MODES][N_LAYERS];   /* SparF, memory store, warm */
	double sparf_first[N_MODES][N_LAYERS]; /* first call after a reopen */
	double sparf[N_MODES][N_LAYERS];       /* the next (timed) call */
	/* CPU ns of the whole process (all threads) during those calls */
	double cold_dense_cpu[N_LAYERS];
	double sparf_cpu[N_MODES][N_LAYERS];
	double flex_cpu;
	double reopen; /* kvf_close + kvf_open of the store */
};

/* Figures of one SparF mode on one layer (the last pass). */
struct sparf_figs {
	uint64_t first_bytes;     /* bytes_read of the first call after reopen */
	uint64_t bytes;           /* bytes_read of the timed call */
	uint64_t pages_read;      /* sparf_pages_read of the timed call */
	uint64_t pages_skipped;   /* sparf_pages_skipped of it */
	double cos_min, cos_mean; /* vs dense, over the q heads */
};

/* Figures of one layer that do not vary between passes (the last pass). */
struct layer_figs {
	uint64_t dense_bytes;          /* bytes_read of a cold dense call */
	struct sparf_figs sp[N_MODES]; /* per SparF mode */
	double hh_mass; /* dense attention mass on heavy hitters */
};

struct attend_ctx {
	const struct attend_args *a;
	kvf_options opts;          /* the file store's (kept for reopens) */
	char *mem_dir;             /* DIR/mem */
	char *file_dir;            /* DIR/file */
	char *plain_path;          /* DIR/plain.dat */
	kvf_store *mem;            /* memory store, open for the whole run */
	kvf_store *file;           /* file store, reopened for cold calls */
	uint16_t *noise_k;         /* [65536] f16, uniform in [-0.5, 0.5) */
	uint16_t *noise_v;         /* [65536] f16, uniform in [-1, 1) */
	float *q[N_LAYERS];        /* [n_q_heads][head_dim] per layer */
	float *dense[N_LAYERS];    /* dense output of the last cold call */
	float *out;                /* [n_q_heads][head_dim] scratch */
	uint64_t *membuf;          /* kv_bytes for the plain memory read */
	unsigned char *chunk;      /* PLAIN_CHUNK bytes, aligned */
	uint64_t kv_bytes;         /* K+V bytes of one layer */
	uint64_t plain_file_bytes; /* kv_bytes rounded up to PLAIN_CHUNK */
	uint32_t n_threads;        /* threads the store computes with */
	uint32_t top_r, top_k;     /* SparF parameters in use */
	uint32_t group_tokens;     /* G: tokens of a head in a K/V page */
	int direct_io;             /* the file store opened with O_DIRECT */
	int plain_direct;          /* the plain file is O_DIRECT */
	volatile uint64_t sink;    /* plain read sums, so none is dropped */
	double last_cpu;           /* CPU ns of the last timed call */
	struct layer_figs fig[N_LAYERS];
	uint64_t flex_bytes;    /* bytes_read of the FlexGen pass */
	double diff_mem_file;   /* max |dense memory - dense file|, layer 0 */
	double diff_flex;       /* max |FlexGen - dense kvf_attend| */
	double diff_ref;        /* max |double reference - kvf_attend| */
	uint64_t verified_rows; /* rows read back and compared */
};

static void usage(FILE *f)
{
	fprintf(f,
		"usage: kvbench attend [--dir DIR] [--tokens N] [--q-heads N] [--kv-heads N]\n"
		"                      [--head-dim N] [--top-r N] [--top-k N] [--threads N]\n"
		"                      [--repeat N] [--json] [--keep]\n"
		"  --dir DIR        directory for the stores and the plain file\n"
		"                   (default ./kvbench-attend)\n"
		"  --tokens N       tokens of the sequence, K suffix (default 32K)\n"
		"  --q-heads N      query heads (default 32; a multiple of --kv-heads)\n"
		"  --kv-heads N     kv heads (default 8)\n"
		"  --head-dim N     elements per head, f16; a multiple of 8, >= 16\n"
		"                   (default 128)\n"
		"  --top-r N        SparF dims (default head_dim / 8)\n"
		"  --top-k N        SparF tokens (default tokens / 8); by groups, the\n"
		"                   ceil(N / tokens a page) groups of most mass\n"
		"  --threads N      threads the store computes with, and the baselines\n"
		"                   (default: online CPUs)\n"
		"  --repeat N       passes; medians are reported (default 5)\n"
		"  --json           JSON instead of a table\n"
		"  --keep           leave the stores and the plain file in DIR\n");
}

/* parse_head_dim - --head-dim: a multiple of 8 in [16, 512] */
static int parse_head_dim(const char *flag, const char *text, void *out)
{
	uint64_t v;

	if (bench_parse_u64(flag, text, &v) != 0)
		return 2;
	if (v < 16 || v > 512 || v % 8 != 0)
		return -1;
	*(uint32_t *)out = (uint32_t)v;
	return 0;
}

static int parse_args(int argc, char **argv, struct attend_args *a)
{
	const struct bench_opt opts[] = {
		BENCH_STR("--dir", a->dir),
		BENCH_U32("--tokens", a->n_tokens, 1, 1u << 24),
		BENCH_U32("--q-heads", a->model.n_q_heads, 1, 1024),
		BENCH_U32("--kv-heads", a->model.n_kv_heads, 1, 1024),
		BENCH_FUNC("--head-dim", parse_head_dim, &a->model.head_dim),
		BENCH_U32("--top-r", a->top_r, 1, 512),
		BENCH_U32("--top-k", a->top_k, 1, 1u << 24),
		BENCH_U32("--threads", a->n_threads, 1, MAX_THREADS),
		BENCH_U32("--repeat", a->repeat, 1, MAX_REPEAT),
		BENCH_BOOL("--json", a->json),
		BENCH_BOOL("--keep", a->keep),
		{ 0 }
	};
	int rc;

	*a = (struct attend_args){ .dir = "kvbench-attend",
				   .model = { .n_layers = N_LAYERS,
					      .n_q_heads = 32,
					      .n_kv_heads = 8,
					      .head_dim = 128,
					      .dtype = KVF_DTYPE_F16 },
				   .n_tokens = 32768,
				   .repeat = 5 };
	rc = bench_parse_opts("attend", usage, opts, argc, argv);
	if (rc != 0)
		return rc;
	if (bench_check_heads("attend", &a->model) != 0)
		return 2;
	if (a->top_r > a->model.head_dim)
		return bench_usage_error("attend",
					 "--top-r %u is past --head-dim %u",
					 a->top_r, a->model.head_dim);
	return 0;
}

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

static int setup(struct attend_ctx *c)
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
	if (bench_make_dir("attend", a->dir, NULL) != 0)
		return -1;
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
	c->opts.direct_io = 1;
	rc = kvf_open(c->file_dir, &c->opts, &c->file);
	c->direct_io = rc == KVF_OK;
	if (rc == KVF_ENOTSUP) { /* no O_DIRECT here: say so, go on */
		c->opts.direct_io = 0;
		rc = kvf_open(c->file_dir, &c->opts, &c->file);
	}
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

static void teardown(struct attend_ctx *c)
{
	kvf_close(c->file);
	kvf_close(c->mem);
	if (!c->a->keep && c->file_dir) {
		bench_remove_store(c->file_dir);
		bench_remove_store(c->mem_dir);
		unlink(c->plain_path);
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

/* ---- plain loops --------------------------------------------------------- */

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

/* plain_mem - read every word of the kv_bytes buffer on n threads (the
 * calling thread takes the first part); ns, 0 on error */
static double plain_mem(struct attend_ctx *c, uint32_t n)
{
	struct sum_part part[MAX_THREADS];
	pthread_t tid[MAX_THREADS];
	size_t words = c->kv_bytes / 8, each = (words + n - 1) / n;
	uint64_t t0 = bench_now_ns(), sum = 0;
	uint32_t started = 1;

	for (uint32_t i = 0; i < n; i++) {
		size_t lo = (size_t)i * each < words ? (size_t)i * each : words;
		size_t hi = lo + each < words ? lo + each : words;

		part[i] =
			(struct sum_part){ .w = c->membuf + lo, .n = hi - lo };
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
		fprintf(stderr, "kvbench attend: pthread_create failed\n");
		return 0;
	}
	return (double)t0;
}

/* plain_direct - plain_file_bytes (kv_bytes rounded up to PLAIN_CHUNK)
 * read from the plain file in sequential PLAIN_CHUNK preads, one thread;
 * ns, 0 on error */
static double plain_direct(struct attend_ctx *c)
{
	int fd = open(c->plain_path,
		      O_RDONLY | (c->plain_direct ? O_DIRECT : 0));
	uint64_t t0, done = 0;

	if (fd < 0)
		goto err;
	t0 = bench_now_ns();
	while (done < c->plain_file_bytes) {
		if (pread(fd, c->chunk, PLAIN_CHUNK, (off_t)done) !=
		    (ssize_t)PLAIN_CHUNK)
			goto err;
		done += PLAIN_CHUNK;
	}
	t0 = bench_now_ns() - t0;
	c->sink += c->chunk[4095];
	close(fd);
	return (double)t0;
err:
	fprintf(stderr, "kvbench attend: reading %s: %s\n", c->plain_path,
		strerror(errno));
	if (fd >= 0)
		close(fd);
	return 0;
}

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

/* attend - one timed kvf_attend of a layer into out (sparse: 0 dense, else
 * that SparF mode at the run's top_r and top_k); ns, 0 on error; *bytes
 * gets the bytes_read delta, *pr / *ps (may be NULL) the SparF page
 * deltas, c->last_cpu the CPU time of the process meanwhile */
static double attend(struct attend_ctx *c, kvf_store *st, uint32_t layer,
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

struct flex_worker {
	struct attend_ctx *c;
	uint32_t layer;
	uint32_t first, step; /* KV heads first, first + step, ... */
	unsigned char *k, *v; /* one head's K and V rows */
	float *state;         /* KVC_ATTN_STATE_FLOATS(group, head_dim) */
	float *qs;            /* [group][head_dim], scaled */
	kvf_status rc;        /* first failure */
	char msg[256];        /* its message */
};

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

static void flex_free(struct flex_worker *w, uint32_t n)
{
	for (uint32_t i = 0; i < n; i++) {
		kvf_free(w[i].k);
		kvf_free(w[i].v);
		kvf_free(w[i].state);
		kvf_free(w[i].qs);
	}
}

static int flex_alloc(struct attend_ctx *c, struct flex_worker *w)
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
			flex_free(w, i + 1);
			fprintf(stderr, "kvbench attend: out of memory\n");
			return -1;
		}
	}
	return 0;
}

/* ---- checks -------------------------------------------------------------- */

static double max_diff(const float *a, const float *b, size_t n)
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

/* sparf_cosine - min and mean over the q heads of cos(SparF, dense) */
static void sparf_cosine(const struct attend_ctx *c, const float *sparse,
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

/* check_layer - untimed: read every head of a layer back with kvf_read,
 * compare each row with the row appended, and compute the double
 * reference; its max |difference| to dense kvf_attend (c->dense[layer])
 * goes to c->diff_ref, the heavy-hitter mass to the layer's figures */
static int check_layer(struct attend_ctx *c, struct flex_worker *w,
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
	d = max_diff(c->out, c->dense[layer], (size_t)m->n_q_heads * D);
	c->diff_ref = d > c->diff_ref ? d : c->diff_ref;
	c->fig[layer].hh_mass = hh;
	ret = 0;
out:
	free(s);
	free(acc);
	free(row);
	return ret;
}

/* ---- one pass ------------------------------------------------------------ */

/* pass_memory - dense kvf_attend on the memory store and the plain read
 * (MEM_CALLS of each, the mean taken), `first` choosing which goes first;
 * then SparF (each mode) on the memory store */
static int pass_memory(struct attend_ctx *c, int first, struct attend_pass *p)
{
	uint64_t bytes;

	p->mem_attend = p->mem_plain = p->mem_plain1 = 0;
	for (int i = 0; i < 2; i++)
		for (uint32_t j = 0; j < MEM_CALLS; j++) {
			double x, y;

			if ((first ^ i) == 0) {
				x = attend(c, c->mem, 0, 0, c->out, &bytes,
					   NULL, NULL);
				if (x == 0)
					return -1;
				p->mem_attend += x / MEM_CALLS;
				continue;
			}
			x = plain_mem(c, c->n_threads);
			y = plain_mem(c, 1);
			if (x == 0 || y == 0)
				return -1;
			p->mem_plain += x / MEM_CALLS;
			p->mem_plain1 += y / MEM_CALLS;
		}
	for (uint32_t s = 0; s < N_MODES; s++)
		for (uint32_t l = 0; l < N_LAYERS; l++) {
			p->mem_sparf[s][l] = attend(c, c->mem, l,
						    sparf_mode[s].sparse,
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
	p->sparf_first[s][l] = attend(c, c->file, l, sparse, c->out,
				      &f->first_bytes, NULL, NULL);
	if (p->sparf_first[s][l] == 0)
		return -1;
	p->sparf[s][l] = attend(c, c->file, l, sparse, c->out, &f->bytes,
				&f->pages_read, &f->pages_skipped);
	if (p->sparf[s][l] == 0)
		return -1;
	p->sparf_cpu[s][l] = c->last_cpu;
	sparf_cosine(c, c->out, c->dense[l], f);
	return 0;
}

/* pass_cold - dense, SparF (each mode) and the FlexGen way on the file
 * store, each after a reopen, and the plain O_DIRECT read */
static int pass_cold(struct attend_ctx *c, struct flex_worker *w, int first,
		     struct attend_pass *p)
{
	size_t qe = (size_t)c->a->model.n_q_heads * c->a->model.head_dim;
	double diff;

	for (int i = 0; i < 2; i++) {
		if ((first ^ i) == 1) {
			if ((p->plain_direct = plain_direct(c)) == 0)
				return -1;
			continue;
		}
		for (uint32_t l = 0; l < N_LAYERS; l++) {
			struct layer_figs *f = &c->fig[l];

			if ((p->reopen = reopen(c)) == 0)
				return -1;
			p->cold_dense[l] = attend(c, c->file, l, 0, c->dense[l],
						  &f->dense_bytes, NULL, NULL);
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
	diff = max_diff(c->out, c->dense[0], qe);
	c->diff_flex = diff > c->diff_flex ? diff : c->diff_flex;
	return 0;
}

/* ---- output -------------------------------------------------------------- */

static double gbs(uint64_t bytes, double ns)
{
	return ns > 0 ? (double)bytes / ns : 0;
}

static double mib(uint64_t bytes)
{
	return (double)bytes / (1024.0 * 1024.0);
}

static const char *const layer_name[N_LAYERS] = { "scattered heavy hitters",
						  "clustered heavy hitters" };

/* print_sparf - section 3 for SparF mode s: each layer against dense */
static void print_sparf(const struct attend_ctx *c, const struct attend_pass *m,
			uint32_t s)
{
	uint32_t G = c->group_tokens;

	printf("%s vs dense, cold: top_r %u dims, top_k %u\n",
	       sparf_mode[s].title, c->top_r, c->top_k);
	if (sparf_mode[s].sparse == 2)
		printf("   (each KV head's %u groups of %u tokens of most approximate mass, whole)\n",
		       (c->top_k + G - 1) / G, G);
	else
		printf("   (each query head's %u tokens of highest approximate score)\n",
		       c->top_k);
	for (uint32_t l = 0; l < N_LAYERS; l++) {
		const struct sparf_figs *f = &c->fig[l].sp[s];
		uint64_t dense = c->fig[l].dense_bytes;

		printf("   layer %u: %s (they hold %.0f%% of dense attention's mass)\n",
		       l, layer_name[l], 100 * c->fig[l].hh_mass);
		printf("%-34s %8.1f MiB %8.1f MiB %7.2fx  <= 0.30x\n",
		       "   bytes read", mib(f->bytes), mib(dense),
		       (double)f->bytes / (double)dense);
		printf("%-34s %9.1f ms %9.1f ms %7.2fx  >= 2.50x faster\n",
		       "   time a call", m->sparf[s][l] / 1e6,
		       m->cold_dense[l] / 1e6,
		       m->cold_dense[l] / m->sparf[s][l]);
		printf("   the timed call is the second after a reopen: CPU %.1f ms; on the memory store\n"
		       "   (no I/O) %.1f ms; SparF pages read %llu, skipped %llu\n",
		       m->sparf_cpu[s][l] / 1e6, m->mem_sparf[s][l] / 1e6,
		       (unsigned long long)f->pages_read,
		       (unsigned long long)f->pages_skipped);
		printf("   first call after the reopen (it also catches the mean of V up if behind):\n"
		       "   %.1f MiB (%.2fx dense), %.1f ms (speed-up %.2fx)\n",
		       mib(f->first_bytes), (double)f->first_bytes / (double)dense,
		       m->sparf_first[s][l] / 1e6,
		       m->cold_dense[l] / m->sparf_first[s][l]);
		printf("   cosine of SparF's output to dense over the %u q heads: min %.4f, mean %.4f\n",
		       c->a->model.n_q_heads, f->cos_min, f->cos_mean);
	}
}

static void print_table(const struct attend_ctx *c, const struct attend_pass *m)
{
	const struct attend_args *a = c->a;
	uint64_t kv = c->kv_bytes;
	int ok = c->diff_ref <= CHECK_TOL && c->diff_mem_file <= CHECK_TOL &&
		 c->diff_flex <= CHECK_TOL;

	printf("kvbench attend: %s, one sequence of %u tokens, %u q heads / %u kv heads x %u dims f16\n"
	       "  (K+V %.1f MiB a layer); %u threads (store and baselines); both stores keep K^T pages;\n"
	       "  file store O_DIRECT %s (plain file %s); SparF top_r %u, top_k %u; median of %u\n",
	       a->dir, a->n_tokens, a->model.n_q_heads, a->model.n_kv_heads,
	       a->model.head_dim, mib(kv), c->n_threads,
	       c->direct_io ? "on" : "off (fallback)",
	       c->plain_direct ? "on" : "off", c->top_r, c->top_k, a->repeat);
	printf("\n%-34s %12s %12s %8s  %s\n", "measurement", "kvflash",
	       "baseline", "ratio", "target");
	printf("%-34s %7.2f GB/s %7.2f GB/s %7.2fx  >= 0.60x\n",
	       "1. dense, in memory", gbs(kv, m->mem_attend),
	       gbs(kv, m->mem_plain), m->mem_plain / m->mem_attend);
	printf("   kvf_attend %.1f ms a call (mean of %u back to back); baseline: sum of every\n"
	       "   64-bit word of a buffer of as many bytes, %u threads (on one: %.2f GB/s, %.2fx)\n",
	       m->mem_attend / 1e6, MEM_CALLS, c->n_threads,
	       gbs(kv, m->mem_plain1), m->mem_plain1 / m->mem_attend);
	printf("%-34s %7.2f GB/s %7.2f GB/s %7.2fx  >= 0.80x\n",
	       "2. dense, cold, file backend", gbs(kv, m->cold_dense[0]),
	       gbs(c->plain_file_bytes, m->plain_direct),
	       gbs(kv, m->cold_dense[0]) /
		       gbs(c->plain_file_bytes, m->plain_direct));
	printf("   kvf_attend %.1f ms a call (CPU %.1f ms), layer 1 %.1f ms; it read %.1f MiB in\n"
	       "   %llu pages; baseline: one thread of 1 MiB O_DIRECT preads; reopen %.1f ms, untimed\n",
	       m->cold_dense[0] / 1e6, m->cold_dense_cpu[0] / 1e6,
	       m->cold_dense[1] / 1e6, mib(c->fig[0].dense_bytes),
	       (unsigned long long)(c->fig[0].dense_bytes / 4096),
	       m->reopen / 1e6);
	for (uint32_t s = 0; s < N_MODES; s++)
		print_sparf(c, m, s);
	printf("%-34s %9.1f ms %9.1f ms %7.2fx  (speed-up of kvf_attend)\n",
	       "4. kvf_attend vs the FlexGen way", m->cold_dense[0] / 1e6,
	       m->flex / 1e6, m->flex / m->cold_dense[0]);
	printf("   cold, layer 0; FlexGen way: %u threads, each kvf_read of one head's K and V\n"
	       "   (%.1f MiB in all), then kvc_kernels()->attn_fold (%s, the store's kernel) over\n"
	       "   them; CPU %.1f ms (kvf_attend %.1f ms)\n",
	       c->n_threads, mib(c->flex_bytes), kvc_kernels()->name,
	       m->flex_cpu / 1e6, m->cold_dense_cpu[0] / 1e6);
	printf("checks: %llu rows read back equal the rows appended; max |difference| to a\n"
	       "  double-precision reference %.2g, memory vs file store %.2g, FlexGen vs\n"
	       "  kvf_attend %.2g (tolerance %.0e): %s\n",
	       (unsigned long long)c->verified_rows, c->diff_ref,
	       c->diff_mem_file, c->diff_flex, CHECK_TOL,
	       ok ? "ok" : "MISMATCH");
}

static void json_vs(struct bench_json *j, const char *key, double kvf,
		    double base, const char *unit, double ratio,
		    const char *target_kind, double target)
{
	char k0[48], k1[48];

	snprintf(k0, sizeof(k0), "kvflash_%s", unit);
	snprintf(k1, sizeof(k1), "baseline_%s", unit);
	bench_json_begin(j, key);
	bench_json_double(j, k0, kvf);
	bench_json_double(j, k1, base);
	bench_json_double(j, "ratio", ratio);
	if (target_kind)
		bench_json_double(j, target_kind, target);
}

/* json_sparf - "<mode>_layer<l>": SparF mode s on layer l against dense */
static void json_sparf(struct bench_json *j, const struct attend_ctx *c,
		       const struct attend_pass *m, uint32_t s, uint32_t l)
{
	const struct sparf_figs *f = &c->fig[l].sp[s];
	uint64_t dense = c->fig[l].dense_bytes;
	char key[48];

	snprintf(key, sizeof(key), "%s_layer%u", sparf_mode[s].json, l);
	bench_json_begin(j, key);
	bench_json_str(j, "pattern", layer_name[l]);
	bench_json_u64(j, "sparse", sparf_mode[s].sparse);
	bench_json_str(j, "mode", sparf_mode[s].name);
	bench_json_double(j, "dense_heavy_hitter_mass", c->fig[l].hh_mass);
	json_vs(j, "bytes", (double)f->bytes, (double)dense, "bytes",
		(double)f->bytes / (double)dense, "target_max_ratio", 0.3);
	bench_json_end(j);
	json_vs(j, "time", m->sparf[s][l] / 1e6, m->cold_dense[l] / 1e6, "ms",
		m->cold_dense[l] / m->sparf[s][l], "target_min_speedup", 2.5);
	bench_json_end(j);
	bench_json_begin(j, "first_call_after_open");
	bench_json_u64(j, "bytes", f->first_bytes);
	bench_json_double(j, "ms", m->sparf_first[s][l] / 1e6);
	bench_json_end(j);
	bench_json_double(j, "cpu_ms", m->sparf_cpu[s][l] / 1e6);
	bench_json_double(j, "memory_store_ms", m->mem_sparf[s][l] / 1e6);
	bench_json_double(j, "cosine_min", f->cos_min);
	bench_json_double(j, "cosine_mean", f->cos_mean);
	bench_json_u64(j, "sparf_pages_read", f->pages_read);
	bench_json_u64(j, "sparf_pages_skipped", f->pages_skipped);
	bench_json_end(j);
}

static void print_json(const struct attend_ctx *c, const struct attend_pass *m)
{
	const struct attend_args *a = c->a;
	struct bench_json j = { .f = stdout };
	uint64_t kv = c->kv_bytes;

	bench_json_begin(&j, NULL);
	bench_json_str(&j, "bench", "attend");
	bench_json_str(&j, "dir", a->dir);
	bench_json_begin(&j, "model");
	bench_json_u64(&j, "n_q_heads", a->model.n_q_heads);
	bench_json_u64(&j, "n_kv_heads", a->model.n_kv_heads);
	bench_json_u64(&j, "head_dim", a->model.head_dim);
	bench_json_str(&j, "dtype", "f16");
	bench_json_end(&j);
	bench_json_u64(&j, "tokens", a->n_tokens);
	bench_json_u64(&j, "kv_bytes_per_layer", kv);
	bench_json_u64(&j, "threads", c->n_threads);
	bench_json_u64(&j, "top_r", c->top_r);
	bench_json_u64(&j, "top_k", c->top_k);
	bench_json_u64(&j, "group_tokens", c->group_tokens);
	bench_json_u64(&j, "repeat", a->repeat);
	bench_json_u64(&j, "direct_io", (uint64_t)c->direct_io);
	bench_json_u64(&j, "plain_direct_io", (uint64_t)c->plain_direct);
	bench_json_str(&j, "kernel", kvc_kernels()->name);
	json_vs(&j, "dense_memory", gbs(kv, m->mem_attend),
		gbs(kv, m->mem_plain), "gb_s", m->mem_plain / m->mem_attend,
		"target_min_ratio", 0.6);
	bench_json_double(&j, "kvflash_ms", m->mem_attend / 1e6);
	bench_json_double(&j, "baseline_one_thread_gb_s",
			  gbs(kv, m->mem_plain1));
	bench_json_end(&j);
	json_vs(&j, "dense_cold_file", gbs(kv, m->cold_dense[0]),
		gbs(c->plain_file_bytes, m->plain_direct), "gb_s",
		gbs(kv, m->cold_dense[0]) /
			gbs(c->plain_file_bytes, m->plain_direct),
		"target_min_ratio", 0.8);
	bench_json_double(&j, "kvflash_ms", m->cold_dense[0] / 1e6);
	bench_json_double(&j, "kvflash_cpu_ms", m->cold_dense_cpu[0] / 1e6);
	bench_json_double(&j, "kvflash_layer1_ms", m->cold_dense[1] / 1e6);
	bench_json_u64(&j, "kvflash_bytes_read", c->fig[0].dense_bytes);
	bench_json_double(&j, "reopen_ms", m->reopen / 1e6);
	bench_json_end(&j);
	for (uint32_t s = 0; s < N_MODES; s++)
		for (uint32_t l = 0; l < N_LAYERS; l++)
			json_sparf(&j, c, m, s, l);
	json_vs(&j, "flexgen_way", m->cold_dense[0] / 1e6, m->flex / 1e6, "ms",
		m->flex / m->cold_dense[0], NULL, 0);
	bench_json_double(&j, "kvflash_cpu_ms", m->cold_dense_cpu[0] / 1e6);
	bench_json_double(&j, "baseline_cpu_ms", m->flex_cpu / 1e6);
	bench_json_u64(&j, "baseline_bytes_read", c->flex_bytes);
	bench_json_end(&j);
	bench_json_begin(&j, "checks");
	bench_json_u64(&j, "rows_verified", c->verified_rows);
	bench_json_double(&j, "max_diff_reference", c->diff_ref);
	bench_json_double(&j, "max_diff_memory_vs_file", c->diff_mem_file);
	bench_json_double(&j, "max_diff_flexgen", c->diff_flex);
	bench_json_double(&j, "tolerance", CHECK_TOL);
	bench_json_end(&j);
	bench_json_end(&j);
}

/* median_of - the median over n passes of the double at byte offset off */
static double median_of(const struct attend_pass *p, uint32_t n, size_t off)
{
	double v[MAX_REPEAT];

	for (uint32_t i = 0; i < n; i++)
		memcpy(&v[i], (const char *)&p[i] + off, sizeof(double));
	return bench_median(v, n);
}

/* ---- main ---------------------------------------------------------------- */

int bench_attend_main(int argc, char **argv)
{
	struct attend_args a;
	struct attend_ctx c = { 0 };
	struct attend_pass passes[MAX_REPEAT], med;
	struct flex_worker w[MAX_THREADS];
	size_t qe;
	uint64_t bytes;
	int rc, have_w = 0;

	if ((rc = parse_args(argc, argv, &a)) != 0)
		return rc == 1 ? 0 : rc;
	c.a = &a;
	rc = 1;
	if (setup(&c) != 0)
		goto out;
	if (flex_alloc(&c, w) != 0)
		goto out;
	have_w = 1;
	qe = (size_t)a.model.n_q_heads * a.model.head_dim;
	/* untimed first calls on the memory store: dense, and SparF, whose
	 * first call catches the mean of V up */
	if (attend(&c, c.mem, 0, 0, c.out, &bytes, NULL, NULL) == 0)
		goto out;
	for (uint32_t s = 0; s < N_MODES; s++)
		for (uint32_t l = 0; l < N_LAYERS; l++)
			if (attend(&c, c.mem, l, sparf_mode[s].sparse, c.out,
				   &bytes, NULL, NULL) == 0)
				goto out;
	for (uint32_t i = 0; i < a.repeat; i++)
		if (pass_memory(&c, (int)(i % 2), &passes[i]) != 0 ||
		    pass_cold(&c, w, (int)(i % 2), &passes[i]) != 0)
			goto out;
	if (attend(&c, c.mem, 0, 0, c.out, &bytes, NULL, NULL) == 0)
		goto out;
	c.diff_mem_file = max_diff(c.out, c.dense[0], qe);
	for (uint32_t l = 0; l < N_LAYERS; l++)
		if (check_layer(&c, &w[0], l) != 0)
			goto out;
	for (size_t off = 0; off < sizeof(med); off += sizeof(double)) {
		double v = median_of(passes, a.repeat, off);

		memcpy((char *)&med + off, &v, sizeof(double));
	}
	if (a.json)
		print_json(&c, &med);
	else
		print_table(&c, &med);
	rc = 0;
out:
	if (have_w)
		flex_free(w, c.n_threads);
	teardown(&c);
	return rc;
}
