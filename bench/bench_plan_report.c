/*
 * bench_plan_report.c - the figures of `kvbench plan`: a table, one JSON
 * object, and the plots (data files and a gnuplot script run by popen).
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "bench/bench_plan_int.h"

static const char *const sweep_name[2] = { "kvpr", "xcache" };

static const struct plan_sweep *sweep_of(const struct plan_case *pc, int w)
{
	return w ? &pc->xcache : &pc->kvpr;
}

static double token_bytes(const kvf_model *m, int x)
{
	return x ? (double)m->n_q_heads * m->head_dim * 2
		 : 2.0 * m->n_kv_heads * m->head_dim * 2;
}

void plan_print_table(const struct plan_ctx *c)
{
	const struct plan_args *a = c->a;

	printf("kvbench plan: one layer of %u tokens, f16, median of %u steps a point\n",
	       a->tokens, a->repeat);
	printf("caller: this CPU (the bench's reference recomputation) %.2f GFLOP/s; host memcpy %.2f GB/s\n",
	       c->caller_flops / 1e9, c->host_bps / 1e9);
	for (uint32_t i = 0; i < PLAN_CASES; i++) {
		const struct plan_case *pc = &c->c[i];
		const kvf_profile *p = &pc->prof;

		if (i % 2 == 0)
			printf("\n%s: %u query heads, %u kv heads x %u; X %.0f B a token, K+V %.0f B (%s)%s\n"
			       "  profile: read cold %.2f GB/s, warm %.2f GB/s; attention near the data %.0f tokens/s;"
			       " recomputation near the data %.2f GFLOP/s\n",
			       pc->shape, pc->m.n_q_heads, pc->m.n_kv_heads,
			       pc->m.head_dim, token_bytes(&pc->m, 1),
			       token_bytes(&pc->m, 0),
			       pc->x_smaller ? "X smaller: the X-cache saves bytes"
			       : token_bytes(&pc->m, 1) == token_bytes(&pc->m, 0)
				       ? "the same size: the X-cache neither saves nor costs bytes"
				       : "X larger: the X-cache costs bytes",
			       pc->direct_io ? "" : " [no O_DIRECT]",
			       p->read_cold_bytes_per_s / 1e9,
			       p->read_warm_bytes_per_s / 1e9,
			       p->attend_tokens_per_s, p->store_flops / 1e9);
		printf("  link %s (%.3g MB/s); caller %.2f GFLOP/s; profiled again before the X-cache sweep: near the data %.2f GFLOP/s\n",
		       pc->link, p->link_bytes_per_s / 1e6, p->caller_flops / 1e9,
		       pc->prof_x.store_flops / 1e9);
		for (int w = 0; w < 2; w++) {
			const struct plan_sweep *sw = sweep_of(pc, w);

			printf("    %-7s %-6s", w ? "X-cache" : "KVPR", w ? "alpha" : "l/s");
			for (uint32_t k = 0; k < sw->n_pt; k++)
				printf(" %7.3f%s", sw->pt[k].x, k == sw->pick ? "*" : " ");
			printf("\n    %-7s %-6s", "", "ms");
			for (uint32_t k = 0; k < sw->n_pt; k++)
				printf(" %7.2f ", sw->pt[k].t_s * 1e3);
			printf("\n    pick %s %.3f: %.2f ms (predicted %.2f); best %.3f: %.2f ms; pick/best %.3f%s\n",
			       w ? "alpha" : "l/s", sw->pt[sw->pick].x,
			       sw->pt[sw->pick].t_s * 1e3, sw->pred_s * 1e3,
			       sw->pt[sw->best].x, sw->pt[sw->best].t_s * 1e3,
			       sw->ratio, sw->ratio <= 1.10 ? "" : "  (over 1.10)");
		}
		printf("    beta (HillInfer) %.3g, the store's share of importance evaluation %.3f\n",
		       pc->beta, pc->near_share);
		printf("    checks: recomputed K vs K read back %.2g; output vs kvf_attend: KVPR %.2g, X-cache %.2g\n",
		       pc->kvpr.kv_err, pc->kvpr.out_err, pc->xcache.out_err);
	}
}

static void json_point(const struct plan_point *p)
{
	printf("{\"x\": %.6f, \"n\": %llu, \"step_s\": %.6e}", p->x,
	       (unsigned long long)p->n, p->t_s);
}

void plan_print_json(const struct plan_ctx *c)
{
	const struct plan_args *a = c->a;

	printf("{\"bench\": \"plan\", \"tokens\": %u, \"repeat\": %u, \"caller_flops\": %.6e, \"host_bytes_per_s\": %.6e,\n \"cases\": [",
	       a->tokens, a->repeat, c->caller_flops, c->host_bps);
	for (uint32_t i = 0; i < PLAN_CASES; i++) {
		const struct plan_case *pc = &c->c[i];
		const kvf_profile *p = &pc->prof;

		printf("%s\n  {\"shape\": \"%s\", \"link\": \"%s\", \"q_heads\": %u, \"kv_heads\": %u, \"head_dim\": %u, \"direct_io\": %s,\n",
		       i ? "," : "", pc->shape, pc->link, pc->m.n_q_heads,
		       pc->m.n_kv_heads, pc->m.head_dim, pc->direct_io ? "true" : "false");
		printf("   \"profile\": {\"caller_flops\": %.6e, \"link_bytes_per_s\": %.6e, \"read_cold_bytes_per_s\": %.6e, \"read_warm_bytes_per_s\": %.6e, \"attend_tokens_per_s\": %.6e, \"store_flops\": %.6e},\n",
		       p->caller_flops, p->link_bytes_per_s,
		       p->read_cold_bytes_per_s, p->read_warm_bytes_per_s,
		       p->attend_tokens_per_s, p->store_flops);
		printf("   \"profile_xcache\": {\"read_cold_bytes_per_s\": %.6e, \"store_flops\": %.6e},\n",
		       pc->prof_x.read_cold_bytes_per_s, pc->prof_x.store_flops);
		printf("   \"x_smaller\": %s, \"beta\": %.6e, \"near_share\": %.6f",
		       pc->x_smaller ? "true" : "false", pc->beta, pc->near_share);
		for (int w = 0; w < 2; w++) {
			const struct plan_sweep *sw = sweep_of(pc, w);

			printf(",\n   \"%s\": {\"points\": [", sweep_name[w]);
			for (uint32_t k = 0; k < sw->n_pt; k++) {
				printf(k ? ", " : "");
				json_point(&sw->pt[k]);
			}
			printf("],\n    \"pick\": ");
			json_point(&sw->pt[sw->pick]);
			printf(", \"best\": ");
			json_point(&sw->pt[sw->best]);
			printf(", \"ratio\": %.4f, \"predicted_s\": %.6e, \"kv_err\": %.3e, \"out_err\": %.3e}",
			       sw->ratio, sw->pred_s, sw->kv_err, sw->out_err);
		}
		printf("}");
	}
	printf("\n ]}\n");
}

/* ---- plots -------------------------------------------------------------------- */

static int write_data(const struct plan_ctx *c, const char *dir)
{
	char path[4096];

	for (uint32_t i = 0; i < PLAN_CASES; i++)
		for (int w = 0; w < 2; w++) {
			const struct plan_case *pc = &c->c[i];
			const struct plan_sweep *sw = sweep_of(pc, w);
			FILE *f;

			snprintf(path, sizeof(path), "%s/plan_%s_%s_%s.dat", dir,
				 sweep_name[w], pc->shape, pc->link);
			if ((f = fopen(path, "w")) == NULL) {
				fprintf(stderr, "kvbench plan: cannot write %s: %s\n",
					path, strerror(errno));
				return 1;
			}
			fprintf(f, "# %s %s link %s: x step_ms pick\n",
				sweep_name[w], pc->shape, pc->link);
			for (uint32_t k = 0; k < sw->n_pt; k++)
				fprintf(f, "%.6f %.6f %d\n", sw->pt[k].x,
					sw->pt[k].t_s * 1e3, k == sw->pick);
			fclose(f);
		}
	return 0;
}

/* remove_outputs - the data files and PNGs a plot writes: a plot that
 * failed leaves none behind (gnuplot creates its output before it reads
 * the plot that fails, so a failed run used to leave empty PNGs and the
 * data beside whatever DIR already held) */
static void remove_outputs(const struct plan_ctx *c, const char *dir)
{
	char path[4096];

	for (int w = 0; w < 2; w++) {
		for (uint32_t i = 0; i < PLAN_CASES; i++) {
			snprintf(path, sizeof(path), "%s/plan_%s_%s_%s.dat", dir,
				 sweep_name[w], c->c[i].shape, c->c[i].link);
			(void)unlink(path);
		}
		snprintf(path, sizeof(path), "%s/plan_%s.png", dir, sweep_name[w]);
		(void)unlink(path);
	}
}

/* png_written - dir/plan_NAME.png is there and not empty */
static int png_written(const char *dir, const char *name)
{
	char path[4096];
	struct stat sb;

	snprintf(path, sizeof(path), "%s/plan_%s.png", dir, name);
	return stat(path, &sb) == 0 && sb.st_size > 0;
}

static void script(FILE *g, const char *dir, int w)
{
	const char *name = sweep_name[w];

	fprintf(g, "set terminal png size 1100,450\nset output '%s/plan_%s.png'\n",
		dir, name);
	fprintf(g, "set multiplot layout 1,2 title \"%s\"\n",
		w ? "X-cache (HILOS): step time against the share alpha kept as X; circles: the planner's pick"
		  : "KVPR: step time against the split l/s recomputed by the caller; circles: the planner's pick");
	fprintf(g, "set logscale y\nset grid\nset ylabel 'ms per decode step (one layer)'\nset xlabel '%s'\n",
		w ? "alpha" : "l / s");
	for (int k = 0; k < 2; k++) {
		const char *link = k ? "slow" : "host";

		fprintf(g, "set title 'link: %s'\n", k ? "slow (GPU-like FLOP per byte)" : "host memory");
		fprintf(g, "plot '%s/plan_%s_mha_%s.dat' u 1:2 w lp lc 1 t 'MHA', "
			   "'' u 1:($3 > 0 ? $2 : 1/0) w p pt 6 ps 2 lc 1 notitle, "
			   "'%s/plan_%s_gqa_%s.dat' u 1:2 w lp lc 2 t 'GQA', "
			   "'' u 1:($3 > 0 ? $2 : 1/0) w p pt 6 ps 2 lc 2 notitle\n",
			dir, name, link, dir, name, link);
	}
	fprintf(g, "unset multiplot\n");
}

int plan_plot(const struct plan_ctx *c, const char *dir)
{
	FILE *g;
	int rc;

	if (system("command -v gnuplot >/dev/null 2>&1") != 0) {
		fprintf(stderr, "kvbench plan: gnuplot not found: no plots "
			"(apt-get install gnuplot-nox; tools/bootstrap.sh installs it)\n");
		return 0;
	}
	if (mkdir(dir, 0755) != 0 && errno != EEXIST) {
		fprintf(stderr, "kvbench plan: cannot make %s: %s\n", dir, strerror(errno));
		return 1;
	}
	if (write_data(c, dir) != 0) {
		remove_outputs(c, dir);
		return 1;
	}
	if ((g = popen("gnuplot", "w")) == NULL) {
		fprintf(stderr, "kvbench plan: cannot run gnuplot: %s\n", strerror(errno));
		remove_outputs(c, dir);
		return 1;
	}
	script(g, dir, 0);
	script(g, dir, 1);
	rc = pclose(g);
	if (rc != 0 || !png_written(dir, sweep_name[0]) ||
	    !png_written(dir, sweep_name[1])) {
		fprintf(stderr, "kvbench plan: gnuplot failed (status %d): nothing written to %s\n",
			rc, dir);
		remove_outputs(c, dir);
		return 1;
	}
	fprintf(stderr, "kvbench plan: wrote %s/plan_kvpr.png and %s/plan_xcache.png\n",
		dir, dir);
	return 0;
}
