/*
 * prefix.c - the prefix index: chain hashes of token chunks, nodes shared
 * by the sequences that hold them, the longest stored prefix of a token
 * list, and the "T" records that make the index survive close and crash.
 *
 * The index itself is never written: at open it is rebuilt from each
 * sequence's "T" record (its token ids) and its recovered lengths, so it
 * can never name tokens the store lost.  A chunk is published only while
 * a live sequence holds its K/V; reuse is a fork from that sequence
 * (prefix_calls.c), so pages, references, recovery and the cleaner work
 * as for any fork.
 *
 * Locking: pi->lock (a leaf) around every change and walk; sequence
 * figures also need the sequence's lock, taken by the caller first.
 */
#include "engine/sequences/prefix.h"

#include <string.h>
#include <time.h>
#include <xxhash.h>

#include "api/alloc.h"
#include "api/status.h"
#include "engine/base/meta.h"
#include "engine/sequences/seq.h"
#include "engine/sequences/seq_state.h"
#include "engine/base/store_state.h"

uint64_t prefix_hash_mask = UINT64_MAX;

uint64_t prefix_chain_hash(uint64_t prev, const uint32_t *tokens, uint32_t G)
{
	return XXH3_64bits_withSeed(tokens, (size_t)G * sizeof(*tokens), prev) &
	       prefix_hash_mask;
}

static uint64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

void prefix_init(kvf_store *st)
{
	pthread_mutex_init(&st->prefix.lock, NULL);
	st->prefix.next_cached_id = PREFIX_CACHED_ID_BASE;
	st->prefix.ready = 1;
}

void prefix_seq_free(struct prefix_seq *ps)
{
	if (ps == NULL)
		return;
	kvf_free(ps->tokens);
	kvf_free(ps->nodes);
	kvf_free(ps);
}

void prefix_free(kvf_store *st)
{
	struct prefix_index *pi = &st->prefix;

	if (!pi->ready)
		return;
	for (uint32_t b = 0; b < pi->cap; b++)
		for (struct prefix_node *n = pi->bucket[b], *next; n; n = next) {
			next = n->hnext;
			kvf_free(n->holders);
			kvf_free(n);
		}
	for (struct prefix_seq *ps = pi->seqs, *next; ps; ps = next) {
		next = ps->next;
		prefix_seq_free(ps);
	}
	kvf_free(pi->bucket);
	pthread_mutex_destroy(&pi->lock);
	pi->ready = 0;
}

/* ---- nodes ---------------------------------------------------------------- */

static size_t node_size(const kvf_store *st)
{
	return sizeof(struct prefix_node) + st->group_tokens * sizeof(uint32_t);
}

/* find - the node of chunk tokens[0, G) after parent with chain hash h;
 * compares parent and tokens, never the hash alone.  pi->lock held. */
static struct prefix_node *find(kvf_store *st, uint64_t h,
				const struct prefix_node *parent,
				const uint32_t *tokens)
{
	struct prefix_index *pi = &st->prefix;

	if (pi->cap == 0)
		return NULL;
	for (struct prefix_node *n = pi->bucket[h & (pi->cap - 1)]; n;
	     n = n->hnext)
		if (n->hash == h && n->parent == parent &&
		    memcmp(n->tokens, tokens,
			   st->group_tokens * sizeof(*tokens)) == 0)
			return n;
	return NULL;
}

/* grow - double the bucket array when the nodes outnumber it */
static kvf_status grow(struct prefix_index *pi)
{
	uint32_t cap = pi->cap ? pi->cap * 2 : 256;
	struct prefix_node **nb;

	if (pi->n_nodes < pi->cap)
		return KVF_OK;
	if ((nb = kvf_calloc(cap, sizeof(*nb))) == NULL)
		return KVF_ENOMEM;
	for (uint32_t b = 0; b < pi->cap; b++)
		for (struct prefix_node *n = pi->bucket[b], *next; n; n = next) {
			next = n->hnext;
			n->hnext = nb[n->hash & (cap - 1)];
			nb[n->hash & (cap - 1)] = n;
		}
	kvf_free(pi->bucket);
	pi->node_bytes += (uint64_t)(cap - pi->cap) * sizeof(*nb);
	pi->bucket = nb;
	pi->cap = cap;
	return KVF_OK;
}

/* node_add - a new node for chunk tokens after parent; NULL if out of
 * memory.  pi->lock held. */
static struct prefix_node *node_add(kvf_store *st, uint64_t h,
				    struct prefix_node *parent,
				    const uint32_t *tokens)
{
	struct prefix_index *pi = &st->prefix;
	struct prefix_node *n, **head;

	if (grow(pi) != KVF_OK || (n = kvf_calloc(1, node_size(st))) == NULL)
		return NULL;
	n->hash = h;
	n->depth = parent ? parent->depth + 1 : 0;
	n->parent = parent;
	memcpy(n->tokens, tokens, st->group_tokens * sizeof(*tokens));
	n->hnext = pi->bucket[h & (pi->cap - 1)];
	pi->bucket[h & (pi->cap - 1)] = n;
	head = parent ? &parent->child : &pi->roots;
	n->sibling = *head;
	*head = n;
	pi->n_nodes++;
	pi->node_bytes += node_size(st);
	return n;
}

/* node_remove - unlink and free n (no holders, no children) */
static void node_remove(kvf_store *st, struct prefix_node *n)
{
	struct prefix_index *pi = &st->prefix;
	struct prefix_node **p = &pi->bucket[n->hash & (pi->cap - 1)];

	while (*p != n)
		p = &(*p)->hnext;
	*p = n->hnext;
	p = n->parent ? &n->parent->child : &pi->roots;
	while (*p != n)
		p = &(*p)->sibling;
	*p = n->sibling;
	pi->n_nodes--;
	pi->node_bytes -= node_size(st) + n->cap_holders * sizeof(uint64_t);
	kvf_free(n->holders);
	kvf_free(n);
}

/* cached_only - n is kept by cached prefixes alone */
static int cached_only(const struct prefix_node *n)
{
	return n->n_holders > 0 && n->n_holders == n->n_cached;
}

static kvf_status holder_add(struct prefix_index *pi, struct prefix_node *n,
			     uint64_t id, int cached)
{
	int was = cached_only(n);

	if (n->n_holders == n->cap_holders) {
		uint32_t cap = n->cap_holders ? n->cap_holders * 2 : 2;
		uint64_t *h = kvf_realloc(n->holders, cap * sizeof(*h));

		if (h == NULL)
			return KVF_ENOMEM;
		pi->node_bytes += (cap - n->cap_holders) * sizeof(*h);
		n->holders = h;
		n->cap_holders = cap;
	}
	n->holders[n->n_holders++] = id;
	n->n_cached += cached != 0;
	pi->cached_only += (uint64_t)cached_only(n) - (uint64_t)was;
	return KVF_OK;
}

static void holder_remove(struct prefix_index *pi, struct prefix_node *n,
			  uint64_t id, int cached)
{
	int was = cached_only(n);

	for (uint32_t i = n->n_holders; i-- > 0;)
		if (n->holders[i] == id) {
			memmove(&n->holders[i], &n->holders[i + 1],
				(n->n_holders - i - 1) * sizeof(*n->holders));
			n->n_holders--;
			n->n_cached -= cached != 0;
			break;
		}
	pi->cached_only += (uint64_t)cached_only(n) - (uint64_t)was;
}

/* ---- lookup --------------------------------------------------------------- */

/* common - how many of a[0, n) equal b[0, n) from the start */
static uint64_t common(const uint32_t *a, const uint32_t *b, uint64_t n)
{
	uint64_t i = 0;

	while (i < n && a[i] == b[i])
		i++;
	return i;
}

void prefix_lookup(kvf_store *st, const uint32_t *tokens, uint64_t n,
		   struct prefix_match *out)
{
	struct prefix_index *pi = &st->prefix;
	uint32_t G = st->group_tokens;
	struct prefix_node *at = NULL, *best = NULL;
	uint64_t h = PREFIX_SEED, c = 0, best_m = 0, t = now_ns();

	out->holder = KVF_SEQ_NONE;
	out->n_tokens = 0;
	out->from_cache = 0;
	pthread_mutex_lock(&pi->lock);
	while ((c + 1) * G <= n) {
		uint64_t h2 = prefix_chain_hash(h, tokens + c * G, G);
		struct prefix_node *next = find(st, h2, at, tokens + c * G);

		if (next == NULL)
			break;
		at = next;
		h = h2;
		c++;
	}
	/* divergence inside the next group: the children's first tokens
	 * that agree are reused too (the fork copies that partial group) */
	if (c * G < n) {
		uint64_t left = n - c * G < G ? n - c * G : G;

		for (struct prefix_node *k = at ? at->child : pi->roots; k;
		     k = k->sibling) {
			uint64_t m = common(k->tokens, tokens + c * G, left);

			if (m > best_m && k->n_holders > 0) {
				best_m = m;
				best = k;
			}
		}
	}
	if (best == NULL)
		best = at;
	if (best && best->n_holders > 0) {
		out->holder = best->holders[best->n_holders - 1];
		out->n_tokens = c * G + best_m;
		out->from_cache = cached_only(best);
		for (struct prefix_node *k = best; k; k = k->parent) {
			k->hits++;
			k->last_use_ns = t;
		}
	}
	pthread_mutex_unlock(&pi->lock);
}

void prefix_count_reuse(kvf_store *st, uint64_t n, uint64_t n_reused)
{
	struct prefix_index *pi = &st->prefix;
	uint64_t per_token = (uint64_t)st->hdr.n_layers * 2 *
			     st->hdr.n_kv_heads * st->row_bytes;

	atomic_fetch_add(&pi->lookups, 1);
	atomic_fetch_add(&pi->tokens_asked, n);
	if (n_reused == 0)
		return;
	atomic_fetch_add(&pi->hits, 1);
	atomic_fetch_add(&pi->tokens_reused, n_reused);
	atomic_fetch_add(&pi->bytes_saved, n_reused * per_token);
}

/* ---- tracked sequences ---------------------------------------------------- */

struct prefix_seq *prefix_seq_new(uint64_t id, const uint32_t *tokens,
				  uint64_t n)
{
	struct prefix_seq *ps = kvf_calloc(1, sizeof(*ps));

	if (ps == NULL)
		return NULL;
	ps->id = id;
	if (prefix_seq_grow(ps, n) != KVF_OK) {
		prefix_seq_free(ps);
		return NULL;
	}
	if (n)
		memcpy(ps->tokens, tokens, n * sizeof(*tokens));
	ps->n_tokens = n;
	return ps;
}

kvf_status prefix_seq_grow(struct prefix_seq *ps, uint64_t n)
{
	uint64_t want = ps->n_tokens + n, cap = ps->cap_tokens;
	uint32_t *t;

	if (want <= cap && cap > 0)
		return KVF_OK;
	cap = cap ? cap : 64;
	while (cap < want)
		cap *= 2;
	if ((t = kvf_realloc(ps->tokens, cap * sizeof(*t))) == NULL)
		return KVF_ENOMEM;
	ps->tokens = t;
	ps->cap_tokens = cap;
	return KVF_OK;
}

void prefix_attach(kvf_store *st, struct seq *seq, struct prefix_seq *ps)
{
	struct prefix_index *pi = &st->prefix;

	pthread_mutex_lock(&pi->lock);
	ps->prev = NULL;
	ps->next = pi->seqs;
	if (pi->seqs)
		pi->seqs->prev = ps;
	pi->seqs = ps;
	pi->node_bytes += sizeof(*ps);
	pi->n_cached_seqs += ps->cached != 0;
	pthread_mutex_unlock(&pi->lock);
	seq->prefix = ps;
	prefix_publish(st, seq);
}

void prefix_publish(kvf_store *st, struct seq *seq)
{
	struct prefix_index *pi = &st->prefix;
	struct prefix_seq *ps = seq->prefix;
	uint32_t G = st->group_tokens;
	uint64_t ready = ps ? ps->n_tokens : 0, chunks, t = now_ns();

	for (uint32_t l = 0; l < st->hdr.n_layers; l++)
		if (seq->len[l] < ready)
			ready = seq->len[l];
	chunks = ready / G;
	if (ps == NULL || chunks <= ps->n_pub)
		return;
	if (chunks > ps->cap_nodes) {
		struct prefix_node **nodes =
			kvf_realloc(ps->nodes, chunks * sizeof(*nodes));

		if (nodes == NULL)
			return;
		ps->nodes = nodes;
		ps->cap_nodes = chunks;
	}
	pthread_mutex_lock(&pi->lock);
	while (ps->n_pub < chunks) {
		uint64_t c = ps->n_pub;
		struct prefix_node *parent = c ? ps->nodes[c - 1] : NULL;
		uint64_t h = prefix_chain_hash(parent ? parent->hash : PREFIX_SEED,
					       ps->tokens + c * G, G);
		struct prefix_node *n = find(st, h, parent, ps->tokens + c * G);

		if (n == NULL &&
		    (n = node_add(st, h, parent, ps->tokens + c * G)) == NULL)
			break;
		if (holder_add(pi, n, seq->id, ps->cached) != KVF_OK) {
			if (n->n_holders == 0)
				node_remove(st, n);
			break;
		}
		n->last_use_ns = t;
		ps->nodes[ps->n_pub++] = n;
	}
	pthread_mutex_unlock(&pi->lock);
}

void prefix_forget(kvf_store *st, struct seq *seq)
{
	struct prefix_index *pi = &st->prefix;
	struct prefix_seq *ps = seq->prefix;

	if (ps == NULL)
		return;
	pthread_mutex_lock(&pi->lock);
	/* deepest first: a node left without holders has no children */
	for (uint64_t c = ps->n_pub; c-- > 0;) {
		struct prefix_node *n = ps->nodes[c];

		holder_remove(pi, n, seq->id, ps->cached);
		if (n->n_holders == 0 && n->child == NULL)
			node_remove(st, n);
	}
	if (ps->prev)
		ps->prev->next = ps->next;
	else
		pi->seqs = ps->next;
	if (ps->next)
		ps->next->prev = ps->prev;
	pi->node_bytes -= sizeof(*ps);
	pi->n_cached_seqs -= ps->cached != 0;
	pthread_mutex_unlock(&pi->lock);
	seq->prefix = NULL;
	prefix_seq_free(ps);
}

void prefix_truncate(kvf_store *st, struct seq *seq, uint64_t n_tokens)
{
	struct prefix_index *pi = &st->prefix;
	struct prefix_seq *ps = seq->prefix;
	uint64_t keep = n_tokens / st->group_tokens;

	if (ps == NULL)
		return;
	pthread_mutex_lock(&pi->lock);
	/* deepest first, as prefix_forget */
	for (; ps->n_pub > keep; ps->n_pub--) {
		struct prefix_node *n = ps->nodes[ps->n_pub - 1];

		holder_remove(pi, n, seq->id, ps->cached);
		if (n->n_holders == 0 && n->child == NULL)
			node_remove(st, n);
	}
	pthread_mutex_unlock(&pi->lock);
	if (ps->n_tokens > n_tokens)
		ps->n_tokens = n_tokens;
}

/* ---- records -------------------------------------------------------------- */

static kvf_status record(struct catalog_batch *b, uint64_t id,
			 uint64_t create_seqno, const uint32_t *tokens,
			 uint64_t n, const uint32_t *more, uint64_t n_more,
			 uint32_t flags)
{
	struct meta_tokens h = { .create_seqno = create_seqno,
				 .n = (uint32_t)(n + n_more), .flags = flags };
	size_t len = sizeof(h) + (size_t)(n + n_more) * sizeof(uint32_t);
	unsigned char key[9], *val = kvf_malloc(len);

	if (val == NULL)
		return KVF_ENOMEM;
	memcpy(val, &h, sizeof(h));
	if (n)
		memcpy(val + sizeof(h), tokens, n * sizeof(uint32_t));
	if (n_more)
		memcpy(val + sizeof(h) + n * sizeof(uint32_t), more,
		       n_more * sizeof(uint32_t));
	meta_key_u64(key, META_TAG_TOKENS, id);
	catalog_batch_put(b, key, sizeof(key), val, len);
	kvf_free(val);
	return KVF_OK;
}

kvf_status prefix_record(struct catalog_batch *b, uint64_t id,
			 uint64_t create_seqno, const uint32_t *tokens,
			 uint64_t n, const uint32_t *more, uint64_t n_more)
{
	return record(b, id, create_seqno, tokens, n, more, n_more, 0);
}

kvf_status prefix_record_cached(struct catalog_batch *b, uint64_t id,
				uint64_t create_seqno, const uint32_t *tokens,
				uint64_t n)
{
	return record(b, id, create_seqno, tokens, n, NULL, 0,
		      META_TOKENS_CACHED);
}

void prefix_record_delete(struct catalog_batch *b, uint64_t id)
{
	unsigned char key[9];

	meta_key_u64(key, META_TAG_TOKENS, id);
	catalog_batch_delete(b, key, sizeof(key));
}

/* load_one - one "T" record at open */
static int load_one(void *arg, const void *key, size_t klen, const void *val,
		    size_t vlen)
{
	kvf_store *st = arg;
	struct meta_tokens h;
	struct prefix_seq *ps;
	struct seq *seq;
	uint64_t id;

	if (klen != 9 || vlen < sizeof(h))
		return kvf_fail(KVF_ECORRUPT, "kvf_open: %s/meta: token record of %zu bytes, key of %zu (need at least %zu and 9)",
				st->dir, vlen, klen, sizeof(h));
	memcpy(&h, val, sizeof(h));
	id = meta_key_id(key, 8);
	if (h.n > PREFIX_MAX_TOKENS ||
	    vlen != sizeof(h) + (size_t)h.n * sizeof(uint32_t))
		return kvf_fail(KVF_ECORRUPT, "kvf_open: %s/meta: token record of sequence %llu has %zu bytes for %llu tokens",
				st->dir, (unsigned long long)id, vlen,
				(unsigned long long)h.n);
	if (h.flags & ~META_TOKENS_CACHED)
		return kvf_fail(KVF_ECORRUPT, "kvf_open: %s/meta: token record of sequence %llu has unknown flags 0x%x",
				st->dir, (unsigned long long)id, h.flags);
	/* a record without its sequence (or of an earlier one with the same
	 * id) names no K/V: skip it */
	if ((seq = seq_get(st, id)) == NULL)
		return KVF_OK;
	if (seq->create_seqno != h.create_seqno) {
		seq_put(st, seq);
		return KVF_OK;
	}
	ps = prefix_seq_new(id, (const uint32_t *)((const unsigned char *)val +
						   sizeof(h)),
			    h.n);
	if (ps == NULL) {
		seq_put(st, seq);
		return kvf_fail(KVF_ENOMEM, "kvf_open: out of memory for the prefix index");
	}
	ps->cached = (h.flags & META_TOKENS_CACHED) != 0;
	pthread_mutex_lock(&seq->lock);
	prefix_forget(st, seq); /* a second record for one id: the last wins */
	seq->cached = ps->cached;
	if (ps->cached && id >= st->prefix.next_cached_id)
		st->prefix.next_cached_id = id + 1;
	prefix_attach(st, seq, ps);
	pthread_mutex_unlock(&seq->lock);
	seq_put(st, seq);
	return KVF_OK;
}

kvf_status prefix_load(kvf_store *st)
{
	const unsigned char tag = META_TAG_TOKENS;

	return catalog_scan(st->cat, &tag, 1, load_one, st);
}

/* ---- figures -------------------------------------------------------------- */

void prefix_seq_figures(kvf_store *st, struct seq *seq,
			struct prefix_seq_figures *out)
{
	struct prefix_seq *ps = seq->prefix;

	memset(out, 0, sizeof(*out));
	if (ps == NULL)
		return;
	pthread_mutex_lock(&st->prefix.lock);
	out->tokens = ps->n_tokens;
	out->chunks = ps->n_pub;
	for (uint64_t c = 0; c < ps->n_pub; c++) {
		if (ps->nodes[c]->n_holders > 1) {
			out->shared_chunks++;
			out->shared_hash = ps->nodes[c]->hash;
		} else {
			out->own_chunks++;
		}
	}
	pthread_mutex_unlock(&st->prefix.lock);
}

void prefix_stats(kvf_store *st, kvf_stats *s)
{
	struct prefix_index *pi = &st->prefix;

	s->prefix_lookups = atomic_load(&pi->lookups);
	s->prefix_hits = atomic_load(&pi->hits);
	s->prefix_tokens_asked = atomic_load(&pi->tokens_asked);
	s->prefix_tokens_reused = atomic_load(&pi->tokens_reused);
	s->prefix_bytes_saved = atomic_load(&pi->bytes_saved);
	s->prefix_cache_kept = atomic_load(&pi->cache_kept);
	s->prefix_cache_dropped = atomic_load(&pi->cache_dropped);
	s->prefix_cache_hits = atomic_load(&pi->cache_hits);
	pthread_mutex_lock(&pi->lock);
	s->prefix_chunks = pi->n_nodes;
	s->prefix_cached = pi->n_cached_seqs;
	s->prefix_cached_bytes = pi->cached_only * prefix_chunk_bytes(st);
	s->index_bytes += pi->node_bytes;
	pthread_mutex_unlock(&pi->lock);
}

uint64_t prefix_chunk_bytes(const kvf_store *st)
{
	/* a chunk is one sealed group of K and one of V per layer and head:
	 * encoded on a codec store, which is what dropping it gives back */
	uint64_t kv = st->codec != KVF_CODEC_NONE
			      ? (uint64_t)st->codec_lay[0].group_bytes +
					st->codec_lay[1].group_bytes
			      : 2ull * st->group_tokens * st->row_bytes;

	return (uint64_t)st->hdr.n_layers * st->hdr.n_kv_heads * kv;
}

uint64_t prefix_cached_bytes(kvf_store *st)
{
	uint64_t n;

	pthread_mutex_lock(&st->prefix.lock);
	n = st->prefix.cached_only;
	pthread_mutex_unlock(&st->prefix.lock);
	return n * prefix_chunk_bytes(st);
}

/* cached_value - ps's figures as a cached prefix (pi->lock held) */
static void cached_value(const struct prefix_seq *ps,
			 struct prefix_cached_info *out)
{
	memset(out, 0, sizeof(*out));
	out->id = ps->id;
	out->chunks = ps->n_pub;
	/* the chunks it alone holds are a suffix (a holder of a node holds
	 * its parent); hits only fall along a chain, so the first of them
	 * has the most, and is what its chunks are worth */
	for (uint64_t c = 0; c < ps->n_pub; c++) {
		const struct prefix_node *n = ps->nodes[c];

		if (n->n_holders > 1)
			continue;
		if (out->own_chunks++ == 0) {
			out->hits = n->hits;
			out->last_use_ns = n->last_use_ns;
		}
	}
	/* another cached prefix holds its deepest chunk, so all of it */
	if (ps->n_pub > 0) {
		const struct prefix_node *d = ps->nodes[ps->n_pub - 1];

		out->covered = d->n_cached > 1;
	}
}

void prefix_cached_value(kvf_store *st, struct seq *seq,
			 struct prefix_cached_info *out)
{
	memset(out, 0, sizeof(*out));
	out->id = seq->id;
	if (seq->prefix == NULL)
		return;
	pthread_mutex_lock(&st->prefix.lock);
	cached_value(seq->prefix, out);
	pthread_mutex_unlock(&st->prefix.lock);
}

kvf_status prefix_cached_list(kvf_store *st, struct prefix_cached_info **out,
			      size_t *n)
{
	struct prefix_index *pi = &st->prefix;
	struct prefix_cached_info *v;
	size_t k = 0;

	pthread_mutex_lock(&pi->lock);
	v = kvf_calloc(pi->n_cached_seqs ? pi->n_cached_seqs : 1, sizeof(*v));
	if (v == NULL) {
		pthread_mutex_unlock(&pi->lock);
		return KVF_ENOMEM;
	}
	for (struct prefix_seq *ps = pi->seqs; ps; ps = ps->next)
		if (ps->cached)
			cached_value(ps, &v[k++]);
	pthread_mutex_unlock(&pi->lock);
	*out = v;
	*n = k;
	return KVF_OK;
}

uint64_t prefix_cached_count(kvf_store *st)
{
	uint64_t n;

	pthread_mutex_lock(&st->prefix.lock);
	n = st->prefix.n_cached_seqs;
	pthread_mutex_unlock(&st->prefix.lock);
	return n;
}

uint64_t prefix_cached_id(kvf_store *st)
{
	uint64_t id;

	pthread_mutex_lock(&st->prefix.lock);
	id = st->prefix.next_cached_id++;
	if (st->prefix.next_cached_id == KVF_SEQ_NONE)
		st->prefix.next_cached_id = PREFIX_CACHED_ID_BASE;
	pthread_mutex_unlock(&st->prefix.lock);
	return id;
}

kvf_status prefix_chunks(kvf_store *st, struct prefix_chunk_info **out,
			 size_t *n)
{
	struct prefix_index *pi = &st->prefix;
	struct prefix_chunk_info *v;
	size_t k = 0;

	pthread_mutex_lock(&pi->lock);
	v = kvf_calloc(pi->n_nodes ? pi->n_nodes : 1, sizeof(*v));
	if (v == NULL) {
		pthread_mutex_unlock(&pi->lock);
		return KVF_ENOMEM;
	}
	for (uint32_t b = 0; b < pi->cap; b++)
		for (struct prefix_node *x = pi->bucket[b]; x; x = x->hnext)
			v[k++] = (struct prefix_chunk_info){
				.hash = x->hash, .depth = x->depth,
				.n_holders = x->n_holders,
				.holder = x->n_holders
					? x->holders[x->n_holders - 1]
					: KVF_SEQ_NONE,
				.hits = x->hits, .last_use_ns = x->last_use_ns };
	pthread_mutex_unlock(&pi->lock);
	*out = v;
	*n = k;
	return KVF_OK;
}

kvf_status prefix_tokens_copy(kvf_store *st, const char *call, uint64_t id,
			      uint32_t **out, uint64_t *n)
{
	uint32_t *t = NULL;
	struct seq *seq;
	uint64_t k = 0;
	kvf_status rc;

	if ((rc = seq_get_locked(st, call, id, &seq)) != KVF_OK)
		return rc;
	if (seq->prefix && seq->prefix->n_tokens > 0) {
		k = seq->prefix->n_tokens;
		if ((t = kvf_malloc(k * sizeof(*t))) != NULL)
			memcpy(t, seq->prefix->tokens, k * sizeof(*t));
	}
	seq_unlock_put(st, seq);
	if (k > 0 && t == NULL)
		return kvf_fail(KVF_ENOMEM, "%s: out of memory", call);
	*out = t;
	*n = k;
	return KVF_OK;
}
