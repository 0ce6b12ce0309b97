/*
 * kvtool_segments.c - `kvtool segments [--all] [--json] DIR`: the segments
 * of a store (kvf_segment_info_get for 0 .. kvf_stats.segments_total - 1):
 * stripe, state, pages, owner, age and erase count, then totals by state.
 *
 * Free segments are left out of the list unless --all is given (a default
 * store has thousands); the totals count them all.  Ages are from the
 * write time the store recorded to now, by the wall clock.  The store is
 * opened read-only and never changed.
 */
#include <string.h>
#include <time.h>

#include "kvtool.h"

#define CELL 32 /* bytes of a formatted cell */

static uint64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* age_text - "42s", "17m", "5h", "3d"; "-" when never written */
static void age_text(char *buf, size_t cap, uint64_t write_ns, uint64_t now)
{
	uint64_t s = now > write_ns ? (now - write_ns) / 1000000000ull : 0;

	if (write_ns == 0)
		snprintf(buf, cap, "-");
	else if (s < 120)
		snprintf(buf, cap, "%llus", (unsigned long long)s);
	else if (s < 7200)
		snprintf(buf, cap, "%llum", (unsigned long long)(s / 60));
	else if (s < 172800)
		snprintf(buf, cap, "%lluh", (unsigned long long)(s / 3600));
	else
		snprintf(buf, cap, "%llud", (unsigned long long)(s / 86400));
}

static void owner_text(char *buf, size_t cap, const kvf_segment_info *g)
{
	if (g->owner == KVF_SEQ_NONE || g->state == KVF_SEG_FREE)
		snprintf(buf, cap, "-");
	else
		snprintf(buf, cap, "%llu", (unsigned long long)g->owner);
}

static void add_row(struct table *t, const kvf_segment_info *g, uint64_t now)
{
	char seg[CELL], stripe[CELL], idx[CELL], data[CELL], live[CELL];
	char owner[CELL], seqno[CELL], age[CELL], erases[CELL];
	const char *cells[10] = { seg, stripe, idx, kvf_seg_state_name(g->state),
				  data, live, owner, seqno, age, erases };

	snprintf(seg, CELL, "%u", g->segid);
	snprintf(stripe, CELL, "%u", g->stripe);
	snprintf(idx, CELL, "%llu", (unsigned long long)g->seg_in_stripe);
	snprintf(data, CELL, "%u", g->data_pages);
	snprintf(live, CELL, "%u", g->live_pages);
	owner_text(owner, CELL, g);
	if (g->seqno)
		snprintf(seqno, CELL, "%llu", (unsigned long long)g->seqno);
	else
		snprintf(seqno, CELL, "-");
	age_text(age, CELL, g->write_ns, now);
	snprintf(erases, CELL, "%u", g->erase_count);
	table_row(t, cells);
}

static void json_row(const kvf_segment_info *g, uint64_t now, int first)
{
	printf("%s{\"segid\": %u, \"stripe\": %u, \"seg_in_stripe\": %llu, \"state\": \"%s\", \"data_pages\": %u, \"live_pages\": %u, \"owner\": ",
	       first ? "" : ", ", g->segid, g->stripe,
	       (unsigned long long)g->seg_in_stripe, kvf_seg_state_name(g->state),
	       g->data_pages, g->live_pages);
	if (g->owner == KVF_SEQ_NONE || g->state == KVF_SEG_FREE)
		fputs("null", stdout);
	else
		printf("%llu", (unsigned long long)g->owner);
	printf(", \"seqno\": %llu, \"write_ns\": %llu, \"age_s\": ",
	       (unsigned long long)g->seqno, (unsigned long long)g->write_ns);
	if (g->write_ns)
		printf("%.3f", now > g->write_ns ? (double)(now - g->write_ns) / 1e9 : 0.0);
	else
		fputs("null", stdout);
	printf(", \"erase_count\": %u}", g->erase_count);
}

int cmd_segments(const struct cmd *c, int argc, char **argv)
{
	int json = 0, all = 0, rc, first = 1;
	const struct opt_spec opts[] = { { "--json", &json, NULL },
					  { "--all", &all, NULL } };
	static const char *const head[] = { "SEG", "STRIPE", "INDEX", "STATE",
					     "DATA", "LIVE", "OWNER", "SEQNO",
					     "AGE", "ERASES" };
	kvf_stats s = { .struct_size = sizeof(s) };
	uint32_t count[KVF_SEG_CORRUPT + 1] = { 0 };
	struct table t = { .n_cols = 10 };
	uint64_t now = now_ns();
	const char *dir;
	kvf_store *st;

	if ((rc = parse_store_args(c, argc, argv, opts, 2, &dir)) != EXIT_OK)
		return rc;
	if ((rc = store_open(c, dir, &st)) != EXIT_OK)
		return rc;
	if (kvf_stats_get(st, &s) != KVF_OK)
		return store_close(c, st, call_failed(c));
	if (json)
		fputs("{\"segments\": [", stdout);
	else
		table_row(&t, head);
	for (uint32_t i = 0; i < s.segments_total; i++) {
		kvf_segment_info g;

		memset(&g, 0, sizeof(g));
		g.struct_size = sizeof(g);
		if (kvf_segment_info_get(st, i, &g) != KVF_OK) {
			table_free(&t);
			return store_close(c, st, call_failed(c));
		}
		if ((unsigned)g.state <= KVF_SEG_CORRUPT)
			count[g.state]++;
		if (g.state == KVF_SEG_FREE && !all)
			continue;
		if (json)
			json_row(&g, now, first);
		else
			add_row(&t, &g, now);
		first = 0;
	}
	if (json) {
		printf("], \"total\": %u, \"free\": %u, \"open\": %u, \"sealed\": %u, \"dying\": %u, \"corrupt\": %u}\n",
		       s.segments_total, count[KVF_SEG_FREE], count[KVF_SEG_OPEN],
		       count[KVF_SEG_SEALED], count[KVF_SEG_DYING],
		       count[KVF_SEG_CORRUPT]);
		return store_close(c, st, EXIT_OK);
	}
	rc = table_print(&t, stdout);
	printf("%u segments: %u sealed, %u open, %u dying, %u corrupt, %u free%s\n",
	       s.segments_total, count[KVF_SEG_SEALED], count[KVF_SEG_OPEN],
	       count[KVF_SEG_DYING], count[KVF_SEG_CORRUPT], count[KVF_SEG_FREE],
	       all || count[KVF_SEG_FREE] == 0 ? "" : " (--all lists the free ones)");
	return store_close(c, st, rc);
}
