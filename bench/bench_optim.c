/*
 * bench_optim.c - `kvbench optim`: Adam steps on optimizer state kept in
 * the store (kvf_opt_step) against plain loops that move the same bytes,
 * side by side in one run.
 *
 * One tensor of n_params fp32 parameters (default 32M: 128 MiB of params
 * and 256 MiB of Adam moments, well past the caches; at 64M a step of the
 * file store takes some 5 s on a 2-core VM and the default run would pass
 * a minute) lives in two stores in turn, each with its own optimizer
 * created from the same initial parameters (PyTorch's Adam defaults), and
 * stepped once untimed before the timed steps (the first step after
 * create also lays out the third generation of segments):
 *  1. a memory store (KVF_MEDIA_MEMORY): a kvf_opt_step with a dense f32
 *     gradient and f32 params_out against memcpy of the same bytes.  A
 *     step reads p, m, v and g and writes p, m, v and params_out: 8 * 4
 *     bytes per parameter.  The baseline copies four arrays of n_params
 *     floats into four others (16 bytes read and 16 written per
 *     parameter), so both sides count 32 bytes per parameter;
 *  2. a file store with O_DIRECT: the same step against one thread of
 *     1 MiB O_DIRECT pread + pwrite (in place) over a preallocated, fully
 *     written file of p, m and v, then one fdatasync, as the store makes
 *     each step durable once (a media sync and a synced catalog commit).
 *     Both sides count the state bytes through the media, 24 bytes per
 *     parameter (read p, m, v; write p, m, v), so the ratio is that of
 *     the step times;
 *  3. 1% Top-K gradients (ascending indices, f32 values): the bytes the
 *     caller hands to kvf_opt_step (4-byte index + value per entry)
 *     against the dense gradient's, and the step time on each store
 *     against the dense step's.  A Top-K step still streams all of p, m
 *     and v (a zero gradient still moves Adam's state).
 * Each pass runs every side `steps` times, alternating which side goes
 * first; every step is timed alone and the medians over all passes are
 * reported, with the targets beside them (figures, never pass/fail).
 * Beside each store's figures: what one dense step asked of the media
 * (bytes and requests read and written, syncs, trims), from the media's
 * own counters (ftl/media.h, reached through engine/lifecycle/store.h: kvf_stats
 * does not count the optimizer's pages as written).  Both stores live in
 * DIR/store, one after the other (the memory store keeps its catalog
 * there); --media runs one of them alone.
 *
 * Checks, untimed: first a small tensor (5 full chunks and a partial one)
 * on a memory store, two dense steps and a Top-K one, every parameter and
 * every params_out value compared bit for bit with the compute/optim.h
 * kernels run on plain arrays; then, on the big tensors, after every step,
 * three ranges of parameters (start, middle, end) of params_out, and of
 * kvf_opt_read at the end, against the same kernels run on those ranges
 * alone (the update is element-wise, so a range gives the same bits).
 *
 * The files: this one parses the arguments and runs the whole;
 * bench_optim_run.c the data, checks and timed steps; bench_optim_report.c
 * the figures (bench_optim_int.h is what they share).
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "api/alloc.h"
#include "bench/bench_common.h"
#include "bench/bench_optim_int.h"
#include "kvflash.h"

static void usage(FILE *f)
{
	fprintf(f,
		"usage: kvbench optim [--dir DIR] [--params N] [--steps N] [--repeat N]\n"
		"                     [--topk PCT] [--stripes N] [--segment BYTES]\n"
		"                     [--size BYTES] [--media memory|file|both]\n"
		"                     [--json] [--keep]\n"
		"  --dir DIR        directory for the stores and the plain file\n"
		"                   (default ./kvbench-optim)\n"
		"  --params N       fp32 parameters of the tensor (at least 8K),\n"
		"                   K/M/G suffixes\n"
		"                   (default 32M: 128 MiB params + 256 MiB Adam moments)\n"
		"  --steps N        timed steps per side per pass (default 2)\n"
		"  --repeat N       passes; medians over every timed step (default 3)\n"
		"  --topk PCT       Top-K gradient entries, percent (default 1)\n"
		"  --stripes N      store stripes (files) (default 1)\n"
		"  --segment BYTES  segment size per stripe (default 1M)\n"
		"  --size BYTES     store capacity (default: three generations of\n"
		"                   the state, + 25%%)\n"
		"  --media KIND     the stores to measure: memory, file or both\n"
		"                   (default both)\n"
		"  --json           JSON instead of a table\n"
		"  --keep           leave the file store and the plain file in DIR\n");
}

/* parse_media - --media memory|file|both */
static int parse_media(const char *flag, const char *text, void *out)
{
	struct optim_args *a = out;

	(void)flag;
	if (strcmp(text, "memory") != 0 && strcmp(text, "file") != 0 &&
	    strcmp(text, "both") != 0)
		return -1;
	a->run_mem = strcmp(text, "file") != 0;
	a->run_file = strcmp(text, "memory") != 0;
	return 0;
}

/* parse_topk - --topk PCT in (0, 100] */
static int parse_topk(const char *flag, const char *text, void *out)
{
	double *pct = out;

	if (bench_parse_double(flag, text, pct) != 0)
		return 2;
	return *pct > 0 && *pct <= 100 ? 0 : -1;
}

static int parse_args(int argc, char **argv, struct optim_args *a)
{
	const struct bench_opt opts[] = {
		BENCH_STR("--dir", a->dir),
		BENCH_FUNC("--media", parse_media, a),
		BENCH_FUNC("--topk", parse_topk, &a->topk_pct),
		/* the small check borrows init and grad */
		BENCH_U64("--params", a->n_params, 8192, UINT32_MAX),
		BENCH_U32("--steps", a->steps, 1, 64),
		BENCH_U32("--repeat", a->repeat, 1, 64),
		BENCH_U32("--stripes", a->n_stripes, 1, 64),
		BENCH_U64("--segment", a->segment_bytes, 1, UINT64_MAX),
		BENCH_U64("--size", a->capacity_bytes, 1, UINT64_MAX),
		BENCH_BOOL("--json", a->json),
		BENCH_BOOL("--keep", a->keep),
		{ 0 }
	};
	int rc;

	*a = (struct optim_args){ .dir = "kvbench-optim",
				  .n_params = 32 * MIB,
				  .steps = 2,
				  .repeat = 3,
				  .topk_pct = 1.0,
				  .n_stripes = 1,
				  .segment_bytes = MIB,
				  .run_mem = 1,
				  .run_file = 1 };
	rc = bench_parse_opts("optim", usage, opts, argc, argv);
	if (rc != 0)
		return rc;
	if ((uint64_t)a->steps * a->repeat > MAX_SAMPLES)
		return bench_usage_error("optim",
					 "--steps times --repeat is at most %u",
					 MAX_SAMPLES);
	return 0;
}


int bench_optim_main(int argc, char **argv)
{
	struct optim_args a;
	struct optim_ctx c = { 0 };
	int rc;

	if ((rc = parse_args(argc, argv, &a)) != 0)
		return rc == 1 ? 0 : rc;
	c.a = &a;
	rc = 1;
	if (optim_setup(&c) != 0)
		goto out;
	if (a.capacity_bytes == 0)
		a.capacity_bytes = optim_default_capacity(&c);
	if (optim_small_check(&c) != 0 ||
	    (a.run_mem && optim_measure_kind(&c, KVF_MEDIA_MEMORY, &c.mem) != 0) ||
	    (a.run_file && optim_measure_kind(&c, KVF_MEDIA_FILE, &c.file) != 0))
		goto out;
	if (a.json)
		optim_print_json(&c);
	else
		optim_print_table(&c);
	rc = 0;
out:
	if (!a.keep && c.store_dir) {
		bench_remove_store(c.store_dir);
		unlink(c.plain_path);
		if (c.made_dir)
			rmdir(a.dir);
	}
	free(c.init);
	free(c.grad);
	free(c.out);
	free(c.idx);
	free(c.vals);
	free(c.src);
	free(c.dst);
	kvf_free(c.chunk);
	free(c.store_dir);
	free(c.plain_path);
	free(c.ref.p);
	free(c.ref.m);
	free(c.ref.v);
	free(c.ref.g);
	free(c.ref.out);
	free(c.ref.got);
	return rc;
}
