/*
 * bench_plan.c - `kvbench plan`: the planners against measured decode
 * steps on this machine.  For a model shape with multi-head attention and
 * one with grouped-query attention (one layer of --tokens tokens each,
 * f16, K and V made from X by the bench's own CPU reference: X W_k with
 * RoPE, X W_v), a fresh file store (O_DIRECT where allowed, no DRAM tier:
 * every read goes to the media) is filled, profiled (kvf_profile_run with
 * the bench's measured recomputation rate as the caller's FLOP/s), and
 * then, for two links between store and caller:
 *  - host: the machine's memcpy rate (a CPU caller reading the store);
 *  - slow: the caller's FLOP/s over --slow-ratio, so this CPU stands for a
 *    GPU behind PCIe (which has thousands of FLOP per link byte),
 * the time of one decode step of the layer is measured against KVPR's
 * split l (the caller recomputes K,V of [0, l) from X, kvf_kvpr_start
 * streams the rest) and against the X-cache share alpha (kvf_attend_x_start
 * attends [0, alpha s) from X near the data, the caller reads and attends
 * the rest, merged by LSE), on a grid of 9 points and at the planner's
 * pick (kvf_plan_kvpr, kvf_plan_xcache on the profile read back with
 * kvf_profile_get).  Reported: every point's median step time, the pick,
 * the best point measured, their ratio (the planner is right when it is
 * at most 1.10), the planner's predicted step time, HillInfer's beta, and
 * two checks: K recomputed by the caller against K read back, and the
 * step's output against kvf_attend over the whole context.
 * --plot DIR writes the sweeps as data files and PNGs (gnuplot).
 *
 * The files: this one parses the arguments and runs the whole;
 * bench_plan_run.c the stores and steps; bench_plan_report.c the figures.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "api/alloc.h"
#include "bench/bench_common.h"
#include "bench/bench_plan_int.h"
#include "kvflash.h"

static void usage(FILE *f)
{
	fprintf(f,
		"usage: kvbench plan [--dir DIR] [--tokens N] [--repeat N]\n"
		"                    [--q-heads N] [--gqa-kv-heads N] [--head-dim N]\n"
		"                    [--slow-ratio X] [--plot DIR] [--json] [--keep]\n"
		"  --dir DIR          directory for the stores (default ./kvbench-plan)\n"
		"  --tokens N         context tokens of the layer timed (default 1024)\n"
		"  --repeat N         timed steps per point, the median (default 3)\n"
		"  --q-heads N        query heads of both shapes (default 4); the MHA\n"
		"                     shape has as many kv heads\n"
		"  --gqa-kv-heads N   kv heads of the GQA shape (default 1)\n"
		"  --head-dim N       elements per head, even (default 64)\n"
		"  --slow-ratio X     the slow link carries the caller's FLOP/s over X\n"
		"                     bytes/s (default 512)\n"
		"  --plot DIR         write plan_kvpr.png, plan_xcache.png and their\n"
		"                     data to DIR (needs gnuplot)\n"
		"  --json             one JSON object instead of a table\n"
		"  --keep             leave the stores in DIR\n");
}

static int parse_args(int argc, char **argv, struct plan_args *a)
{
	const struct bench_opt opts[] = {
		BENCH_STR("--dir", a->dir),
		BENCH_U32("--tokens", a->tokens, 8, PLAN_MAX_TOKENS),
		BENCH_U32("--repeat", a->repeat, 1, 31),
		BENCH_U32("--q-heads", a->q_heads, 1, 256),
		BENCH_U32("--gqa-kv-heads", a->gqa_kv_heads, 1, 256),
		BENCH_U32("--head-dim", a->head_dim, 2, 512),
		BENCH_DOUBLE("--slow-ratio", a->slow_ratio),
		BENCH_STR("--plot", a->plot_dir),
		BENCH_BOOL("--json", a->json),
		BENCH_BOOL("--keep", a->keep),
		{ 0 }
	};
	int rc;

	*a = (struct plan_args){ .dir = "kvbench-plan", .tokens = 1024,
				 .repeat = 3, .q_heads = 4, .gqa_kv_heads = 1,
				 .head_dim = 64, .slow_ratio = 512 };
	if ((rc = bench_parse_opts("plan", usage, opts, argc, argv)) != 0)
		return rc;
	if (a->head_dim % 2)
		return bench_usage_error("plan", "--head-dim %u is odd (RoPE pairs elements)",
					 a->head_dim);
	if (a->q_heads % a->gqa_kv_heads)
		return bench_usage_error("plan", "--q-heads %u is not a multiple of --gqa-kv-heads %u",
					 a->q_heads, a->gqa_kv_heads);
	if (!(a->slow_ratio > 0))
		return bench_usage_error("plan", "--slow-ratio %g must be > 0",
					 a->slow_ratio);
	return 0;
}

int bench_plan_main(int argc, char **argv)
{
	struct plan_args a;
	struct plan_ctx *c;
	int rc, made = 0;

	if ((rc = parse_args(argc, argv, &a)) != 0)
		return rc == 1 ? 0 : rc;
	if ((c = kvf_calloc(1, sizeof(*c))) == NULL) {
		fprintf(stderr, "kvbench plan: out of memory\n");
		return 1;
	}
	c->a = &a;
	rc = 1;
	if (bench_make_dir("plan", a.dir, &made) != 0)
		goto out;
	plan_measure_host(c);
	{
		kvf_model mha = { 1, a.q_heads, a.q_heads, a.head_dim, KVF_DTYPE_F16 };
		kvf_model gqa = { 1, a.q_heads, a.gqa_kv_heads, a.head_dim, KVF_DTYPE_F16 };

		if (plan_run_shape(c, 0, "mha", &mha) != 0 ||
		    plan_run_shape(c, 2, "gqa", &gqa) != 0)
			goto out;
	}
	if (a.json)
		plan_print_json(c);
	else
		plan_print_table(c);
	rc = 0;
	if (a.plot_dir && plan_plot(c, a.plot_dir) != 0)
		rc = 1;
out:
	if (made && !a.keep)
		rmdir(a.dir);
	kvf_free(c);
	return rc;
}
