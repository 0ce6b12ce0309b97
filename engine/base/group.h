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
#include "engine/sequences/seq_state.h"

/* group_entry - the first index entry of token group g */
static inline uint64_t group_entry(const kvf_store *st, uint64_t g)
{
	return g * st->group_stride;
}

/* group_plain_entry - the first entry of group g's plain rows (its tail,
 * or an X group) */
static inline uint64_t group_plain_entry(const kvf_store *st, uint64_t g)
{
	return g * st->group_stride + st->plain_off;
}

/* stream_encoded - stream s seals its groups encoded (K or V of a codec
 * store); its layout */
static inline const struct kvc_codec_layout *
stream_codec(const kvf_store *st, const struct stream *s)
{
	return s->enc ? &st->codec_lay[s->enc - 1] : NULL;
}

/* group_fill_pages - pages the first n tokens of a group reach */
static inline uint32_t group_fill_pages(const kvf_store *st, uint64_t n)
{
	uint32_t ps = st->hdr.page_size;

	return (uint32_t)((n * st->row_bytes + ps - 1) / ps);
}

/* group_sealed_pages - pages a sealed group of s takes; group_sealed_entry
 * - the first of them */
static inline uint32_t group_sealed_pages(const kvf_store *st,
					  const struct stream *s)
{
	return s->enc ? st->group_pages
		      : group_fill_pages(st, st->group_tokens);
}

static inline uint64_t group_sealed_entry(const kvf_store *st,
					  const struct stream *s, uint64_t g)
{
	return s->enc ? group_entry(st, g) : group_plain_entry(st, g);
}

/* group_buf_bytes - a whole group's pages, plain or encoded: the size of
 * its buffer */
static inline uint32_t group_buf_bytes(const kvf_store *st)
{
	uint32_t fill = group_fill_pages(st, st->group_tokens);

	return (fill > st->group_pages ? fill : st->group_pages) *
	       st->hdr.page_size;
}

/* tokens_entries - index entries a stream of `tokens` tokens has once
 * they are all on media (its whole groups, and the tail's pages): the
 * end of what its index may use */
static inline uint64_t tokens_entries(const kvf_store *st, uint64_t tokens)
{
	uint32_t tail = (uint32_t)(tokens % st->group_tokens);

	return tokens / st->group_tokens * st->group_stride +
	       (tail ? st->plain_off + group_fill_pages(st, tail) : 0);
}

/* group_entry_used - entry e holds a page of stream s (of `tokens`
 * tokens) once they are all on media; the others of [0, tokens_entries)
 * are the unused entries of a codec store's groups */
static inline int group_entry_used(const kvf_store *st,
				   const struct stream *s, uint64_t tokens,
				   uint64_t e)
{
	uint64_t g = e / st->group_stride, at = e % st->group_stride;
	uint64_t first;
	uint32_t n;

	if (g < tokens / st->group_tokens) {
		first = s->enc ? 0 : st->plain_off;
		n = group_sealed_pages(st, s);
	} else {
		first = st->plain_off;
		n = group_fill_pages(st, tokens % st->group_tokens);
	}
	return at >= first && at < first + n;
}

#endif /* KVF_ENGINE_GROUP_H */
