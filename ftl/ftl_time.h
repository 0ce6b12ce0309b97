/*
 * ftl_time.h - the timing model of the emulated NAND device.
 *
 * Every NAND operation is charged to the die that holds the block and to
 * the channel that connects the die, in the order the operations are
 * issued (first come, first served on each resource):
 *  - read:    the die senses the page into its register (tR), then the
 *             channel moves it and its spare area to the controller
 *             ((page_size + oob_bytes) / rate); the
 *             die stays busy until its register is emptied;
 *  - program: the channel moves the page into the die's register, then the
 *             die programs it (tPROG);
 *  - erase:   the die alone, for tBERS.
 * An operation starts no earlier than the host clock `issue_ns`.  The
 * modeled device time of a run is the latest completion; busy time is
 * kept per die and per channel, so utilization and the benefit of
 * spreading work over channels and dies both show.  Planes address blocks
 * but are not modeled as separate array units (no multi-plane commands).
 *
 * Not thread-safe: the owner (the flash media) serializes calls.
 */
#ifndef KVF_FTL_TIME_H
#define KVF_FTL_TIME_H

#include <stdint.h>

#include "kvflash.h"

/* NAND cell types; each has default timings and a P/E rating. */
enum kvf_flash_cell {
	KVF_FLASH_CELL_DEFAULT = 0, /* TLC */
	KVF_FLASH_SLC = 1,
	KVF_FLASH_MLC = 2,
	KVF_FLASH_TLC = 3,
	KVF_FLASH_QLC = 4
};

/* Device timings; a zero field takes the cell type's default. */
struct kvf_flash_timing {
	uint32_t read_ns;      /* tR: array to page register (ns) */
	uint32_t prog_ns;      /* tPROG: page register to array (ns) */
	uint32_t erase_ns;     /* tBERS: one block erase (ns) */
	uint32_t channel_mbps; /* channel transfer rate (10^6 bytes/s) */
};

/*
 * ftl_cell_defaults - fill t's zero fields and *pe_limit (if 0) with the
 * defaults of cell; returns the cell's name ("SLC", ...), or NULL for an
 * unknown cell type.
 */
const char *ftl_cell_defaults(enum kvf_flash_cell cell,
			      struct kvf_flash_timing *t, uint32_t *pe_limit);

struct ftl_time {
	uint32_t n_dies;       /* dies modeled */
	uint32_t n_channels;   /* channels modeled */
	uint64_t read_ns;      /* tR (ns) */
	uint64_t prog_ns;      /* tPROG (ns) */
	uint64_t erase_ns;     /* tBERS (ns) */
	uint64_t xfer_ns;      /* one page over one channel (ns) */
	uint64_t issue_ns;     /* host clock: no operation starts earlier (ns) */
	uint64_t end_ns;       /* latest completion so far (ns) */
	uint64_t *die_free_ns; /* [die] time the die is next free (ns) */
	uint64_t *ch_free_ns;  /* [channel] time the channel is next free (ns) */
	uint64_t *die_busy_ns; /* [die] accumulated busy time (ns) */
	uint64_t *ch_busy_ns;  /* [channel] accumulated busy time (ns) */
};

/*
 * ftl_time_init - model n_dies dies on n_channels channels with timings t
 * (every field non-zero), a page transfer moving xfer_bytes (the page and
 * its spare area).
 * Return: KVF_OK, KVF_ENOMEM.
 */
kvf_status ftl_time_init(struct ftl_time *tm, uint32_t n_dies,
			 uint32_t n_channels, const struct kvf_flash_timing *t,
			 uint32_t xfer_bytes);
/* ftl_time_release - free the arrays; tm may be zeroed or released. */
void ftl_time_release(struct ftl_time *tm);

static inline uint64_t time_max(uint64_t a, uint64_t b)
{
	return a > b ? a : b;
}

/* ftl_time_read - a page read on die/channel; returns its completion (ns). */
static inline uint64_t ftl_time_read(struct ftl_time *tm, uint32_t die,
				     uint32_t ch)
{
	uint64_t start = time_max(tm->die_free_ns[die], tm->issue_ns);
	uint64_t xs = time_max(tm->ch_free_ns[ch], start + tm->read_ns);
	uint64_t done = xs + tm->xfer_ns;

	tm->die_busy_ns[die] += tm->read_ns + tm->xfer_ns;
	tm->ch_busy_ns[ch] += tm->xfer_ns;
	tm->die_free_ns[die] = done;
	tm->ch_free_ns[ch] = done;
	tm->end_ns = time_max(tm->end_ns, done);
	return done;
}

/* ftl_time_program - a page program on die/channel; returns completion. */
static inline uint64_t ftl_time_program(struct ftl_time *tm, uint32_t die,
					uint32_t ch)
{
	uint64_t xs = time_max(time_max(tm->ch_free_ns[ch],
					 tm->die_free_ns[die]), tm->issue_ns);
	uint64_t done = xs + tm->xfer_ns + tm->prog_ns;

	tm->die_busy_ns[die] += tm->xfer_ns + tm->prog_ns;
	tm->ch_busy_ns[ch] += tm->xfer_ns;
	tm->ch_free_ns[ch] = xs + tm->xfer_ns;
	tm->die_free_ns[die] = done;
	tm->end_ns = time_max(tm->end_ns, done);
	return done;
}

/*
 * ftl_time_copy - an internal page move (GC, wear leveling) from die
 * src to die dst: a read on src's channel, then a program on dst's.
 * Returns the completion of the program.
 */
uint64_t ftl_time_copy(struct ftl_time *tm, uint32_t src_die,
		       uint32_t src_ch, uint32_t dst_die, uint32_t dst_ch);

/* ftl_time_erase - a block erase on die; returns its completion (ns). */
static inline uint64_t ftl_time_erase(struct ftl_time *tm, uint32_t die)
{
	uint64_t start = time_max(tm->die_free_ns[die], tm->issue_ns);
	uint64_t done = start + tm->erase_ns;

	tm->die_busy_ns[die] += tm->erase_ns;
	tm->die_free_ns[die] = done;
	tm->end_ns = time_max(tm->end_ns, done);
	return done;
}

/* ftl_time_idle_at - is every die and channel free at time t (ns)? */
int ftl_time_idle_at(const struct ftl_time *tm, uint64_t t);

/*
 * ftl_time_sum_busy - total die and channel busy time (ns) so far, and
 * the busiest die's and channel's (ns); any pointer may be NULL.
 */
void ftl_time_sum_busy(const struct ftl_time *tm, uint64_t *die_total,
		       uint64_t *die_max, uint64_t *ch_total, uint64_t *ch_max);

#endif /* KVF_FTL_TIME_H */
