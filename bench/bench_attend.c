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
 *  5. (after 4, untimed) H2O eviction (kvf_h2o_evict) of a fork of the
 *     memory store's sequence, keeping 1/2 and 1/4 of each layer: scores
 *     from H2O_QUERIES queries near the layer's q, and the cosine of dense
 *     attention to q over what stays against the full sequence's;
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
 * With --model DIR it measures a trained model instead: the perplexity of
 * a llama2.c checkpoint on held-out tokens with dense attention and with
 * each SparF mode, the model's K and V in a store (bench_attend_model.c).
 *
 * Data: a row of (layer, kind, head, token) is noise drawn from a hash of
 * the four (so any row can be made again to check it), plus, for a heavy
 * hitter's K, HH_K * strength on the head's aligned dims.  One thread drives
 * the stores; the baselines' threads share nothing but read-only data.
 *
 * Files: bench_attend.c (this one) has the flags and the run's order;
 * bench_attend_setup.c the data, the stores and the untimed reference
 * check; bench_attend_run.c the timed calls, the baselines and one pass;
 * bench_attend_report.c the table and the JSON.  What they share is in
 * bench_attend_int.h.
 */
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "bench/bench_attend_int.h"
#include "bench/bench_common.h"
#include "kvflash.h"

static void usage(FILE *f)
{
	fprintf(f,
		"usage: kvbench attend [--dir DIR] [--tokens N] [--q-heads N] [--kv-heads N]\n"
		"                      [--head-dim N] [--top-r N] [--top-k N] [--threads N]\n"
		"                      [--repeat N] [--json] [--keep]\n"
		"       kvbench attend --codec NAME [--dir DIR] [--tokens N] [--q-heads N]\n"
		"                      [--kv-heads N] [--head-dim N] [--threads N] [--budget N]\n"
		"                      [--repeat N] [--json] [--keep]\n"
		"       kvbench attend --model DIR [--codec NAME] [--windows N] [--window N]\n"
		"                      [--dir DIR] [--json] [--keep]\n"
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
		"  --keep           leave the stores and the plain file in DIR\n"
		"  --model DIR      perplexity of the llama2.c checkpoint DIR/tinypy.bin\n"
		"                   on DIR/val.bin, token by token with its K and V in\n"
		"                   a store: dense and each SparF mode at 1/8 and 1/4\n"
		"                   (e.g. the tinypy model beside the repository)\n"
		"  --windows N      --model: windows, spread over val.bin (default 96)\n"
		"  --window N       --model: tokens a window (default 128, as trained)\n"
		"  --codec NAME     fp8, int8 or int4: dense attention over a store of that\n"
		"                   codec against an uncompressed one, cold and warm\n"
		"                   (bytes, speed, output cosine); with --model, the\n"
		"                   dense perplexity with that codec as well, and per\n"
		"                   token its argmax agreement and KL against the\n"
		"                   uncompressed store\n"
		"  --budget N       --codec: the warm stores' dram_budget, K/M/G suffix\n"
		"                   (default 1G): how much of the layer the tier holds\n");
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
		BENCH_STR("--model", a->model_dir),
		BENCH_U32("--windows", a->windows, 1, 1u << 16),
		BENCH_U32("--window", a->window, 2, 1u << 16),
		BENCH_FUNC("--codec", bench_parse_codec, &a->codec),
		BENCH_U64("--budget", a->budget, 1u << 20, 1ull << 40),
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
				   .repeat = 5,
				   .windows = 96,
				   .window = 128,
				   .budget = 1ull << 30 };
	rc = bench_parse_opts("attend", usage, opts, argc, argv);
	if (rc != 0)
		return rc;
	/* what a mode does not read is refused, not ignored */
	static const char *const shape[] = {
		"--tokens", "--q-heads", "--kv-heads", "--head-dim", "--top-r",
		"--top-k", "--threads", "--repeat", "--budget", NULL
	};
	static const char *const windows[] = { "--windows", "--window", NULL };
	static const char *const sparf[] = { "--top-r", "--top-k", NULL };
	static const char *const budget[] = { "--budget", NULL };

	if (a->model_dir != NULL)
		rc = bench_refuse_unused("attend", argc, argv, shape,
					 "with --model (the model sets the shape)");
	else if ((rc = bench_refuse_unused("attend", argc, argv, windows,
					   "without --model")) == 0)
		rc = a->codec != KVF_CODEC_NONE ?
			     bench_refuse_unused("attend", argc, argv, sparf,
						 "with --codec (dense attention only)") :
			     bench_refuse_unused("attend", argc, argv, budget,
						 "without --codec");
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
	if (a.model_dir != NULL)
		return attend_model_main(&a);
	if (a.codec != KVF_CODEC_NONE)
		return attend_codec_main(&a);
	c.a = &a;
	rc = 1;
	if (attend_setup(&c) != 0)
		goto out;
	if (attend_flex_alloc(&c, w) != 0)
		goto out;
	have_w = 1;
	qe = (size_t)a.model.n_q_heads * a.model.head_dim;
	/* untimed first calls on the memory store: dense, and SparF, whose
	 * first call catches the mean of V up */
	if (attend_call(&c, c.mem, 0, 0, c.out, &bytes, NULL, NULL) == 0)
		goto out;
	for (uint32_t s = 0; s < N_MODES; s++)
		for (uint32_t l = 0; l < N_LAYERS; l++)
			if (attend_call(&c, c.mem, l, sparf_mode[s].sparse,
					c.out, &bytes, NULL, NULL) == 0)
				goto out;
	for (uint32_t i = 0; i < a.repeat; i++)
		if (attend_pass_memory(&c, (int)(i % 2), &passes[i]) != 0 ||
		    attend_pass_cold(&c, w, (int)(i % 2), &passes[i]) != 0)
			goto out;
	if (attend_call(&c, c.mem, 0, 0, c.out, &bytes, NULL, NULL) == 0)
		goto out;
	c.diff_mem_file = attend_max_diff(c.out, c.dense[0], qe);
	for (uint32_t l = 0; l < N_LAYERS; l++)
		if (attend_check_layer(&c, &w[0], l) != 0)
			goto out;
	if (attend_h2o(&c) != 0)
		goto out;
	for (size_t off = 0; off < sizeof(med); off += sizeof(double)) {
		double v = median_of(passes, a.repeat, off);

		memcpy((char *)&med + off, &v, sizeof(double));
	}
	if (a.json)
		attend_print_json(&c, &med);
	else
		attend_print_table(&c, &med);
	rc = 0;
out:
	if (have_w)
		attend_flex_free(w, c.n_threads);
	attend_teardown(&c);
	return rc;
}
