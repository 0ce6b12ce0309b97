/*
 * group.h - token groups and index entries of K, V and X streams.
 *
 * A stream keeps its tokens in groups of G = st->group_tokens tokens.  A
 * group takes P = st->group_pages entries of the stream's index, entries
 * [g * P, (g + 1) * P), each one page placed, checked, cached and cleaned
 * on its own; the group's rows are packed over its pages as one array of
 * G * row_bytes bytes (a row may cross from one page to the next), the
 * bytes after them zero.  P is 1 unless a head's rows would leave more
 * than 3 % of a page unused (segfmt.h, group_layout), and every store of
 * format 3 has P = 1.  A part-filled tail group is written at kvf_sync as
 * the pages its tokens reach, no more.  K^T and optimizer streams have
 * entries of their own (a K^T page, an optimizer chunk) and none of this.
 */
#ifndef KVF_ENGINE_GROUP_H
#define KVF_ENGINE_GROUP_H

#include <stdint.h>

#include "engine/base/store_state.h"

/* group_entry - the first index entry of token group g */
static inline uint64_t group_entry(const kvf_store *st, uint64_t g)
{
	return g * st->group_pages;
}

/* group_fill_pages - pages the first n tokens of a group reach */
static inline uint32_t group_fill_pages(const kvf_store *st, uint64_t n)
{
	uint32_t ps = st->hdr.page_size;

	return (uint32_t)((n * st->row_bytes + ps - 1) / ps);
}

/* group_buf_bytes - a whole group's pages: its buffer's size */
static inline uint32_t group_buf_bytes(const kvf_store *st)
{
	return st->group_pages * st->hdr.page_size;
}

/* tokens_entries - index entries a stream of `tokens` tokens has once
 * they are all on media (its whole groups, and the tail's pages) */
static inline uint64_t tokens_entries(const kvf_store *st, uint64_t tokens)
{
	return tokens / st->group_tokens * st->group_pages +
	       group_fill_pages(st, tokens % st->group_tokens);
}

#endif /* KVF_ENGINE_GROUP_H */
