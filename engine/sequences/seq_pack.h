/*
 * seq_pack.h - a sequence's open segments at a durable point: small ones
 * go into the store's packs (engine/segments/openseg.h), the rest are
 * written as ever.
 */
#ifndef KVF_ENGINE_SEQ_PACK_H
#define KVF_ENGINE_SEQ_PACK_H

#include "api/status.h"
#include "kvflash.h"

struct seq;

/*
 * seq_flush_packed - openseg_flush_all, but an open segment of at most half
 * a segment joins the stripe's pack (its index entries follow its pages),
 * and wait for the segments written.  Caller holds dur.lock and seq->lock,
 * and calls openseg_pack_end before the durable point and before it lets
 * dur.lock go, whatever happened.  KVF_EFATAL when a write failed.
 */
kvf_status seq_flush_packed(kvf_store *st, struct seq *seq);

/*
 * seq_pack_small - only the open segments of seq that seq_flush_packed
 * would put in a pack go there; the others stay open.  The cleaner's way
 * to get back the segments many short sequences hold open between syncs
 * (each takes one of its own for a page or two).  Same locking and duty
 * (openseg_pack_end) as seq_flush_packed.  KVF_EFATAL when a write
 * failed.
 */
kvf_status seq_pack_small(kvf_store *st, struct seq *seq);

#endif /* KVF_ENGINE_SEQ_PACK_H */
