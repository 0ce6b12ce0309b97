/*
 * seq.c - the sequence table, streams, and the public sequence calls
 * (kvf_seq_create, kvf_seq_fork, kvf_seq_free, kvf_seq_len).
 *
 * The table is open addressing with linear probing over ids, guarded by
 * seq_table_lock; deletions re-insert the rest of their cluster, so no
 * tombstones are needed.
 *
 * Stripe placement: group g of a stream goes to stripe
 * (g + stream offset) % n_stripes, so consecutive groups of one head land
 * on consecutive stripes and a head's read fans out over all of them; the
 * offset spreads the heads' first groups too.
 */
#include "engine/seq.h"

#include <string.h>

#include "api/alloc.h"
#include "api/status.h"
#include "engine/append.h"
#include "engine/readpath.h"
#include "engine/segment.h"
#include "engine/writer.h"

static uint64_t hash_id(uint64_t id)
{
	id ^= id >> 33;
	id *= 0xff51afd7ed558ccdull;
	id ^= id >> 33;
	return id;
}

kvf_status seq_table_init(kvf_store *st)
{
	st->seq_table_cap = 64;
	st->seq_table = kvf_calloc(st->seq_table_cap, sizeof(*st->seq_table));
	if (st->seq_table == NULL)
		return kvf_fail(KVF_ENOMEM, "kvf_open: out of memory");
	return KVF_OK;
}

void seq_table_free(kvf_store *st)
{
	if (st->seq_table == NULL)
		return;
	for (uint32_t i = 0; i < st->seq_table_cap; i++)
		if (st->seq_table[i])
			seq_destroy(st, st->seq_table[i]);
	kvf_free(st->seq_table);
	st->seq_table = NULL;
	st->n_seqs = 0;
}

/* slot_of - the table slot holding (ns, id), or the empty slot where it
 * goes */
static uint32_t slot_of(struct seq **tab, uint32_t cap, uint32_t ns,
			uint64_t id)
{
	uint32_t i = (uint32_t)hash_id(id ^ ((uint64_t)ns << 61)) & (cap - 1);

	while (tab[i] && (tab[i]->id != id || tab[i]->ns != ns))
		i = (i + 1) & (cap - 1);
	return i;
}

struct seq *seq_get(kvf_store *st, uint64_t id)
{
	return seq_get_ns(st, SEQ_NS_USER, id);
}

struct seq *seq_get_ns(kvf_store *st, uint32_t ns, uint64_t id)
{
	struct seq *seq;

	pthread_rwlock_rdlock(&st->seq_table_lock);
	seq = st->seq_table[slot_of(st->seq_table, st->seq_table_cap, ns, id)];
	if (seq)
		atomic_fetch_add(&seq->refs, 1);
	pthread_rwlock_unlock(&st->seq_table_lock);
	return seq;
}

void seq_put(kvf_store *st, struct seq *seq)
{
	if (seq && atomic_fetch_sub(&seq->refs, 1) == 1)
		seq_destroy(st, seq);
}

kvf_status seq_get_locked(kvf_store *st, const char *call, uint64_t id,
			  struct seq **out)
{
	struct seq *seq = seq_get(st, id);

	if (seq) {
		pthread_mutex_lock(&seq->lock);
		if (!seq->dead) {
			*out = seq;
			return KVF_OK;
		}
		pthread_mutex_unlock(&seq->lock);
		seq_put(st, seq);
	}
	return kvf_fail(KVF_ENOENT, "%s: sequence %llu does not exist", call,
			(unsigned long long)id);
}

void seq_unlock_put(kvf_store *st, struct seq *seq)
{
	pthread_mutex_unlock(&seq->lock);
	seq_put(st, seq);
}

uint32_t seq_n_kv_streams(kvf_store *st)
{
	return st->hdr.n_layers * 2 * st->hdr.n_kv_heads;
}

uint32_t seq_n_x_streams(kvf_store *st)
{
	return st->hdr.n_layers * st->hdr.n_q_heads;
}

struct seq *seq_alloc(kvf_store *st, uint64_t id)
{
	struct seq *seq = kvf_calloc(1, sizeof(*seq));
	uint32_t nl = st->hdr.n_layers;

	if (seq == NULL)
		return NULL;
	seq->id = id;
	seq->family = id;
	seq->parent = SEQ_NO_PARENT;
	atomic_init(&seq->refs, 1);
	pthread_mutex_init(&seq->lock, NULL);
	seq->len = kvf_calloc(nl, sizeof(uint64_t));
	seq->x_len = kvf_calloc(nl, sizeof(uint64_t));
	seq->kv = kvf_calloc(seq_n_kv_streams(st), sizeof(struct stream));
	seq->open = kvf_calloc(st->hdr.n_stripes, sizeof(struct open_seg));
	seq->reserved = kvf_calloc(st->hdr.n_stripes, sizeof(uint32_t));
	if (!seq->len || !seq->x_len || !seq->kv || !seq->open ||
	    !seq->reserved) {
		seq_destroy(st, seq);
		return NULL;
	}
	for (uint32_t s = 0; s < st->hdr.n_stripes; s++)
		seq->open[s].segid = SEG_NONE;
	return seq;
}

static void streams_free(struct stream *s, uint32_t n)
{
	if (s == NULL)
		return;
	for (uint32_t i = 0; i < n; i++) {
		kvf_free(s[i].pages);
		kvf_free(s[i].gbuf);
	}
	kvf_free(s);
}

void seq_destroy(kvf_store *st, struct seq *seq)
{
	if (seq->open) {
		for (uint32_t s = 0; s < st->hdr.n_stripes; s++)
			segbuf_put(st, seq->open[s].sb);
		kvf_free(seq->open);
	}
	/* the writer is done with every job by the time a sequence goes */
	while (seq->jobs) {
		struct flush_job *j = seq->jobs;

		seq->jobs = j->seq_next;
		job_free(st, j);
	}
	streams_free(seq->kv, seq_n_kv_streams(st));
	streams_free(seq->x, seq_n_x_streams(st));
	streams_free(seq->kt, seq_n_kt_streams(st));
	streams_free(seq->opt, OPT_STREAMS);
	if (seq->h2o)
		for (uint32_t i = 0; i < st->hdr.n_layers * st->hdr.n_kv_heads; i++)
			kvf_free(seq->h2o[i].score);
	kvf_free(seq->h2o);
	kvf_free(seq->vbar);
	kvf_free(seq->vbar_n);
	kvf_free(seq->len);
	kvf_free(seq->x_len);
	kvf_free(seq->reserved);
	pthread_mutex_destroy(&seq->lock);
	kvf_free(seq);
}

/* table_grow - double the table; caller holds seq_table_lock for writing */
static kvf_status table_grow(kvf_store *st)
{
	uint32_t cap = st->seq_table_cap * 2;
	struct seq **tab = kvf_calloc(cap, sizeof(*tab));

	if (tab == NULL)
		return kvf_fail(KVF_ENOMEM, "out of memory for the sequence table");
	for (uint32_t i = 0; i < st->seq_table_cap; i++)
		if (st->seq_table[i])
			tab[slot_of(tab, cap, st->seq_table[i]->ns,
				    st->seq_table[i]->id)] =
				st->seq_table[i];
	kvf_free(st->seq_table);
	st->seq_table = tab;
	st->seq_table_cap = cap;
	return KVF_OK;
}

kvf_status seq_insert(kvf_store *st, struct seq *seq)
{
	kvf_status rc = KVF_OK;
	uint32_t i;

	pthread_rwlock_wrlock(&st->seq_table_lock);
	i = slot_of(st->seq_table, st->seq_table_cap, seq->ns, seq->id);
	if (st->seq_table[i]) {
		rc = kvf_fail(KVF_EEXIST, "sequence %llu exists already",
			      (unsigned long long)seq->id);
		goto out;
	}
	if ((st->n_seqs + 1) * 4 > st->seq_table_cap * 3) {
		if ((rc = table_grow(st)) != KVF_OK)
			goto out;
		i = slot_of(st->seq_table, st->seq_table_cap, seq->ns, seq->id);
	}
	st->seq_table[i] = seq;
	st->n_seqs++;
out:
	pthread_rwlock_unlock(&st->seq_table_lock);
	return rc;
}

/* table_remove - take seq out of the table; the table's reference passes
 * to the caller */
static void table_remove(kvf_store *st, struct seq *seq)
{
	uint32_t cap, i, j;

	pthread_rwlock_wrlock(&st->seq_table_lock);
	cap = st->seq_table_cap;
	i = slot_of(st->seq_table, cap, seq->ns, seq->id);
	if (st->seq_table[i] == seq) {
		st->seq_table[i] = NULL;
		st->n_seqs--;
		/* re-place the rest of the cluster */
		for (j = (i + 1) & (cap - 1); st->seq_table[j];
		     j = (j + 1) & (cap - 1)) {
			struct seq *s = st->seq_table[j];

			st->seq_table[j] = NULL;
			st->seq_table[slot_of(st->seq_table, cap, s->ns, s->id)] = s;
		}
	}
	pthread_rwlock_unlock(&st->seq_table_lock);
}

kvf_status seq_foreach(kvf_store *st,
		       void (*fn)(kvf_store *, struct seq *, void *), void *arg)
{
	struct seq **list;
	uint32_t n = 0;

	pthread_rwlock_rdlock(&st->seq_table_lock);
	list = kvf_malloc((size_t)(st->n_seqs ? st->n_seqs : 1) * sizeof(*list));
	if (list)
		for (uint32_t i = 0; i < st->seq_table_cap; i++)
			if (st->seq_table[i]) {
				atomic_fetch_add(&st->seq_table[i]->refs, 1);
				list[n++] = st->seq_table[i];
			}
	pthread_rwlock_unlock(&st->seq_table_lock);
	if (list == NULL)
		return kvf_fail(KVF_ENOMEM, "out of memory for the list of sequences");
	for (uint32_t i = 0; i < n; i++) {
		fn(st, list[i], arg);
		seq_put(st, list[i]);
	}
	kvf_free(list);
	return KVF_OK;
}

uint32_t seq_count(kvf_store *st)
{
	uint32_t n = 0;

	pthread_rwlock_rdlock(&st->seq_table_lock);
	for (uint32_t i = 0; i < st->seq_table_cap; i++)
		n += st->seq_table[i] && st->seq_table[i]->ns == SEQ_NS_USER;
	pthread_rwlock_unlock(&st->seq_table_lock);
	return n;
}

struct stream *seq_kv_stream(kvf_store *st, struct seq *seq, uint32_t layer,
			     enum kv_kind kind, uint32_t head)
{
	uint32_t h = st->hdr.n_kv_heads;

	return &seq->kv[((size_t)layer * 2 + (uint32_t)kind) * h + head];
}

kvf_status seq_x_alloc(kvf_store *st, struct seq *seq)
{
	if (seq->x)
		return KVF_OK;
	seq->x = kvf_calloc(seq_n_x_streams(st), sizeof(struct stream));
	if (seq->x == NULL)
		return kvf_fail(KVF_ENOMEM, "out of memory for X streams");
	return KVF_OK;
}

struct stream *seq_x_stream(kvf_store *st, struct seq *seq, uint32_t layer,
			    uint32_t slice)
{
	return &seq->x[(size_t)layer * st->hdr.n_q_heads + slice];
}

uint32_t seq_n_kt_streams(kvf_store *st)
{
	return st->kt_dims ? st->hdr.n_layers * st->hdr.n_kv_heads : 0;
}

uint32_t seq_n_streams(kvf_store *st)
{
	return seq_n_kv_streams(st) + seq_n_x_streams(st) + seq_n_kt_streams(st) +
	       OPT_STREAMS;
}

struct stream *seq_stream_at(kvf_store *st, struct seq *seq, uint32_t i,
			     uint32_t *sid)
{
	uint32_t nkv = seq_n_kv_streams(st), h = st->hdr.n_kv_heads;
	uint32_t q = st->hdr.n_q_heads;

	if (i < nkv) {
		uint32_t layer = i / (2 * h), kind = (i / h) % 2, head = i % h;

		*sid = stream_id(layer, (enum kv_kind)kind, head);
		return &seq->kv[i];
	}
	i -= nkv;
	if (i < seq_n_x_streams(st)) {
		*sid = stream_id(i / q, KIND_X, i % q);
		return seq->x ? &seq->x[i] : NULL;
	}
	i -= seq_n_x_streams(st);
	if (i < seq_n_kt_streams(st)) {
		*sid = stream_id(i / h, KIND_KT, i % h);
		return seq->kt ? &seq->kt[i] : NULL;
	}
	i -= seq_n_kt_streams(st);
	*sid = stream_id(0, KIND_OPT, i);
	return seq->opt ? &seq->opt[i] : NULL;
}

struct stream *seq_stream_of(kvf_store *st, struct seq *seq, uint32_t sid)
{
	uint32_t layer = stream_layer(sid), head = stream_head(sid);
	enum kv_kind kind = stream_kind(sid);

	if (layer >= st->hdr.n_layers)
		return NULL;
	switch (kind) {
	case KIND_K:
	case KIND_V:
		return head < st->hdr.n_kv_heads
			       ? seq_kv_stream(st, seq, layer, kind, head) : NULL;
	case KIND_X:
		return seq->x && head < st->hdr.n_q_heads
			       ? seq_x_stream(st, seq, layer, head) : NULL;
	case KIND_KT:
		return seq->kt && head < st->hdr.n_kv_heads
			       ? &seq->kt[(size_t)layer * st->hdr.n_kv_heads + head]
			       : NULL;
	case KIND_OPT:
		return seq->opt && layer == 0 && head < OPT_STREAMS
			       ? &seq->opt[head] : NULL;
	default:
		return NULL;
	}
}

uint64_t seq_stream_groups(kvf_store *st, struct seq *seq, uint32_t sid)
{
	enum kv_kind kind = stream_kind(sid);
	uint64_t tokens = seq_tokens(seq, kind, stream_layer(sid));

	if (kind == KIND_KT)
		return tokens / st->kt_tokens * st->kt_groups;
	if (kind == KIND_OPT) /* only the committed generation counts */
		return stream_head(sid) % 2 == seq->opt_gen ? seq->opt_chunks : 0;
	return (tokens + st->group_tokens - 1) / st->group_tokens;
}

uint64_t seq_tokens(struct seq *seq, enum kv_kind kind, uint32_t layer)
{
	return kind == KIND_X ? seq->x_len[layer] : seq->len[layer];
}

kvf_status seq_h2o_alloc(kvf_store *st, struct seq *seq)
{
	if (seq->h2o)
		return KVF_OK;
	seq->h2o = kvf_calloc((size_t)st->hdr.n_layers * st->hdr.n_kv_heads,
			      sizeof(*seq->h2o));
	if (seq->h2o == NULL)
		return kvf_fail(KVF_ENOMEM, "out of memory for H2O scores");
	return KVF_OK;
}

kvf_status seq_vbar_alloc(kvf_store *st, struct seq *seq)
{
	size_t lh = (size_t)st->hdr.n_layers * st->hdr.n_kv_heads;

	if (seq->vbar)
		return KVF_OK;
	seq->vbar = kvf_calloc(lh * st->hdr.head_dim, sizeof(float));
	seq->vbar_n = kvf_calloc(lh, sizeof(uint64_t));
	if (seq->vbar == NULL || seq->vbar_n == NULL) {
		kvf_free(seq->vbar);
		kvf_free(seq->vbar_n);
		seq->vbar = NULL;
		seq->vbar_n = NULL;
		return kvf_fail(KVF_ENOMEM, "out of memory for the means of V");
	}
	return KVF_OK;
}

kvf_status seq_kt_alloc(kvf_store *st, struct seq *seq)
{
	if (seq->kt || st->kt_dims == 0)
		return KVF_OK;
	seq->kt = kvf_calloc(seq_n_kt_streams(st), sizeof(struct stream));
	if (seq->kt == NULL)
		return kvf_fail(KVF_ENOMEM, "out of memory for K^T streams");
	return KVF_OK;
}

kvf_status stream_reserve(struct stream *s, uint64_t n_groups)
{
	unsigned char *p;
	uint64_t cap;

	if (n_groups <= s->n_alloc)
		return KVF_OK;
	if (n_groups > UINT32_MAX - 1)
		return kvf_fail(KVF_ERANGE, "%llu token groups is past the limit of one stream",
				(unsigned long long)n_groups);
	/* grow by half: a stream's index is most of the store's memory */
	cap = s->n_alloc ? (uint64_t)s->n_alloc + s->n_alloc / 2 : 16;
	if (cap < n_groups)
		cap = n_groups;
	if (cap > UINT32_MAX - 1)
		cap = UINT32_MAX - 1;
	p = kvf_realloc(s->pages, cap * PAGE_REF_BYTES);
	if (p == NULL)
		return kvf_fail(KVF_ENOMEM, "out of memory for the index of a stream");
	memset(p + (size_t)s->n_alloc * PAGE_REF_BYTES, 0xff, /* ADDR_NONE */
	       (size_t)(cap - s->n_alloc) * PAGE_REF_BYTES);
	s->pages = p;
	s->n_alloc = (uint32_t)cap;
	return KVF_OK;
}

uint32_t stream_stripe(kvf_store *st, uint32_t sid, uint64_t g)
{
	uint32_t off = stream_head(sid) * 2 + (uint32_t)stream_kind(sid) +
		       stream_layer(sid);

	return (uint32_t)((g + off) % st->hdr.n_stripes);
}

kvf_status seq_record(kvf_store *st, struct seq *seq, struct catalog_batch *b)
{
	uint32_t nl = st->hdr.n_layers;
	size_t len = sizeof(struct meta_seq) + 2 * (size_t)nl * sizeof(uint64_t);
	unsigned char *val = kvf_malloc(len);
	struct meta_seq m = { .create_seqno = seq->create_seqno,
			      .family = seq->family, .parent = seq->parent,
			      .n_layers = nl };
	unsigned char key[9];

	if (val == NULL)
		return kvf_fail(KVF_ENOMEM, "out of memory for a sequence record");
	memcpy(val, &m, sizeof(m));
	memcpy(val + sizeof(m), seq->len, nl * sizeof(uint64_t));
	memcpy(val + sizeof(m) + nl * sizeof(uint64_t), seq->x_len,
	       nl * sizeof(uint64_t));
	meta_key_u64(key, seq->ns == SEQ_NS_OPT ? META_TAG_OPT_SEQ : META_TAG_SEQ,
		     seq->id);
	catalog_batch_put(b, key, sizeof(key), val, len);
	kvf_free(val);
	return KVF_OK;
}

kvf_status seq_vbar_record(kvf_store *st, struct seq *seq,
			   struct catalog_batch *b)
{
	size_t lh = (size_t)st->hdr.n_layers * st->hdr.n_kv_heads;
	size_t row = sizeof(uint64_t) + (size_t)st->hdr.head_dim * sizeof(float);
	unsigned char *val, key[9];

	if (seq->vbar == NULL || seq->vbar_changes == seq->vbar_synced)
		return KVF_OK;
	/* the record only saves reading V again: without memory, skip it */
	if ((val = kvf_malloc(lh * row)) == NULL)
		return KVF_OK;
	for (size_t i = 0; i < lh; i++) {
		memcpy(val + i * row, &seq->vbar_n[i], sizeof(uint64_t));
		memcpy(val + i * row + sizeof(uint64_t),
		       seq->vbar + i * st->hdr.head_dim, row - sizeof(uint64_t));
	}
	meta_key_u64(key, META_TAG_VBAR, seq->id);
	catalog_batch_put(b, key, sizeof(key), val, lh * row);
	kvf_free(val);
	/* counts as written only once the batch commits (sync_done) */
	seq->vbar_capture = seq->vbar_changes;
	seq->vbar_capture_gen = st->sync_gen;
	return KVF_OK;
}

kvf_status seq_vbar_load(kvf_store *st, uint64_t id, const void *val,
			 size_t vlen)
{
	size_t lh = (size_t)st->hdr.n_layers * st->hdr.n_kv_heads;
	size_t row = sizeof(uint64_t) + (size_t)st->hdr.head_dim * sizeof(float);
	const unsigned char *v = val;
	struct seq *seq;
	kvf_status rc;

	if (vlen != lh * row)
		return kvf_fail(KVF_ECORRUPT,
				"kvf_open: the means of V of sequence %llu are %zu bytes, not %zu",
				(unsigned long long)id, vlen, lh * row);
	if ((seq = seq_get_ns(st, SEQ_NS_USER, id)) == NULL)
		return KVF_OK; /* freed since */
	if ((rc = seq_vbar_alloc(st, seq)) == KVF_OK)
		for (size_t i = 0; i < lh; i++) {
			memcpy(&seq->vbar_n[i], v + i * row, sizeof(uint64_t));
			memcpy(seq->vbar + i * st->hdr.head_dim,
			       v + i * row + sizeof(uint64_t), row - sizeof(uint64_t));
			/* a mean of more tokens than survived is of no use */
			if (seq->vbar_n[i] > seq->len[i / st->hdr.n_kv_heads])
				seq->vbar_n[i] = 0;
		}
	seq_put(st, seq);
	return rc;
}

/* ---- public calls ------------------------------------------------------ */

/* writable - the checks every call that changes the store makes first */
static kvf_status writable(kvf_store *st, const char *call)
{
	kvf_status rc;

	if (st == NULL)
		return kvf_fail(KVF_EINVAL, "%s: store is NULL", call);
	if ((rc = store_check(st, call)) != KVF_OK)
		return rc;
	if (st->read_only)
		return kvf_fail(KVF_ENOTSUP, "%s: the store %s is open read-only",
				call, st->dir);
	return KVF_OK;
}

/* commit_one - commit a batch holding seq's record (and ref) changes */
static kvf_status commit_batch(kvf_store *st, struct catalog_batch *b,
			       const char *call)
{
	kvf_status rc = catalog_commit(st->cat, b, 0);

	if (rc != KVF_OK)
		return store_set_fatal(st, rc, call);
	return KVF_OK;
}

kvf_status kvf_seq_create(kvf_store *st, uint64_t id)
{
	const char *call = "kvf_seq_create";
	struct catalog_batch *b;
	struct seq *seq, *old;
	kvf_status rc;

	if ((rc = writable(st, call)) != KVF_OK)
		return rc;
	if (id == SEQ_NO_PARENT)
		return kvf_fail(KVF_EINVAL, "%s: sequence id %llu is reserved",
				call, (unsigned long long)id);
	pthread_rwlock_rdlock(&st->world);
	if ((old = seq_get(st, id)) != NULL) {
		seq_put(st, old);
		rc = kvf_fail(KVF_EEXIST, "%s: sequence %llu exists already",
			      call, (unsigned long long)id);
		goto out;
	}
	seq = seq_alloc(st, id);
	b = catalog_batch_new();
	if (seq == NULL || b == NULL) {
		if (seq)
			seq_destroy(st, seq);
		catalog_batch_free(b);
		rc = kvf_fail(KVF_ENOMEM, "%s: out of memory", call);
		goto out;
	}
	seq->create_seqno = atomic_fetch_add(&st->next_seqno, 1);
	if ((rc = seq_record(st, seq, b)) != KVF_OK ||
	    (rc = seq_insert(st, seq)) != KVF_OK) {
		catalog_batch_free(b);
		seq_destroy(st, seq);
		if (rc == KVF_EEXIST) /* created by another thread meanwhile */
			rc = kvf_fail(KVF_EEXIST, "%s: sequence %llu exists already",
				      call, (unsigned long long)id);
		goto out;
	}
	rc = commit_batch(st, b, call);
	catalog_batch_free(b);
out:
	pthread_rwlock_unlock(&st->world);
	return rc;
}

static void drop_refs(kvf_store *st, struct seq *seq);

void seq_remove(kvf_store *st, struct seq *seq)
{
	table_remove(st, seq);
	seq_put(st, seq);
}

void seq_drop_all(kvf_store *st, struct seq *seq)
{
	(void)seq_jobs_reap(st, seq, 1); /* every page committed first */
	drop_refs(st, seq);
}

/* drop_refs - give up every page reference of seq's index (at free) */
static void drop_refs(kvf_store *st, struct seq *seq)
{
	uint32_t n = seq_n_streams(st);

	for (uint32_t i = 0; i < n; i++) {
		uint32_t sid;
		struct stream *s = seq_stream_at(st, seq, i, &sid);

		if (s == NULL)
			continue;
		for (uint32_t g = 0; g < s->n_groups; g++) {
			uint32_t a = stream_page(s, g).addr;

			if (a != ADDR_NONE && openseg_page(st, seq, a) == NULL)
				seg_ref_dec(st, a);
		}
	}
	openseg_release(st, seq);
}

kvf_status kvf_seq_free(kvf_store *st, uint64_t id)
{
	const char *call = "kvf_seq_free";
	struct catalog_batch *b;
	unsigned char key[9];
	struct seq *seq;
	kvf_status rc;

	if ((rc = writable(st, call)) != KVF_OK)
		return rc;
	/* sync_lock first: a sync in progress must not write back the
	 * record of a sequence freed after it captured it */
	pthread_mutex_lock(&st->sync_lock);
	pthread_rwlock_rdlock(&st->world);
	if ((rc = seq_get_locked(st, call, id, &seq)) != KVF_OK)
		goto out;
	/* every page must be committed before its reference is dropped */
	if ((rc = seq_jobs_reap(st, seq, 1)) != KVF_OK) {
		seq_unlock_put(st, seq);
		goto out;
	}
	b = catalog_batch_new();
	if (b == NULL) {
		seq_unlock_put(st, seq);
		rc = kvf_fail(KVF_ENOMEM, "%s: out of memory", call);
		goto out;
	}
	meta_key_u64(key, META_TAG_SEQ, id);
	catalog_batch_delete(b, key, sizeof(key));
	if (seq->vbar) {
		meta_key_u64(key, META_TAG_VBAR, id);
		catalog_batch_delete(b, key, sizeof(key));
	}
	if (seq->has_ref_record) {
		meta_key_u64(key, META_TAG_REF, id);
		catalog_batch_delete(b, key, sizeof(key));
	}
	rc = commit_batch(st, b, call);
	catalog_batch_free(b);
	if (rc == KVF_OK) {
		seq->dead = 1;
		table_remove(st, seq);
		drop_refs(st, seq);
		pthread_mutex_unlock(&seq->lock);
		seq_put(st, seq); /* the table's reference */
		seq_put(st, seq); /* ours */
	} else {
		seq_unlock_put(st, seq);
	}
out:
	pthread_rwlock_unlock(&st->world);
	pthread_mutex_unlock(&st->sync_lock);
	return rc;
}

kvf_status kvf_seq_len(kvf_store *st, uint64_t id, uint32_t layer,
		       uint64_t *n_tokens)
{
	const char *call = "kvf_seq_len";
	struct seq *seq;
	kvf_status rc;

	if (st == NULL || n_tokens == NULL)
		return kvf_fail(KVF_EINVAL, "%s: %s is NULL", call,
				st ? "n_tokens" : "store");
	if ((rc = store_check(st, call)) != KVF_OK)
		return rc;
	if (layer >= st->hdr.n_layers)
		return kvf_fail(KVF_ERANGE, "%s: layer %u out of range (store has %u layers)",
				call, layer, st->hdr.n_layers);
	if ((rc = seq_get_locked(st, call, id, &seq)) != KVF_OK)
		return rc;
	*n_tokens = seq->len[layer];
	seq_unlock_put(st, seq);
	return KVF_OK;
}

/* fork_stream - share parent stream ps's full groups below n_tokens with
 * cs, copy the partial tail group; add the shared entries to refs */
static kvf_status fork_stream(kvf_store *st, struct seq *parent,
			      struct stream *ps, struct stream *cs,
			      uint32_t sid, uint64_t n_tokens,
			      uint64_t parent_tokens,
			      struct meta_ref_entry *refs, uint64_t *n_refs)
{
	uint32_t G = st->group_tokens, ps_bytes = st->hdr.page_size;
	uint64_t full = n_tokens / G, tail = n_tokens % G;
	kvf_status rc;

	if ((rc = stream_reserve(cs, full + 1)) != KVF_OK)
		return rc;
	for (uint64_t g = 0; g < full; g++) {
		struct page_ref r = stream_page(ps, g);

		stream_set_page(cs, g, r);
		refs[(*n_refs)++] = (struct meta_ref_entry){
			.stream = sid, .group = (uint32_t)g, .addr = r.addr };
	}
	cs->n_groups = (uint32_t)full;
	if (tail == 0)
		return KVF_OK;
	cs->gbuf = kvf_calloc(1, ps_bytes);
	if (cs->gbuf == NULL)
		return kvf_fail(KVF_ENOMEM, "out of memory");
	return stream_group_copy(st, parent, ps, parent_tokens, full, cs->gbuf);
}

/* fork_kt_stream - share the K^T entries of the blocks below n_tokens */
static kvf_status fork_kt_stream(kvf_store *st, struct stream *ps,
				 struct stream *cs, uint32_t sid,
				 uint64_t n_tokens, struct meta_ref_entry *refs,
				 uint64_t *n_refs)
{
	uint64_t n = n_tokens / st->kt_tokens * st->kt_groups;
	kvf_status rc;

	if ((rc = stream_reserve(cs, n + 1)) != KVF_OK)
		return rc;
	for (uint64_t i = 0; i < n; i++) {
		struct page_ref r = stream_page(ps, i);

		stream_set_page(cs, i, r);
		refs[(*n_refs)++] = (struct meta_ref_entry){
			.stream = sid, .group = (uint32_t)i, .addr = r.addr };
	}
	cs->n_groups = (uint32_t)n;
	return KVF_OK;
}

kvf_status kvf_seq_fork(kvf_store *st, uint64_t parent_id, uint64_t child_id,
			uint64_t n_tokens)
{
	const char *call = "kvf_seq_fork";
	unsigned char *ref_rec = NULL; /* struct meta_ref + entries */
	struct meta_ref_entry *refs = NULL;
	struct catalog_batch *b = NULL;
	struct seq *parent, *child = NULL, *old;
	uint64_t n_refs = 0, max_refs = 0;
	uint32_t G, n_streams;
	kvf_status rc;

	if ((rc = writable(st, call)) != KVF_OK)
		return rc;
	if (child_id == SEQ_NO_PARENT)
		return kvf_fail(KVF_EINVAL, "%s: sequence id %llu is reserved",
				call, (unsigned long long)child_id);
	if (child_id == parent_id)
		return kvf_fail(KVF_EINVAL, "%s: child and parent are both %llu",
				call, (unsigned long long)child_id);
	pthread_rwlock_rdlock(&st->world);
	if ((old = seq_get(st, child_id)) != NULL) {
		seq_put(st, old);
		rc = kvf_fail(KVF_EEXIST, "%s: sequence %llu exists already",
			      call, (unsigned long long)child_id);
		goto out_world;
	}
	if ((rc = seq_get_locked(st, call, parent_id, &parent)) != KVF_OK)
		goto out_world;
	for (uint32_t l = 0; l < st->hdr.n_layers; l++)
		if (parent->len[l] < n_tokens) {
			rc = kvf_fail(KVF_ERANGE,
				      "%s: n_tokens %llu past the end of sequence %llu (layer %u has %llu tokens)",
				      call, (unsigned long long)n_tokens,
				      (unsigned long long)parent_id, l,
				      (unsigned long long)parent->len[l]);
			goto out_parent;
		}
	G = st->group_tokens;
	n_streams = seq_n_streams(st);
	max_refs = (uint64_t)n_streams * (n_tokens / G + 1);
	child = seq_alloc(st, child_id);
	ref_rec = kvf_malloc(sizeof(struct meta_ref) +
			     (max_refs ? max_refs : 1) * sizeof(*refs));
	if (ref_rec)
		refs = (struct meta_ref_entry *)(ref_rec + sizeof(struct meta_ref));
	b = catalog_batch_new();
	if (child == NULL || ref_rec == NULL || b == NULL ||
	    (parent->x && seq_x_alloc(st, child) != KVF_OK) ||
	    (parent->kt && seq_kt_alloc(st, child) != KVF_OK)) {
		rc = kvf_fail(KVF_ENOMEM, "%s: out of memory", call);
		goto out_child;
	}
	/* shared pages must be on media, with committed records, before
	 * the child's record refers to them */
	if ((rc = openseg_flush_all(st, parent)) != KVF_OK)
		goto out_child;
	child->family = parent->family;
	child->parent = parent_id;
	for (uint32_t i = 0; i < n_streams; i++) {
		uint32_t sid;
		struct stream *ps = seq_stream_at(st, parent, i, &sid);
		struct stream *cs = seq_stream_at(st, child, i, &sid);
		enum kv_kind kind = stream_kind(sid);
		uint64_t ptok = seq_tokens(parent, kind, stream_layer(sid));
		uint64_t n = n_tokens < ptok ? n_tokens : ptok;

		if (ps == NULL || cs == NULL)
			continue;
		if (kind == KIND_KT) {
			/* complete blocks only: the child rebuilds its open
			 * block from its K tokens when it needs it */
			n = n / st->kt_tokens * st->kt_tokens;
			rc = fork_kt_stream(st, ps, cs, sid, n, refs, &n_refs);
			if (rc != KVF_OK)
				goto out_child;
			continue;
		}
		rc = fork_stream(st, parent, ps, cs, sid, n, ptok, refs,
				 &n_refs);
		if (rc != KVF_OK)
			goto out_child;
	}
	for (uint32_t l = 0; l < st->hdr.n_layers; l++) {
		child->len[l] = n_tokens;
		child->x_len[l] = n_tokens < parent->x_len[l] ? n_tokens
							       : parent->x_len[l];
	}
	child->create_seqno = atomic_fetch_add(&st->next_seqno, 1);
	child->has_ref_record = 1;
	{
		struct meta_ref h = { .seqno = child->create_seqno, .n = n_refs };
		unsigned char key[9];

		memcpy(ref_rec, &h, sizeof(h));
		meta_key_u64(key, META_TAG_REF, child_id);
		catalog_batch_put(b, key, sizeof(key), ref_rec,
				  sizeof(h) + n_refs * sizeof(*refs));
	}
	for (uint64_t i = 0; i < n_refs; i++)
		if (seg_ref_full(st, refs[i].addr)) {
			rc = kvf_fail(KVF_ERANGE,
				      "%s: a page of sequence %llu is already shared by %u sequences, the most a page can be",
				      call, (unsigned long long)parent_id,
				      UINT16_MAX);
			goto out_child;
		}
	if ((rc = seq_record(st, child, b)) != KVF_OK)
		goto out_child;
	/* the shared pages' references first, then the child appears in
	 * the table already locked: no call can reach it half made */
	for (uint64_t i = 0; i < n_refs; i++)
		if (seg_ref_inc(st, refs[i].addr) != KVF_OK) {
			while (i-- > 0)
				seg_ref_dec(st, refs[i].addr);
			rc = kvf_fail(KVF_ENOMEM, "%s: out of memory for page references",
				      call);
			goto out_child;
		}
	pthread_mutex_lock(&child->lock);
	if ((rc = seq_insert(st, child)) != KVF_OK) {
		pthread_mutex_unlock(&child->lock);
		for (uint64_t i = 0; i < n_refs; i++)
			seg_ref_dec(st, refs[i].addr);
		kvf_fail_wrap(rc, call);
		goto out_child;
	}
	/* the child's partial tail groups go to media before its record, so
	 * a child that a crash leaves behind is whole */
	if ((rc = seq_seal_partials(st, child)) == KVF_OK)
		rc = openseg_flush_all(st, child);
	if (rc == KVF_OK)
		rc = commit_batch(st, b, call);
	if (rc != KVF_OK && rc != KVF_EFATAL) { /* undo: the child never was */
		child->dead = 1;
		seq_drop_all(st, child);
		pthread_mutex_unlock(&child->lock);
		seq_remove(st, child);
		child = NULL;
		kvf_fail_wrap(rc, call);
		goto out_child;
	}
	pthread_mutex_unlock(&child->lock);
	child = NULL;
out_child:
	if (child)
		seq_destroy(st, child);
	kvf_free(ref_rec);
	catalog_batch_free(b);
out_parent:
	seq_unlock_put(st, parent);
out_world:
	pthread_rwlock_unlock(&st->world);
	return rc;
}
