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
 * given; this one parses the arguments and runs the contexts one after
 * the other; bench_decode_ctx_run.c runs the systems at one context;
 * bench_decode_ctx_report.c prints the table, the JSON and the plot
 * (bench_decode_ctx_int.h is what they share).
 */
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
		"                      [--sparse 1|2] [--sparf-share N] [--codec NAME]\n"
		"                      [--json] [--plot DIR] [--keep]\n"
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
		"  --codec NAME     fp8, int8 or int4: one more kvflash row, dense over a\n"
		"                   store of that codec (compressed KV), with the same\n"
		"                   dram_budget; its output's cosine to dense is shown,\n"
		"                   not checked (the codec rounds)\n"
		"  --json           one JSON document instead of a table\n"
		"  --plot DIR       DIR/decode_context.dat, .gp and, through gnuplot,\n"
		"                   .png: tokens/s against context length, a line a system\n"
		"  --keep           leave the stores and the plain files in DIR\n"
		"Systems: kvflash dense and SparF on a file store that does not fit its\n"
		"dram_budget, reopened before each run; the same attention over an\n"
		"in-memory cache; a FlexGen-style reader (O_DIRECT pread of K and V from\n"
		"a plain file, then the same kernel).  Their outputs must agree with\n"
		"dense kvflash's.\n",
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


/* budget_of - the store's dram_budget at a prompt of tokens: --budget, or
 * a quarter of the K+V, and never under the least kvf_open takes */
static uint64_t budget_of(const struct ctx_args *a, uint64_t tokens)
{
	uint64_t b = a->budget ? a->budget : decode_ctx_kv_bytes(a, tokens) / 4;

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
		BENCH_FUNC("--codec", bench_parse_codec, &a->codec),
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
	if (a->codec != KVF_CODEC_NONE)
		decode_ctx_add_codec(a->codec);
	for (uint32_t i = 0; i < a->n_context; i++) {
		uint64_t kv = decode_ctx_kv_bytes(a, a->context[i]);

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
		if (decode_ctx_run_context(c, a.context[i], budget_of(&a, a.context[i]),
					   &r->pt[i]) != 0)
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
