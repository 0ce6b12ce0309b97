/*
 * cleaner.c - segment cleaning: victim choice, relocation, and the
 * background thread.
 *
 * A pass works on one stripe with the world lock held exclusive, so no
 * call is half way through an index change while pages move.  It takes a
 * free output segment (each stripe keeps CLEANER_RESERVE of them for this),
 * then, best victim first, reads each victim whole, finds every index slot
 * pointing at each live page (the segment record names the page's writer;
 * forks share pages across a family, so every live member of the writer's
 * family is checked), and copies the page into the output.  A victim whose
 * live pages are not all accounted for by index slots (a replacement is
 * still waiting in an open segment) is skipped.  The output is written and
 * synced, its record and the victims' deletions commit with a synced log,
 * then the slots move to the copies and the victims are trimmed and freed.
 *
 * The background thread sleeps until free segments drop below a low
 * watermark (kicked by writers, or every second), then makes dying segments
 * reusable, packs the open segments of short sequences and cleans until a
 * high watermark.
 */
#include "engine/cleaning/cleaner.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <xxhash.h>

#include "api/alloc.h"
#include "api/status.h"
#include "engine/base/catalog.h"
#include "engine/durability/durable.h"
#include "engine/cleaning/evict.h"
#include "engine/base/fatal.h"
#include "engine/base/key.h"
#include "engine/base/meta.h"
#include "engine/base/segfmt.h"
#include "engine/segments/openseg.h"
#include "engine/segments/segtable.h"
#include "engine/sequences/prefix.h"
#include "engine/sequences/seq.h"
#include "engine/sequences/seq_pack.h"
#include "engine/sequences/seq_state.h"
#include "engine/sequences/seq_stream.h"
#include "engine/base/store_state.h"
#include "engine/base/wake.h"
#include "engine/segments/writer.h"

/* A slot that points at a page being moved. */
struct owner {
	struct seq *seq;   /* with a reference */
	struct stream *s;  /* the stream */
	uint32_t sid;      /* its id */
	uint32_t group;    /* group in the stream */
	uint32_t out_page; /* page in the output segment */
};

struct pass {
	kvf_store *st;
	uint32_t stripe;
	uint32_t out;            /* output segment id */
	unsigned char *buf;      /* output segment bytes */
	struct seg_summary_entry *entries; /* output summary */
	struct meta_run *runs;   /* output record runs */
	uint32_t n_runs, cap_runs;
	uint32_t n_pages;        /* pages in the output */
	struct owner *owners;    /* slots to move after commit */
	uint32_t n_owners, cap_owners;
	uint32_t *victims;       /* victim segment ids */
	uint32_t n_victims;
	unsigned char *vbuf;     /* one victim, read whole */
};

static double now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* pick_victim - the sealed segment of stripe not yet chosen with the
 * best cost-benefit, or with fewest_live the fewest live pages (greedy);
 * SEG_NONE if no segment would give space back */
static uint32_t pick_victim(kvf_store *st, uint32_t stripe, const uint8_t *skip,
			    int fewest_live)
{
	double best = 0, now = now_s();
	uint32_t pick = SEG_NONE;

	pthread_mutex_lock(&st->segtab.lock);
	for (uint32_t i = stripe; i < st->n_segments; i += st->hdr.n_stripes) {
		const struct seg_info *si = &st->segtab.info[i];
		double u, age, score;

		/* a partly filled segment gives space back even when all its
		 * pages are live (every optimizer create and step leaves its
		 * last ones so); only a full, all-live one cannot */
		if (si->state != SEG_SEALED || skip[i] || si->n_data == 0 ||
		    si->live >= st->data_per_seg)
			continue;
		u = (double)si->live / st->data_per_seg;
		age = now - (double)si->write_ns / 1e9;
		score = fewest_live ? 2 - u
				    : (1 - u) * (age > 1e-3 ? age : 1e-3) / (1 + u);
		if (score > best) {
			best = score;
			pick = i;
		}
	}
	pthread_mutex_unlock(&st->segtab.lock);
	return pick;
}

static int grow(void **p, uint32_t *cap, uint32_t need, size_t elt)
{
	uint32_t c = *cap ? *cap : 64;
	void *q;

	if (need <= *cap)
		return 0;
	while (c < need)
		c *= 2;
	q = kvf_realloc(*p, (size_t)c * elt);
	if (q == NULL)
		return -1;
	*p = q;
	*cap = c;
	return 0;
}

struct find_ctx {
	struct pass *p;
	uint64_t family;
	uint32_t ns;     /* namespace of the family */
	uint32_t sid, group, addr;
	uint32_t found;
	int oom;
};

/* find_owners - every live sequence of the family whose slot (sid, group)
 * holds addr becomes an owner of the page being moved */
static void find_owners(kvf_store *st, struct seq *seq, void *arg)
{
	struct find_ctx *c = arg;
	struct stream *s;

	if (seq->family != c->family || seq->ns != c->ns || seq->dead || c->oom)
		return;
	s = seq_stream_of(st, seq, c->sid);
	if (s == NULL || c->group >= s->n_groups ||
	    stream_page(s, c->group).addr != c->addr)
		return;
	if (grow((void **)&c->p->owners, &c->p->cap_owners,
		 c->p->n_owners + 1, sizeof(struct owner))) {
		c->oom = 1;
		return;
	}
	atomic_fetch_add(&seq->refs, 1);
	c->p->owners[c->p->n_owners++] = (struct owner){
		.seq = seq, .s = s, .sid = c->sid, .group = c->group,
		.out_page = c->p->n_pages };
	c->found++;
}

static void drop_owners(struct pass *p, uint32_t from)
{
	while (p->n_owners > from)
		seq_put(p->st, p->owners[--p->n_owners].seq);
}

/* copy_page - page k of run r of victim v (read whole into p->vbuf, its
 * n_data data pages first) into the output, with every owner it has,
 * unless it is dead or copied already (a later run that names the page
 * again names an owner found the first time); 0, or -1 if the victim
 * cannot be taken */
static int copy_page(struct pass *p, uint32_t v, const struct meta_run *r,
		     uint32_t k, uint32_t n_data, uint32_t *refs)
{
	kvf_store *st = p->st;
	uint32_t ps = st->hdr.page_size, pg = r->page + k;
	struct seg_summary_entry e;
	struct find_ctx fc;

	if (pg >= n_data || refs[pg] == 0)
		return 0;
	memcpy(&e, p->vbuf + (size_t)n_data * ps +
		   sizeof(struct seg_summary_header) + (size_t)pg * sizeof(e),
	       sizeof(e));
	if ((uint32_t)page_hash(p->vbuf + (size_t)pg * ps, ps) !=
	    (uint32_t)e.page_hash)
		return -1; /* a damaged page is not copied as good */
	fc = (struct find_ctx){ .p = p, .family = r->family, .ns = r->ns,
				.sid = r->stream,
				.group = r->group + k * r->stride,
				.addr = addr_make(v, pg, st->page_bits) };
	if (refs[pg] == 1) {
		/* an unshared page is nearly always its writer's: look
		 * there first, not through every sequence of the store */
		struct seq *w = seq_get_ns(st, r->ns, r->seq);

		if (w) {
			find_owners(st, w, &fc);
			seq_put(st, w);
		}
	}
	if (fc.found == 0 && !fc.oom && seq_foreach(st, find_owners, &fc) != KVF_OK)
		fc.oom = 1;
	if (fc.oom || fc.found != refs[pg])
		return -1;
	if (grow((void **)&p->runs, &p->cap_runs, p->n_runs + fc.found,
		 sizeof(struct meta_run)))
		return -1;
	for (uint32_t o = p->n_owners - fc.found; o < p->n_owners; o++)
		meta_run_add(p->runs, &p->n_runs, (struct meta_run){
			.seq = p->owners[o].seq->id,
			.family = p->owners[o].seq->family,
			.ns = (uint8_t)p->owners[o].seq->ns, .stride = 1,
			.stream = p->owners[o].sid,
			.group = p->owners[o].group,
			.page = p->n_pages, .n = 1 });
	memcpy(p->buf + (size_t)p->n_pages * ps, p->vbuf + (size_t)pg * ps, ps);
	p->entries[p->n_pages] = e;
	p->n_pages++;
	refs[pg] = 0; /* copied */
	return 0;
}

/* take_victim - copy victim v's live pages into the output; 1 if taken,
 * 0 if skipped (does not fit, or a live page has no slot), -1 on error */
static int take_victim(struct pass *p, uint32_t v)
{
	kvf_store *st = p->st;
	uint32_t ps = st->hdr.page_size, n_data, sp;
	uint32_t owners0 = p->n_owners, pages0 = p->n_pages, runs0 = p->n_runs;
	/* this victim's pages may extend the last run so far */
	struct meta_run last0 = runs0 ? p->runs[runs0 - 1] : (struct meta_run){ 0 };
	struct seg_summary_header h;
	struct meta_seg rec;
	const unsigned char *vruns;
	unsigned char key[5];
	uint32_t *refs;
	void *val = NULL;
	size_t vlen;
	int taken = 0;

	pthread_mutex_lock(&st->segtab.lock);
	n_data = st->segtab.info[v].n_data;
	if (p->n_pages + st->segtab.info[v].live > st->data_per_seg) {
		pthread_mutex_unlock(&st->segtab.lock);
		return 0;
	}
	pthread_mutex_unlock(&st->segtab.lock);
	/* the world lock is held: the references cannot change under us */
	refs = kvf_malloc((size_t)n_data * sizeof(*refs));
	if (refs == NULL)
		return kvf_fail(KVF_ENOMEM, "cleaner: out of memory"), -1;
	for (uint32_t pg = 0; pg < n_data; pg++)
		refs[pg] = seg_page_refs(st, addr_make(v, pg, st->page_bits));
	meta_key_u32(key, META_TAG_SEG, v);
	sp = summary_pages(n_data, ps);
	if (catalog_get(st->cat, key, sizeof(key), &val, &vlen) != KVF_OK ||
	    kvf_media_read_pages(st->media, p->stripe, seg_in_stripe(st, v), 0,
				 n_data + sp, p->vbuf) != KVF_OK)
		goto out;
	atomic_fetch_add(&st->c.bytes_read, (uint64_t)(n_data + sp) * ps);
	if (vlen < sizeof(rec))
		goto out;
	memcpy(&rec, val, sizeof(rec));
	memcpy(&h, p->vbuf + (size_t)n_data * ps, sizeof(h));
	if (vlen != sizeof(rec) + (size_t)rec.n_runs * sizeof(struct meta_run) ||
	    rec.n_data_pages != n_data || h.n_data_pages != n_data ||
	    h.segid != v || memcmp(h.magic, SEG_MAGIC, 8) != 0)
		goto out; /* damaged: leave it to verify */
	vruns = (const unsigned char *)val + sizeof(rec);
	for (uint32_t i = 0; i < rec.n_runs; i++) {
		struct meta_run r;

		memcpy(&r, vruns + (size_t)i * sizeof(r), sizeof(r));
		for (uint32_t k = 0; k < r.n; k++)
			if (copy_page(p, v, &r, k, n_data, refs) != 0)
				goto undo;
	}
	for (uint32_t pg = 0; pg < n_data; pg++)
		if (refs[pg] != 0)
			goto undo; /* a live page no slot names */
	p->victims[p->n_victims++] = v;
	taken = 1;
	goto out;
undo:
	drop_owners(p, owners0);
	p->n_pages = pages0;
	p->n_runs = runs0;
	if (runs0)
		p->runs[runs0 - 1] = last0;
out:
	kvf_free(val);
	kvf_free(refs);
	return taken;
}

/* commit_pass - write the output, commit, move the slots, free victims */
static kvf_status commit_pass(struct pass *p)
{
	kvf_store *st = p->st;
	uint32_t ps = st->hdr.page_size, n = p->n_pages;
	uint32_t sp = summary_pages(n, ps);
	unsigned char *sum = p->buf + (size_t)n * ps;
	struct seg_summary_header h;
	struct meta_seg rec;
	struct catalog_batch *b;
	unsigned char key[5];
	size_t rec_len;
	unsigned char *val;
	kvf_status rc;

	memset(&h, 0, sizeof(h));
	memcpy(h.magic, SEG_MAGIC, 8);
	h.store_id = st->hdr.store_id;
	h.seqno = atomic_fetch_add(&st->writer.next_seqno, 1);
	h.segid = p->out;
	h.n_data_pages = n;
	h.page_size = ps;
	memset(sum, 0, (size_t)sp * ps);
	memcpy(sum + sizeof(h), p->entries, (size_t)n * sizeof(*p->entries));
	memcpy(sum, &h, sizeof(h));
	h.checksum = XXH3_64bits(sum, sizeof(h) + (size_t)n * sizeof(*p->entries));
	memcpy(sum, &h, sizeof(h));
	rc = kvf_media_write_segment(st->media, p->stripe, seg_in_stripe(st, p->out),
				     p->buf, (size_t)(n + sp) * ps);
	if (rc == KVF_OK)
		rc = kvf_media_sync(st->media);
	if (rc != KVF_OK)
		return store_set_fatal(st, rc, "cleaner: segment write");
	rec = (struct meta_seg){ .seqno = h.seqno, .write_ns = 0,
				 .owner = KVF_SEQ_NONE,
				 .n_data_pages = n, .n_runs = p->n_runs };
	{
		struct timespec ts;

		clock_gettime(CLOCK_REALTIME, &ts);
		rec.write_ns = (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
	}
	rec_len = sizeof(rec) + (size_t)p->n_runs * sizeof(struct meta_run);
	val = kvf_malloc(rec_len);
	b = catalog_batch_new();
	if (val == NULL || b == NULL) {
		kvf_free(val);
		catalog_batch_free(b);
		kvf_fail(KVF_ENOMEM, "cleaner: out of memory");
		return store_set_fatal(st, KVF_ENOMEM, "cleaner: commit");
	}
	memcpy(val, &rec, sizeof(rec));
	memcpy(val + sizeof(rec), p->runs, (size_t)p->n_runs * sizeof(struct meta_run));
	meta_key_u32(key, META_TAG_SEG, p->out);
	catalog_batch_put(b, key, sizeof(key), val, rec_len);
	for (uint32_t i = 0; i < p->n_victims; i++) {
		meta_key_u32(key, META_TAG_SEG, p->victims[i]);
		catalog_batch_delete(b, key, sizeof(key));
	}
	rc = catalog_commit(st->cat, b, 1);
	catalog_batch_free(b);
	kvf_free(val);
	if (rc != KVF_OK)
		return store_set_fatal(st, rc, "cleaner: commit");

	/* the copies are durable: move every slot, then free the victims */
	pthread_mutex_lock(&st->segtab.lock);
	{
		struct seg_info *o = &st->segtab.info[p->out];

		o->state = SEG_SEALED;
		o->n_data = n;
		o->seqno = rec.seqno;
		o->write_ns = rec.write_ns;
		o->owner = KVF_SEQ_NONE;
		o->live = 0;
	}
	for (uint32_t i = 0; i < p->n_victims; i++)
		seg_refs_drop_locked(st, p->victims[i]);
	pthread_mutex_unlock(&st->segtab.lock);
	for (uint32_t i = 0; i < p->n_owners; i++) {
		struct owner *w = &p->owners[i];
		struct page_ref r = stream_page(w->s, w->group);

		r.addr = addr_make(p->out, w->out_page, st->page_bits);
		stream_set_page(w->s, w->group, r);
		if (seg_ref_inc(st, r.addr) != KVF_OK && rc == KVF_OK)
			rc = store_set_fatal(st, KVF_ENOMEM, "cleaner: references");
	}
	if (rc != KVF_OK)
		return rc;
	pthread_mutex_lock(&st->segtab.lock);
	for (uint32_t i = 0; i < p->n_victims; i++) {
		struct seg_info *si = &st->segtab.info[p->victims[i]];

		si->state = SEG_DYING;
		si->died_epoch = 0; /* durable already */
		st->segtab.n_dying++;
	}
	pthread_mutex_unlock(&st->segtab.lock);
	atomic_fetch_add(&st->c.cleaner_bytes, (uint64_t)n * ps);
	atomic_fetch_add(&st->c.summary_bytes, (uint64_t)sp * ps);
	atomic_fetch_add(&st->c.segments_written, 1);
	atomic_fetch_add(&st->c.segments_cleaned, p->n_victims);
	b = catalog_batch_new();
	if (b == NULL)
		return KVF_OK; /* reclaimed at the next durable point */
	rc = seg_reclaim(st, 0, b);
	if (catalog_batch_count(b) > 0 && catalog_commit(st->cat, b, 0) != KVF_OK)
		rc = store_set_fatal(st, KVF_EIO, "cleaner: reclaim commit");
	catalog_batch_free(b);
	return rc;
}

/* clean_stripe - one pass on stripe s; *freed gets the net segments won */
static kvf_status clean_stripe(kvf_store *st, uint32_t s, int *freed)
{
	struct pass p = { .st = st, .stripe = s, .out = SEG_NONE };
	uint8_t *skip = kvf_calloc(st->n_segments, 1);
	uint32_t ps = st->hdr.page_size;
	kvf_status rc = KVF_OK;

	*freed = 0;
	p.buf = kvf_aligned_alloc(KVF_MEDIA_ALIGN, st->hdr.segment_size);
	p.vbuf = kvf_aligned_alloc(KVF_MEDIA_ALIGN, st->hdr.segment_size);
	p.entries = kvf_calloc(st->data_per_seg, sizeof(*p.entries));
	p.victims = kvf_calloc(st->hdr.segs_per_stripe, sizeof(uint32_t));
	if (!skip || !p.buf || !p.vbuf || !p.entries || !p.victims) {
		rc = kvf_fail(KVF_ENOMEM, "cleaner: out of memory");
		goto out;
	}
	(void)ps;
	/* cost-benefit first; when its first victim leaves room for no
	 * second (segments more than half live, the emptier ones younger),
	 * the fewest live pages first, which fills an output from the
	 * segments that fit together */
	for (int fewest_live = 0; fewest_live < 2; fewest_live++) {
		memset(skip, 0, st->n_segments);
		drop_owners(&p, 0);
		p.n_pages = p.n_runs = p.n_victims = 0;
		for (;;) {
			uint32_t v = pick_victim(st, s, skip, fewest_live);
			int t;

			if (v == SEG_NONE)
				break;
			skip[v] = 1;
			t = take_victim(&p, v);
			if (t < 0) {
				drop_owners(&p, 0);
				rc = KVF_ENOMEM;
				goto out;
			}
			if (p.n_pages == st->data_per_seg)
				break;
		}
		/* worth it only if the victims give back more than the
		 * output uses; picked again only when one victim with live
		 * pages took the output alone */
		if (p.n_victims != 1 || p.n_pages == 0)
			break;
	}
	if (p.n_victims < 2 && !(p.n_victims == 1 && p.n_pages == 0)) {
		drop_owners(&p, 0);
		goto out;
	}
	pthread_mutex_lock(&st->segtab.lock);
	if ((p.out = seg_pop_free_locked(st, s)) != SEG_NONE) {
		st->segtab.info[p.out].state = SEG_OPEN;
		st->segtab.info[p.out].live_bits = seg_bits_take(st, p.out);
	}
	pthread_mutex_unlock(&st->segtab.lock);
	if (p.out == SEG_NONE) {
		drop_owners(&p, 0);
		rc = kvf_fail(KVF_ENOSPC, "cleaner: no free segment on stripe %u to copy into", s);
		goto out;
	}
	rc = commit_pass(&p);
	if (rc == KVF_OK)
		*freed = (int)p.n_victims - (p.n_pages ? 1 : 0);
	drop_owners(&p, 0);
out:
	kvf_free(skip);
	kvf_free(p.buf);
	kvf_free(p.vbuf);
	kvf_free(p.entries);
	kvf_free(p.runs);
	kvf_free(p.owners);
	kvf_free(p.victims);
	return rc;
}

/* short_of - whether a stripe has fewer than want free segments beside
 * the cleaner's reserve (world lock held exclusive) */
static int short_of(kvf_store *st, uint32_t want)
{
	for (uint32_t s = 0; s < st->hdr.n_stripes; s++)
		if (st->segtab.free_count[s] < want + CLEANER_RESERVE)
			return 1;
	return 0;
}

/* pack_one - seq's small open segments go into packs, as at a sync */
static void pack_one(kvf_store *st, struct seq *seq, void *arg)
{
	kvf_status *rc = arg;

	if (*rc != KVF_OK)
		return;
	pthread_mutex_lock(&seq->lock);
	if (!seq->dead && seq->admitted && seq->ns == SEQ_NS_USER)
		*rc = seq_pack_small(st, seq);
	pthread_mutex_unlock(&seq->lock);
}

/* pack_open - the segments that short sequences hold open between syncs
 * (a page or two in each) go into packs and come back free: thousands of
 * such sequences would fill a store's segments with next to nothing in
 * them.  Only once want segments were opened since the last sweep: what
 * that one left open stays so (more than half full, or not movable), and
 * a sweep blocks every call while it writes, so a store that runs short
 * for long-lived sequences does not sweep at each segment they open.
 * Caller holds dur.lock and the world lock exclusive. */
static kvf_status pack_open(kvf_store *st, uint32_t want, int *progress)
{
	uint32_t before = st->segtab.n_free;
	kvf_status rc = KVF_OK, frc, prc;
	uint64_t opened;

	pthread_mutex_lock(&st->segtab.lock);
	opened = st->segtab.n_opened;
	pthread_mutex_unlock(&st->segtab.lock);
	if (opened - st->cleaner.packed_at < want)
		return KVF_OK;
	frc = seq_foreach_created(st, pack_one, &rc);
	if (frc == KVF_OK) /* else nothing was looked at: try again */
		st->cleaner.packed_at = opened;
	prc = openseg_pack_end(st); /* whatever happened: entries point there */
	if (rc == KVF_OK)
		rc = frc == KVF_ENOMEM ? KVF_OK : frc; /* then nothing packed */
	if (rc == KVF_OK || prc == KVF_EFATAL)
		rc = prc;
	if (st->segtab.n_free > before)
		*progress = 1;
	return rc;
}

kvf_status cleaner_run(kvf_store *st, uint32_t want)
{
	struct catalog_batch *b;
	int progress = 0, enough = 1;
	kvf_status rc = KVF_OK;

	pthread_mutex_lock(&st->dur.lock);
	pthread_rwlock_wrlock(&st->world);
	/* segment states and references settle once the writer is idle */
	writer_wait_all(st);
	/* dying segments only wait for a durable point */
	if (st->segtab.n_dying > 0 && (b = catalog_batch_new()) != NULL) {
		uint32_t before = st->segtab.n_free;

		rc = store_durable_point(st, b, 0);
		catalog_batch_free(b);
		progress = st->segtab.n_free > before;
	}
	/* open segments before sealed ones: a pack takes a few pages of
	 * each, cleaning copies every live page of its victims */
	if (rc == KVF_OK && short_of(st, want))
		rc = pack_open(st, want, &progress);
	for (uint32_t s = 0; s < st->hdr.n_stripes && rc == KVF_OK; s++) {
		int freed = 1;

		while (rc == KVF_OK && freed > 0 &&
		       st->segtab.free_count[s] < want + CLEANER_RESERVE) {
			rc = clean_stripe(st, s, &freed);
			if (freed > 0)
				progress = 1;
		}
	}
	/* the segments may be free already (another cleaner run, or the
	 * durable point above): then there is nothing to do */
	for (uint32_t s = 0; s < st->hdr.n_stripes; s++)
		enough = enough && st->segtab.free_count[s] >= want + CLEANER_RESERVE;
	pthread_rwlock_unlock(&st->world);
	pthread_mutex_unlock(&st->dur.lock);
	if (rc == KVF_ENOSPC)
		rc = KVF_OK; /* ran out of room to copy: report by progress */
	if (rc == KVF_OK && !progress && !enough)
		return kvf_fail(KVF_ENOSPC,
				"cleaner: no segment to free (live data fills the store)");
	return rc;
}

/* evict_for_room - evict down to evict_low, and at least want segments a
 * stripe of pages; whether anything went */
static int evict_for_room(kvf_store *st, uint32_t want, uint64_t keep)
{
	uint64_t pages = (uint64_t)want * st->hdr.n_stripes * st->data_per_seg;
	uint64_t over = evict_pages_over_low(st);

	return evict_run(st, st->opts.evict_policy, over > pages ? over : pages,
			 KVF_EVICTED_FULL, keep) > 0;
}

int cleaner_make_room(kvf_store *st, int attempt, uint32_t want, uint64_t keep,
		      const char *what, kvf_status *rc)
{
	kvf_status crc = KVF_ENOSPC;

	if (*rc != KVF_ENOSPC)
		return 0;
	if (seg_fs_full_take())
		return 0; /* the file system is full: the message says so */
	if (attempt < CLEANER_TRIES && (crc = cleaner_run(st, want)) == KVF_OK)
		return 1;
	/* cleaning alone gives no room: evict, then reclaim (what this
	 * call evicted, or what another thread's eviction left dying).  A
	 * round that drops sequences may always go again, as there are
	 * finitely many; one that drops none, only a few times */
	if (crc == KVF_ENOSPC && !st->read_only &&
	    (st->opts.evict_policy != KVF_EVICT_NONE ||
	     prefix_cached_count(st) > 0)) { /* the cache gives way always */
		int evicted = evict_for_room(st, want, keep);

		crc = cleaner_run(st, want);
		if (evicted && (crc == KVF_OK || crc == KVF_ENOSPC))
			return 1;
		if (crc == KVF_OK && attempt < EVICT_TRIES)
			return 1;
		if (crc == KVF_OK)
			crc = KVF_ENOSPC; /* free segments, yet not enough for
					   * this call */
	}
	if (crc != KVF_ENOSPC) {
		*rc = crc;
		return 0;
	}
	*rc = kvf_fail(KVF_ENOSPC,
		       "%s: the store is full of live data (%u segments; this needs %u free on a stripe, and cleaning freed none%s); free sequences or optimizers and retry",
		       what, st->n_segments, want,
		       st->opts.evict_policy != KVF_EVICT_NONE
			       ? ", and eviction gave too little back: what is left is pinned, or shares all its pages"
			       : "");
	return 0;
}

/* ---- background thread -------------------------------------------------- */

static uint32_t low_watermark(kvf_store *st)
{
	uint32_t w = (uint32_t)(st->hdr.segs_per_stripe / 10);

	return (w > 2 ? w : 2) + CLEANER_RESERVE;
}

static int below_low(kvf_store *st)
{
	int low = 0;

	pthread_mutex_lock(&st->segtab.lock);
	for (uint32_t s = 0; s < st->hdr.n_stripes; s++)
		if (st->segtab.free_count[s] < low_watermark(st))
			low = 1;
	pthread_mutex_unlock(&st->segtab.lock);
	return low;
}

static void *cleaner_main(void *arg)
{
	kvf_store *st = arg;

	while (wake_wait(&st->cleaner.bell, 1)) {
		if (store_failed(st))
			continue;
		if (evict_over_high(st) &&
		    evict_run(st, st->opts.evict_policy, 0, KVF_EVICTED_WATERMARK,
			      KVF_SEQ_NONE) > 0)
			(void)cleaner_run(st, 2 * low_watermark(st));
		else if (below_low(st))
			(void)cleaner_run(st, 2 * low_watermark(st));
	}
	return NULL;
}

kvf_status cleaner_start(kvf_store *st)
{
	wake_init(&st->cleaner.bell);
	if (pthread_create(&st->cleaner.thread, NULL, cleaner_main, st) != 0) {
		wake_destroy(&st->cleaner.bell);
		return kvf_fail(KVF_ENOMEM, "kvf_open: cannot start the cleaner thread");
	}
	st->cleaner.running = 1;
	return KVF_OK;
}

void cleaner_stop(kvf_store *st)
{
	if (!st->cleaner.running)
		return;
	wake_stop(&st->cleaner.bell);
	pthread_join(st->cleaner.thread, NULL);
	wake_destroy(&st->cleaner.bell);
	st->cleaner.running = 0;
}
