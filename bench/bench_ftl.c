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
 *
 * The files: this one parses the arguments; bench_ftl_run.c drives the
 * device; bench_ftl_report.c prints the figures and the validation.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "bench/bench_common.h"
#include "bench/bench_ftl_int.h"
#include "ftl/media_flash.h"

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
		return ftl_validate(&a);
	if (a.wearout)
		return ftl_wearout(&a);
	if (ftl_run_case(&a, &r))
		return 1;
	ftl_figures(&a, &r, &f);
	if (a.json)
		ftl_print_json(&a, &r, &f);
	else
		ftl_print_table(&a, &r, &f);
	return 0;
}
