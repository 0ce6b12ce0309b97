/*
 * ftl_time.c - cell-type defaults and the parts of the timing model that
 * are not on the per-page fast path (see ftl_time.h for the model).
 *
 * The defaults are representative datasheet-class figures for each cell
 * type, not those of one particular part; every one can be overridden
 * through struct kvf_flash_timing.
 */
#include "ftl/ftl_time.h"

#include "api/alloc.h"
#include "api/status.h"

struct cell_default {
	const char *name;  /* "SLC", ... */
	uint32_t read_ns;  /* tR (ns) */
	uint32_t prog_ns;  /* tPROG (ns) */
	uint32_t erase_ns; /* tBERS (ns) */
	uint32_t pe_limit; /* rated program/erase cycles */
};

static const struct cell_default cells[] = {
	[KVF_FLASH_SLC] = { "SLC", 25000, 200000, 1500000, 100000 },
	[KVF_FLASH_MLC] = { "MLC", 50000, 600000, 3000000, 10000 },
	[KVF_FLASH_TLC] = { "TLC", 75000, 900000, 4000000, 3000 },
	[KVF_FLASH_QLC] = { "QLC", 140000, 2500000, 10000000, 1000 },
};

#define DEFAULT_CHANNEL_MBPS 800u /* ONFI 4.x class bus (10^6 bytes/s) */

const char *ftl_cell_defaults(enum kvf_flash_cell cell,
			      struct kvf_flash_timing *t, uint32_t *pe_limit)
{
	const struct cell_default *c;

	if (cell == KVF_FLASH_CELL_DEFAULT)
		cell = KVF_FLASH_TLC;
	if ((unsigned)cell >= sizeof(cells) / sizeof(cells[0]) ||
	    cells[cell].name == NULL)
		return NULL;
	c = &cells[cell];
	if (t->read_ns == 0)
		t->read_ns = c->read_ns;
	if (t->prog_ns == 0)
		t->prog_ns = c->prog_ns;
	if (t->erase_ns == 0)
		t->erase_ns = c->erase_ns;
	if (t->channel_mbps == 0)
		t->channel_mbps = DEFAULT_CHANNEL_MBPS;
	if (pe_limit && *pe_limit == 0)
		*pe_limit = c->pe_limit;
	return c->name;
}

kvf_status ftl_time_init(struct ftl_time *tm, uint32_t n_dies,
			 uint32_t n_channels, const struct kvf_flash_timing *t,
			 uint32_t xfer_bytes)
{
	*tm = (struct ftl_time){ .n_dies = n_dies, .n_channels = n_channels };
	tm->read_ns = t->read_ns;
	tm->prog_ns = t->prog_ns;
	tm->erase_ns = t->erase_ns;
	/* bytes * 1e9 / (mbps * 1e6), rounded up: never a free transfer */
	tm->xfer_ns = ((uint64_t)xfer_bytes * 1000u + t->channel_mbps - 1) /
		      t->channel_mbps;
	tm->die_free_ns = kvf_calloc(n_dies, sizeof(uint64_t));
	tm->die_busy_ns = kvf_calloc(n_dies, sizeof(uint64_t));
	tm->ch_free_ns = kvf_calloc(n_channels, sizeof(uint64_t));
	tm->ch_busy_ns = kvf_calloc(n_channels, sizeof(uint64_t));
	if (!tm->die_free_ns || !tm->die_busy_ns || !tm->ch_free_ns ||
	    !tm->ch_busy_ns) {
		ftl_time_release(tm);
		return kvf_fail(KVF_ENOMEM,
				"kvf_media_open: flash: cannot allocate the timing model for %u dies",
				n_dies);
	}
	return KVF_OK;
}

void ftl_time_release(struct ftl_time *tm)
{
	kvf_free(tm->die_free_ns);
	kvf_free(tm->die_busy_ns);
	kvf_free(tm->ch_free_ns);
	kvf_free(tm->ch_busy_ns);
	tm->die_free_ns = tm->die_busy_ns = NULL;
	tm->ch_free_ns = tm->ch_busy_ns = NULL;
}

/*
 * A move within one die uses copy-back (the page never leaves the die:
 * tR then tPROG, no channel time); across dies the page is read out over
 * the source channel and programmed in over the destination channel, and
 * the program waits for the read.
 */
uint64_t ftl_time_copy(struct ftl_time *tm, uint32_t src_die,
		       uint32_t src_ch, uint32_t dst_die, uint32_t dst_ch)
{
	uint64_t rd, xs, done, start;

	if (src_die == dst_die) {
		start = time_max(tm->die_free_ns[src_die], tm->issue_ns);
		done = start + tm->read_ns + tm->prog_ns;
		tm->die_busy_ns[src_die] += tm->read_ns + tm->prog_ns;
		tm->die_free_ns[src_die] = done;
		tm->end_ns = time_max(tm->end_ns, done);
		return done;
	}
	rd = ftl_time_read(tm, src_die, src_ch);
	xs = time_max(time_max(tm->ch_free_ns[dst_ch],
			       tm->die_free_ns[dst_die]), rd);
	done = xs + tm->xfer_ns + tm->prog_ns;
	tm->die_busy_ns[dst_die] += tm->xfer_ns + tm->prog_ns;
	tm->ch_busy_ns[dst_ch] += tm->xfer_ns;
	tm->ch_free_ns[dst_ch] = xs + tm->xfer_ns;
	tm->die_free_ns[dst_die] = done;
	tm->end_ns = time_max(tm->end_ns, done);
	return done;
}

int ftl_time_idle_at(const struct ftl_time *tm, uint64_t t)
{
	for (uint32_t d = 0; d < tm->n_dies; d++)
		if (tm->die_free_ns[d] > t)
			return 0;
	for (uint32_t c = 0; c < tm->n_channels; c++)
		if (tm->ch_free_ns[c] > t)
			return 0;
	return 1;
}

void ftl_time_sum_busy(const struct ftl_time *tm, uint64_t *die_total,
		       uint64_t *die_max, uint64_t *ch_total, uint64_t *ch_max)
{
	uint64_t dt = 0, dm = 0, ct = 0, cm = 0;

	for (uint32_t d = 0; d < tm->n_dies; d++) {
		dt += tm->die_busy_ns[d];
		dm = time_max(dm, tm->die_busy_ns[d]);
	}
	for (uint32_t c = 0; c < tm->n_channels; c++) {
		ct += tm->ch_busy_ns[c];
		cm = time_max(cm, tm->ch_busy_ns[c]);
	}
	if (die_total)
		*die_total = dt;
	if (die_max)
		*die_max = dm;
	if (ch_total)
		*ch_total = ct;
	if (ch_max)
		*ch_max = cm;
}
