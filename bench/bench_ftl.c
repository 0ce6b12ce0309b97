/*
 * bench_ftl.c - `kvbench ftl`: synthetic workloads on the emulated NAND
 * flash device alone, and the validation of its GC against analytic
 * models of write amplification.
 *
 * One run: open a flash media (metadata only by default), fill every
 * logical page once, warm up for --warmup drive writes (a drive write is
 * one host write per logical page), then measure --measure more, one
 * drive write at a time so the table shows that WA has settled.  Figures
 * are deltas over the measured phase; the emulator's own speed is host
 * page writes and NAND programs per second of wall time over warm-up and
 * measurement.
 *
 * Workloads: uniform random pages; hotcold:R:F (a fraction R of writes to
 * a fraction F of the pages); zipf:THETA (page of rank k with probability
 * proportional to 1/k^THETA, ranks scattered over the pages); seq (whole
 * segments in address order); segment (whole segments at random).  --trim
 * P turns a fraction P of the operations into TRIMs of a random page (or
 * segment).  --streams passes hot/cold classes as stream hints.
 *
 * --validate runs uniform writes over spare factors 0.05..0.5 with FIFO,
 * greedy and d-choices and prints measured WA next to the FIFO fixed
 * point and the greedy and d-choices mean-field models (docs/ftl.md),
 * each evaluated at the effective spare factor the run had.
 */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "api/alloc.h"
#include "api/status.h"
#include "bench/bench_common.h"
#include "ftl/ftl_gc.h"
#include "ftl/media_flash.h"

#define BATCH 4096u    /* pages generated per write call */
#define MAX_DW 64u     /* measured drive writes kept one by one */

enum workload { WL_UNIFORM, WL_HOTCOLD, WL_ZIPF, WL_SEQ, WL_SEGMENT };

struct ftl_args {
	enum kvf_flash_gc_policy gc;   /* victim choice */
	uint32_t gc_d;                 /* d-choices sample */
	double spare;                  /* spare factor */
	uint32_t ppb;                  /* pages per block */
	uint32_t blocks;               /* blocks in the device */
	uint32_t page_size;            /* bytes */
	uint32_t channels;             /* channels */
	uint32_t dies;                 /* dies per channel */
	enum kvf_flash_cell cell;      /* timings and P/E rating */
	enum kvf_flash_mapping mapping; /* page or block */
	enum workload wl;              /* access pattern */
	double hot_r;                  /* hotcold: fraction of writes */
	double hot_f;                  /* hotcold: fraction of pages */
	double theta;                  /* zipf exponent */
	double trim;                   /* fraction of operations that trim */
	int streams;                   /* hot/cold as stream hints */
	uint32_t warmup;               /* drive writes before measuring */
	uint32_t measure;              /* drive writes measured */
	uint32_t wl_gap;               /* static WL threshold; 0 = off */
	uint32_t pe_limit;             /* 0 = the cell's rating */
	enum kvf_flash_backing backing; /* none or memory */
	uint64_t idle_every;           /* host pages between idle spells */
	uint64_t idle_us;              /* length of one idle spell (us) */
	int qd1;                       /* sync issue: latency */
	uint64_t seed;                 /* generator seed */
	int validate;                  /* the model table */
	int wearout;                   /* write until the device wears out */
	int json;                      /* JSON output */
	const char *wl_text;           /* the --workload text */
};

/* ---- workload generators ---- */

struct gen {
	enum workload wl;   /* kind */
	uint64_t n;         /* logical pages */
	uint64_t rng;       /* xorshift state */
	uint64_t hot;       /* hotcold: hot pages [0, hot) */
	double hot_r;       /* hotcold: fraction of writes to them */
	double *prob;       /* zipf alias table: acceptance */
	uint32_t *alias;    /* zipf alias table: alias */
	uint32_t *perm;     /* zipf: rank -> page */
	uint64_t next_seg;  /* seq: next segment */
};

static uint64_t rnd(uint64_t *s)
{
	uint64_t x = *s;

	x ^= x << 13;
	x ^= x >> 7;
	x ^= x << 17;
	*s = x;
	return x * 0x2545f4914f6cdd1dull;
}

static uint64_t below(uint64_t *s, uint64_t n)
{
	return rnd(s) % n;
}

static double unit(uint64_t *s)
{
	return (double)(rnd(s) >> 11) * (1.0 / 9007199254740992.0);
}

/* zipf_init - Vose's alias method over n ranks, p(k) ~ 1 / (k+1)^theta */
static int zipf_init(struct gen *g, double theta)
{
	uint32_t *small = kvf_malloc(g->n * sizeof(uint32_t));
	uint32_t *large = kvf_malloc(g->n * sizeof(uint32_t));
	uint64_t ns = 0, nl = 0;
	double sum = 0.0;

	g->prob = kvf_malloc(g->n * sizeof(double));
	g->alias = kvf_malloc(g->n * sizeof(uint32_t));
	g->perm = kvf_malloc(g->n * sizeof(uint32_t));
	if (!small || !large || !g->prob || !g->alias || !g->perm) {
		kvf_free(small);
		kvf_free(large);
		return -1;
	}
	for (uint64_t k = 0; k < g->n; k++)
		sum += pow((double)(k + 1), -theta);
	for (uint64_t k = 0; k < g->n; k++) {
		g->prob[k] = pow((double)(k + 1), -theta) / sum * (double)g->n;
		if (g->prob[k] < 1.0)
			small[ns++] = (uint32_t)k;
		else
			large[nl++] = (uint32_t)k;
	}
	while (ns > 0 && nl > 0) {
		uint32_t s = small[--ns], l = large[nl - 1];

		g->alias[s] = l;
		g->prob[l] -= 1.0 - g->prob[s];
		if (g->prob[l] < 1.0) {
			nl--;
			small[ns++] = l;
		}
	}
	while (nl > 0)
		g->prob[large[--nl]] = 1.0;
	while (ns > 0)
		g->prob[small[--ns]] = 1.0;
	for (uint64_t k = 0; k < g->n; k++)
		g->perm[k] = (uint32_t)k;
	for (uint64_t k = g->n - 1; k > 0; k--) {
		uint64_t j = below(&g->rng, k + 1);
		uint32_t t = g->perm[k];

		g->perm[k] = g->perm[j];
		g->perm[j] = t;
	}
	kvf_free(small);
	kvf_free(large);
	return 0;
}

static int gen_init(struct gen *g, const struct ftl_args *a, uint64_t n)
{
	memset(g, 0, sizeof(*g));
	g->wl = a->wl;
	g->n = n;
	g->rng = a->seed ? a->seed : 0x853c49e6748fea9bull;
	g->hot = (uint64_t)(a->hot_f * (double)n);
	if (g->hot == 0)
		g->hot = 1;
	g->hot_r = a->hot_r;
	if (a->wl == WL_ZIPF)
		return zipf_init(g, a->theta);
	return 0;
}

static void gen_release(struct gen *g)
{
	kvf_free(g->prob);
	kvf_free(g->alias);
	kvf_free(g->perm);
}

/* gen_page - the next page; *hot tells its class (hotcold, zipf top) */
static uint64_t gen_page(struct gen *g, int *hot)
{
	uint64_t k;

	switch (g->wl) {
	case WL_HOTCOLD:
		*hot = unit(&g->rng) < g->hot_r;
		return *hot ? below(&g->rng, g->hot) :
			      g->hot + below(&g->rng, g->n - g->hot);
	case WL_ZIPF:
		k = below(&g->rng, g->n);
		if (unit(&g->rng) >= g->prob[k])
			k = g->alias[k];
		*hot = k < g->n / 10;
		return g->perm[k];
	default:
		*hot = 0;
		return below(&g->rng, g->n);
	}
}

/* ---- running ---- */

struct ftl_run {
	struct kvf_flash_stats fill;   /* after the fill */
	struct kvf_flash_stats before; /* start of the measured phase */
	struct kvf_flash_stats after;  /* end of it */
	double dw_wa[MAX_DW];          /* WA of each measured drive write */
	uint32_t n_dw;                 /* entries in dw_wa */
	uint64_t n_lpn;                /* logical pages */
	uint64_t wall_ns;              /* warm-up + measure wall time */
	uint64_t trims;                /* trim operations issued */
	uint64_t bytes_per_request;    /* host bytes per write request */
};

static int fail(const char *what)
{
	fprintf(stderr, "kvbench ftl: %s: %s\n", what, kvf_last_error());
	return 1;
}

/* worn_write - a write failed: in a wear-out run, KVF_ENOSPC is the end
 * being reached (returns 2, silently); anything else is a failure */
static int worn_write(const struct ftl_args *a, kvf_status rc)
{
	if (a->wearout && rc == KVF_ENOSPC)
		return 2;
	return fail("writing");
}

static int open_device(const struct ftl_args *a, struct kvf_media **m,
		       uint64_t *n_lpn)
{
	uint32_t pps = a->ppb;
	uint64_t phys = (uint64_t)a->blocks * a->ppb;
	uint64_t segs = (uint64_t)((1.0 - a->spare) * (double)phys) / pps;
	struct kvf_flash_config fc;
	struct kvf_media_config mc = {
		.kind = KVF_MEDIA_FLASH,
		.geo = { .n_stripes = 1, .page_size = a->page_size,
			 .pages_per_segment = pps, .segs_per_stripe = segs },
		.flash = &fc,
	};
	uint32_t units = a->channels * a->dies;

	kvf_flash_config_init(&fc);
	fc.channels = a->channels;
	fc.dies_per_channel = a->dies;
	fc.blocks_per_plane = (a->blocks + units - 1) / units;
	fc.pages_per_block = a->ppb;
	fc.cell = a->cell;
	fc.mapping = a->mapping;
	fc.gc = a->gc;
	fc.gc_d = a->gc_d;
	fc.n_streams = a->streams ? 2 : 1;
	fc.wl_static_gap = a->wl_gap;
	fc.pe_limit = a->pe_limit;
	fc.backing = a->backing;
	fc.issue = a->qd1 ? KVF_FLASH_ISSUE_SYNC : KVF_FLASH_ISSUE_QUEUED;
	fc.seed = a->seed;
	if (segs == 0) {
		fprintf(stderr, "kvbench ftl: --spare %g leaves no logical space\n",
			a->spare);
		return 1;
	}
	if (kvf_media_open(&mc, m) != KVF_OK)
		return fail("opening the device");
	*n_lpn = segs * pps;
	return 0;
}

/* write_segments - n whole-segment requests (seq or random) */
static int write_segments(const struct ftl_args *a, struct kvf_media *m,
			  struct gen *g, uint64_t n, uint32_t pps, void *buf)
{
	kvf_status rc;

	uint64_t segs = g->n / pps;

	for (uint64_t i = 0; i < n; i++) {
		uint64_t seg = g->wl == WL_SEQ ? g->next_seg++ % segs :
			       below(&g->rng, segs);
		struct kvf_media_io io = { .stripe = 0, .seg = seg, .page = 0,
					   .n_pages = pps, .buf = buf };

		if ((rc = kvf_flash_write(m, &io, 1, 0)) != KVF_OK)
			return worn_write(a, rc);
	}
	return 0;
}

/* run_pages - n_host host page writes of the workload, with trims and
 * idle spells mixed in; 0, 1 (failed, message printed) or 2 (a wear-out
 * run reached the end of the device's life) */
static int run_pages(struct kvf_media *m, const struct ftl_args *a,
		     struct gen *g, uint64_t n_host, void *seg_buf,
		     struct ftl_run *r)
{
	uint64_t lpns[2][BATCH], done = 0, since_idle = 0;
	int rc;

	while (done < n_host) {
		uint32_t n[2] = { 0, 0 }, want;

		want = n_host - done < BATCH ? (uint32_t)(n_host - done) : BATCH;
		if (a->idle_every && want > a->idle_every - since_idle)
			want = (uint32_t)(a->idle_every - since_idle);
		if (a->wl == WL_SEQ || a->wl == WL_SEGMENT) {
			uint64_t segs = (want + a->ppb - 1) / a->ppb;

			if (a->trim > 0.0 && unit(&g->rng) < a->trim) {
				if (kvf_flash_trim_pages(m, 0,
					below(&g->rng, g->n / a->ppb) * a->ppb,
					a->ppb) != KVF_OK)
					return fail("trimming");
				r->trims++;
				continue;
			}
			if ((rc = write_segments(a, m, g, segs, a->ppb,
						 seg_buf)) != 0)
				return rc;
			want = (uint32_t)(segs * a->ppb);
		} else {
			for (uint32_t i = 0; i < want; i++) {
				int hot;
				uint64_t l = gen_page(g, &hot);

				if (a->trim > 0.0 && unit(&g->rng) < a->trim) {
					if (kvf_flash_trim_pages(m, 0, l, 1) !=
					    KVF_OK)
						return fail("trimming");
					r->trims++;
					i--;
					continue;
				}
				hot = a->streams ? !hot : 0; /* stream 1 cold */
				lpns[hot][n[hot]++] = l;
			}
			for (int s = 0; s < 2; s++) {
				kvf_status st;

				if (n[s] == 0)
					continue;
				st = kvf_flash_write_lpns(m, 0, lpns[s], n[s],
							  (uint32_t)s);
				if (st != KVF_OK)
					return worn_write(a, st);
			}
		}
		done += want;
		since_idle += want;
		if (a->idle_every && since_idle >= a->idle_every) {
			if (kvf_flash_idle(m, a->idle_us * 1000) != KVF_OK)
				return fail("idling");
			since_idle = 0;
		}
	}
	return 0;
}

static int fill(struct kvf_media *m, uint64_t n_lpn)
{
	uint64_t lpns[BATCH];

	for (uint64_t l = 0; l < n_lpn;) {
		uint32_t k = 0;

		while (k < BATCH && l < n_lpn)
			lpns[k++] = l++;
		if (kvf_flash_write_lpns(m, 0, lpns, k, 0) != KVF_OK)
			return fail("filling");
	}
	return 0;
}

static int run_case(const struct ftl_args *a, struct ftl_run *r)
{
	struct kvf_media *m = NULL;
	struct gen g;
	void *seg_buf = NULL;
	uint64_t t0, prev_host, prev_nand;
	int rc = 1;

	memset(r, 0, sizeof(*r));
	if (open_device(a, &m, &r->n_lpn))
		return 1;
	if (gen_init(&g, a, r->n_lpn)) {
		fprintf(stderr, "kvbench ftl: out of memory for the workload\n");
		goto out_media;
	}
	seg_buf = kvf_aligned_alloc(KVF_MEDIA_ALIGN,
				    (size_t)a->ppb * a->page_size);
	if (seg_buf == NULL) {
		fprintf(stderr, "kvbench ftl: out of memory\n");
		goto out_gen;
	}
	memset(seg_buf, 0x5a, (size_t)a->ppb * a->page_size);
	if (fill(m, r->n_lpn))
		goto out_buf;
	kvf_flash_stats(m, &r->fill);
	t0 = bench_now_ns();
	if (run_pages(m, a, &g, (uint64_t)a->warmup * r->n_lpn, seg_buf, r))
		goto out_buf;
	kvf_flash_stats(m, &r->before);
	prev_host = r->before.host_pages;
	prev_nand = r->before.nand_programs;
	for (uint32_t dw = 0; dw < a->measure; dw++) {
		struct kvf_flash_stats s;

		if (run_pages(m, a, &g, r->n_lpn, seg_buf, r))
			goto out_buf;
		kvf_flash_stats(m, &s);
		if (r->n_dw < MAX_DW)
			r->dw_wa[r->n_dw++] = (double)(s.nand_programs - prev_nand) /
					      (double)(s.host_pages - prev_host);
		prev_host = s.host_pages;
		prev_nand = s.nand_programs;
	}
	r->wall_ns = bench_now_ns() - t0;
	kvf_flash_stats(m, &r->after);
	if (kvf_flash_check(m) != KVF_OK) {
		fail("FTL self-check after the run");
		goto out_buf;
	}
	r->bytes_per_request = a->wl == WL_SEQ || a->wl == WL_SEGMENT ?
			       (uint64_t)a->ppb * a->page_size : a->page_size;
	rc = 0;
out_buf:
	kvf_free(seg_buf);
out_gen:
	gen_release(&g);
out_media:
	kvf_media_free(m);
	return rc;
}

/* ---- figures ---- */

struct figures {
	double wa;          /* device WA over the measured phase */
	double sfe;         /* effective spare factor over it */
	double host_mbs;    /* modeled host write bandwidth (MB/s) */
	double dev_s;       /* modeled device time of the phase (s) */
	double host_per_s;  /* emulator: host page writes per wall second */
	double prog_per_s;  /* emulator: NAND programs per wall second */
	double dw_spread;   /* (max - min) / mean of per-drive-write WA */
	double die_util;    /* die busy time / (dies x device time) */
	double ch_util;     /* channel busy time / (channels x device time) */
	struct kvf_flash_lifetime life; /* at the measured WA and wear */
};

static void figures(const struct ftl_args *a, const struct ftl_run *r,
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

static void print_table(const struct ftl_args *a, const struct ftl_run *r,
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

static void print_json(const struct ftl_args *a, const struct ftl_run *r,
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

static int validate(const struct ftl_args *base)
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
			if (run_case(&a, &r))
				return 1;
			figures(&a, &r, &f);
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

/* ---- wear-out ---- */

/*
 * wearout - fill, warm up, project the lifetime from the warm-up's WA and
 * wear, then keep writing the workload until the device turns read-only;
 * report the host bytes written when the first block retired and at the
 * end, against the projection.
 */
static int wearout(const struct ftl_args *a)
{
	struct kvf_flash_stats s0, s1, s;
	struct kvf_flash_lifetime p;
	struct kvf_media *m = NULL;
	struct ftl_run r;
	struct gen g;
	double first = 0.0, t0;
	void *seg_buf;
	int rc = 1, w = 0;

	memset(&r, 0, sizeof(r));
	if (open_device(a, &m, &r.n_lpn))
		return 1;
	seg_buf = kvf_aligned_alloc(KVF_MEDIA_ALIGN,
				    (size_t)a->ppb * a->page_size);
	if (seg_buf == NULL || gen_init(&g, a, r.n_lpn)) {
		fprintf(stderr, "kvbench ftl: out of memory\n");
		kvf_free(seg_buf);
		kvf_media_free(m);
		return 1;
	}
	t0 = (double)bench_now_ns();
	if (fill(m, r.n_lpn))
		goto out;
	kvf_flash_stats(m, &s0);
	if (run_pages(m, a, &g, (uint64_t)a->warmup * r.n_lpn, seg_buf, &r))
		goto out;
	kvf_flash_stats(m, &s1);
	kvf_flash_project(&s1, (double)(s1.host_pages - s0.host_pages) *
				       s1.page_size,
			  (double)(s1.erases - s0.erases), a->page_size, &p);
	while ((w = run_pages(m, a, &g, r.n_lpn / 16 + 1, seg_buf, &r)) == 0) {
		kvf_flash_stats(m, &s);
		if (first == 0.0 && s.retired_blocks > 0)
			first = (double)s.host_pages * s.page_size;
	}
	if (w != 2)
		goto out;
	kvf_flash_stats(m, &s);
	if (a->json) {
		struct bench_json j = { .f = stdout };

		bench_json_begin(&j, NULL);
		bench_json_str(&j, "bench", "ftl-wearout");
		bench_json_u64(&j, "pe_limit", s.pe_limit);
		bench_json_double(&j, "warmup_device_wa",
				  (double)(s1.nand_programs - s0.nand_programs) /
					  (double)(s1.host_pages - s0.host_pages));
		bench_json_double(&j, "projected_host_bytes", p.host_bytes_total);
		bench_json_double(&j, "host_bytes_at_first_retirement", first);
		bench_json_double(&j, "host_bytes_at_wear_out",
				  (double)s.host_pages * s.page_size);
		bench_json_u64(&j, "retired_blocks", s.retired_blocks);
		bench_json_u64(&j, "lost_bytes", s.lost_bytes);
		bench_json_double(&j, "device_wa", s.device_wa);
		bench_json_double(&j, "wall_s",
				  ((double)bench_now_ns() - t0) / 1e9);
		bench_json_end(&j);
	} else {
		printf("kvbench ftl --wearout: %u blocks x %u pages, %s, P/E limit %u, %s\n",
		       s.blocks, s.pages_per_block, a->wl_text, s.pe_limit, s.gc);
		printf("  after warm-up     WA %.4f, erase max/mean %u/%.2f: projected %.4g host bytes until the first block wears out (%.1f drive writes)\n",
		       (double)(s1.nand_programs - s0.nand_programs) /
			       (double)(s1.host_pages - s0.host_pages),
		       s1.erase_max, s1.erase_mean, p.host_bytes_total,
		       p.drive_writes);
		printf("  first retirement  after %.4g host bytes (%+.1f%% of the projection)\n",
		       first, 100.0 * (first / p.host_bytes_total - 1.0));
		printf("  worn out          after %.4g host bytes (%.1f drive writes): %llu blocks retired, %.3g bytes lost, device WA %.4f over its life\n",
		       (double)s.host_pages * s.page_size,
		       (double)s.host_pages / (double)r.n_lpn,
		       (unsigned long long)s.retired_blocks,
		       (double)s.lost_bytes, s.device_wa);
		printf("  emulator          %.2f s wall, %.2f M NAND programs/s\n",
		       ((double)bench_now_ns() - t0) / 1e9,
		       (double)s.nand_programs /
			       (((double)bench_now_ns() - t0) / 1e9) / 1e6);
	}
	rc = 0;
out:
	gen_release(&g);
	kvf_free(seg_buf);
	kvf_media_free(m);
	return rc;
}

/* ---- arguments ---- */

static void usage(FILE *f)
{
	fprintf(f,
		"usage: kvbench ftl [options]\n"
		"  --gc greedy|cost-benefit|fifo|dchoices   victim choice (default greedy)\n"
		"  --d N                  d-choices sample size (default 10)\n"
		"  --spare F              spare factor (physical-logical)/physical (default 0.2)\n"
		"  --pages-per-block N    pages per block (default 64)\n"
		"  --blocks N             blocks in the device (default 6000)\n"
		"  --page-size BYTES      4K, 8K or 16K (default 4K)\n"
		"  --channels N --dies N  channels, dies per channel (default 1, 1)\n"
		"  --cell slc|mlc|tlc|qlc cell type: timings and P/E rating (default tlc)\n"
		"  --mapping page|block   FTL mapping (default page)\n"
		"  --workload W           uniform | hotcold:R:F | zipf:THETA | seq | segment\n"
		"  --trim P               a fraction P of operations are TRIMs (default 0)\n"
		"  --streams              pass hot/cold classes as stream hints\n"
		"  --warmup N             drive writes after the fill before measuring (default 10)\n"
		"  --measure N            drive writes measured (default 5)\n"
		"  --wl-static GAP        static wear leveling at this erase gap (default off)\n"
		"  --pe-limit N           erases before a block retires (default: the cell's)\n"
		"  --backing none|memory  keep page bytes or not (default none)\n"
		"  --idle-every N --idle-us T  idle T us every N host pages (background GC)\n"
		"  --qd1                  each request waits for the last: latency figures\n"
		"  --seed N               workload seed\n"
		"  --validate             measured WA vs the analytic models, Sf 0.05..0.5\n"
		"  --wearout              after warm-up, write until the device wears out and\n"
		"                         compare with the lifetime projected after warm-up\n"
		"  --json                 JSON instead of a table\n");
}

static int parse_workload(const char *t, struct ftl_args *a)
{
	char *end;

	a->wl_text = t;
	if (strcmp(t, "uniform") == 0) {
		a->wl = WL_UNIFORM;
	} else if (strcmp(t, "seq") == 0) {
		a->wl = WL_SEQ;
	} else if (strcmp(t, "segment") == 0) {
		a->wl = WL_SEGMENT;
	} else if (strncmp(t, "hotcold:", 8) == 0) {
		a->wl = WL_HOTCOLD;
		a->hot_r = strtod(t + 8, &end);
		if (*end != ':')
			return -1;
		a->hot_f = strtod(end + 1, &end);
		if (*end || !(a->hot_r > 0 && a->hot_r <= 1) ||
		    !(a->hot_f > 0 && a->hot_f < 1))
			return 2;
	} else if (strncmp(t, "zipf:", 5) == 0) {
		a->wl = WL_ZIPF;
		a->theta = strtod(t + 5, &end);
		if (*end || !(a->theta > 0 && a->theta < 10))
			return -1;
	} else {
		return -1;
	}
	return 0;
}

static int parse_enum(const char *t, const char *const *names, int n)
{
	for (int i = 0; i < n; i++)
		if (names[i] && strcmp(t, names[i]) == 0)
			return i;
	return -1;
}

/* parse_value - one "--flag VALUE" option: 0, 2 (bad value, message
 * printed) or 1 (not a flag this knows) */
static int parse_value(const char *f, const char *v, struct ftl_args *a)
{
	static const char *const gcs[] = { "greedy", "cost-benefit", "fifo",
					   "dchoices" };
	static const char *const cells[] = { NULL, "slc", "mlc", "tlc", "qlc" };
	static const char *const maps[] = { "page", "block" };
	static const char *const backs[] = { "memory", NULL, "none" };
	uint64_t u = 0;
	int e;

	if (strcmp(f, "--gc") == 0) {
		if ((e = parse_enum(v, gcs, 4)) < 0)
			return bench_usage_error("ftl", "--gc %s: use greedy, cost-benefit, fifo or dchoices", v);
		a->gc = (enum kvf_flash_gc_policy)e;
	} else if (strcmp(f, "--cell") == 0) {
		if ((e = parse_enum(v, cells, 5)) < 0)
			return bench_usage_error("ftl", "--cell %s: use slc, mlc, tlc or qlc", v);
		a->cell = (enum kvf_flash_cell)e;
	} else if (strcmp(f, "--mapping") == 0) {
		if ((e = parse_enum(v, maps, 2)) < 0)
			return bench_usage_error("ftl", "--mapping %s: use page or block", v);
		a->mapping = (enum kvf_flash_mapping)e;
	} else if (strcmp(f, "--backing") == 0) {
		if ((e = parse_enum(v, backs, 3)) < 0)
			return bench_usage_error("ftl", "--backing %s: use none or memory", v);
		a->backing = (enum kvf_flash_backing)e;
	} else if (strcmp(f, "--workload") == 0) {
		if (parse_workload(v, a))
			return bench_usage_error("ftl", "--workload %s: use uniform, hotcold:R:F (0<R<=1, 0<F<1), zipf:THETA, seq or segment", v);
	} else if (strcmp(f, "--spare") == 0) {
		if (bench_parse_double(f, v, &a->spare))
			return 2;
	} else if (strcmp(f, "--trim") == 0) {
		if (bench_parse_double(f, v, &a->trim))
			return 2;
	} else if (strcmp(f, "--seed") == 0) {
		if (bench_parse_u64(f, v, &a->seed))
			return 2;
	} else if (strcmp(f, "--idle-every") == 0) {
		if (bench_parse_u64(f, v, &a->idle_every))
			return 2;
	} else if (strcmp(f, "--idle-us") == 0) {
		if (bench_parse_u64(f, v, &a->idle_us))
			return 2;
	} else {
		uint32_t *dst = strcmp(f, "--d") == 0 ? &a->gc_d :
				strcmp(f, "--pages-per-block") == 0 ? &a->ppb :
				strcmp(f, "--blocks") == 0 ? &a->blocks :
				strcmp(f, "--page-size") == 0 ? &a->page_size :
				strcmp(f, "--channels") == 0 ? &a->channels :
				strcmp(f, "--dies") == 0 ? &a->dies :
				strcmp(f, "--warmup") == 0 ? &a->warmup :
				strcmp(f, "--measure") == 0 ? &a->measure :
				strcmp(f, "--wl-static") == 0 ? &a->wl_gap :
				strcmp(f, "--pe-limit") == 0 ? &a->pe_limit :
								NULL;

		if (dst == NULL)
			return 1;
		if (bench_parse_u64(f, v, &u))
			return 2;
		if (u > UINT32_MAX)
			return bench_usage_error("ftl", "%s %s is too large", f, v);
		*dst = (uint32_t)u;
	}
	return 0;
}

static int check_args(const struct ftl_args *a)
{
	if (!(a->spare > 0.0 && a->spare < 1.0))
		return bench_usage_error("ftl", "--spare %g: use a value in (0, 1)", a->spare);
	if (!(a->trim >= 0.0 && a->trim < 1.0))
		return bench_usage_error("ftl", "--trim %g: use a value in [0, 1)", a->trim);
	if (a->blocks < 16 || a->ppb < 2)
		return bench_usage_error("ftl", "--blocks needs at least 16, --pages-per-block at least 2");
	if (a->measure == 0 || a->channels == 0 || a->dies == 0 || a->gc_d == 0)
		return bench_usage_error("ftl", "--measure, --channels, --dies and --d must be at least 1");
	if (a->mapping == KVF_FLASH_MAP_BLOCK && a->wl != WL_SEQ &&
	    a->wl != WL_SEGMENT)
		fprintf(stderr, "kvbench ftl: note: block-level mapping merges a whole block for every single-page write\n");
	if (a->idle_every && a->idle_us == 0)
		return bench_usage_error("ftl", "--idle-every needs --idle-us");
	return 0;
}

int bench_ftl_main(int argc, char **argv)
{
	struct ftl_args a = {
		.gc = KVF_FLASH_GC_GREEDY, .gc_d = 10, .spare = 0.2, .ppb = 64,
		.blocks = 6000, .page_size = 4096, .channels = 1, .dies = 1,
		.cell = KVF_FLASH_TLC, .mapping = KVF_FLASH_MAP_PAGE,
		.wl = WL_UNIFORM, .warmup = 10, .measure = 5,
		.backing = KVF_FLASH_BACKING_NONE, .seed = 1,
		.wl_text = "uniform",
	};
	struct ftl_run r;
	struct figures f;

	for (int i = 1; i < argc; i++) {
		const char *fl = argv[i];
		int rc;

		if (strcmp(fl, "--help") == 0 || strcmp(fl, "-h") == 0) {
			usage(stdout);
			return 0;
		}
		if (strcmp(fl, "--json") == 0) {
			a.json = 1;
			continue;
		}
		if (strcmp(fl, "--validate") == 0) {
			a.validate = 1;
			continue;
		}
		if (strcmp(fl, "--streams") == 0) {
			a.streams = 1;
			continue;
		}
		if (strcmp(fl, "--qd1") == 0) {
			a.qd1 = 1;
			continue;
		}
		if (strcmp(fl, "--wearout") == 0) {
			a.wearout = 1;
			continue;
		}
		if (i + 1 >= argc)
			return bench_usage_error("ftl", "unknown option or missing value: '%s' (kvbench ftl --help)", fl);
		rc = parse_value(fl, argv[i + 1], &a);
		if (rc == 2)
			return 2;
		if (rc == 1)
			return bench_usage_error("ftl", "unknown option '%s' (kvbench ftl --help)", fl);
		i++;
	}
	if (check_args(&a))
		return 2;
	if (a.validate)
		return validate(&a);
	if (a.wearout)
		return wearout(&a);
	if (run_case(&a, &r))
		return 1;
	figures(&a, &r, &f);
	if (a.json)
		print_json(&a, &r, &f);
	else
		print_table(&a, &r, &f);
	return 0;
}
