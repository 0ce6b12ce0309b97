/*
 * bench_endurance_trace.c - block traces, the file system model that
 * turns file writes into them, their replay on the emulated SSD, and the
 * lifetime arithmetic (docs/endurance.md has the method and why).
 */
#include <math.h>
#include <dirent.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "bench/bench_endurance_int.h"
#include "ftl/media.h"
#include "ftl/media_flash.h"

/* ---- traces ---- */

void end_trace_init(struct end_trace *t, uint64_t n_lpn)
{
	memset(t, 0, sizeof(*t));
	pthread_mutex_init(&t->lock, NULL);
	t->n_lpn = n_lpn;
}

void end_trace_free(struct end_trace *t)
{
	free(t->ev);
	t->ev = NULL;
	t->n = t->cap = 0;
	pthread_mutex_destroy(&t->lock);
}

void end_trace_add(struct end_trace *t, uint32_t op, uint64_t lpn, uint64_t n)
{
	struct end_tev *last;

	if (n == 0)
		return;
	pthread_mutex_lock(&t->lock);
	if (lpn + n > t->n_lpn)
		t->failed = 1;
	if (op == TR_WRITE)
		t->write_pages += n;
	else
		t->trim_pages += n;
	last = t->n ? &t->ev[t->n - 1] : NULL;
	if (last && last->op == op && last->lpn + last->n == lpn &&
	    last->n + n <= UINT32_MAX) {
		last->n += (uint32_t)n;
		goto out;
	}
	if (t->n == t->cap) {
		size_t cap = t->cap ? 2 * t->cap : 1024;
		struct end_tev *ev = realloc(t->ev, cap * sizeof(*ev));

		if (ev == NULL) {
			t->failed = 1;
			goto out;
		}
		t->ev = ev;
		t->cap = cap;
	}
	while (n > UINT32_MAX) { /* never in practice: events are small */
		t->failed = 1;
		n = UINT32_MAX;
	}
	t->ev[t->n++] = (struct end_tev){ .lpn = lpn, .n = (uint32_t)n, .op = op };
out:
	pthread_mutex_unlock(&t->lock);
}

int end_trace_check(const struct end_trace *t)
{
	uint64_t w = 0, tr = 0;

	for (size_t i = 0; i < t->n; i++) {
		const struct end_tev *e = &t->ev[i];

		if (e->n == 0 || e->lpn + e->n > t->n_lpn ||
		    (e->op != TR_WRITE && e->op != TR_TRIM)) {
			fprintf(stderr, "kvbench endurance: trace event %zu (op %u, pages %llu+%u) is outside the device (%llu pages)\n",
				i, e->op, (unsigned long long)e->lpn, e->n,
				(unsigned long long)t->n_lpn);
			return -1;
		}
		if (e->op == TR_WRITE)
			w += e->n;
		else
			tr += e->n;
	}
	if (t->failed || w != t->write_pages || tr != t->trim_pages) {
		fprintf(stderr, "kvbench endurance: trace counts do not add up (%llu written, %llu in events)\n",
			(unsigned long long)t->write_pages, (unsigned long long)w);
		return -1;
	}
	return 0;
}

/* ---- the file system model ---- */

int fsm_init(struct fsm *f, struct end_trace *tr, uint64_t base, uint64_t n)
{
	memset(f, 0, sizeof(*f));
	f->tr = tr;
	f->base = base;
	f->n = n;
	f->used = calloc(n ? n : 1, 1);
	return f->used ? 0 : -1;
}

void fsm_free(struct fsm *f)
{
	for (size_t i = 0; i < f->n_files; i++) {
		free(f->files[i].lpn);
		free(f->files[i].dirty);
	}
	free(f->files);
	free(f->dirty);
	free(f->used);
	memset(f, 0, sizeof(*f));
}

long fsm_create(struct fsm *f, const char *name)
{
	struct fsm_file *fl;

	if (f->n_files == f->cap_files) {
		size_t cap = f->cap_files ? 2 * f->cap_files : 256;
		struct fsm_file *n = realloc(f->files, cap * sizeof(*n));

		if (n == NULL)
			return -1;
		f->files = n;
		f->cap_files = cap;
	}
	fl = &f->files[f->n_files];
	memset(fl, 0, sizeof(*fl));
	snprintf(fl->name, sizeof(fl->name), "%s", name ? name : "");
	fl->live = 1;
	return (long)f->n_files++;
}

long fsm_lookup(const struct fsm *f, const char *name)
{
	for (size_t i = f->n_files; i-- > 0;)
		if (f->files[i].live && strcmp(f->files[i].name, name) == 0)
			return (long)i;
	return -1;
}

static int file_grow(struct fsm_file *fl, uint64_t pages)
{
	uint64_t cap = fl->cap_pages ? fl->cap_pages : 4;
	uint64_t *l;
	uint8_t *d;

	if (pages <= fl->cap_pages)
		goto size;
	while (cap < pages)
		cap *= 2;
	if ((l = realloc(fl->lpn, cap * sizeof(*l))) == NULL)
		return -1;
	fl->lpn = l;
	if ((d = realloc(fl->dirty, cap)) == NULL)
		return -1;
	fl->dirty = d;
	for (uint64_t i = fl->cap_pages; i < cap; i++) {
		l[i] = UINT64_MAX;
		d[i] = 0;
	}
	fl->cap_pages = cap;
size:
	if (pages > fl->n_pages)
		fl->n_pages = pages;
	return 0;
}

int fsm_write(struct fsm *f, long fi, uint64_t off, uint64_t len)
{
	struct fsm_file *fl = &f->files[fi];
	uint64_t p0 = off / END_PAGE, p1 = (off + len + END_PAGE - 1) / END_PAGE;

	if (len == 0)
		return 0;
	if (file_grow(fl, p1))
		return -1;
	if (off + len > fl->size)
		fl->size = off + len;
	f->bytes_in += len;
	for (uint64_t p = p0; p < p1; p++) {
		if (fl->dirty[p])
			continue;
		if (f->n_dirty == f->cap_dirty) {
			size_t cap = f->cap_dirty ? 2 * f->cap_dirty : 4096;
			uint64_t (*d)[2] = realloc(f->dirty, cap * sizeof(*d));

			if (d == NULL)
				return -1;
			f->dirty = d;
			f->cap_dirty = cap;
		}
		fl->dirty[p] = 1;
		f->dirty[f->n_dirty][0] = (uint64_t)fi;
		f->dirty[f->n_dirty][1] = p;
		f->n_dirty++;
	}
	return 0;
}

/* alloc_page - a free device page next to hint (or the cursor) */
static uint64_t alloc_page(struct fsm *f, uint64_t hint)
{
	uint64_t p = hint < f->n && !f->used[hint] ? hint : f->cursor;

	for (uint64_t k = 0; k < f->n; k++, p++) {
		if (p >= f->n)
			p = 0;
		if (!f->used[p]) {
			f->used[p] = 1;
			f->n_used++;
			f->cursor = p + 1 < f->n ? p + 1 : 0;
			return p;
		}
	}
	f->full = 1;
	return UINT64_MAX;
}

static int cmp_dirty(const void *x, const void *y)
{
	const uint64_t *a = x, *b = y;

	if (a[0] != b[0])
		return a[0] < b[0] ? -1 : 1;
	return a[1] < b[1] ? -1 : a[1] > b[1];
}

int fsm_flush(struct fsm *f)
{
	return fsm_flush_if(f, NULL);
}

int fsm_flush_if(struct fsm *f, int (*pick)(const char *name))
{
	uint64_t run0 = 0, run_n = 0;
	size_t kept = 0;

	/* by file and page: delayed allocation places each file's new
	 * pages together, and the device sees them in address order */
	if (f->n_dirty == 0)
		return f->full ? -1 : 0;
	qsort(f->dirty, f->n_dirty, sizeof(f->dirty[0]), cmp_dirty);
	for (size_t i = 0; i < f->n_dirty; i++) {
		struct fsm_file *fl = &f->files[f->dirty[i][0]];
		uint64_t p = f->dirty[i][1], lpn;

		if (!fl->live || !fl->dirty[p])
			continue;
		if (pick && !pick(fl->name)) {
			memmove(f->dirty[kept++], f->dirty[i], sizeof(f->dirty[0]));
			continue;
		}
		fl->dirty[p] = 0;
		if (fl->lpn[p] == UINT64_MAX) {
			uint64_t hint = p > 0 && fl->lpn[p - 1] != UINT64_MAX ?
					fl->lpn[p - 1] + 1 : UINT64_MAX;

			if ((fl->lpn[p] = alloc_page(f, hint)) == UINT64_MAX)
				break;
		}
		lpn = f->base + fl->lpn[p];
		if (run_n && run0 + run_n == lpn) {
			run_n++;
			continue;
		}
		end_trace_add(f->tr, TR_WRITE, run0, run_n);
		run0 = lpn;
		run_n = 1;
	}
	end_trace_add(f->tr, TR_WRITE, run0, run_n);
	f->n_dirty = kept;
	return f->full ? -1 : 0;
}

void fsm_unlink(struct fsm *f, long fi)
{
	struct fsm_file *fl = &f->files[fi];
	uint64_t run0 = 0, run_n = 0;

	for (uint64_t p = 0; p < fl->n_pages; p++) {
		uint64_t l = fl->lpn[p];

		fl->dirty[p] = 0;
		if (l == UINT64_MAX)
			continue;
		f->used[l] = 0;
		f->n_used--;
		if (run_n && run0 + run_n == f->base + l) {
			run_n++;
			continue;
		}
		end_trace_add(f->tr, TR_TRIM, run0, run_n);
		run0 = f->base + l;
		run_n = 1;
	}
	end_trace_add(f->tr, TR_TRIM, run0, run_n);
	fl->live = 0;
	free(fl->lpn);
	free(fl->dirty);
	fl->lpn = NULL;
	fl->dirty = NULL;
	fl->n_pages = fl->cap_pages = 0;
}

int fsm_poll_dir(struct fsm *f, const char *dir, int (*skip)(const char *name))
{
	size_t n0 = f->n_files; /* files created by this poll are seen */
	DIR *d = opendir(dir);
	struct dirent *e;
	uint8_t *seen;
	char path[1024];

	if (d == NULL)
		return -1;
	if ((seen = calloc(n0 + 1, 1)) == NULL) {
		closedir(d);
		return -1;
	}
	while ((e = readdir(d)) != NULL) {
		struct stat sb;
		long fi;

		if (e->d_name[0] == '.' || (skip && skip(e->d_name)))
			continue;
		snprintf(path, sizeof(path), "%s/%s", dir, e->d_name);
		if (stat(path, &sb) != 0 || !S_ISREG(sb.st_mode))
			continue; /* gone since readdir: taken as unlinked */
		if ((fi = fsm_lookup(f, e->d_name)) < 0 &&
		    (fi = fsm_create(f, e->d_name)) < 0)
			goto fail;
		if ((size_t)fi < n0)
			seen[fi] = 1;
		if ((uint64_t)sb.st_size > f->files[fi].size &&
		    fsm_write(f, fi, f->files[fi].size,
			      (uint64_t)sb.st_size - f->files[fi].size))
			goto fail;
	}
	closedir(d);
	for (size_t i = 0; i < n0; i++)
		if (f->files[i].live && f->files[i].name[0] && !seen[i])
			fsm_unlink(f, (long)i);
	free(seen);
	return 0;
fail:
	closedir(d);
	free(seen);
	return -1;
}

/* ---- the SSD replay ---- */

static int open_ssd(uint64_t n_lpn, double spare, uint32_t ppb,
		    struct kvf_media **m)
{
	struct kvf_flash_config fc;
	struct kvf_media_config mc = {
		.kind = KVF_MEDIA_FLASH,
		.geo = { .n_stripes = 1, .page_size = END_PAGE,
			 .pages_per_segment = ppb,
			 .segs_per_stripe = (n_lpn + ppb - 1) / ppb },
		.flash = &fc,
	};

	kvf_flash_config_init(&fc);
	fc.pages_per_block = ppb;
	fc.spare_factor = spare;
	fc.backing = KVF_FLASH_BACKING_NONE;
	fc.gc = KVF_FLASH_GC_GREEDY;
	fc.seed = 1;
	if (kvf_media_open(&mc, m) != KVF_OK) {
		fprintf(stderr, "kvbench endurance: opening the emulated SSD: %s\n",
			kvf_last_error());
		return -1;
	}
	return 0;
}

#define LPN_BATCH 4096u

/* write_run - n pages from lpn as single-page writes */
static kvf_status write_run(struct kvf_media *m, uint64_t lpn, uint64_t n,
			    uint64_t *buf)
{
	kvf_status rc = KVF_OK;

	while (n > 0 && rc == KVF_OK) {
		uint32_t k = n > LPN_BATCH ? LPN_BATCH : (uint32_t)n;

		for (uint32_t i = 0; i < k; i++)
			buf[i] = lpn + i;
		rc = kvf_flash_write_lpns(m, 0, buf, k, 0);
		lpn += k;
		n -= k;
	}
	return rc;
}

/* mean_live - mean live fraction of the trace's own pages over its
 * writes, from a replay of the liveness alone */
static double mean_live(const struct end_trace *t)
{
	uint8_t *live = calloc(t->n_lpn ? t->n_lpn : 1, 1);
	uint64_t n_live = 0;
	double sum = 0.0, w = 0.0;

	if (live == NULL)
		return 0.0;
	for (size_t i = 0; i < t->n; i++) {
		const struct end_tev *e = &t->ev[i];

		for (uint64_t p = e->lpn; p < e->lpn + e->n; p++) {
			if (e->op == TR_WRITE && !live[p]) {
				live[p] = 1;
				n_live++;
			} else if (e->op == TR_TRIM && live[p]) {
				live[p] = 0;
				n_live--;
			}
		}
		if (e->op == TR_WRITE) {
			sum += (double)n_live * e->n;
			w += e->n;
		}
	}
	free(live);
	return w > 0 ? sum / w / (double)t->n_lpn : 0.0;
}

/* replay_pass - the trace once; *done += its pages written */
static kvf_status replay_pass(struct kvf_media *m, const struct end_trace *t,
			      int discard, uint64_t *buf, uint64_t *done)
{
	kvf_status rc = KVF_OK;

	for (size_t i = 0; i < t->n && rc == KVF_OK; i++) {
		const struct end_tev *e = &t->ev[i];

		if (e->op == TR_WRITE)
			rc = write_run(m, e->lpn, e->n, buf);
		else if (discard)
			rc = kvf_flash_trim_pages(m, 0, e->lpn, e->n);
	}
	*done += t->write_pages;
	return rc;
}

int end_replay_run(const struct end_trace *t, double spare, double util,
		   uint32_t block_pages, int discard, struct end_replay *out)
{
	uint32_t ppb = block_pages ? block_pages : 256;
	double u0 = mean_live(t);
	uint64_t cold = 0, *buf;
	struct kvf_flash_stats s0, s1;
	struct kvf_media *m = NULL;
	kvf_status rc = KVF_OK;

	memset(out, 0, sizeof(*out));
	/* cold data C beside the trace's N pages lifts the mean live share
	 * from u0 to (u0 N + C) / (N + C) */
	if (util > u0 && util < 1.0)
		cold = (uint64_t)((util - u0) * (double)t->n_lpn / (1.0 - util));
	cold = (cold + ppb - 1) / ppb * ppb;
	if ((buf = malloc(LPN_BATCH * sizeof(*buf))) == NULL)
		return -1;
	if (open_ssd(t->n_lpn + cold, spare, ppb, &m)) {
		free(buf);
		return -1;
	}
	if (cold)
		rc = write_run(m, t->n_lpn, cold, buf);
	/* steady state: the trace over and over (it is a whole workload,
	 * every sequence ended), a warm-up of two drive writes, then at
	 * least two drive writes (and one whole pass) measured */
	for (int phase = 0; phase < 2 && rc == KVF_OK; phase++) {
		uint64_t want = 2 * (t->n_lpn + cold), done = 0;

		if (phase == 1)
			rc = kvf_flash_stats(m, &s0);
		while (rc == KVF_OK && (done < want || (phase == 1 && done == 0)) &&
		       t->write_pages > 0)
			rc = replay_pass(m, t, discard, buf, &done);
	}
	if (rc == KVF_OK)
		rc = kvf_flash_stats(m, &s1);
	free(buf);
	if (rc != KVF_OK) {
		fprintf(stderr, "kvbench endurance: replay: %s\n", kvf_last_error());
		kvf_media_free(m);
		return -1;
	}
	kvf_media_free(m);
	out->spare = spare;
	out->util_target = util;
	out->cold_pages = cold;
	out->host_pages = s1.host_pages - s0.host_pages;
	out->nand_programs = s1.nand_programs - s0.nand_programs;
	out->erases = s1.erases - s0.erases;
	out->device_wa = out->host_pages ?
			 (double)out->nand_programs / (double)out->host_pages : 0.0;
	out->util_mean = (u0 * (double)t->n_lpn + (double)cold) /
			 (double)(t->n_lpn + cold);
	out->erase_min = s1.erase_min;
	out->erase_max = s1.erase_max;
	out->erase_mean = s1.erase_mean;
	out->wear_evenness = s1.wear_evenness;
	out->hist_lo = s1.hist_lo;
	out->hist_width = s1.hist_width;
	memcpy(out->erase_hist, s1.erase_hist, sizeof(out->erase_hist));
	return 0;
}

/* ---- lifetime ---- */

#define YEAR_S (365.25 * 86400.0)

double end_nand_budget(const struct end_drive *d)
{
	return d->capacity_bytes / (1.0 - d->spare) * d->pe_cycles;
}

double end_lifetime_years(const struct end_drive *d, double nand_bytes_per_token)
{
	double per_s = nand_bytes_per_token * d->tokens_per_s;

	/* nothing written: the cells never wear; no tokens: no figure */
	if (isnan(per_s))
		return NAN;
	return per_s > 0 ? end_nand_budget(d) / per_s / YEAR_S : INFINITY;
}

double end_rated_years(const struct end_drive *d, double host_bytes_per_token)
{
	double tbw = d->dwpd * d->capacity_bytes * 365.0 * d->warranty_years;
	double per_s = host_bytes_per_token * d->tokens_per_s;

	if (isnan(per_s))
		return NAN;
	return per_s > 0 ? tbw / per_s / YEAR_S : INFINITY;
}

double end_requests_per_pbw(double requests, double nand_bytes)
{
	if (nand_bytes > 0)
		return requests * 1e15 / nand_bytes;
	return requests > 0 ? INFINITY : NAN;
}
