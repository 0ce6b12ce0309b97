/*
 * openseg_state.h - a segment a sequence is filling on one stripe (openseg.c).
 */
#ifndef KVF_ENGINE_OPENSEG_STATE_H
#define KVF_ENGINE_OPENSEG_STATE_H

#include <stdint.h>

struct segbuf;

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

#endif /* KVF_ENGINE_OPENSEG_STATE_H */
