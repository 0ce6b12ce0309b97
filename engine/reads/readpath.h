/*
 * readpath.h - reading a stream's tokens: from its group buffer, from an
 * open segment still in memory, or from media, where every page is
 * checked against the index's checksum before it is used.
 *
 * stream_read_spans is the page-span iterator the compute plane consumes:
 * it hands out runs of consecutive tokens, one page (or part of one) at a
 * time, in token order, reading media pages in batches through the media's
 * queue so a head's range fans out over all stripes.
 *
 * Every function here needs the sequence's lock held by the caller.
 */
#ifndef KVF_ENGINE_READPATH_H
#define KVF_ENGINE_READPATH_H

#include <pthread.h>
#include <stdint.h>

#include "api/status.h"
#include "engine/reads/readpath_state.h"
#include "kvflash.h"

struct seq;
struct stream;
struct page_ref;
struct kvf_media_io;

/* read_io_add - a request reading the page at addr into dst, merged into
 * the last of io[0..*n_io) when it continues it on media and in memory */
void read_io_add(kvf_store *st, struct kvf_media_io *io, uint32_t *n_io,
		 uint32_t addr, void *dst);

typedef kvf_status (*span_fn)(void *arg, uint64_t first, uint32_t n_tokens,
			      const unsigned char *rows);

/*
 * stream_read_spans - deliver tokens [t0, t1) of stream s (which holds
 * `tokens` tokens) to fn in order, as rows of the store's dtype (a codec
 * store's sealed K/V groups decoded).
 * Return: KVF_OK; KVF_ECORRUPT (page failed its checksum; the message
 * names segment, stripe and page), KVF_EIO, KVF_ENOMEM, or fn's status.
 */
kvf_status stream_read_spans(kvf_store *st, struct seq *seq, struct stream *s,
			     uint64_t tokens, uint64_t t0, uint64_t t1,
			     span_fn fn, void *arg);

/*
 * span_coded_fn / stream_read_spans_coded - stream_read_spans for a
 * caller that computes on encoded groups (scores over K): the tokens of a
 * codec store's sealed groups go to cfn as the encoded group (layout
 * stream_codec(st, s)), with `at` the group's token of first; the plain
 * tail to fn.  For a stream that is not encoded it is stream_read_spans.
 * stream_read_spans itself hands a codec store's sealed groups out
 * decoded into the store's dtype.
 */
typedef kvf_status (*span_coded_fn)(void *arg, uint64_t first,
				    uint32_t n_tokens, const unsigned char *grp,
				    uint32_t at);
kvf_status stream_read_spans_coded(kvf_store *st, struct seq *seq,
				   struct stream *s, uint64_t tokens,
				   uint64_t t0, uint64_t t1, span_fn fn,
				   span_coded_fn cfn, void *arg);

/*
 * pair_fn / stream_read_pair - tokens [t0, t1) of two streams of the same
 * length (K and V of one head) handed out together: fn gets n_tokens rows
 * of each (a codec store's sealed groups decoded), from token first, one
 * token group at a time in order.  Pages
 * of both are read in one batch, so attention needs no copy of its own.
 */
typedef kvf_status (*pair_fn)(void *arg, uint64_t first, uint32_t n_tokens,
			      const unsigned char *a_rows,
			      const unsigned char *b_rows);
kvf_status stream_read_pair(kvf_store *st, struct seq *seq, struct stream *a,
			    struct stream *b, uint64_t tokens, uint64_t t0,
			    uint64_t t1, pair_fn fn, void *arg);

/*
 * coded_fn / stream_read_pair_coded - stream_read_pair for attention on a
 * codec store: the tokens of sealed groups go to cfn as the encoded K and
 * V groups (layouts st->codec_lay), with `at` the group's token of first
 * (so the tokens are [at, at + n_tokens) of the groups), to be decoded in
 * registers; the plain tail goes to fn.  Without a codec it is
 * stream_read_pair.  stream_read_pair and stream_read_pair_groups on a
 * codec store hand fn decoded rows.
 */
typedef kvf_status (*coded_fn)(void *arg, uint64_t first, uint32_t n_tokens,
			       const unsigned char *a_grp,
			       const unsigned char *b_grp, uint32_t at);
kvf_status stream_read_pair_coded(kvf_store *st, struct seq *seq,
				  struct stream *a, struct stream *b,
				  uint64_t tokens, uint64_t t0, uint64_t t1,
				  pair_fn fn, coded_fn cfn, void *arg);

/* stream_read_pair_groups - stream_read_pair_coded for the listed groups
 * only (whole groups, clipped to the stream's tokens), in list order;
 * cfn NULL: encoded groups decoded for fn */
kvf_status stream_read_pair_groups(kvf_store *st, struct seq *seq,
				   struct stream *a, struct stream *b,
				   uint64_t tokens, const uint64_t *groups,
				   uint64_t n_groups, pair_fn fn, coded_fn cfn,
				   void *arg);

/*
 * stream_read_spans_kept / stream_read_pair_kept - stream_read_spans_coded
 * and stream_read_pair_coded over the tokens of [t0, t1) that lane (a KV
 * head of a layer) has not dropped (engine/sequences/dropmark.h; the
 * streams are its K or V): a dropped group's tokens are handed to no one,
 * as if masked.
 */
kvf_status stream_read_spans_kept(kvf_store *st, struct seq *seq,
				  uint32_t lane, struct stream *s,
				  uint64_t tokens, uint64_t t0, uint64_t t1,
				  span_fn fn, span_coded_fn cfn, void *arg);
kvf_status stream_read_pair_kept(kvf_store *st, struct seq *seq,
				 uint32_t lane, struct stream *a,
				 struct stream *b, uint64_t tokens,
				 uint64_t t0, uint64_t t1, pair_fn fn,
				 coded_fn cfn, void *arg);

/*
 * entry_fn / stream_read_entries - the pages of index entries idx[0..n) of
 * stream s (any kind; K^T entries are block * kt_groups + dim group),
 * read in batches and verified, handed to fn as (i, page, in_place) in
 * order.  in_place = 1: the page is the memory media's own copy, valid
 * while the caller keeps the page referenced and holds seq->lock; else
 * it is valid only during the call.
 */
typedef kvf_status (*entry_fn)(void *arg, uint64_t i, const unsigned char *page,
			       int in_place);
kvf_status stream_read_entries(kvf_store *st, struct seq *seq,
			       struct stream *s, const uint64_t *idx,
			       uint64_t n, entry_fn fn, void *arg);

/* One page stream_read_into fetches: entry idx of stream s, into dst. */
struct page_read {
	struct stream *s;
	uint64_t idx;
	unsigned char *dst; /* page_size bytes, KVF_MEDIA_ALIGN-aligned */
};

/*
 * stream_read_into - the pages of want[0..n) into their dst, with every
 * media read in flight at once: pages the memory media keeps are copied,
 * the rest read in one kvf_media_read, pages adjacent on media and in dst
 * merged into one request; then every page is checked against the index.
 * io: room for n requests (the caller's, so that a read allocates
 * nothing).  The pages must all be written: none in an open segment or a
 * write in flight (the caller flushed them and placed none since).  This
 * looks at neither, so it may run while pages of other streams of seq are
 * placed (by the holder of seq->lock, or by a task it waits for).
 * Return: KVF_OK; KVF_ECORRUPT (no page in the index, or a page failed
 * its checksum), KVF_EIO.
 */
kvf_status stream_read_into(kvf_store *st, struct seq *seq,
			    const struct page_read *want, uint32_t n,
			    struct kvf_media_io *io);

/* stream_group_copy - the whole page of group g of s into dst (page_size
 * bytes; tokens past the stream's end are zero) */
kvf_status stream_group_copy(kvf_store *st, struct seq *seq, struct stream *s,
			     uint64_t tokens, uint64_t g, void *dst);

/* stream_tail - make s->gbuf hold the stream's partial tail group (loading
 * it from media after a reopen); allocates an empty one if there is none */
kvf_status stream_tail(kvf_store *st, struct seq *seq, struct stream *s,
		       uint64_t tokens);

/* page_read_verified - read one page of seq at ref into dst (aligned) and
 * check it; `what` names the caller for the message */
kvf_status page_read_verified(kvf_store *st, struct seq *seq,
			      const struct page_ref *ref, void *dst,
			      const char *what);

/* read_spares_init / read_spares_free - first at open, last at close */
void read_spares_init(kvf_store *st);
void read_spares_free(kvf_store *st);

#endif /* KVF_ENGINE_READPATH_H */
