/*
 * seq.c - the sequence table: lookups and references, a sequence's
 * memory (seq_alloc, seq_destroy), insertion and removal, and the walk
 * over every sequence.  The streams of a sequence and its catalog records
 * are in seq_stream.c; the public sequence calls (kvf_seq_create,
 * kvf_seq_fork, kvf_seq_free, kvf_seq_len) in seq_calls.c.
 *
 * The table is open addressing with linear probing over ids, guarded by
 * seqtab.lock; deletions re-insert the rest of their cluster, so no
 * tombstones are needed.
 */
#include "engine/sequences/seq_int.h"

#include <stdlib.h>
#include <string.h>

#include "api/alloc.h"
#include "api/status.h"
#include "engine/sequences/seq.h"
#include "engine/sequences/seq_stream.h"
#include "engine/base/store_state.h"
#include "engine/segments/writer.h"

static uint64_t hash_id(uint64_t id)
{
	id ^= id >> 33;
	id *= 0xff51afd7ed558ccdull;
	id ^= id >> 33;
	return id;
}

kvf_status seq_table_init(kvf_store *st)
{
	pthread_rwlock_init(&st->seqtab.lock, NULL);
	st->seqtab.cap = 64;
	st->seqtab.slot = kvf_calloc(st->seqtab.cap, sizeof(*st->seqtab.slot));
	if (st->seqtab.slot == NULL)
		return kvf_fail(KVF_ENOMEM, "kvf_open: out of memory");
	return KVF_OK;
}

void seq_table_free(kvf_store *st)
{
	if (st->seqtab.slot == NULL)
		return;
	pthread_rwlock_destroy(&st->seqtab.lock);
	for (uint32_t i = 0; i < st->seqtab.cap; i++)
		if (st->seqtab.slot[i])
			seq_destroy(st, st->seqtab.slot[i]);
	kvf_free(st->seqtab.slot);
	st->seqtab.slot = NULL;
	st->seqtab.n = 0;
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

	pthread_rwlock_rdlock(&st->seqtab.lock);
	seq = st->seqtab.slot[slot_of(st->seqtab.slot, st->seqtab.cap, ns, id)];
	if (seq)
		atomic_fetch_add(&seq->refs, 1);
	pthread_rwlock_unlock(&st->seqtab.lock);
	return seq;
}

void seq_note_use(kvf_store *st, struct seq *seq)
{
	if (seq->ns != SEQ_NS_USER)
		return;
	/* recency and frequency for eviction (engine/cleaning/evict.c) */
	atomic_store_explicit(&seq->last_use,
			      atomic_fetch_add_explicit(&st->seqtab.use_clock, 1,
							memory_order_relaxed),
			      memory_order_relaxed);
	atomic_fetch_add_explicit(&seq->uses, 1, memory_order_relaxed);
}

void seq_note_evicted(kvf_store *st, uint64_t id)
{
	pthread_rwlock_wrlock(&st->seqtab.lock);
	st->seqtab.evicted[st->seqtab.evicted_next] = id;
	st->seqtab.evicted_next = (st->seqtab.evicted_next + 1) % SEQ_EVICTED_MEMORY;
	if (st->seqtab.evicted_n < SEQ_EVICTED_MEMORY)
		st->seqtab.evicted_n++;
	pthread_rwlock_unlock(&st->seqtab.lock);
}

/* was_evicted - id is among the latest evicted (for the message only);
 * the ring's empty slots are no ids, nor KVF_SEQ_NONE (an evicted id
 * created again, seq_insert) */
static int was_evicted(kvf_store *st, uint64_t id)
{
	int found = 0;

	if (id == KVF_SEQ_NONE)
		return 0;
	pthread_rwlock_rdlock(&st->seqtab.lock);
	for (uint32_t i = 0; i < st->seqtab.evicted_n && !found; i++)
		found = st->seqtab.evicted[i] == id;
	pthread_rwlock_unlock(&st->seqtab.lock);
	return found;
}

void seq_put(kvf_store *st, struct seq *seq)
{
	if (seq && atomic_fetch_sub(&seq->refs, 1) == 1)
		seq_destroy(st, seq);
}

kvf_status seq_get_locked(kvf_store *st, const char *call, uint64_t id,
			  struct seq **out)
{
	kvf_status rc = seq_find_locked(st, call, id, out);

	if (rc == KVF_OK)
		seq_note_use(st, *out);
	return rc;
}

kvf_status seq_find_locked(kvf_store *st, const char *call, uint64_t id,
			   struct seq **out)
{
	struct seq *seq;
	kvf_status rc = seq_find_any_locked(st, call, id, &seq);

	if (rc != KVF_OK)
		return rc;
	if (!seq->cached) {
		*out = seq;
		return KVF_OK;
	}
	seq_unlock_put(st, seq);
	return kvf_fail(KVF_ENOENT,
			"%s: sequence %llu does not exist: the id names one of the store's cached prefixes (kvf_prefix_list, kvf_prefix_drop)",
			call, (unsigned long long)id);
}

kvf_status seq_find_any_locked(kvf_store *st, const char *call, uint64_t id,
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
	if (was_evicted(st, id))
		return kvf_fail(KVF_ENOENT,
				"%s: sequence %llu does not exist: it was evicted (kvf_evict_log says why)",
				call, (unsigned long long)id);
	return kvf_fail(KVF_ENOENT, "%s: sequence %llu does not exist", call,
			(unsigned long long)id);
}

void seq_unlock_put(kvf_store *st, struct seq *seq)
{
	pthread_mutex_unlock(&seq->lock);
	seq_put(st, seq);
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
	seq->admitted = 1;
	atomic_init(&seq->refs, 1);
	/* a new sequence is the most recently used */
	atomic_init(&seq->last_use, atomic_fetch_add(&st->seqtab.use_clock, 1));
	seq->use_synced = UINT64_MAX; /* no "U" record yet */
	pthread_mutex_init(&seq->lock, NULL);
	seq->len = kvf_calloc(nl, sizeof(uint64_t));
	seq->x_len = kvf_calloc(nl, sizeof(uint64_t));
	seq->rec_len = kvf_calloc(4 * (size_t)nl, sizeof(uint64_t));
	seq->kv = kvf_calloc(seq_n_kv_streams(st), sizeof(struct stream));
	seq->open = kvf_calloc(st->hdr.n_stripes, sizeof(struct open_seg));
	seq->reserved = kvf_calloc(st->hdr.n_stripes, sizeof(uint32_t));
	if (!seq->len || !seq->x_len || !seq->rec_len || !seq->kv ||
	    !seq->open || !seq->reserved) {
		seq_destroy(st, seq);
		return NULL;
	}
	for (uint32_t s = 0; s < st->hdr.n_stripes; s++)
		seq->open[s].segid = SEG_NONE;
	/* [layer][kind][head]: a codec store encodes K and V groups */
	if (st->codec != KVF_CODEC_NONE)
		for (uint32_t i = 0; i < seq_n_kv_streams(st); i++)
			seq->kv[i].enc = (uint8_t)(1 + i / st->hdr.n_kv_heads % 2);
	return seq;
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
	streams_free(st, seq->kv, seq_n_kv_streams(st));
	streams_free(st, seq->x, seq_n_x_streams(st));
	streams_free(st, seq->kt, seq_n_kt_streams(st));
	streams_free(st, seq->optim, OPTIM_STREAMS);
	if (seq->h2o)
		for (uint32_t i = 0; i < st->hdr.n_layers * st->hdr.n_kv_heads; i++)
			kvf_free(seq->h2o[i].score);
	kvf_free(seq->h2o);
	kvf_free(seq->drop);
	kvf_free(seq->vbar);
	kvf_free(seq->vbar_n);
	kvf_free(seq->len);
	kvf_free(seq->x_len);
	kvf_free(seq->rec_len);
	kvf_free(seq->reserved);
	pthread_mutex_destroy(&seq->lock);
	kvf_free(seq);
}

/* table_grow - double the table; caller holds seqtab.lock for writing */
static kvf_status table_grow(kvf_store *st)
{
	uint32_t cap = st->seqtab.cap * 2;
	struct seq **tab = kvf_calloc(cap, sizeof(*tab));

	if (tab == NULL)
		return kvf_fail(KVF_ENOMEM, "out of memory for the sequence table");
	for (uint32_t i = 0; i < st->seqtab.cap; i++)
		if (st->seqtab.slot[i])
			tab[slot_of(tab, cap, st->seqtab.slot[i]->ns,
				    st->seqtab.slot[i]->id)] =
				st->seqtab.slot[i];
	kvf_free(st->seqtab.slot);
	st->seqtab.slot = tab;
	st->seqtab.cap = cap;
	return KVF_OK;
}

kvf_status seq_insert(kvf_store *st, struct seq *seq)
{
	kvf_status rc = KVF_OK;
	uint32_t i;

	pthread_rwlock_wrlock(&st->seqtab.lock);
	i = slot_of(st->seqtab.slot, st->seqtab.cap, seq->ns, seq->id);
	if (st->seqtab.slot[i]) {
		rc = kvf_fail(KVF_EEXIST, "sequence %llu exists already",
			      (unsigned long long)seq->id);
		goto out;
	}
	if ((st->seqtab.n + 1) * 4 > st->seqtab.cap * 3) {
		if ((rc = table_grow(st)) != KVF_OK)
			goto out;
		i = slot_of(st->seqtab.slot, st->seqtab.cap, seq->ns, seq->id);
	}
	st->seqtab.slot[i] = seq;
	st->seqtab.n++;
	/* an id taken again is no longer "evicted" */
	for (uint32_t e = 0; seq->ns == SEQ_NS_USER && e < st->seqtab.evicted_n; e++)
		if (st->seqtab.evicted[e] == seq->id)
			st->seqtab.evicted[e] = KVF_SEQ_NONE;
out:
	pthread_rwlock_unlock(&st->seqtab.lock);
	return rc;
}

/* seq_table_remove - take seq out of the table; the table's reference
 * passes to the caller */
void seq_table_remove(kvf_store *st, struct seq *seq)
{
	uint32_t cap, i, j;

	pthread_rwlock_wrlock(&st->seqtab.lock);
	cap = st->seqtab.cap;
	i = slot_of(st->seqtab.slot, cap, seq->ns, seq->id);
	if (st->seqtab.slot[i] == seq) {
		st->seqtab.slot[i] = NULL;
		st->seqtab.n--;
		/* re-place the rest of the cluster */
		for (j = (i + 1) & (cap - 1); st->seqtab.slot[j];
		     j = (j + 1) & (cap - 1)) {
			struct seq *s = st->seqtab.slot[j];

			st->seqtab.slot[j] = NULL;
			st->seqtab.slot[slot_of(st->seqtab.slot, cap, s->ns, s->id)] = s;
		}
	}
	pthread_rwlock_unlock(&st->seqtab.lock);
}

static int by_creation(const void *a, const void *b)
{
	const struct seq *x = *(struct seq *const *)a, *y = *(struct seq *const *)b;

	return x->create_seqno < y->create_seqno ? -1
						 : x->create_seqno > y->create_seqno;
}

/* foreach - seq_foreach; in order of creation when `sorted` */
static kvf_status foreach(kvf_store *st,
			  void (*fn)(kvf_store *, struct seq *, void *),
			  void *arg, int sorted)
{
	struct seq **list;
	uint32_t n = 0;

	pthread_rwlock_rdlock(&st->seqtab.lock);
	list = kvf_malloc((size_t)(st->seqtab.n ? st->seqtab.n : 1) * sizeof(*list));
	if (list)
		for (uint32_t i = 0; i < st->seqtab.cap; i++)
			if (st->seqtab.slot[i]) {
				atomic_fetch_add(&st->seqtab.slot[i]->refs, 1);
				list[n++] = st->seqtab.slot[i];
			}
	pthread_rwlock_unlock(&st->seqtab.lock);
	if (list == NULL)
		return kvf_fail(KVF_ENOMEM, "out of memory for the list of sequences");
	if (sorted) /* create_seqno is fixed from creation on */
		qsort(list, n, sizeof(*list), by_creation);
	for (uint32_t i = 0; i < n; i++) {
		fn(st, list[i], arg);
		seq_put(st, list[i]);
	}
	kvf_free(list);
	return KVF_OK;
}

kvf_status seq_foreach(kvf_store *st,
		       void (*fn)(kvf_store *, struct seq *, void *), void *arg)
{
	return foreach(st, fn, arg, 0);
}

kvf_status seq_foreach_created(kvf_store *st,
			       void (*fn)(kvf_store *, struct seq *, void *),
			       void *arg)
{
	return foreach(st, fn, arg, 1);
}

uint32_t seq_count(kvf_store *st)
{
	uint32_t n = 0;

	pthread_rwlock_rdlock(&st->seqtab.lock);
	for (uint32_t i = 0; i < st->seqtab.cap; i++)
		n += st->seqtab.slot[i] && st->seqtab.slot[i]->ns == SEQ_NS_USER &&
		     !st->seqtab.slot[i]->cached;
	pthread_rwlock_unlock(&st->seqtab.lock);
	return n;
}

void seq_remove(kvf_store *st, struct seq *seq)
{
	seq_table_remove(st, seq);
	seq_put(st, seq);
}
