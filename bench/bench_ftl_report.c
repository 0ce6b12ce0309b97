/*
 * bench_ftl_report.c - `kvbench ftl`: the figures of a measured run (WA,
 * effective spare factor, modeled bandwidth and utilization, lifetime),
 * the table and JSON that print them, and --validate: uniform writes over
 * spare factors 0.05..0.5 with FIFO, greedy and d-choices, measured WA
 * next to the analytic models (docs/ftl.md).
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "bench/bench_common.h"
#include "bench/bench_ftl_int.h"
#include "ftl/ftl_gc.h"
#include "ftl/media_flash.h"

void ftl_figures(const struct ftl_args *a, const struct ftl_run *r,
		 struct figures *f)
{
	const struct kvf_flash_stats *b = &r->before, *e = &r->after;
	double host = (double)(e->host_pages - b->host_pages);
	double erased = (double)(e->erased_sum - b->erased_sum) /
			(double)(e->erased_samples - b->erased_samples);
	double live = (double)(e->blocks - e->retired_blocks) * e->pages_per_block;
	double lo = 1e300, hi = 0, mean = 0;
	uint64_t dt = e->device_time_ns - b->device_time_ns;
	double warm_host = (double)(e->host_pages - r->fill.host_pages);
	double warm_prog = (double)(e->nand_programs - r->fill.nand_programs);

	memset(f, 0, sizeof(*f));
	f->wa = (double)(e->nand_programs - b->nand_programs) / host;
	f->sfe = 1.0 - (double)r->n_lpn / (live - erased);
	f->dev_s = (double)dt / 1e9;
	f->host_mbs = dt ? host * e->page_size / 1e6 / ((double)dt / 1e9) : 0.0;
	f->host_per_s = warm_host / ((double)r->wall_ns / 1e9);
	f->prog_per_s = warm_prog / ((double)r->wall_ns / 1e9);
	for (uint32_t i = 0; i < r->n_dw; i++) {
		lo = r->dw_wa[i] < lo ? r->dw_wa[i] : lo;
		hi = r->dw_wa[i] > hi ? r->dw_wa[i] : hi;
		mean += r->dw_wa[i] / r->n_dw;
	}
	f->dw_spread = r->n_dw > 1 ? (hi - lo) / mean : 0.0;
	if (dt > 0) {
		f->die_util = (double)(e->die_busy_ns - b->die_busy_ns) /
			      ((double)e->dies * (double)dt);
		f->ch_util = (double)(e->channel_busy_ns - b->channel_busy_ns) /
			     ((double)e->channels * (double)dt);
	}
	kvf_flash_project(e, host * e->page_size,
			  (double)(e->erases - b->erases),
			  (double)r->bytes_per_request, &f->life);
	(void)a;
}

static int uniform_model(const struct ftl_args *a)
{
	return a->wl == WL_UNIFORM && a->trim == 0.0 &&
	       a->mapping == KVF_FLASH_MAP_PAGE;
}

static double model_for(enum kvf_flash_gc_policy gc, double sfe, uint32_t ppb,
			uint32_t d)
{
	switch (gc) {
	case KVF_FLASH_GC_FIFO:
		return gc_model_fifo_wa(sfe);
	case KVF_FLASH_GC_GREEDY:
		return gc_model_greedy_wa(sfe, ppb);
	case KVF_FLASH_GC_DCHOICES:
		return gc_model_dchoices_wa(sfe, ppb, d);
	default:
		return 0.0;
	}
}

static const char *cell_name(enum kvf_flash_cell c)
{
	static const char *names[] = { "TLC", "SLC", "MLC", "TLC", "QLC" };

	return names[c];
}

void ftl_print_table(const struct ftl_args *a, const struct ftl_run *r,
		     const struct figures *f)
{
	const struct kvf_flash_stats *b = &r->before, *e = &r->after;
	uint64_t host = e->host_pages - b->host_pages;

	printf("kvbench ftl: %u blocks x %u pages x %u B (%u ch x %u die, %s), %s mapping, GC %s\n",
	       e->blocks, e->pages_per_block, e->page_size, e->channels,
	       e->dies / e->channels, cell_name(a->cell), e->mapping, e->gc);
	printf("  workload          %s%s%s, fill + %u drive writes warm-up + %u measured (%llu logical pages)\n",
	       a->wl_text, a->trim > 0.0 ? " + trim" : "",
	       a->streams ? " with stream hints" : "", a->warmup, a->measure,
	       (unsigned long long)r->n_lpn);
	printf("  capacity          %.3f GB logical, %.3f GB raw (%u-byte spare area per page)\n",
	       (double)e->logical_pages * e->page_size / 1e9,
	       (double)e->raw_bytes / 1e9, e->oob_bytes);
	printf("  spare factor      %.4f configured, %.4f effective (OP %.4f)\n",
	       e->spare_factor, f->sfe, e->over_provisioning);
	printf("  host pages        %llu measured", (unsigned long long)host);
	if (r->trims)
		printf(" (+ %llu trims over the run, %llu live pages dropped)",
		       (unsigned long long)r->trims,
		       (unsigned long long)e->trimmed_pages);
	printf("\n  NAND programs     %llu = host %llu + GC %llu + WL %llu + pad %llu\n",
	       (unsigned long long)(e->nand_programs - b->nand_programs),
	       (unsigned long long)host,
	       (unsigned long long)(e->gc_programs - b->gc_programs),
	       (unsigned long long)(e->wl_programs - b->wl_programs),
	       (unsigned long long)(e->pad_programs - b->pad_programs));
	printf("  device WA         %.4f", f->wa);
	if (uniform_model(a))
		printf("   (models at Sf %.4f: FIFO %.4f, greedy %.4f, d-choices(%u) %.4f)",
		       f->sfe, gc_model_fifo_wa(f->sfe),
		       gc_model_greedy_wa(f->sfe, a->ppb), a->gc_d,
		       gc_model_dchoices_wa(f->sfe, a->ppb, a->gc_d));
	printf("\n  WA per drive write");
	for (uint32_t i = 0; i < r->n_dw; i++)
		printf(" %.4f", r->dw_wa[i]);
	printf("  (spread %.2f%%)\n", 100.0 * f->dw_spread);
	printf("  erases            %llu (GC victims %llu, background %llu, WL moves %llu)\n",
	       (unsigned long long)(e->erases - b->erases),
	       (unsigned long long)(e->gc_victims - b->gc_victims),
	       (unsigned long long)(e->bg_victims - b->bg_victims),
	       (unsigned long long)(e->wl_moves - b->wl_moves));
	printf("  erase count       min %u  mean %.2f  max %u  evenness %.4f  (P/E limit %u, %llu blocks retired)\n",
	       e->erase_min, e->erase_mean, e->erase_max, e->wear_evenness,
	       e->pe_limit, (unsigned long long)e->retired_blocks);
	printf("  erase histogram  ");
	for (uint32_t i = 0; i < KVF_FLASH_HIST_BUCKETS; i++) {
		uint32_t lo = e->hist_lo + i * e->hist_width;

		if (e->erase_hist[i] == 0)
			continue;
		if (e->hist_width == 1)
			printf(" %u:%llu", lo, (unsigned long long)e->erase_hist[i]);
		else
			printf(" %u-%u:%llu", lo, lo + e->hist_width - 1,
			       (unsigned long long)e->erase_hist[i]);
	}
	printf("\n  modeled time      %.3f s of device time, host writes at %.1f MB/s, dies %.0f%% busy, channels %.0f%% busy",
	       f->dev_s, f->host_mbs, 100.0 * f->die_util, 100.0 * f->ch_util);
	if (e->latency_requests)
		printf("; latency mean %.1f us, p50 %.1f us, p99 %.1f us, max %.1f us",
		       (double)e->latency_sum_ns / e->latency_requests / 1e3,
		       e->latency_p50_ns / 1e3, e->latency_p99_ns / 1e3,
		       e->latency_max_ns / 1e3);
	printf("\n  lifetime          %.3g bytes written by the host until the first block wears out (%.1f drive writes), %.3g more %llu-byte requests\n",
	       f->life.host_bytes_total, f->life.drive_writes,
	       f->life.requests_remaining,
	       (unsigned long long)r->bytes_per_request);
	printf("  emulator speed    %.2f M host page writes/s, %.2f M NAND programs/s (%.2f s wall for %u drive writes)\n",
	       f->host_per_s / 1e6, f->prog_per_s / 1e6,
	       (double)r->wall_ns / 1e9, a->warmup + a->measure);
}

void ftl_print_json(const struct ftl_args *a, const struct ftl_run *r,
		    const struct figures *f)
{
	const struct kvf_flash_stats *b = &r->before, *e = &r->after;
	struct bench_json j = { .f = stdout };

	bench_json_begin(&j, NULL);
	bench_json_str(&j, "bench", "ftl");
	bench_json_begin(&j, "config");
	bench_json_u64(&j, "blocks", e->blocks);
	bench_json_u64(&j, "pages_per_block", e->pages_per_block);
	bench_json_u64(&j, "page_size", e->page_size);
	bench_json_u64(&j, "channels", e->channels);
	bench_json_u64(&j, "dies", e->dies);
	bench_json_str(&j, "cell", cell_name(a->cell));
	bench_json_str(&j, "mapping", e->mapping);
	bench_json_str(&j, "gc", e->gc);
	bench_json_str(&j, "workload", a->wl_text);
	bench_json_double(&j, "trim", a->trim);
	bench_json_u64(&j, "streams", (uint64_t)a->streams);
	bench_json_u64(&j, "warmup_drive_writes", a->warmup);
	bench_json_u64(&j, "measured_drive_writes", a->measure);
	bench_json_u64(&j, "logical_pages", r->n_lpn);
	bench_json_u64(&j, "oob_bytes", e->oob_bytes);
	bench_json_u64(&j, "raw_bytes", e->raw_bytes);
	bench_json_end(&j);
	bench_json_double(&j, "device_wa", f->wa);
	bench_json_double(&j, "spare_factor", e->spare_factor);
	bench_json_double(&j, "spare_factor_effective", f->sfe);
	bench_json_double(&j, "over_provisioning", e->over_provisioning);
	bench_json_u64(&j, "host_pages", e->host_pages - b->host_pages);
	bench_json_u64(&j, "nand_pages_programmed",
		       e->nand_programs - b->nand_programs);
	bench_json_u64(&j, "gc_programs", e->gc_programs - b->gc_programs);
	bench_json_u64(&j, "wl_programs", e->wl_programs - b->wl_programs);
	bench_json_u64(&j, "pad_programs", e->pad_programs - b->pad_programs);
	bench_json_u64(&j, "erases", e->erases - b->erases);
	bench_json_u64(&j, "erase_min", e->erase_min);
	bench_json_u64(&j, "erase_max", e->erase_max);
	bench_json_double(&j, "erase_mean", e->erase_mean);
	bench_json_double(&j, "wear_evenness", e->wear_evenness);
	bench_json_u64(&j, "trims", r->trims);
	if (uniform_model(a)) {
		bench_json_double(&j, "model_wa_fifo", gc_model_fifo_wa(f->sfe));
		bench_json_double(&j, "model_wa_greedy",
				  gc_model_greedy_wa(f->sfe, a->ppb));
		bench_json_double(&j, "model_wa_dchoices",
				  gc_model_dchoices_wa(f->sfe, a->ppb, a->gc_d));
	}
	bench_json_double(&j, "wa_spread_per_drive_write", f->dw_spread);
	bench_json_double(&j, "device_time_s", f->dev_s);
	bench_json_double(&j, "host_write_mbs_modeled", f->host_mbs);
	bench_json_double(&j, "die_utilization", f->die_util);
	bench_json_double(&j, "channel_utilization", f->ch_util);
	if (e->latency_requests) {
		bench_json_double(&j, "latency_mean_us",
				  (double)e->latency_sum_ns / e->latency_requests /
					  1e3);
		bench_json_double(&j, "latency_p99_us", e->latency_p99_ns / 1e3);
	}
	bench_json_double(&j, "lifetime_host_bytes", f->life.host_bytes_total);
	bench_json_double(&j, "lifetime_drive_writes", f->life.drive_writes);
	bench_json_double(&j, "lifetime_requests_remaining",
			  f->life.requests_remaining);
	bench_json_double(&j, "emulator_host_writes_per_s", f->host_per_s);
	bench_json_double(&j, "emulator_programs_per_s", f->prog_per_s);
	bench_json_double(&j, "wall_s", (double)r->wall_ns / 1e9);
	bench_json_end(&j);
}

/* ---- validation ---- */

static const double val_spares[] = { 0.05, 0.10, 0.15, 0.20, 0.25, 0.30,
				     0.35, 0.40, 0.45, 0.50 };
static const enum kvf_flash_gc_policy val_gc[] = {
	KVF_FLASH_GC_FIFO, KVF_FLASH_GC_GREEDY, KVF_FLASH_GC_DCHOICES
};
#define N_SPARES (sizeof(val_spares) / sizeof(val_spares[0]))
#define N_VGC (sizeof(val_gc) / sizeof(val_gc[0]))

int ftl_validate(const struct ftl_args *base)
{
	double meas[N_SPARES][N_VGC], model[N_SPARES][N_VGC], sfe[N_SPARES][N_VGC];
	double worst = 0.0, speed_host = 0.0, speed_prog = 0.0, wall = 0.0;
	struct bench_json j = { .f = stdout };

	for (size_t s = 0; s < N_SPARES; s++) {
		for (size_t p = 0; p < N_VGC; p++) {
			struct ftl_args a = *base;
			struct ftl_run r;
			struct figures f;

			a.spare = val_spares[s];
			a.gc = val_gc[p];
			a.wl = WL_UNIFORM;
			a.trim = 0.0;
			a.seed = base->seed + 1000 * s + p;
			if (ftl_run_case(&a, &r))
				return 1;
			ftl_figures(&a, &r, &f);
			meas[s][p] = f.wa;
			sfe[s][p] = f.sfe;
			model[s][p] = model_for(a.gc, f.sfe, a.ppb, a.gc_d);
			if (fabs(f.wa / model[s][p] - 1.0) > worst)
				worst = fabs(f.wa / model[s][p] - 1.0);
			speed_host += f.host_per_s * ((double)r.wall_ns / 1e9);
			speed_prog += f.prog_per_s * ((double)r.wall_ns / 1e9);
			wall += (double)r.wall_ns / 1e9;
			if (!base->json) {
				fprintf(stderr, "\r  ran Sf %.2f %-8s", val_spares[s],
					kvf_flash_gc_name(a.gc));
				fflush(stderr);
			}
		}
	}
	if (base->json) {
		bench_json_begin(&j, NULL);
		bench_json_str(&j, "bench", "ftl-validate");
		bench_json_u64(&j, "blocks", base->blocks);
		bench_json_u64(&j, "pages_per_block", base->ppb);
		bench_json_u64(&j, "d", base->gc_d);
		for (size_t s = 0; s < N_SPARES; s++) {
			char key[32];

			snprintf(key, sizeof(key), "sf_%.2f", val_spares[s]);
			bench_json_begin(&j, key);
			for (size_t p = 0; p < N_VGC; p++) {
				bench_json_begin(&j, kvf_flash_gc_name(val_gc[p]));
				bench_json_double(&j, "spare_factor_effective",
						  sfe[s][p]);
				bench_json_double(&j, "measured_wa", meas[s][p]);
				bench_json_double(&j, "model_wa", model[s][p]);
				bench_json_double(&j, "error",
						  meas[s][p] / model[s][p] - 1.0);
				bench_json_end(&j);
			}
			bench_json_end(&j);
		}
		bench_json_double(&j, "worst_error", worst);
		bench_json_double(&j, "emulator_host_writes_per_s",
				  speed_host / wall);
		bench_json_double(&j, "emulator_programs_per_s", speed_prog / wall);
		bench_json_end(&j);
		return 0;
	}
	fprintf(stderr, "\r%40s\r", "");
	printf("kvbench ftl --validate: uniform random single-page writes, %u blocks x %u pages, fill + %u drive writes warm-up + %u measured\n",
	       base->blocks, base->ppb, base->warmup, base->measure);
	printf("models evaluated at the effective spare factor of each run: FIFO = fixed point u = exp(-(1-u)/(1-Sf)); greedy, d-choices(%u) = mean field, b = %u\n\n",
	       base->gc_d, base->ppb);
	printf("         |               FIFO                |              greedy               |           d-choices(%u)\n",
	       base->gc_d);
	printf("  Sf     | Sf eff  measured    model    err   | Sf eff  measured    model    err   | Sf eff  measured    model    err\n");
	printf("  -------+-----------------------------------+-----------------------------------+-----------------------------------\n");
	for (size_t s = 0; s < N_SPARES; s++) {
		printf("  %.2f   ", val_spares[s]);
		for (size_t p = 0; p < N_VGC; p++)
			printf("| %.4f %9.4f %9.4f %+6.2f%% ", sfe[s][p],
			       meas[s][p], model[s][p],
			       100.0 * (meas[s][p] / model[s][p] - 1.0));
		printf("\n");
	}
	printf("\n  worst |error| %.2f%%; emulator %.2f M host page writes/s, %.2f M NAND programs/s over %.1f s wall\n",
	       100.0 * worst, speed_host / wall / 1e6, speed_prog / wall / 1e6,
	       wall);
	return 0;
}
