/*
 * bench_decode_ctx_report.c - `kvbench decode --context`: the figures of
 * every system at every context length as a table or one JSON document,
 * and the plot (a data file, a gnuplot script beside it, and the PNG when
 * gnuplot is installed).  See bench_decode_ctx.c for what is measured.
 */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "bench/bench_common.h"
#include "bench/bench_decode_ctx_int.h"
#include "kvflash.h"

static double mib(double bytes)
{
	return bytes / (1024.0 * 1024.0);
}

static const char *sparse_name(uint32_t sparse)
{
	return sparse == 2 ? "by whole token groups" : "by tokens";
}

/* ---- table ---------------------------------------------------------------- */

static void print_point(const struct ctx_result *r, const struct ctx_point *p)
{
	const struct ctx_figs *fg = NULL;

	for (uint32_t s = 0; s < ctx_n_systems; s++)
		if (ctx_systems[s].kind == CTX_FLEXGEN)
			fg = &p->sys[s];
	printf("\ncontext %llu tokens: K+V %.1f MiB after the last step; dram_budget %.1f MiB (%.0f%% of it:\n"
	       "  the KV does not fit); store built in %.2f s, plain file written in %.2f s;\n"
	       "  SparF %s: top_k %u tokens, top_r %u dims\n",
	       (unsigned long long)p->tokens, mib((double)p->kv_bytes), mib((double)p->budget),
	       100.0 * (double)p->budget / (double)p->kv_bytes, p->build_s, p->plain_s,
	       sparse_name(r->a->sparse), p->top_k, p->top_r);
	printf("  %-22s %9s %8s %8s %9s %9s %8s %17s %9s %15s\n", "system", "tokens/s",
	       "step ms", "CPU ms", "read MiB", "wrote KiB", "vs Flex", "tier hits/misses",
	       "max |err|", "cos min/mean");
	for (uint32_t s = 0; s < ctx_n_systems; s++) {
		const struct ctx_system *sy = &ctx_systems[s];
		const struct ctx_figs *f = &p->sys[s];
		char hits[40] = "-", err[16] = "(ref)", cosv[24] = "(ref)";

		if (sy->kind == CTX_KVFLASH)
			snprintf(hits, sizeof(hits), "%llu/%llu",
				 (unsigned long long)f->cache_hits,
				 (unsigned long long)f->cache_misses);
		if (s != CTX_DENSE) {
			snprintf(err, sizeof(err), "%.2g", f->max_err);
			snprintf(cosv, sizeof(cosv), "%.4f/%.4f", f->min_cos, f->mean_cos);
		}
		printf("  %-22s %9.2f %8.2f %8.2f %9.2f %9.1f %7.2fx %17s %9s %15s\n",
		       sy->label, f->tokens_s, f->step_med_ns / 1e6, f->cpu_ns / 1e6,
		       mib(f->bytes_read),
		       f->bytes_written / 1024, fg ? f->tokens_s / fg->tokens_s : 0, hits,
		       err, cosv);
	}
	printf("  in-memory and FlexGen against dense kvf_attend (every step and layer): %s\n",
	       p->agree ? "agree" : "DISAGREE");
}

void decode_ctx_print_table(const struct ctx_result *r)
{
	const struct ctx_args *a = r->a;
	const kvf_model *m = &a->model;
	int direct = 1;

	int llama = m->n_q_heads == 32 && m->n_kv_heads == 8 && m->head_dim == 128;

	printf("kvbench decode --context: one sequence, %u layers of %u q / %u kv heads x %u dims f16\n"
	       "  (%s; a stack of 32 such layers runs at these tokens/s x %u/32); %u threads;\n"
	       "  %u decode steps timed after %u untimed; a step: per layer, append the token's K and V,\n"
	       "  then attention with a new q.  Cold where it matters: the kvflash store is closed and\n"
	       "  reopened before each of its runs (its tier empty), its file media reads with O_DIRECT\n"
	       "  and its dram_budget is below the K+V; the FlexGen reader preads K and V with O_DIRECT\n"
	       "  every step and caches nothing; the in-memory cache holds every token in DRAM (warm).\n"
	       "  Bytes read and written are per step: kvf_stats for kvflash, counted for the others;\n"
	       "  CPU ms is the process's CPU time a step, every thread (%u cores here at most).\n",
	       m->n_layers, m->n_q_heads, m->n_kv_heads, m->head_dim,
	       llama ? "Llama-8B's layer shape" : "Llama-8B's layer is 32 q / 8 kv x 128",
	       m->n_layers, r->n_threads, a->steps, a->warmup, r->n_threads);
	for (uint32_t i = 0; i < r->n_pt; i++)
		print_point(r, &r->pt[i]);
	printf("\ntokens/s per sequence:\n  %10s", "context");
	for (uint32_t s = 0; s < ctx_n_systems; s++)
		printf(" %22s", ctx_systems[s].label);
	printf("\n");
	for (uint32_t i = 0; i < r->n_pt; i++) {
		printf("  %10llu", (unsigned long long)r->pt[i].tokens);
		for (uint32_t s = 0; s < ctx_n_systems; s++)
			printf(" %22.2f", r->pt[i].sys[s].tokens_s);
		printf("\n");
		direct &= r->pt[i].store_direct && r->pt[i].plain_direct;
	}
	printf("SparF's cosine is to dense attention on noise data: it says little about quality\n"
	       "(kvbench attend measures that on shaped heads and a trained model).\n");
	if (!direct)
		printf("note: O_DIRECT was refused here (store %s, plain file %s): reads may come from the page cache\n",
		       r->pt[0].store_direct ? "on" : "off", r->pt[0].plain_direct ? "on" : "off");
}

/* ---- JSON ----------------------------------------------------------------- */

void decode_ctx_print_json(const struct ctx_result *r)
{
	const struct ctx_args *a = r->a;
	struct bench_json j = { .f = stdout };
	int agree = 1;

	bench_json_begin(&j, NULL);
	bench_json_str(&j, "bench", "decode_context");
	bench_json_model(&j, &a->model);
	bench_json_u64(&j, "steps", a->steps);
	bench_json_u64(&j, "warmup", a->warmup);
	bench_json_u64(&j, "threads", r->n_threads);
	bench_json_u64(&j, "sparse", a->sparse);
	bench_json_u64(&j, "sparf_share", a->sparf_share);
	bench_json_str(&j, "cold", "kvflash: store reopened before each run, O_DIRECT file media, "
				  "dram_budget below the K+V; flexgen: O_DIRECT pread every step");
	bench_json_double(&j, "max_err_allowed", CTX_MAX_ERR);
	bench_json_double(&j, "min_cos_allowed", CTX_MIN_COS);
	bench_json_begin(&j, "contexts");
	for (uint32_t i = 0; i < r->n_pt; i++) {
		const struct ctx_point *p = &r->pt[i];
		char key[32];

		snprintf(key, sizeof(key), "%llu", (unsigned long long)p->tokens);
		bench_json_begin(&j, key);
		bench_json_u64(&j, "tokens", p->tokens);
		bench_json_u64(&j, "kv_bytes", p->kv_bytes);
		bench_json_u64(&j, "dram_budget", p->budget);
		bench_json_u64(&j, "top_k", p->top_k);
		bench_json_u64(&j, "top_r", p->top_r);
		bench_json_double(&j, "build_s", p->build_s);
		bench_json_double(&j, "plain_write_s", p->plain_s);
		bench_json_u64(&j, "store_direct_io", (uint64_t)p->store_direct);
		bench_json_u64(&j, "plain_direct_io", (uint64_t)p->plain_direct);
		bench_json_u64(&j, "agree", (uint64_t)p->agree);
		agree &= p->agree;
		bench_json_begin(&j, "systems");
		for (uint32_t s = 0; s < ctx_n_systems; s++) {
			const struct ctx_system *sy = &ctx_systems[s];
			const struct ctx_figs *f = &p->sys[s];

			bench_json_begin(&j, sy->key);
			if (sy->kind == CTX_KVFLASH)
				bench_json_str(&j, "codec", kvf_codec_name(sy->codec));
			bench_json_double(&j, "tokens_per_s", f->tokens_s);
			bench_json_double(&j, "step_ms_median", f->step_med_ns / 1e6);
			bench_json_double(&j, "step_ms_mean", f->step_mean_ns / 1e6);
			bench_json_double(&j, "cpu_ms_per_step", f->cpu_ns / 1e6);
			bench_json_double(&j, "bytes_read_per_step", f->bytes_read);
			bench_json_double(&j, "bytes_written_per_step", f->bytes_written);
			if (sy->kind == CTX_KVFLASH) {
				bench_json_u64(&j, "cache_hits", f->cache_hits);
				bench_json_u64(&j, "cache_misses", f->cache_misses);
			}
			if (s != CTX_DENSE) {
				bench_json_double(&j, "max_err_vs_dense", f->max_err);
				bench_json_double(&j, "min_cos_vs_dense", f->min_cos);
				bench_json_double(&j, "mean_cos_vs_dense", f->mean_cos);
			}
			bench_json_end(&j);
		}
		bench_json_end(&j);
		bench_json_end(&j);
	}
	bench_json_end(&j);
	bench_json_u64(&j, "agree", (uint64_t)agree);
	bench_json_end(&j);
}

/* ---- plot ----------------------------------------------------------------- */

static int write_data(const struct ctx_result *r, const char *path)
{
	FILE *f = fopen(path, "w");

	if (f == NULL)
		goto err;
	fprintf(f, "# kvbench decode --context: tokens/s per sequence, %u layers\n# context",
		r->a->model.n_layers);
	for (uint32_t s = 0; s < ctx_n_systems; s++)
		fprintf(f, " %s", ctx_systems[s].key);
	fprintf(f, "\n");
	for (uint32_t i = 0; i < r->n_pt; i++) {
		fprintf(f, "%llu", (unsigned long long)r->pt[i].tokens);
		for (uint32_t s = 0; s < ctx_n_systems; s++)
			fprintf(f, " %.6g", r->pt[i].sys[s].tokens_s);
		fprintf(f, "\n");
	}
	if (fclose(f) != 0)
		goto err;
	return 0;
err:
	fprintf(stderr, "kvbench decode: cannot write %s: %s\n", path, strerror(errno));
	return 1;
}

/* write_script - the gnuplot script; it names its files relative to its
 * directory (run it there: cd DIR && gnuplot decode_context.gp) */
static int write_script(const struct ctx_result *r, const char *path)
{
	const kvf_model *m = &r->a->model;
	FILE *f = fopen(path, "w");

	if (f == NULL)
		goto err;
	fprintf(f, "# kvbench decode --context: tokens/s against context length\n"
		   "set terminal png size 900,560\n"
		   "set output 'decode_context.png'\n"
		   "set title \"decode, one sequence: %u layers of %u q / %u kv heads x %u, f16; KV larger than the DRAM budget\"\n"
		   "set xlabel 'context (tokens)'\nset ylabel 'tokens/s per sequence'\n"
		   "set logscale x 2\nset logscale y 10\nset grid\nset key top right\n"
		   "plot ",
		m->n_layers, m->n_q_heads, m->n_kv_heads, m->head_dim);
	for (uint32_t s = 0; s < ctx_n_systems; s++)
		fprintf(f, "%s'decode_context.dat' u 1:%u w lp lw 2 t '%s'", s ? ", \\\n     " : "",
			s + 2, ctx_systems[s].label);
	fprintf(f, "\n");
	if (fclose(f) != 0)
		goto err;
	return 0;
err:
	fprintf(stderr, "kvbench decode: cannot write %s: %s\n", path, strerror(errno));
	return 1;
}

int decode_ctx_plot(const struct ctx_result *r, const char *dir)
{
	char dat[4096], gp[4096], png[4096], cmd[8400];
	struct stat sb;
	int rc;

	if (mkdir(dir, 0755) != 0 && errno != EEXIST) {
		fprintf(stderr, "kvbench decode: cannot make %s: %s\n", dir, strerror(errno));
		return 1;
	}
	snprintf(dat, sizeof(dat), "%s/decode_context.dat", dir);
	snprintf(gp, sizeof(gp), "%s/decode_context.gp", dir);
	snprintf(png, sizeof(png), "%s/decode_context.png", dir);
	if (write_data(r, dat) != 0 || write_script(r, gp) != 0)
		return 1;
	if (system("command -v gnuplot >/dev/null 2>&1") != 0) {
		fprintf(stderr, "kvbench decode: wrote %s and %s; gnuplot not found, so no PNG "
			"(apt-get install gnuplot-nox; tools/bootstrap.sh installs it)\n", dat, gp);
		return 0;
	}
	if (strchr(dir, '\'') != NULL) {
		fprintf(stderr, "kvbench decode: wrote %s and %s; not running gnuplot on a directory name with a quote\n",
			dat, gp);
		return 1;
	}
	(void)unlink(png);
	snprintf(cmd, sizeof(cmd), "cd '%s' && gnuplot decode_context.gp", dir);
	rc = system(cmd);
	if (rc != 0 || stat(png, &sb) != 0 || sb.st_size == 0) {
		fprintf(stderr, "kvbench decode: gnuplot failed (status %d) on %s: no PNG\n", rc, gp);
		(void)unlink(png);
		return 1;
	}
	fprintf(stderr, "kvbench decode: wrote %s, %s and %s\n", dat, gp, png);
	return 0;
}
