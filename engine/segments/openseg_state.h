/*
 * openseg_state.h - a segment a sequence is filling on one stripe (openseg.c).
 */
#ifndef KVF_ENGINE_OPENSEG_STATE_H
#define KVF_ENGINE_OPENSEG_STATE_H

#include <stdint.h>

struct segbuf;
struct flush_job;

#define KVF_PACK_MAX_STRIPES 64u /* KVF_MEDIA_MAX_STRIPES */

/* A segment being filled for one sequence on one stripe: owned by the
 * sequence, changed under its lock. */
struct open_seg {
	uint32_t segid;        /* SEG_NONE: none open */
	uint32_t n_pages;      /* data pages placed */
	uint32_t n_superseded; /* entries in sb->superseded */
	uint32_t n_runs;       /* entries in sb->runs */
	struct segbuf *sb;     /* its buffers (engine/segments/writer.h); NULL when
				* none is open */
};

/* The store's packs (openseg.c): at a durable point, the small open
 * segments of many sequences share one segment per stripe instead of
 * taking one each.  A pack is one sequence's open segment adopted at a
 * durable point, whose free pages take the tails of the sequences that
 * come after.  Owned by the caller of the durable point: changed only
 * under dur.lock. */
struct seg_pack {
	struct open_seg open[KVF_PACK_MAX_STRIPES]; /* per stripe; segid
				* SEG_NONE: none.  Its data pages are on
				* media already (written as they came), its
				* buffer holds their summary entries and runs */
	struct flush_job *jobs; /* packs handed to the writer (summary and
				 * record), not yet reaped; seq_next chain */
	uint64_t epoch;         /* the durable point packing now, from 1 */
	uint64_t done;          /* the last whose packs are written and
				 * recorded; writer.lock (writer_mark) */
	uint64_t n_packed;      /* open segments that went into a pack
				 * rather than taking a segment of their own
				 * (since open) */
};

#endif /* KVF_ENGINE_OPENSEG_STATE_H */
