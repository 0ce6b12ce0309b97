/*
 * bench_endurance_report.c - the figures of `kvbench endurance`, its table,
 * its JSON and its plots (gnuplot, when installed).
 */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench/bench_common.h"
#include "bench/bench_endurance_int.h"

void end_figures(const struct end_args *a, const struct end_sys *s,
		 const struct end_workload *w, const struct end_replay *rep,
		 struct end_result *r)
{
	double user = (double)s->user_bytes;

	r->user_bytes = s->user_bytes;
	r->host_bytes = s->host_bytes;
	r->block_bytes = s->tr.write_pages * END_PAGE;
	/* the replay measured device WA in steady state, over passes of the
	 * trace: one pass's NAND bytes at that WA */
	r->nand_bytes = (uint64_t)((double)r->block_bytes * rep->device_wa + 0.5);
	r->gen_tokens = w->gen_tokens;
	r->requests = w->requests;
	r->host_wa = user > 0 ? (double)r->host_bytes / user : 0.0;
	r->fs_wa = r->host_bytes ? (double)r->block_bytes / (double)r->host_bytes : 0.0;
	r->device_wa = rep->device_wa;
	r->total_wa = user > 0 ? (double)r->nand_bytes / user : 0.0;
	r->requests_per_pbw = end_requests_per_pbw((double)w->requests,
						   (double)r->nand_bytes);
	if (w->wl == WL_TRAIN) {
		/* per optimizer step, at --train-steps-per-s */
		struct end_drive d = a->drive;
		double steps = (double)(w->requests ? w->requests : 1);

		d.tokens_per_s = a->train_steps_per_s;
		r->nand_bytes_per_token = NAN;
		r->nand_bytes_per_step = (double)r->nand_bytes / steps;
		r->lifetime_years = end_lifetime_years(&d, r->nand_bytes_per_step);
		r->rated_years = end_rated_years(&d, (double)r->block_bytes / steps);
	} else {
		r->nand_bytes_per_token = w->gen_tokens ?
			(double)r->nand_bytes / (double)w->gen_tokens : NAN;
		r->nand_bytes_per_step = NAN;
		r->lifetime_years = end_lifetime_years(&a->drive, r->nand_bytes_per_token);
		r->rated_years = w->gen_tokens ?
			end_rated_years(&a->drive, (double)r->block_bytes /
						   (double)w->gen_tokens) : NAN;
	}
	r->util_mean = rep->util_mean;
	r->dram_peak = s->dram_peak;
	r->dram_only = s->dram_only;
	r->wait_peak = s->wait_peak;
	r->data_bytes = s->data_bytes;
	r->padding_bytes = s->padding_bytes;
	r->rep = *rep;
}

static const char *sys_name(enum end_sys_kind k)
{
	return end_sys_ops(k)->name;
}

/* find_codec - the row of system k with codec c on wl, if it ran well */
static const struct end_result *find_codec(const struct end_result *r,
					   size_t n, enum end_wl wl,
					   enum end_sys_kind k, kvf_codec c)
{
	for (size_t i = 0; i < n; i++)
		if (r[i].wl == wl && r[i].sys == k && r[i].codec == c && r[i].ok)
			return &r[i];
	return NULL;
}

static const struct end_result *find(const struct end_result *r, size_t n,
				     enum end_wl wl, enum end_sys_kind k)
{
	return find_codec(r, n, wl, k, KVF_CODEC_NONE);
}

/* years - a lifetime for the table: "never" for a system that wrote
 * nothing, "-" where there is no figure (no tokens) */
static const char *years(double y, char *buf, size_t cap)
{
	if (isinf(y))
		return "never";
	if (isnan(y))
		return "-";
	snprintf(buf, cap, "%.2f", y);
	return buf;
}

/* codec_lines - per workload, each codec's kvflash rows against the
 * uncompressed ones and the baselines (these stay uncompressed); the
 * target (issue 25): INT4 with admission at least 4x fewer NAND bytes
 * per generated token than tuned RocksDB on online and chat */
static void codec_lines(const struct end_args *a, const struct end_result *r,
			size_t n)
{
	for (uint32_t c = 0; c < a->n_codecs; c++) {
		kvf_codec cd = a->codec[c];

		if (cd == KVF_CODEC_NONE)
			continue;
		for (int wl = 0; wl < WL_COUNT; wl++) {
			for (int k = SYS_KVFLASH; k < SYS_COUNT; k++) {
				const struct end_result *x, *t, *p, *rb;
				char yb[32];

				if (!end_sys_kvflash((enum end_sys_kind)k) ||
				    (x = find_codec(r, n, (enum end_wl)wl,
						    (enum end_sys_kind)k, cd)) == NULL)
					continue;
				if (x->nand_bytes == 0) {
					printf("%-8s %s: no NAND bytes written (nothing left DRAM): no wear\n",
					       end_wl_name((enum end_wl)wl), x->name);
					continue;
				}
				p = find(r, n, (enum end_wl)wl, (enum end_sys_kind)k);
				t = find(r, n, (enum end_wl)wl, SYS_ROCKS_TUNED);
				rb = find(r, n, (enum end_wl)wl, SYS_ROCKS);
				printf("%-8s %s: %.0f NAND B/token", end_wl_name((enum end_wl)wl),
				       x->name, x->nand_bytes_per_token);
				if (p)
					printf("; %.2fx fewer than %s", (double)p->nand_bytes /
					       (double)x->nand_bytes, p->name);
				if (rb)
					printf("; %.2fx fewer than rocksdb", (double)rb->nand_bytes /
					       (double)x->nand_bytes);
				if (t) {
					double f = (double)t->nand_bytes / (double)x->nand_bytes;

					printf("; %.2fx fewer than rocksdb-tuned", f);
					if (cd == KVF_CODEC_INT4 && k == SYS_KVFLASH_ADMIT &&
					    (wl == WL_ONLINE || wl == WL_CHAT))
						printf(" (target >= 4x: %s)", f >= 4.0 ? "met" : "not met");
				}
				printf("; life %s\n", years(x->lifetime_years, yb, sizeof(yb)));
			}
		}
	}
}

void end_print_table(const struct end_args *a, const struct end_result *r,
		     size_t n)
{
	char sync[48];

	if (a->sync_every)
		snprintf(sync, sizeof(sync), "sync every %u steps", a->sync_every);
	else
		snprintf(sync, sizeof(sync), "no sync points");
	printf("kvbench endurance: %u layers, %u KV heads of %u (f16); SSD: spare %.2f, %u-page blocks, greedy GC; %s\n",
	       a->model.n_layers, a->model.n_kv_heads, a->model.head_dim,
	       a->spare, a->block_pages, sync);
	printf("drive for the lifetime: %.2f TB, %.0f P/E, %.2f DWPD over %.0f years, at %.0f generated tokens/s\n\n",
	       a->drive.capacity_bytes / 1e12, a->drive.pe_cycles, a->drive.dwpd,
	       a->drive.warranty_years, a->drive.tokens_per_s);
	printf("%-8s %-18s %8s %7s %7s %7s %7s %12s %10s %9s %9s %8s %6s %8s\n",
	       "workload", "system", "user MiB", "host", "fs", "device", "total",
	       "NAND B/tok", "req/PBW", "life (y)", "rated (y)", "erases", "util",
	       "DRAM MiB");
	for (size_t i = 0; i < n; i++) {
		const struct end_result *x = &r[i];
		char pb[32], rq[32], yl[32], yr[32];
		double per;

		if (!x->ok) {
			printf("%-8s %-18s failed: %s\n", end_wl_name(x->wl),
			       x->name, x->error);
			continue;
		}
		per = x->wl == WL_TRAIN ? x->nand_bytes_per_step : x->nand_bytes_per_token;
		if (isnan(per))
			snprintf(pb, sizeof(pb), "-");
		else
			snprintf(pb, sizeof(pb), "%.0f", per);
		if (isinf(x->requests_per_pbw))
			snprintf(rq, sizeof(rq), "unbounded");
		else
			snprintf(rq, sizeof(rq), "%.3g", x->requests_per_pbw);
		printf("%-8s %-18s %8.1f %7.3f %7.3f %7.3f %7.3f %12s %10s %9s %9s %4u/%-3.0f %6.2f ",
		       end_wl_name(x->wl), x->name,
		       (double)x->user_bytes / 1048576.0, x->host_wa, x->fs_wa,
		       x->device_wa, x->total_wa, pb, rq,
		       years(x->lifetime_years, yl, sizeof(yl)),
		       years(x->rated_years, yr, sizeof(yr)),
		       x->rep.erase_max, x->rep.erase_mean, x->util_mean);
		if (end_sys_kvflash(x->sys))
			printf("%8.1f\n", (double)x->dram_peak / 1048576.0);
		else
			printf("%8s\n", "-");
	}
	printf("\nhost = bytes handed to the file system (or media) / K/V bytes (train: params, m and v each step); fs = block bytes / host bytes;\n"
	       "NAND B/tok: per generated token (train: per optimizer step, life at %g steps/s);\n", a->train_steps_per_s);
	printf("device = NAND programs / block writes; total = NAND bytes / K/V bytes; erases = max/mean per block\n");
	printf("K/V bytes are the f16 bytes handed over; kvflash-CODEC rows store them in that codec (kvf_options.codec), every other row\n"
	       "stores them uncompressed: rocksdb, rocksdb-tuned, file-per-block and per-token store what they are given\n\n");
	for (int wl = 0; wl < WL_COUNT; wl++) {
		const struct end_result *k = find(r, n, (enum end_wl)wl, SYS_KVFLASH);

		if (k == NULL)
			continue;
		printf("%-8s kvflash: total WA %.3f (goal <= %s)", end_wl_name((enum end_wl)wl),
		       k->total_wa, wl == WL_OFFLINE ? "1.05" : wl == WL_ONLINE ? "1.3" : "-");
		for (int s = SYS_ROCKS; s <= SYS_TOKEN; s++) {
			const struct end_result *b = find(r, n, (enum end_wl)wl, (enum end_sys_kind)s);

			if (b && k->nand_bytes > 0)
				printf("; %.1fx fewer NAND bytes/%s than %s",
				       (double)b->nand_bytes / (double)k->nand_bytes,
				       wl == WL_TRAIN ? "step" : "token",
				       sys_name((enum end_sys_kind)s));
		}
		printf(" (goal >= 10x vs rocksdb and per-token)\n");
	}
	for (int wl = 0; wl < WL_COUNT; wl++) {
		const struct end_result *k = find(r, n, (enum end_wl)wl, SYS_KVFLASH);
		const struct end_result *m = find(r, n, (enum end_wl)wl, SYS_KVFLASH_ADMIT);

		if (k == NULL || m == NULL || k->nand_bytes == 0)
			continue;
		printf("%-8s admission at %llu tokens: %.1f MiB (%.1f%%) fewer NAND bytes than kvflash (%.1f MiB of pages freed unwritten against %.1f); DRAM for waiting pages, peak %.1f MiB against %.1f MiB (the tier's whole peak %.1f against %.1f)\n",
		       end_wl_name((enum end_wl)wl), (unsigned long long)a->admit_tokens,
		       ((double)k->nand_bytes - (double)m->nand_bytes) / 1048576.0,
		       100.0 * (1.0 - (double)m->nand_bytes / (double)k->nand_bytes),
		       (double)m->dram_only / 1048576.0, (double)k->dram_only / 1048576.0,
		       (double)m->wait_peak / 1048576.0, (double)k->wait_peak / 1048576.0,
		       (double)m->dram_peak / 1048576.0, (double)k->dram_peak / 1048576.0);
	}
	codec_lines(a, r, n);
}

void end_print_json(const struct end_args *a, const struct end_result *r,
		    size_t n)
{
	struct bench_json j = { .f = stdout };

	printf("[");
	for (size_t i = 0; i < n; i++) {
		const struct end_result *x = &r[i];

		if (i)
			printf(",");
		bench_json_begin(&j, NULL);
		bench_json_str(&j, "bench", "endurance");
		bench_json_str(&j, "workload", end_wl_name(x->wl));
		bench_json_str(&j, "system", x->name);
		/* what the row stores the K/V as: a codec for kvflash's codec
		 * rows, "none" (as given, uncompressed) for every other */
		bench_json_str(&j, "codec", kvf_codec_name(x->codec));
		bench_json_u64(&j, "ok", (uint64_t)x->ok);
		if (!x->ok) {
			bench_json_str(&j, "error", x->error);
			bench_json_end(&j);
			continue;
		}
		bench_json_model(&j, &a->model);
		bench_json_u64(&j, "user_bytes", x->user_bytes);
		bench_json_u64(&j, "host_bytes", x->host_bytes);
		bench_json_u64(&j, "block_bytes", x->block_bytes);
		bench_json_u64(&j, "nand_bytes", x->nand_bytes);
		bench_json_u64(&j, "generated_tokens", x->gen_tokens);
		bench_json_u64(&j, "requests", x->requests);
		bench_json_double(&j, "host_wa", x->host_wa);
		bench_json_double(&j, "fs_wa", x->fs_wa);
		bench_json_double(&j, "device_wa", x->device_wa);
		bench_json_double(&j, "total_wa", x->total_wa);
		bench_json_double(&j, "nand_bytes_per_token", x->nand_bytes_per_token);
		bench_json_double(&j, "nand_bytes_per_step", x->nand_bytes_per_step);
		bench_json_double(&j, "requests_per_pbw", x->requests_per_pbw);
		bench_json_double(&j, "lifetime_years", x->lifetime_years);
		bench_json_double(&j, "rated_lifetime_years", x->rated_years);
		bench_json_double(&j, "spare_factor", x->rep.spare);
		bench_json_double(&j, "utilization", x->util_mean);
		bench_json_u64(&j, "erases", x->rep.erases);
		bench_json_u64(&j, "erase_min", x->rep.erase_min);
		bench_json_u64(&j, "erase_max", x->rep.erase_max);
		bench_json_double(&j, "erase_mean", x->rep.erase_mean);
		bench_json_double(&j, "wear_evenness", x->rep.wear_evenness);
		bench_json_u64(&j, "dram_peak", x->dram_peak);
		bench_json_u64(&j, "dram_only_bytes", x->dram_only);
		bench_json_u64(&j, "dram_waiting_peak", x->wait_peak);
		if (end_sys_kvflash(x->sys)) {
			bench_json_u64(&j, "data_bytes", x->data_bytes);
			bench_json_u64(&j, "padding_bytes", x->padding_bytes);
		}
		bench_json_double(&j, "wall_s", x->wall_s);
		bench_json_end(&j);
	}
	printf("]\n");
}

/* ---- plots ---- */

static const double sweep_spare[] = { 0.05, 0.07, 0.12, 0.2, 0.28 };
static const double sweep_util[] = { 0.5, 0.6, 0.7, 0.8, 0.9 };
#define N_SWEEP 5

static FILE *open_in(const char *dir, const char *leaf, char *path, size_t cap)
{
	snprintf(path, cap, "%s/%s", dir, leaf);
	return fopen(path, "w");
}

/* sweep - total WA of each system's online trace against spare factor
 * (util 0) or utilization (at --spare) into f, the trims replayed or not */
static int sweep(const struct end_args *a, const struct end_result *r, size_t n,
		 struct end_trace *const *tr, int by_util, int discard, FILE *f)
{
	fprintf(f, "%s", by_util ? "utilization" : "spare");
	for (int k = 0; k < SYS_COUNT; k++)
		if (tr[k])
			fprintf(f, " %s", sys_name((enum end_sys_kind)k));
	fputc('\n', f);
	for (int i = 0; i < N_SWEEP; i++) {
		double x = by_util ? sweep_util[i] : sweep_spare[i];

		fprintf(f, "%g", x);
		for (int k = 0; k < SYS_COUNT; k++) {
			const struct end_result *o = find(r, n, WL_ONLINE, (enum end_sys_kind)k);
			struct end_replay rep;

			if (!tr[k])
				continue;
			if (o == NULL || end_replay_run(tr[k], by_util ? a->spare : x,
							by_util ? x : 0.0,
							a->block_pages, discard, &rep)) {
				fprintf(f, " NaN");
				continue;
			}
			/* below the trace's own utilization no cold data is
			 * added: the point is not drawn */
			if (by_util && rep.cold_pages == 0 && x > rep.util_mean + 0.01)
				fprintf(f, " NaN");
			else
				fprintf(f, " %g", (double)o->block_bytes /
					(double)o->user_bytes * rep.device_wa);
		}
		fputc('\n', f);
	}
	return 0;
}

/* plots_add - one more PNG the script draws, for the closing message */
static void plots_add(char *list, size_t cap, const char *png)
{
	size_t l = strlen(list);

	snprintf(list + l, cap - l, "%s%s", l ? " " : "", png);
}

/* end_plot draws what the run has: the online sweeps and erase
 * histograms only if the online workload ran (the traces are its), the
 * bytes per token over the systems and workloads that ran; a column no
 * system filled would stop gnuplot */
int end_plot(const struct end_args *a, const struct end_result *r, size_t n,
	     struct end_trace *const *tr)
{
	char path[700], cmd[800], pngs[200] = "";
	int has[SYS_COUNT] = { 0 };
	int traces = 0, hists = 0, systems = 0;
	FILE *f, *gp;

	fflush(stdout); /* the table before the plots' messages */
	if (system("command -v gnuplot >/dev/null 2>&1") != 0) {
		fprintf(stderr, "kvbench endurance: gnuplot is not installed: plots skipped (Debian: apt-get install gnuplot-nox)\n");
		return 1;
	}
	for (int k = 0; k < SYS_COUNT; k++) {
		traces += tr[k] != NULL;
		hists += find(r, n, WL_ONLINE, (enum end_sys_kind)k) != NULL;
		for (int wl = 0; wl < WL_TRAIN; wl++) /* train has no tokens */
			has[k] |= find(r, n, (enum end_wl)wl, (enum end_sys_kind)k) != NULL;
		systems += has[k];
	}
	if (traces == 0 && systems == 0) {
		fprintf(stderr, "kvbench endurance: nothing to plot: the plots are of the online, offline and chat workloads' uncompressed rows (--workloads, --codec none)\n");
		return 1;
	}
	if (bench_make_dir("endurance", a->plot_dir, NULL))
		return -1;
	if ((gp = open_in(a->plot_dir, "endurance.gp", path, sizeof(path))) == NULL)
		return -1;
	fprintf(gp, "set terminal pngcairo size 800,500 noenhanced\n"
		    "set key outside right\nset grid\n");
	if (traces > 0) {
		if ((f = open_in(a->plot_dir, "wa_spare.dat", path, sizeof(path))) == NULL)
			goto fail;
		sweep(a, r, n, tr, 0, 1, f);
		fclose(f);
		if ((f = open_in(a->plot_dir, "wa_spare_nodiscard.dat", path, sizeof(path))) == NULL)
			goto fail;
		sweep(a, r, n, tr, 0, 0, f);
		fclose(f);
		if ((f = open_in(a->plot_dir, "wa_util.dat", path, sizeof(path))) == NULL)
			goto fail;
		sweep(a, r, n, tr, 1, 1, f);
		fclose(f);
		fprintf(gp,
			"set logscale y\n"
			"set output 'wa_spare.png'\n"
			"set title 'online serving: total WA against the SSD spare factor'\n"
			"set xlabel 'spare factor'\nset ylabel 'NAND bytes / K/V bytes'\n"
			"plot for [i=2:%d] 'wa_spare.dat' using 1:i with linespoints title columnhead(i)\n"
			"set output 'wa_spare_nodiscard.png'\n"
			"set title 'online serving, the SSD never told of deletions: total WA against spare factor'\n"
			"plot for [i=2:%d] 'wa_spare_nodiscard.dat' using 1:i with linespoints title columnhead(i)\n"
			"set output 'wa_util.png'\n"
			"set title 'online serving: total WA against utilization (cold data added), spare %.2f'\n"
			"set xlabel 'mean utilization of the logical space'\n"
			"plot for [i=2:%d] 'wa_util.dat' using 1:i with linespoints title columnhead(i)\n"
			"unset logscale y\n",
			traces + 1, traces + 1, a->spare, traces + 1);
		plots_add(pngs, sizeof(pngs), "wa_spare.png wa_spare_nodiscard.png wa_util.png");
	}
	if (hists > 0) {
		/* erase counts of each system's online replay, bucket by bucket */
		if ((f = open_in(a->plot_dir, "erase_hist.dat", path, sizeof(path))) == NULL)
			goto fail;
		for (int k = 0; k < SYS_COUNT; k++) {
			const struct end_result *o = find(r, n, WL_ONLINE, (enum end_sys_kind)k);

			if (o == NULL)
				continue;
			fprintf(f, "\"%s\"\n", sys_name((enum end_sys_kind)k));
			for (int b = 0; b < 16; b++)
				fprintf(f, "%g %llu\n",
					o->rep.hist_lo + (b + 0.5) * o->rep.hist_width,
					(unsigned long long)o->rep.erase_hist[b]);
			fprintf(f, "\n\n");
		}
		fclose(f);
		fprintf(gp,
			"set output 'erase_hist.png'\n"
			"set title 'online serving: erase counts per block'\n"
			"set xlabel 'erases'\nset ylabel 'blocks'\n"
			"plot for [i=0:%d] 'erase_hist.dat' index i using 1:2 with linespoints title columnhead(1)\n",
			hists - 1);
		plots_add(pngs, sizeof(pngs), "erase_hist.png");
	}
	if (systems > 0) {
		if ((f = open_in(a->plot_dir, "bytes_per_token.dat", path, sizeof(path))) == NULL)
			goto fail;
		fprintf(f, "workload");
		for (int k = 0; k < SYS_COUNT; k++)
			if (has[k])
				fprintf(f, " %s", sys_name((enum end_sys_kind)k));
		fputc('\n', f);
		for (int wl = 0; wl < WL_TRAIN; wl++) {
			int any = 0;

			for (int k = 0; k < SYS_COUNT; k++)
				any |= find(r, n, (enum end_wl)wl, (enum end_sys_kind)k) != NULL;
			if (!any)
				continue; /* a workload not run: no empty cluster */
			fprintf(f, "%s", end_wl_name((enum end_wl)wl));
			for (int k = 0; k < SYS_COUNT; k++) {
				const struct end_result *o = find(r, n, (enum end_wl)wl, (enum end_sys_kind)k);

				if (has[k])
					fprintf(f, o ? " %.0f" : " NaN",
						o ? o->nand_bytes_per_token : 0.0);
			}
			fputc('\n', f);
		}
		fclose(f);
		/* a system that wrote nothing has no bar on the log scale */
		fprintf(gp,
			"set output 'bytes_per_token.png'\nset logscale y\n"
			"set title 'NAND bytes per generated token'\nset xlabel ''\n"
			"set ylabel 'bytes'\nset style data histogram\n"
			"set style histogram clustered\nset style fill solid 0.8\n"
			"plot for [i=2:%d] 'bytes_per_token.dat' using i:xtic(1) title columnhead(i)\n",
			systems + 1);
		plots_add(pngs, sizeof(pngs), "bytes_per_token.png");
	}
	fclose(gp);
	gp = NULL;
	snprintf(cmd, sizeof(cmd), "cd '%s' && gnuplot endurance.gp", a->plot_dir);
	if (system(cmd) != 0) {
		snprintf(path, sizeof(path), "%s/endurance.gp", a->plot_dir);
		fprintf(stderr, "kvbench endurance: gnuplot failed on %s\n", path);
		return -1;
	}
	fprintf(stderr, "kvbench endurance: plots in %s: %s%s\n", a->plot_dir, pngs,
		traces ? "" : " (the WA sweeps and erase counts need the online workload with --codec none)");
	return 0;
fail:
	if (gp)
		fclose(gp);
	fprintf(stderr, "kvbench endurance: cannot write %s: %s\n", path, strerror(errno));
	return -1;
}
