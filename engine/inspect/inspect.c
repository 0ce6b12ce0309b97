/*
 * inspect.c - the inspection calls' shared part and the store-wide ones:
 * the argument checks and result copy every inspection call makes, the
 * list of live sequences, summary_load (reading a segment's summary back
 * and checking it), kvf_store_info_get (kvtool info) and
 * kvf_segment_info_get (kvtool segments).  The per-sequence calls are in
 * inspect_seq.c, kvf_verify in verify.c.
 *
 * They read the store and change nothing in it (verification reads count
 * in bytes_read, as every media read does), so tools can run them on a
 * store opened read-only, and programs on a store being written.
 *
 * Locking (engine/base/store_state.h's order): world shared, then seqtab.lock
 * (listing sequences), then segtab.lock, held briefly for snapshots of the
 * segment table.
 */
#include "engine/inspect/inspect.h"

#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

#include "api/alloc.h"
#include "api/options.h"
#include "api/status.h"
#include "engine/base/fatal.h"
#include "engine/inspect/inspect_int.h"
#include "engine/base/segfmt.h"
#include "engine/base/store_state.h"

/* inspect_publish - copy the filled local struct to the caller's, whose
 * struct_size (checked already) says how much of it the caller has */
void inspect_publish(void *out, void *local, size_t lib_size)
{
	size_t caller_size;

	memcpy(&caller_size, out, sizeof(caller_size));
	memcpy(local, &caller_size, sizeof(caller_size));
	memcpy(out, local, caller_size < lib_size ? caller_size : lib_size);
}

/* inspect_common - the checks every inspection call makes first */
kvf_status inspect_common(kvf_store *st, const char *call, const void *out,
			  size_t lib_size)
{
	kvf_status rc;

	if (st == NULL)
		return kvf_fail(KVF_EINVAL, "%s: store is NULL", call);
	if (lib_size && (rc = kvf_struct_check(call, "out", out, lib_size)) != KVF_OK)
		return rc;
	return store_check(st, call);
}

static int cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

	return x < y ? -1 : x > y;
}

/* inspect_live_ids - the ids of the live sequences of namespace ns,
 * ascending, in a kvf_malloc'd array (*ids, *n).  Caller holds world
 * shared. */
kvf_status inspect_live_ids(kvf_store *st, const char *call, uint64_t **ids,
			    size_t *n, uint32_t ns)
{
	uint32_t want = ns & 0xffu;
	uint64_t *list;
	size_t k = 0;

	pthread_rwlock_rdlock(&st->seqtab.lock);
	list = kvf_malloc((st->seqtab.n ? st->seqtab.n : 1) * sizeof(*list));
	for (uint32_t i = 0; list != NULL && i < st->seqtab.cap; i++) {
		const struct seq *seq = st->seqtab.slot[i];

		if (seq == NULL || seq->ns != want ||
		    ((ns & INSPECT_CALLERS) && seq->cached) ||
		    ((ns & INSPECT_CACHED) && !seq->cached))
			continue;
		list[k++] = seq->id;
	}
	pthread_rwlock_unlock(&st->seqtab.lock);
	if (list == NULL)
		return kvf_fail(KVF_ENOMEM, "%s: out of memory for the list of sequences",
				call);
	qsort(list, k, sizeof(*list), cmp_u64);
	*ids = list;
	*n = k;
	return KVF_OK;
}

/* ---- kvf_store_info_get ------------------------------------------------- */

kvf_status kvf_store_info_get(kvf_store *st, kvf_store_info *out)
{
	const struct store_header *h;
	kvf_store_info in;
	kvf_status rc;

	if ((rc = inspect_common(st, "kvf_store_info_get", out, sizeof(in))) != KVF_OK)
		return rc;
	h = &st->hdr; /* fixed from open to close: no lock */
	memset(&in, 0, sizeof(in));
	in.format_version = h->format_version;
	in.library_version = kvf_version_number();
	in.model = (kvf_model){ h->n_layers, h->n_q_heads, h->n_kv_heads,
				h->head_dim, (kvf_dtype)h->dtype };
	in.page_size = h->page_size;
	in.group_tokens = st->group_tokens;
	in.segment_size = h->segment_size;
	in.segs_per_stripe = h->segs_per_stripe;
	in.n_stripes = h->n_stripes;
	in.data_pages_per_segment = st->data_per_seg;
	in.capacity_bytes = h->segment_size * h->segs_per_stripe * h->n_stripes;
	in.media = (kvf_media_kind)h->media;
	in.kt_pages = h->kt_pages;
	in.store_id = h->store_id;
	in.read_only = st->read_only != 0;
	in.group_pages = st->group_pages;
	in.group_bytes = st->group_bytes;
	in.codec = (uint32_t)st->codec;
	in.codec_layout =
		st->codec == KVF_CODEC_NONE ? 0 : st->codec_lay[0].version;
	inspect_publish(out, &in, sizeof(in));
	return KVF_OK;
}

/* ---- kvf_segment_info_get ------------------------------------------------ */

kvf_status kvf_segment_info_get(kvf_store *st, uint32_t segid,
				kvf_segment_info *out)
{
	const char *call = "kvf_segment_info_get";
	const struct seg_info *si;
	kvf_segment_info in;
	kvf_status rc;

	if ((rc = inspect_common(st, call, out, sizeof(in))) != KVF_OK)
		return rc;
	if (segid >= st->n_segments)
		return kvf_fail(KVF_ERANGE,
				"%s: segment %u out of range (store has %u segments: %u stripes of %llu)",
				call, segid, st->n_segments, st->hdr.n_stripes,
				(unsigned long long)st->hdr.segs_per_stripe);
	memset(&in, 0, sizeof(in));
	in.segid = segid;
	in.stripe = seg_stripe(st, segid);
	in.seg_in_stripe = seg_in_stripe(st, segid);
	pthread_mutex_lock(&st->segtab.lock);
	si = &st->segtab.info[segid];
	in.state = (kvf_seg_state)si->state;
	in.live_pages = si->live;
	in.erase_count = si->erase_count;
	in.owner = si->owner;
	if (si->state != SEG_FREE && si->state != SEG_OPEN) {
		in.data_pages = si->n_data;
		in.seqno = si->seqno;
		in.write_ns = si->write_ns;
	}
	pthread_mutex_unlock(&st->segtab.lock);
	if (in.state == KVF_SEG_FREE) {
		in.live_pages = 0;
		in.owner = KVF_SEQ_NONE;
	}
	inspect_publish(out, &in, sizeof(in));
	return KVF_OK;
}

/* ---- summaries ------------------------------------------------------------ */

kvf_status summary_load(kvf_store *st, uint32_t segid, uint32_t n_data,
			uint64_t seqno, unsigned char *buf,
			struct summary_view *out)
{
	uint32_t ps = st->hdr.page_size, sp = summary_pages(n_data, ps);
	struct seg_summary_header h;
	uint64_t want, got;
	kvf_status rc;

#define BAD(fmt, ...)                                                          \
	kvf_fail(KVF_ECORRUPT,                                                 \
		 "segment %u (stripe %u, segment %llu of the stripe): summary at page %u: " fmt, \
		 segid, seg_stripe(st, segid),                                 \
		 (unsigned long long)seg_in_stripe(st, segid), n_data, __VA_ARGS__)
	if (n_data == 0 || n_data > st->data_per_seg)
		return BAD("the catalog says %u data pages (1..%u fit)", n_data,
			   st->data_per_seg);
	rc = kvf_media_read_pages(st->media, seg_stripe(st, segid),
				  seg_in_stripe(st, segid), n_data, sp, buf);
	if (rc != KVF_OK)
		return rc;
	atomic_fetch_add(&st->c.bytes_read, (uint64_t)sp * ps);
	atomic_fetch_add(&st->c.pages_read, sp);
	memcpy(&h, buf, sizeof(h));
	if (memcmp(h.magic, SEG_MAGIC, 8) != 0)
		return BAD("bad magic (expected %s)", SEG_MAGIC);
	if (h.store_id != st->hdr.store_id)
		return BAD("store id %016llx, this store is %016llx",
			   (unsigned long long)h.store_id,
			   (unsigned long long)st->hdr.store_id);
	if (h.segid != segid)
		return BAD("names segment %u", h.segid);
	if (h.seqno != seqno)
		return BAD("seqno %llu, the catalog has %llu",
			   (unsigned long long)h.seqno, (unsigned long long)seqno);
	if (h.n_data_pages != n_data || h.page_size != ps)
		return BAD("%u data pages of %u bytes, the catalog has %u of %u",
			   h.n_data_pages, h.page_size, n_data, ps);
	want = h.checksum;
	memset(buf + offsetof(struct seg_summary_header, checksum), 0,
	       sizeof(h.checksum));
	got = XXH3_64bits(buf, sizeof(h) + (size_t)n_data *
					       sizeof(struct seg_summary_entry));
	memcpy(buf + offsetof(struct seg_summary_header, checksum), &want,
	       sizeof(want));
	if (got != want)
		return BAD("checksum %016llx, computed %016llx",
			   (unsigned long long)want, (unsigned long long)got);
#undef BAD
	out->h = h;
	out->entries = buf + sizeof(h);
	return KVF_OK;
}
