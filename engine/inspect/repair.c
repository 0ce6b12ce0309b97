/*
 * repair.c - kvf_repair: salvage a store whose catalog lost records.
 *
 * The catalog is RocksDB; a damaged record in its write-ahead log makes
 * RocksDB drop every later one, and kvf_open then refuses the store
 * (engine/base/syncmark.h).  What the lost records said is mostly still on the
 * media: every sealed segment carries a summary with the key and hash of
 * each of its pages.  Repair, in order:
 *
 *  1. opens the catalog as it replays; if it already holds every durable
 *     point the mark says completed, there is nothing to do;
 *  2. opens it writable, which keeps what the log replays to before its
 *     damage (as step 1 and the dry run read it; RocksDB's RepairDB only
 *     for a catalog that does not open: it keeps records after a skipped
 *     one, whose points then look whole), and reads its sequences ("S"),
 *     segments ("G") and last durable point ("N");
 *  3. reads every segment: a whole summary of this store with a seqno after
 *     the catalog's last point and at most the mark's, whose pages all
 *     match their hashes, proves its pages, and gets its segment record
 *     back if the catalog lost that too (optimizer segments are left:
 *     their generations are in the lost "O" records);
 *  4. gives each sequence back the whole token groups those segments prove:
 *     groups that run on from its lengths with K and V of every head (X of
 *     every query head for its X length), each
 *     followed by a later group (so it is full; the last group's token
 *     count was in the lost records); a sequence the catalog lost entirely
 *     is made again, as a root;
 *  5. commits it all with an "N" record of the mark's point and the
 *     configuration record ("C", the header's copy), so kvf_open accepts
 *     the store.
 * It never runs implicitly, and it holds the directory's lock throughout.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <unistd.h>
#include <xxhash.h>

#include "api/alloc.h"
#include "api/options.h"
#include "api/status.h"
#include "engine/base/catalog.h"
#include "engine/base/key.h"
#include "engine/base/meta.h"
#include "engine/base/segfmt.h"
#include "engine/segments/segtable.h"
#include "engine/sequences/seq_state.h"
#include "engine/base/store_header.h"
#include "engine/base/store_int.h"
#include "engine/base/syncmark.h"
#include "ftl/media.h"

/* A sequence as the catalog (or the repair) has it. */
struct rseq {
	uint64_t id;
	struct meta_seq m;
	uint64_t *len;   /* [n_layers] K/V tokens */
	uint64_t *x_len; /* [n_layers] X tokens */
	int fresh;       /* 1 = lost by the catalog, made again here */
	int changed;     /* its record must be written */
};

/* One page of a segment given back. */
struct rentry {
	uint64_t seq;
	uint64_t seqno; /* of its segment */
	uint32_t sid;
	uint32_t group;
};

struct repair {
	const char *dir;
	struct store_header h;
	uint32_t pps, data_max, n_segments, group_tokens, group_pages;
	uint32_t group_stride; /* entries of a group (engine/base/group.h) */
	uint32_t plain_off, plain_pages; /* a group's plain rows (X's) */
	struct catalog *cat;
	struct meta_sync last;   /* the catalog's "N"; zero if none */
	struct syncmark mark;
	struct rseq *seqs;
	size_t n_seqs, cap_seqs;
	struct rentry *ents;
	size_t n_ents, cap_ents;
	uint64_t *seg_seqno;     /* [n_segments]: the catalog's "G", 0 none */
	struct catalog_batch *b;
	kvf_repair_report r;
};

static void *grow(void *p, size_t *cap, size_t n, size_t elt)
{
	size_t c = *cap ? *cap * 2 : 64;
	void *q;

	if (n < *cap)
		return p;
	q = kvf_realloc(p, c * elt);
	if (q)
		*cap = c;
	return q;
}

static struct rseq *seq_find(struct repair *rp, uint64_t id)
{
	for (size_t i = 0; i < rp->n_seqs; i++)
		if (rp->seqs[i].id == id)
			return &rp->seqs[i];
	return NULL;
}

static struct rseq *seq_add(struct repair *rp, uint64_t id)
{
	uint32_t nl = rp->h.n_layers;
	struct rseq *s, *p = grow(rp->seqs, &rp->cap_seqs, rp->n_seqs, sizeof(*p));

	if (p == NULL)
		return NULL;
	rp->seqs = p;
	s = &p[rp->n_seqs];
	memset(s, 0, sizeof(*s));
	s->id = id;
	s->len = kvf_calloc(2 * (size_t)nl, sizeof(uint64_t));
	if (s->len == NULL)
		return NULL;
	s->x_len = s->len + nl;
	rp->n_seqs++;
	return s;
}

static int load_seq(void *arg, const void *key, size_t klen, const void *val,
		    size_t vlen)
{
	struct repair *rp = arg;
	uint32_t nl = rp->h.n_layers;
	struct rseq *s;

	if (klen != 9 || vlen != sizeof(struct meta_seq) + 2 * (size_t)nl * 8)
		return kvf_fail(KVF_ECORRUPT,
				"kvf_repair: a sequence record of %zu bytes is malformed",
				vlen);
	if ((s = seq_add(rp, meta_key_id(key, 8))) == NULL)
		return kvf_fail(KVF_ENOMEM, "kvf_repair: out of memory");
	memcpy(&s->m, val, sizeof(s->m));
	memcpy(s->len, (const char *)val + sizeof(s->m), 2 * (size_t)nl * 8);
	return 0;
}

static int load_seg(void *arg, const void *key, size_t klen, const void *val,
		    size_t vlen)
{
	struct repair *rp = arg;
	uint64_t id = meta_key_id(key, 4);
	struct meta_seg m;

	if (klen != 5 || vlen < sizeof(m) || id >= rp->n_segments)
		return kvf_fail(KVF_ECORRUPT,
				"kvf_repair: segment record %llu is malformed",
				(unsigned long long)id);
	memcpy(&m, val, sizeof(m));
	rp->seg_seqno[id] = m.seqno;
	return 0;
}

/* find_summary - the whole summary in the segment buf, if any: its header
 * and entries; NULL when none checks out */
static const struct seg_summary_entry *
find_summary(struct repair *rp, uint32_t segid, const unsigned char *buf,
	     struct seg_summary_header *out, unsigned char *scratch)
{
	uint32_t ps = rp->h.page_size;

	for (uint32_t n = rp->data_max; n >= 1; n--) {
		const unsigned char *p = buf + (size_t)n * ps;
		struct seg_summary_header h;
		size_t bytes = sizeof(h) + (size_t)n * sizeof(struct seg_summary_entry);

		if (memcmp(p, SEG_MAGIC, 8) != 0)
			continue;
		memcpy(&h, p, sizeof(h));
		if (h.n_data_pages != n || h.segid != segid ||
		    h.store_id != rp->h.store_id ||
		    n + summary_pages(n, ps) > rp->pps)
			continue;
		memcpy(scratch, p, bytes);
		memset(scratch + offsetof(struct seg_summary_header, checksum), 0, 8);
		if (XXH3_64bits(scratch, bytes) != h.checksum)
			continue;
		*out = h;
		return (const struct seg_summary_entry *)(p + sizeof(h));
	}
	return NULL;
}

/* take_segment - a segment written after the catalog's last durable
 * point whose pages are all whole proves its pages (step 4); if the
 * catalog lost its record too, the record comes back from its summary.
 * One the catalog knows still proves its pages: the segment records of a
 * log's tail often outlive the sync's records after them. */
static kvf_status take_segment(struct repair *rp, uint32_t segid,
			       const unsigned char *buf,
			       const struct seg_summary_header *h,
			       const struct seg_summary_entry *e)
{
	uint32_t ps = rp->h.page_size, n = h->n_data_pages, n_runs = 0;
	int known = rp->seg_seqno[segid] == h->seqno;
	struct meta_run *runs;
	struct meta_seg m;
	unsigned char key[5], *val;
	size_t vlen;

	if (h->seqno <= rp->last.seqno || h->seqno > rp->mark.seqno)
		return KVF_OK;
	for (uint32_t i = 0; i < n; i++) {
		struct seg_summary_entry x;

		memcpy(&x, &e[i], sizeof(x));
		if (stream_kind((uint32_t)(x.key_lo >> 32)) == KIND_OPTIM) {
			rp->r.segments_optimizer++;
			return KVF_OK;
		}
		if (page_hash(buf + (size_t)i * ps, ps) != x.page_hash) {
			rp->r.segments_damaged++;
			return KVF_OK;
		}
	}
	runs = kvf_calloc(n, sizeof(*runs));
	if (runs == NULL)
		return kvf_fail(KVF_ENOMEM, "kvf_repair: out of memory");
	for (uint32_t i = 0; i < n; i++) {
		struct seg_summary_entry x;
		struct rseq *s;
		struct rentry *q;

		memcpy(&x, &e[i], sizeof(x));
		s = seq_find(rp, x.key_hi);
		meta_run_add(runs, &n_runs, (struct meta_run){
			.seq = x.key_hi, .family = s ? s->m.family : x.key_hi,
			.stream = (uint32_t)(x.key_lo >> 32),
			.group = (uint32_t)x.key_lo, .page = i,
			.ns = SEQ_NS_USER, .stride = 1, .n = 1 });
		q = grow(rp->ents, &rp->cap_ents, rp->n_ents, sizeof(*q));
		if (q == NULL) {
			kvf_free(runs);
			return kvf_fail(KVF_ENOMEM, "kvf_repair: out of memory");
		}
		rp->ents = q;
		rp->ents[rp->n_ents++] = (struct rentry){
			x.key_hi, h->seqno, (uint32_t)(x.key_lo >> 32),
			(uint32_t)x.key_lo };
	}
	if (known) {
		kvf_free(runs);
		return KVF_OK;
	}
	m = (struct meta_seg){ .seqno = h->seqno, .owner = KVF_SEQ_NONE,
			       .n_data_pages = n, .n_runs = n_runs };
	vlen = sizeof(m) + (size_t)n_runs * sizeof(*runs);
	val = kvf_malloc(vlen);
	if (val == NULL) {
		kvf_free(runs);
		return kvf_fail(KVF_ENOMEM, "kvf_repair: out of memory");
	}
	memcpy(val, &m, sizeof(m));
	memcpy(val + sizeof(m), runs, (size_t)n_runs * sizeof(*runs));
	meta_key_u32(key, META_TAG_SEG, segid);
	catalog_batch_put(rp->b, key, sizeof(key), val, vlen);
	kvf_free(val);
	kvf_free(runs);
	rp->r.segments_restored++;
	return KVF_OK;
}

/* scan_media - step 3 over every segment */
static kvf_status scan_media(struct repair *rp, const kvf_options *opts)
{
	uint32_t ps = rp->h.page_size, ns = rp->h.n_stripes;
	struct kvf_media_config cfg = {
		.kind = KVF_MEDIA_FILE,
		.geo = { .n_stripes = ns, .page_size = ps,
			 .pages_per_segment = rp->pps,
			 .segs_per_stripe = rp->h.segs_per_stripe },
		.read_only = 1,
	};
	char *paths[KVF_MEDIA_MAX_STRIPES] = { NULL };
	struct kvf_media *media = NULL;
	unsigned char *buf = NULL, *scratch = NULL;
	kvf_status rc = KVF_OK;

	if (opts && opts->device_paths) {
		cfg.paths = opts->device_paths;
	} else {
		for (uint32_t i = 0; i < ns; i++) {
			if ((paths[i] = kvf_malloc(strlen(rp->dir) + 32)) == NULL) {
				rc = kvf_fail(KVF_ENOMEM, "kvf_repair: out of memory");
				goto out;
			}
			sprintf(paths[i], "%s/stripe-%03u.kvf", rp->dir, i);
		}
		cfg.paths = (const char *const *)paths;
	}
	buf = kvf_aligned_alloc(KVF_MEDIA_ALIGN, (size_t)rp->pps * ps);
	scratch = kvf_malloc((size_t)rp->pps * ps);
	if (buf == NULL || scratch == NULL) {
		rc = kvf_fail(KVF_ENOMEM, "kvf_repair: out of memory");
		goto out;
	}
	if ((rc = kvf_media_open(&cfg, &media)) != KVF_OK) {
		kvf_fail_wrap(rc, "kvf_repair");
		goto out;
	}
	for (uint32_t segid = 0; segid < rp->n_segments && rc == KVF_OK; segid++) {
		struct seg_summary_header h;
		const struct seg_summary_entry *e;

		rc = kvf_media_read_pages(media, segid % ns, segid / ns, 0,
					  rp->pps, buf);
		if (rc != KVF_OK) {
			kvf_fail_wrap(rc, "kvf_repair");
			break;
		}
		rp->r.segments_scanned++;
		e = find_summary(rp, segid, buf, &h, scratch);
		if (e)
			rc = take_segment(rp, segid, buf, &h, e);
	}
out:
	kvf_media_free(media);
	kvf_free(buf);
	kvf_free(scratch);
	for (uint32_t i = 0; i < ns; i++)
		kvf_free(paths[i]);
	return rc;
}

static int cmp_ent(const void *a, const void *b)
{
	const struct rentry *x = a, *y = b;

	if (x->seq != y->seq)
		return x->seq < y->seq ? -1 : 1;
	if (x->sid != y->sid)
		return x->sid < y->sid ? -1 : 1;
	return x->group < y->group ? -1 : x->group > y->group;
}

/* has_group - whether the pages given back hold (seq, sid, group), and,
 * through *later, whether they hold a later group of that stream */
static int has_group(struct repair *rp, uint64_t seq, uint32_t sid,
		     uint32_t group, int *later)
{
	struct rentry key = { seq, 0, sid, group }, *e;
	size_t lo = 0, hi = rp->n_ents;

	while (lo < hi) {
		size_t mid = (lo + hi) / 2;

		if (cmp_ent(&rp->ents[mid], &key) < 0)
			lo = mid + 1;
		else
			hi = mid;
	}
	e = lo < rp->n_ents ? &rp->ents[lo] : NULL;
	if (e == NULL || e->seq != seq || e->sid != sid || e->group != group)
		return 0;
	while (lo < rp->n_ents && rp->ents[lo].seq == seq &&
	       rp->ents[lo].sid == sid && rp->ents[lo].group == group)
		lo++;
	*later = lo < rp->n_ents && rp->ents[lo].seq == seq &&
		 rp->ents[lo].sid == sid;
	return 1;
}

/* full_group - every stream of (seq, layer), K and V of every KV head or
 * with x X of every query head, holds group g in the pages given back,
 * each followed by a later group */
static int full_group(struct repair *rp, uint64_t seq, uint32_t layer,
		      int x, uint32_t g)
{
	/* its index entries: K's and V's whole group (encoded with a
	 * codec), X's plain rows */
	uint64_t e0 = (uint64_t)g * rp->group_stride + (x ? rp->plain_off : 0);
	uint32_t pages = x ? rp->plain_pages : rp->group_pages;
	uint32_t heads = x ? rp->h.n_q_heads : rp->h.n_kv_heads;
	int k0 = x ? KIND_X : KIND_K, k1 = x ? KIND_X : KIND_V;

	if (e0 + pages > UINT32_MAX)
		return 0;
	for (uint32_t h = 0; h < heads; h++)
		for (int kind = k0; kind <= k1; kind++)
			for (uint32_t p = 0; p < pages; p++) {
				int later = 0;

				if (!has_group(rp, seq, stream_id(layer, kind, h),
					       (uint32_t)(e0 + p), &later) || !later)
					return 0;
			}
	return 1;
}

/* extend_len - *len (of K/V, or with x of X) of s's layer, on by the
 * whole groups the pages given back prove; the tokens it gained */
static uint64_t extend_len(struct repair *rp, struct rseq *s, uint32_t layer,
			   int x, uint64_t *len)
{
	uint32_t G = rp->group_tokens;
	uint64_t g = *len / G, was = *len;

	while (g < UINT32_MAX && full_group(rp, s->id, layer, x, (uint32_t)g))
		g++;
	if (g * G <= was)
		return 0;
	*len = g * G;
	s->changed = 1;
	return *len - was;
}

/* extend - step 4: lengths from the pages given back */
static kvf_status extend(struct repair *rp)
{
	if (rp->n_ents > 1)
		qsort(rp->ents, rp->n_ents, sizeof(*rp->ents), cmp_ent);
	for (size_t i = 0; i < rp->n_ents; i++) {
		const struct rentry *e = &rp->ents[i];
		struct rseq *s = seq_find(rp, e->seq);

		if (i > 0 && rp->ents[i - 1].seq == e->seq)
			continue; /* one pass per sequence */
		if (s == NULL) {
			uint64_t first = e->seqno;

			for (size_t j = i; j < rp->n_ents && rp->ents[j].seq == e->seq; j++)
				first = rp->ents[j].seqno < first ? rp->ents[j].seqno : first;
			if ((s = seq_add(rp, e->seq)) == NULL)
				return kvf_fail(KVF_ENOMEM, "kvf_repair: out of memory");
			s->fresh = 1;
			s->m = (struct meta_seq){ .create_seqno = first,
						  .family = e->seq,
						  .parent = KVF_SEQ_NONE,
						  .n_layers = rp->h.n_layers };
		}
		for (uint32_t l = 0; l < rp->h.n_layers; l++) {
			rp->r.tokens_restored += extend_len(rp, s, l, 0, &s->len[l]);
			/* X, kept for the X-cache: a length of its own */
			rp->r.x_tokens_restored +=
				extend_len(rp, s, l, 1, &s->x_len[l]);
		}
		if (s->changed && s->fresh)
			rp->r.sequences_restored++;
		else if (s->changed)
			rp->r.sequences_extended++;
	}
	return KVF_OK;
}

/* put_records - step 5 */
static kvf_status put_records(struct repair *rp)
{
	uint32_t nl = rp->h.n_layers;
	unsigned char key[9], tag = META_TAG_SYNC;
	struct meta_sync ms = rp->last;

	for (size_t i = 0; i < rp->n_seqs; i++) {
		struct rseq *s = &rp->seqs[i];
		size_t len = sizeof(s->m) + 2 * (size_t)nl * 8;
		unsigned char *val;

		if (!s->changed)
			continue;
		if ((val = kvf_malloc(len)) == NULL)
			return kvf_fail(KVF_ENOMEM, "kvf_repair: out of memory");
		memcpy(val, &s->m, sizeof(s->m));
		memcpy(val + sizeof(s->m), s->len, 2 * (size_t)nl * 8);
		meta_key_u64(key, META_TAG_SEQ, s->id);
		catalog_batch_put(rp->b, key, sizeof(key), val, len);
		kvf_free(val);
	}
	ms.seqno = rp->mark.seqno > ms.seqno ? rp->mark.seqno : ms.seqno;
	ms.n_syncs = rp->mark.n_syncs > ms.n_syncs ? rp->mark.n_syncs : ms.n_syncs;
	ms.n_points = rp->mark.n_points;
	catalog_batch_put(rp->b, &tag, 1, &ms, sizeof(ms));
	/* the configuration record is the header's copy: the header is
	 * whole (open_store_files checked it), the record may have been
	 * among the lost */
	tag = META_TAG_CONFIG;
	catalog_batch_put(rp->b, &tag, 1, &rp->h, sizeof(rp->h));
	return KVF_OK;
}

/* read_last - the catalog's "N", zero when it has none */
static kvf_status read_last(struct repair *rp)
{
	unsigned char tag = META_TAG_SYNC;
	void *val;
	size_t vlen;
	kvf_status rc = catalog_get(rp->cat, &tag, 1, &val, &vlen);

	memset(&rp->last, 0, sizeof(rp->last));
	if (rc == KVF_ENOENT)
		return KVF_OK;
	if (rc != KVF_OK)
		return rc;
	if (vlen == sizeof(rp->last))
		memcpy(&rp->last, val, vlen);
	kvf_free(val);
	if (vlen != sizeof(rp->last))
		return kvf_fail(KVF_ECORRUPT, "kvf_repair: the sync record is malformed (%zu bytes)",
				vlen);
	rp->r.catalog_points = rp->last.n_points;
	return KVF_OK;
}

/* open_store_files - lock dir, read its header and mark */
static kvf_status open_store_files(struct repair *rp, int *lock_fd)
{
	char p[4096];
	int fd;
	kvf_status rc;

	snprintf(p, sizeof(p), "%s/%s", rp->dir, STORE_HEADER_FILE);
	rc = store_read_header(p, &rp->h);
	if (rc == KVF_ENOENT)
		return kvf_fail(KVF_ENOENT, "kvf_repair: %s holds no store (no %s)",
				rp->dir, p);
	if (rc != KVF_OK)
		return kvf_fail_wrap(rc, "kvf_repair");
	if (rp->h.media != KVF_MEDIA_FILE)
		return kvf_fail(KVF_ENOTSUP,
				"kvf_repair: %s is a memory or flash store: nothing on media to salvage",
				rp->dir);
	snprintf(p, sizeof(p), "%s/LOCK", rp->dir);
	*lock_fd = open(p, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
	if (*lock_fd < 0)
		return kvf_fail_errno(KVF_EIO, errno, "kvf_repair: open %s", p);
	if (flock(*lock_fd, LOCK_EX | LOCK_NB) != 0)
		return errno == EWOULDBLOCK
			? kvf_fail(KVF_EBUSY, "kvf_repair: %s is open (%s is locked)",
				   rp->dir, p)
			: kvf_fail_errno(KVF_EIO, errno, "kvf_repair: flock %s", p);
	if ((rc = syncmark_open(rp->dir, 0, 1, rp->h.store_id, &fd)) != KVF_OK)
		return kvf_fail_wrap(rc, "kvf_repair");
	snprintf(p, sizeof(p), "%s/%s", rp->dir, SYNCMARK_FILE);
	rc = syncmark_read(fd, p, rp->h.store_id, &rp->mark);
	close(fd);
	if (rc != KVF_OK)
		return kvf_fail_wrap(rc, "kvf_repair");
	rp->r.marked_points = rp->mark.n_points;
	rp->pps = (uint32_t)(rp->h.segment_size / rp->h.page_size);
	rp->data_max = max_data_pages(rp->pps, rp->h.page_size);
	rp->n_segments = (uint32_t)(rp->h.segs_per_stripe * rp->h.n_stripes);
	rp->group_tokens = store_group_of(&rp->h).tokens;
	rp->group_pages = store_group_of(&rp->h).pages;
	rp->group_stride = rp->group_pages;
	{
		uint64_t row = (uint64_t)rp->h.head_dim *
			       store_dtype_bytes((kvf_dtype)rp->h.dtype);

		rp->plain_pages = (uint32_t)((rp->group_tokens * row +
					      rp->h.page_size - 1) /
					     rp->h.page_size);
	}
	if (rp->h.codec != KVF_CODEC_NONE) { /* + the pages of G plain rows */
		rp->plain_off = rp->group_pages;
		rp->group_stride += rp->plain_pages;
	}
	return KVF_OK;
}

kvf_status kvf_repair(const char *dir, const kvf_options *opts, int dry_run,
		      kvf_repair_report *out)
{
	struct repair rp = { .dir = dir };
	char mpath[4096];
	unsigned char tag;
	int lock_fd = -1;
	kvf_status rc;

	if (dir == NULL || *dir == '\0')
		return kvf_fail(KVF_EINVAL, "kvf_repair: dir is %s", dir ? "empty" : "NULL");
	if ((rc = kvf_struct_check("kvf_repair", "out", out, sizeof(rp.r))) != KVF_OK)
		return rc;
	if ((rc = open_store_files(&rp, &lock_fd)) != KVF_OK)
		goto out;
	snprintf(mpath, sizeof(mpath), "%s/meta", dir);
	/* 1: what the catalog replays to */
	rc = catalog_open(mpath, 0, 1, CATALOG_FSYNC, &rp.cat);
	if (rc == KVF_OK) {
		rc = read_last(&rp);
		if (rc == KVF_OK && rp.last.n_points >= rp.mark.n_points)
			goto done; /* nothing lost */
		catalog_close(rp.cat);
		rp.cat = NULL;
	}
	if (rc != KVF_OK && (rc != KVF_ECORRUPT || dry_run)) {
		kvf_fail_wrap(rc, "kvf_repair");
		goto out;
	}
	/* 2: keep what the log replays to before its damage, as the dry
	 * run (and kvf_open) read it: a writable open makes that the
	 * catalog, and everything after it is rebuilt from the summaries.
	 * RocksDB's own repair skips a damaged record and keeps the ones
	 * after it, records of points whose earlier records are gone (a
	 * sync's "N" among them: the points then looked whole and the
	 * sequences of the lost record were never given back); it runs only
	 * for a catalog that does not open at all (a damaged table or
	 * manifest) */
	rc = catalog_open(mpath, 0, dry_run, CATALOG_FSYNC, &rp.cat);
	if (rc == KVF_ECORRUPT && !dry_run) {
		if ((rc = catalog_salvage(mpath)) != KVF_OK) {
			kvf_fail_wrap(rc, "kvf_repair");
			goto out;
		}
		rc = catalog_open(mpath, 0, 0, CATALOG_FSYNC, &rp.cat);
	}
	if (rc != KVF_OK || (rc = read_last(&rp)) != KVF_OK) {
		kvf_fail_wrap(rc, "kvf_repair");
		goto out;
	}
	rp.seg_seqno = kvf_calloc(rp.n_segments, sizeof(uint64_t));
	rp.b = catalog_batch_new();
	if (rp.seg_seqno == NULL || rp.b == NULL) {
		rc = kvf_fail(KVF_ENOMEM, "kvf_repair: out of memory");
		goto out;
	}
	tag = META_TAG_SEQ;
	if ((rc = catalog_scan(rp.cat, &tag, 1, load_seq, &rp)) != KVF_OK)
		goto out;
	tag = META_TAG_SEG;
	if ((rc = catalog_scan(rp.cat, &tag, 1, load_seg, &rp)) != KVF_OK)
		goto out;
	/* 3, 4, 5 */
	if ((rc = scan_media(&rp, opts)) != KVF_OK)
		goto out;
	if (!rp.h.kt_pages && (rc = extend(&rp)) != KVF_OK)
		goto out;
	if ((rc = put_records(&rp)) != KVF_OK)
		goto out;
	if (!dry_run) {
		if ((rc = catalog_commit(rp.cat, rp.b, 1)) != KVF_OK) {
			kvf_fail_wrap(rc, "kvf_repair");
			goto out;
		}
		rp.r.changed = 1;
	}
done:
	rc = KVF_OK;
	rp.r.struct_size = out->struct_size;
	memcpy(out, &rp.r, out->struct_size < sizeof(rp.r) ? out->struct_size
							    : sizeof(rp.r));
out:
	catalog_batch_free(rp.b);
	catalog_close(rp.cat);
	for (size_t i = 0; i < rp.n_seqs; i++)
		kvf_free(rp.seqs[i].len);
	kvf_free(rp.seqs);
	kvf_free(rp.ents);
	kvf_free(rp.seg_seqno);
	if (lock_fd >= 0)
		close(lock_fd);
	return rc;
}
