/*
 * bench_decode_report.c - `kvbench decode`: the four runs' figures and the
 * baselines beside them, as a table or JSON.  See bench_decode.c for what
 * is measured.
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>

#include "bench/bench_common.h"
#include "bench/bench_decode_int.h"
#include "kvflash.h"

/* ---- output --------------------------------------------------------------- */

static double mib(double bytes)
{
	return bytes / (1024.0 * 1024.0);
}

double decode_max_diff(const float *x, const float *y, size_t n)
{
	double m = 0;

	for (size_t i = 0; i < n; i++) {
		double d = fabs((double)x[i] - (double)y[i]);

		if (!(d <= m))
			m = isnan(d) ? INFINITY : d;
	}
	return m;
}

/* row - one line of the table: a label and a figure per run, with dec
 * decimals and "x" after it when ratio */
static void row(const char *label, int dec, int ratio, const double *v)
{
	printf("%-38s", label);
	for (uint32_t r = 0; r < N_RUNS; r++) {
		char cell[32];

		snprintf(cell, sizeof(cell), "%.*f%s", dec, v[r], ratio ? "x" : "");
		printf(" %14s", cell);
	}
	printf("\n");
}

/* ROW - row() of expr evaluated for each run r, with f its figures and b
 * the baselines of its size */
#define ROW(label, dec, ratio, expr)                                 \
	do {                                                         \
		double v_[N_RUNS];                                   \
		for (uint32_t r = 0; r < N_RUNS; r++) {              \
			const struct run_figs *f = &c->run[r];       \
			const struct base_figs *b = &c->base[r / 2]; \
			(void)f;                                     \
			(void)b;                                     \
			v_[r] = (expr);                              \
		}                                                    \
		row(label, dec, ratio, v_);                          \
	} while (0)

void decode_print_table(const struct decode_ctx *c)
{
	const struct decode_args *a = c->a;
	const kvf_model *m = &a->model;

	printf("kvbench decode: batch of %u sequences, %u layers, %u q heads / %u kv heads x %u dims f16\n"
	       "  (K+V %.1f KiB a token over the layers); %u threads; dram_budget %.1f MiB when on;\n"
	       "  %u decode steps timed after %u untimed; per step and layer: kvf_append of one token\n"
	       "  to each sequence, then kvf_attend_batch (dense)\n\n",
	       a->batch, m->n_layers, m->n_q_heads, m->n_kv_heads, m->head_dim,
	       (double)c->token_bytes / 1024, c->n_threads, mib((double)a->budget),
	       a->steps, a->warmup);
	printf("%-38s %14s %14s %14s %14s\n", "", "fits, on", "fits, off",
	       "larger, on", "larger, off");
	ROW("prompt tokens a sequence", 0, 0, (double)f->prompt);
	ROW("working set, K+V (MiB)", 1, 0, mib((double)f->ws_bytes));
	ROW("prefill and sync (s)", 2, 0, f->prefill_s);
	ROW("step latency, median (ms)", 2, 0, f->step_med / 1e6);
	ROW("step latency, mean (ms)", 2, 0, f->step_mean / 1e6);
	ROW("  appends of a step, median (ms)", 3, 0, f->append_med / 1e6);
	ROW("  attention of a step, median (ms)", 2, 0, f->attend_med / 1e6);
	ROW("bytes read from media a step (MiB)", 2, 0, mib(f->bytes_read));
	ROW("  of them by attention (MiB)", 2, 0, mib(f->attend_bytes_read));
	ROW("bytes attended a step (MiB)", 2, 0, mib(f->attended));
	ROW("attention throughput (GB/s)", 2, 0, f->attend_gbs);
	ROW("memory-read loop, same bytes (GB/s)", 2, 0, b->mem_gbs);
	ROW("  attention vs it (warm; >= 0.8x)", 2, 1, f->attend_gbs / b->mem_gbs);
	ROW("O_DIRECT sequential read (GB/s)", 2, 0, b->direct_gbs);
	ROW("  attention vs it (cold; >= 0.8x)", 2, 1, f->attend_gbs / b->direct_gbs);
	ROW("dram_budget in kvf_stats (MiB)", 1, 0, mib((double)f->dram_budget));
	ROW("cache hits over the timed steps", 0, 0, (double)f->cache_hits);
	ROW("cache misses over the timed steps", 0, 0, (double)f->cache_misses);
	ROW("DRAM peak (MiB)", 1, 0, mib((double)f->dram_peak));
	ROW("host write amplification", 3, 0, f->host_wa);
	printf("\n(\"larger\" is %ux the working set that fits.)  Outputs of the last step, tier on vs off:\n"
	       "max |difference| %.3g (fits), %.3g (larger); 0 expected (dense attention).\n",
	       a->scale, c->diff[0], c->diff[1]);
	if (!c->run[0].direct_io || !c->base[0].direct)
		printf("note: O_DIRECT was refused here (store %s, plain file %s): reads may come from the page cache\n",
		       c->run[0].direct_io ? "on" : "off", c->base[0].direct ? "on" : "off");
}

void decode_print_json(const struct decode_ctx *c)
{
	static const char *const run_name[N_RUNS] = { "fit_on", "fit_off", "large_on",
						      "large_off" };
	const struct decode_args *a = c->a;
	struct bench_json j = { .f = stdout };

	bench_json_begin(&j, NULL);
	bench_json_str(&j, "bench", "decode");
	bench_json_model(&j, &a->model);
	bench_json_u64(&j, "batch", a->batch);
	bench_json_u64(&j, "steps", a->steps);
	bench_json_u64(&j, "warmup", a->warmup);
	bench_json_u64(&j, "threads", c->n_threads);
	bench_json_u64(&j, "dram_budget", a->budget);
	bench_json_u64(&j, "scale", a->scale);
	for (uint32_t r = 0; r < N_RUNS; r++) {
		const struct run_figs *f = &c->run[r];
		const struct base_figs *b = &c->base[r / 2];

		bench_json_begin(&j, run_name[r]);
		bench_json_u64(&j, "tier_budget", f->dram_budget);
		bench_json_u64(&j, "prompt_tokens", f->prompt);
		bench_json_u64(&j, "working_set_bytes", f->ws_bytes);
		bench_json_double(&j, "prefill_s", f->prefill_s);
		bench_json_double(&j, "step_ms_median", f->step_med / 1e6);
		bench_json_double(&j, "step_ms_mean", f->step_mean / 1e6);
		bench_json_double(&j, "append_ms_median", f->append_med / 1e6);
		bench_json_double(&j, "attend_ms_median", f->attend_med / 1e6);
		bench_json_double(&j, "bytes_read_per_step", f->bytes_read);
		bench_json_double(&j, "attend_bytes_read_per_step", f->attend_bytes_read);
		bench_json_double(&j, "attended_bytes_per_step", f->attended);
		bench_json_double(&j, "attend_gbs", f->attend_gbs);
		bench_json_double(&j, "mem_read_gbs", b->mem_gbs);
		bench_json_double(&j, "vs_mem_read", f->attend_gbs / b->mem_gbs);
		bench_json_double(&j, "direct_read_gbs", b->direct_gbs);
		bench_json_double(&j, "vs_direct_read", f->attend_gbs / b->direct_gbs);
		bench_json_u64(&j, "cache_hits", f->cache_hits);
		bench_json_u64(&j, "cache_misses", f->cache_misses);
		bench_json_u64(&j, "dram_peak", f->dram_peak);
		bench_json_double(&j, "host_wa", f->host_wa);
		bench_json_u64(&j, "direct_io", (uint64_t)f->direct_io);
		bench_json_end(&j);
	}
	bench_json_double(&j, "max_diff_on_off_fit", c->diff[0]);
	bench_json_double(&j, "max_diff_on_off_large", c->diff[1]);
	bench_json_u64(&j, "plain_direct_io", (uint64_t)c->base[0].direct);
	bench_json_end(&j);
	printf("\n");
}

