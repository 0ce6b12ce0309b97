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
 *
 * With --context, `kvbench decode` runs the long-context benchmark of
 * bench_decode_ctx.c instead (one sequence, kvflash against an in-memory
 * cache and a FlexGen-style reader); without it, what is above.
 *
 * The files: this one parses the arguments and runs the whole;
 * bench_decode_run.c the data, baselines and runs; bench_decode_report.c
 * the figures (bench_decode_int.h is what they share);
 * bench_decode_ctx.c and bench_decode_ctx_report.c the --context mode.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "api/alloc.h"
#include "bench/bench_common.h"
#include "bench/bench_decode_ctx_int.h"
#include "bench/bench_decode_int.h"
#include "compute/half.h"
#include "kvflash.h"

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
		"  --fit BYTES      the working set that fits, below --budget\n"
		"                   (default budget / 2)\n"
		"  --scale N        the larger working set, times --fit (default 4)\n"
		"  --layers N       layers (default 4)\n"
		"  --q-heads N      query heads (default 32; a multiple of --kv-heads)\n"
		"  --kv-heads N     kv heads (default 8)\n"
		"  --head-dim N     elements per head, f16, a multiple of 8 (default 128)\n"
		"  --threads N      threads the store computes with, and the memory\n"
		"                   loop's (default: online CPUs)\n"
		"  --json           one JSON object instead of a table\n"
		"  --keep           leave the stores in DIR\n"
		"With --context N[,N...] it measures long-context decode of one sequence\n"
		"instead: kvflash (dense, SparF) on a store larger than its dram_budget\n"
		"against an in-memory cache and a FlexGen-style reader, in one run\n"
		"(kvbench decode --context 4096 --help for its options).\n");
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
	/* the tier also holds group buffers and the index: a working set of
	 * the whole budget would not fit it either */
	if (a->fit_bytes >= a->budget)
		return bench_usage_error("decode", "--fit %llu is not below --budget %llu: the working set that fits must fit the tier's budget",
					 (unsigned long long)a->fit_bytes,
					 (unsigned long long)a->budget);
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

	if (decode_ctx_wanted(argc, argv))
		return decode_ctx_main(argc, argv);
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
		if (r % 2 == 0 && decode_baselines(c, decode_ws_of(c, r / 2), &c->base[r / 2]) != 0)
			goto out;
		if (decode_run_one(c, r, &b) != 0)
			goto out;
	}
	for (uint32_t i = 0; i < 2; i++)
		c->diff[i] = decode_max_diff(c->last_out[2 * i], c->last_out[2 * i + 1], qn);
	if (a.json)
		decode_print_json(c);
	else
		decode_print_table(c);
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
