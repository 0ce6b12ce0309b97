/*
 * store_stats.c - kvf_stats_get: the store's byte counters, the write
 * amplification on the host and on the device, the segments by state and
 * the memory the index takes.  A file of its own: it only reads, and
 * touches every module's counters.
 *
 * Locking: each sequence's lock in turn (index bytes), then segtab.lock for
 * the segment table; the counters are atomics.
 */
#include <string.h>

#include "api/options.h"
#include "api/status.h"
#include "engine/base/catalog.h"
#include "engine/cleaning/evict.h"
#include "engine/sequences/prefix.h"
#include "engine/sequences/seq.h"
#include "engine/sequences/seq_stream.h"
#include "engine/base/store_state.h"
#include "engine/base/tier.h"

static void index_bytes_of(kvf_store *st, struct seq *seq, void *arg)
{
	uint64_t *sum = arg;
	uint32_t n = seq_n_streams(st);

	pthread_mutex_lock(&seq->lock);
	for (uint32_t i = 0; i < n; i++) {
		uint32_t sid;
		struct stream *s = seq_stream_at(st, seq, i, &sid);

		if (s)
			*sum += (uint64_t)s->n_alloc * PAGE_REF_BYTES +
				sizeof(*s);
	}
	pthread_mutex_unlock(&seq->lock);
}

kvf_status kvf_stats_get(kvf_store *st, kvf_stats *out)
{
	struct kvf_media_stats ms;
	kvf_stats s;
	kvf_status rc;

	if (st == NULL)
		return kvf_fail(KVF_EINVAL, "kvf_stats_get: store is NULL");
	if ((rc = kvf_struct_check("kvf_stats_get", "out", out, sizeof(s))) != KVF_OK)
		return rc;
	memset(&s, 0, sizeof(s));
	s.user_bytes = atomic_load(&st->c.user_bytes);
	s.data_bytes = atomic_load(&st->c.data_bytes);
	s.padding_bytes = atomic_load(&st->c.padding_bytes);
	s.cleaner_bytes = atomic_load(&st->c.cleaner_bytes);
	s.summary_bytes = atomic_load(&st->c.summary_bytes);
	s.kt_bytes = atomic_load(&st->c.kt_bytes);
	s.opt_bytes = atomic_load(&st->c.optim_bytes);
	s.host_bytes_written = s.data_bytes + s.padding_bytes + s.opt_bytes +
			       s.cleaner_bytes + s.kt_bytes + s.summary_bytes;
	s.metadata_bytes = catalog_bytes_written(st->cat);
	/* the KV cache's amplification: optimizer state has no user bytes */
	s.host_wa = s.user_bytes ? (double)(s.host_bytes_written - s.opt_bytes) /
					   (double)s.user_bytes
				 : 0;
	kvf_media_stats(st->media, &ms);
	s.device_wa = ms.host_pages_written
		? (double)ms.nand_pages_programmed / (double)ms.host_pages_written
		: 1.0;
	s.total_wa = s.host_wa * s.device_wa;
	s.bytes_read = atomic_load(&st->c.bytes_read);
	s.pages_read = atomic_load(&st->c.pages_read);
	s.segments_written = atomic_load(&st->c.segments_written);
	s.segments_cleaned = atomic_load(&st->c.segments_cleaned);
	s.segments_reclaimed = atomic_load(&st->c.segments_reclaimed);
	s.sparf_pages_read = atomic_load(&st->c.sparf_pages_read);
	s.sparf_pages_skipped = atomic_load(&st->c.sparf_pages_skipped);
	s.n_syncs = st->dur.n_syncs;
	s.writeback_bytes = atomic_load(&st->c.wb_bytes);
	s.writeback_runs = atomic_load(&st->c.wb_runs);
	s.dram_only_bytes = atomic_load(&st->c.dram_only_bytes);
	s.attend_calls = atomic_load(&st->c.attend_calls);
	s.attend_bytes_read = atomic_load(&st->c.attend_bytes_read);
	s.prefetch_pages = atomic_load(&st->c.prefetch_pages);
	s.prof_append_ns = atomic_load(&st->prof.ns[PROF_APPEND]);
	s.prof_lock_ns = atomic_load(&st->prof.ns[PROF_LOCK]);
	s.prof_copy_ns = atomic_load(&st->prof.ns[PROF_COPY]);
	s.prof_hash_ns = atomic_load(&st->prof.ns[PROF_HASH]);
	s.prof_tier_ns = atomic_load(&st->prof.ns[PROF_TIER]);
	s.prof_segment_ns = atomic_load(&st->prof.ns[PROF_SEGMENT]);
	s.prof_queue_ns = atomic_load(&st->prof.ns[PROF_QUEUE]);
	s.prof_sync_ns = atomic_load(&st->prof.ns[PROF_SYNC]);
	s.prof_writer_ns = atomic_load(&st->prof.ns[PROF_WRITER]);
	tier_figures(st, &s);
	evict_stats(st, &s);
	prefix_stats(st, &s);
	(void)seq_foreach(st, index_bytes_of, &s.index_bytes); /* best effort */
	pthread_mutex_lock(&st->segtab.lock);
	s.segments_total = st->n_segments;
	for (uint32_t i = 0; i < st->n_segments; i++) {
		switch (st->segtab.info[i].state) {
		case SEG_FREE: s.segments_free++; break;
		case SEG_OPEN: s.segments_open++; break;
		case SEG_SEALED: s.segments_sealed++; break;
		case SEG_DYING: s.segments_dying++; break;
		case SEG_CORRUPT: s.segments_corrupt++; break;
		}
		s.live_pages += st->segtab.info[i].live;
	}
	/* the segment table, every live bitmap, the reclaim scratch */
	s.index_bytes += (uint64_t)st->n_segments *
			 (sizeof(struct seg_info) + (st->data_per_seg + 63) / 64 * 8 +
			  2 * sizeof(uint32_t)) +
			 (uint64_t)st->segtab.shared_cap * 2 * sizeof(uint32_t);
	pthread_mutex_unlock(&st->segtab.lock);
	s.n_sequences = seq_count(st);
	s.struct_size = out->struct_size;
	memcpy(out, &s, out->struct_size < sizeof(s) ? out->struct_size : sizeof(s));
	return KVF_OK;
}
