/*
 * verify_message.c - the messages of kvf_verify's damage: where the page
 * is (segment, page, stripe, byte) and what is wrong with it, made from a
 * struct pending when it is reported.  A file of its own: it is all
 * text, and keeps the walk in verify.c short.
 */
#include <stdio.h>

#include "engine/inspect/inspect_int.h"
#include "engine/base/key.h"
#include "engine/segments/segtable.h"

static const char *const kind_names[] = { "K", "V", "X", "KT", "OPT" };

_Static_assert(sizeof(kind_names) / sizeof(kind_names[0]) == KIND_COUNT,
	      "a name for every kind");

static const char *kind_name(enum kv_kind k)
{
	return (unsigned)k < KIND_COUNT ? kind_names[k] : "?";
}

static const char *const state_names[] = { "FREE", "OPEN", "SEALED", "DYING",
					   "CORRUPT" };

static const char *state_name(unsigned s)
{
	return s <= SEG_CORRUPT ? state_names[s] : "nonexistent";
}

/* page_where - "segment S page P (stripe T at byte B)" */
static void page_where(kvf_store *st, const kvf_verify_damage *d, char *buf,
		       size_t cap)
{
	uint64_t off = d->seg_in_stripe * st->hdr.segment_size +
		       (uint64_t)d->page * st->hdr.page_size;

	snprintf(buf, cap, "segment %u page %u (stripe %u at byte %llu)",
		 d->segid, d->page, d->stripe, (unsigned long long)off);
}

/* verify_describe - the message of pending damage p into buf */
void verify_describe(kvf_store *st, const struct pending *p, char *buf,
		     size_t cap)
{
	const kvf_verify_damage *d = &p->d;
	char where[96], what[128];
	uint64_t t0 = d->group * st->group_tokens;

	page_where(st, d, where, sizeof(where));
	if (d->kind == KVF_KIND_KT && st->kt_groups) {
		uint64_t block = d->group / st->kt_groups;

		t0 = block * st->kt_tokens;
		snprintf(what, sizeof(what),
			 "sequence %llu layer %u KT head %u block %llu dim group %llu (tokens %llu..%llu)",
			 (unsigned long long)d->seq, d->layer, d->head,
			 (unsigned long long)block,
			 (unsigned long long)(d->group % st->kt_groups),
			 (unsigned long long)t0,
			 (unsigned long long)(t0 + st->kt_tokens - 1));
	} else {
		snprintf(what, sizeof(what),
			 "sequence %llu layer %u %s head %u group %llu (tokens %llu..%llu)",
			 (unsigned long long)d->seq, d->layer,
			 kind_name((enum kv_kind)d->kind), d->head,
			 (unsigned long long)d->group, (unsigned long long)t0,
			 (unsigned long long)(t0 + st->group_tokens - 1));
	}
	switch (p->problem) {
	case P_NONE:
		snprintf(buf, cap, "%s: no damage", what);
		break;
	case P_HOLE:
		snprintf(buf, cap, "%s: the index has no page for it", what);
		break;
	case P_IO:
		snprintf(buf, cap, "%s, %s: cannot read the page: %s", where, what,
			 p->text);
		break;
	case P_SUMMARY:
		snprintf(buf, cap, "%s", p->text);
		break;
	case P_SEG_CORRUPT:
		snprintf(buf, cap,
			 "%s, %s: the segment failed verification at open (its summary does not check out); the page is unreadable",
			 where, what);
		break;
	case P_SEG_STATE:
		snprintf(buf, cap, "%s, %s: the index names a page of a %s segment",
			 where, what, state_name(p->state));
		break;
	case P_PAST_SUMMARY:
		snprintf(buf, cap,
			 "%s, %s: the segment's summary has only %u data pages",
			 where, what, p->n_sum);
		break;
	case P_DATA:
		snprintf(buf, cap,
			 "%s, %s: checksum mismatch: page has %016llx, summary has %016llx, index has %08x",
			 where, what, (unsigned long long)p->page_hash,
			 (unsigned long long)p->sum_hash, p->check);
		break;
	case P_DATA_INDEX:
		snprintf(buf, cap,
			 "%s, %s: checksum mismatch: page has %016llx, index has %08x",
			 where, what, (unsigned long long)p->page_hash, p->check);
		break;
	case P_INDEX_CHECK:
		snprintf(buf, cap,
			 "%s, %s: the index check %08x disagrees with page and summary (%016llx)",
			 where, what, p->check, (unsigned long long)p->page_hash);
		break;
	case P_SUMMARY_HASH:
		snprintf(buf, cap,
			 "%s, %s: the summary hash %016llx disagrees with page and index (%016llx)",
			 where, what, (unsigned long long)p->sum_hash,
			 (unsigned long long)p->page_hash);
		break;
	case P_KEY: {
		uint32_t sid = (uint32_t)(p->key_lo >> 32);

		snprintf(buf, cap,
			 "%s, %s: the summary names sequence %llu layer %u %s head %u group %u instead",
			 where, what, (unsigned long long)p->key_hi,
			 stream_layer(sid), kind_name(stream_kind(sid)),
			 stream_head(sid), (uint32_t)p->key_lo);
		break;
	}
	case P_WRITER:
		snprintf(buf, cap,
			 "%s, %s: the summary says sequence %llu wrote it, which is neither it nor an ancestor",
			 where, what, (unsigned long long)p->key_hi);
		break;
	}
}
