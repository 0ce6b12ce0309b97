/*
 * bench_ftl_run.c - `kvbench ftl`: the workload generators (uniform,
 * hot/cold, Zipf by Vose's alias method, sequential and random whole
 * segments), opening the emulated device, and the runs that drive it: the
 * fill, warm-up and measured drive writes of one case, and the wear-out
 * run.  A file of its own: this is the part whose speed the emulator
 * figures report.
 */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "api/alloc.h"
#include "api/status.h"
#include "bench/bench_common.h"
#include "bench/bench_ftl_int.h"
#include "ftl/media_flash.h"

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

int ftl_run_case(const struct ftl_args *a, struct ftl_run *r)
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

/* ---- wear-out ---- */

/*
 * wearout - fill, warm up, project the lifetime from the warm-up's WA and
 * wear, then keep writing the workload until the device turns read-only;
 * report the host bytes written when the first block retired and at the
 * end, against the projection.
 */
int ftl_wearout(const struct ftl_args *a)
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

