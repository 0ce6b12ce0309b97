/*
 * h2o_evict.c - kvf_h2o_evict: a sequence gives up the token groups of a
 * layer that attention valued least (H2O, Zhang et al. 2023), keeping the
 * sinks, the recent window and the tail, so a long sequence's bytes stay
 * bounded (docs/store.md, "H2O eviction").
 *
 * As a truncation (seq_truncate.c): the first pass plans, per layer, the
 * groups to drop and changes nothing; then the "D" record stating the new
 * marks commits, and only then do the groups' pages lose this sequence's
 * reference (a fork keeps its own), so a crash leaves either the old
 * sequence or the new one.  The pages free their segments after the next
 * durable point.  Each KV head of a layer drops its own groups, by its
 * own scores (H2O's heavy hitters differ from head to head): one mark per
 * (layer, KV head, group), dropmark.h.
 *
 * Locking: dur.lock (no sync writes the sequence half changed), world
 * shared, the sequence's lock.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "api/alloc.h"
#include "api/options.h"
#include "api/status.h"
#include "engine/base/catalog.h"
#include "engine/base/fatal.h"
#include "engine/base/group.h"
#include "engine/base/meta.h"
#include "engine/base/store_state.h"
#include "engine/segments/openseg.h"
#include "engine/segments/segtable.h"
#include "engine/segments/writer.h"
#include "engine/sequences/dropmark.h"
#include "engine/sequences/prefix.h"
#include "engine/sequences/prefix_state.h"
#include "engine/sequences/seq.h"
#include "engine/sequences/seq_state.h"
#include "engine/sequences/seq_stream.h"

/* A group that may go, and what attention gave it. */
struct cand {
	float score;
	uint64_t g;
};

static int by_score(const void *a, const void *b)
{
	const struct cand *x = a, *y = b;

	if (x->score != y->score)
		return x->score < y->score ? -1 : 1;
	return x->g < y->g ? -1 : x->g > y->g; /* older first on a tie */
}

/* The groups one lane (KV head of a layer) gives up. */
struct plan {
	uint64_t *g;
	uint64_t n;
};

/* placed - every page of group g of KV head h of layer (K and V) is in
 * the index, none waiting for write-back; *open set if one is in an open
 * segment */
static int placed(kvf_store *st, struct seq *seq, uint32_t layer, uint32_t h,
		  uint64_t g, int *open)
{
	for (int kind = KIND_K; kind <= KIND_V; kind++) {
		struct stream *s = seq_kv_stream(st, seq, layer,
						 (enum kv_kind)kind, h);
		uint64_t e0 = group_sealed_entry(st, s, g);

		for (uint32_t p = 0; p < group_sealed_pages(st, s); p++) {
			uint64_t e = e0 + p;
			uint32_t a;

			if (stream_waiting(s, e) != NULL || e >= s->n_groups)
				return 0;
			if ((a = stream_page(s, e).addr) == ADDR_NONE)
				return 0;
			if (openseg_page(st, seq, a) != NULL)
				*open = 1;
		}
	}
	return 1;
}

/* group_score - the H2O scores of group g's tokens in lane */
static float group_score(kvf_store *st, struct seq *seq, uint32_t lane,
			 uint64_t g)
{
	const struct h2o *s = &seq->h2o[lane];
	uint32_t G = st->group_tokens;
	double sum = 0;

	for (uint64_t t = g * G; t < (g + 1) * G && t < s->len; t++)
		sum += s->score[t];
	return (float)sum;
}

/* scored - layer has H2O scores (or no token) */
static kvf_status scored(kvf_store *st, struct seq *seq, uint32_t layer,
			 const char *call)
{
	uint32_t H = st->hdr.n_kv_heads;

	if (seq->len[layer] == 0)
		return KVF_OK;
	for (uint32_t h = 0; seq->h2o && h < H; h++)
		if (seq->h2o[(size_t)layer * H + h].len > 0)
			return KVF_OK;
	return kvf_fail(KVF_EINVAL,
			"%s: layer %u of sequence %llu has no H2O scores: attend it with opts.h2o = 1 first",
			call, layer, (unsigned long long)seq->id);
}

/* plan_lane - the groups KV head h of layer gives up under o, lowest
 * value first */
static kvf_status plan_lane(kvf_store *st, struct seq *seq, uint32_t layer,
			    uint32_t h, const kvf_h2o_evict_opts *o,
			    struct plan *p, int *open, const char *call)
{
	uint32_t G = st->group_tokens, lane = dropmark_lane(st, layer, h);
	uint64_t len = seq->len[layer], rec = seq->rec_len[layer], kept, target,
		 sinks, window, n = 0;
	struct cand *c;

	p->n = 0;
	if (len == 0)
		return KVF_OK;
	target = o->keep_tokens ? o->keep_tokens : (uint64_t)ceil(o->keep * (double)len);
	if (target > len)
		target = len;
	if (target == 0)
		target = 1;
	sinks = o->sinks == KVF_TOKENS_NONE ? 0
		: o->sinks ? o->sinks : KVF_SINK_TOKENS_DEFAULT;
	window = o->window == KVF_TOKENS_NONE ? 0
		 : o->window ? o->window : target / 2;
	kept = dropmark_kept(st, seq, lane, len);
	if (kept <= target || window >= len)
		return KVF_OK;
	/* candidates: whole groups past the sinks, before the window, not the
	 * last one, nor the one the last "S" record ends inside: recovery
	 * gives the layer that length back, so that group's synced tokens
	 * need their pages (dropped, and their segments reused after a
	 * durable point with no "S" record, such as the cleaner's, a crash
	 * would leave the tail with no page and clip_lost would cut synced
	 * tokens) */
	c = kvf_malloc(((len - 1) / G + 1) * sizeof(*c));
	p->g = kvf_malloc(((len - 1) / G + 1) * sizeof(*p->g));
	if (c == NULL || p->g == NULL) {
		kvf_free(c);
		return kvf_fail(KVF_ENOMEM, "%s: out of memory", call);
	}
	for (uint64_t g = (sinks + G - 1) / G; g < (len - 1) / G; g++) {
		if ((g + 1) * G > len - window)
			break;
		if (dropmark_is(seq, lane, g) || (g * G < rec && rec < (g + 1) * G) ||
		    !placed(st, seq, layer, h, g, open))
			continue;
		c[n].g = g;
		c[n++].score = group_score(st, seq, lane, g);
	}
	qsort(c, n, sizeof(*c), by_score);
	for (uint64_t i = 0; i < n && kept > target; i++) {
		p->g[p->n++] = c[i].g;
		kept = kept > G ? kept - G : 0;
	}
	kvf_free(c);
	return KVF_OK;
}

/* give_up - group g of lane's K and V leaves the index */
static void give_up(kvf_store *st, struct seq *seq, uint32_t lane, uint64_t g)
{
	uint32_t H = st->hdr.n_kv_heads;

	for (int kind = KIND_K; kind <= KIND_V; kind++) {
		struct stream *s = seq_kv_stream(st, seq, lane / H,
						 (enum kv_kind)kind, lane % H);

		for (uint64_t e = group_entry(st, g);
		     e < group_entry(st, g + 1) && e < s->n_groups; e++) {
			uint32_t a = stream_page(s, e).addr;

			if (a != ADDR_NONE)
				seg_ref_dec(st, a);
			stream_set_page(s, e, (struct page_ref){ ADDR_NONE, 0 });
		}
	}
}

/* forget - lane's score and mean of V that covered g: the scores of
 * dropped tokens read 0, the mean is caught up again from the kept tokens
 * (attend_sparf.c) */
static void forget(kvf_store *st, struct seq *seq, uint32_t lane, uint64_t g)
{
	uint32_t D = st->hdr.head_dim, G = st->group_tokens;
	struct h2o *s = &seq->h2o[lane];

	for (uint64_t t = g * G; t < (g + 1) * G && t < s->len; t++)
		s->score[t] = 0.0f;
	if (seq->vbar && seq->vbar_n[lane]) {
		seq->vbar_n[lane] = 0;
		memset(seq->vbar + (size_t)lane * D, 0, D * sizeof(float));
	}
}

/* first_dropped - the first token of seq that some lane dropped, or
 * UINT64_MAX: prefix reuse shares nothing from there on */
static uint64_t first_dropped(kvf_store *st, struct seq *seq)
{
	uint32_t H = st->hdr.n_kv_heads;
	uint64_t first = UINT64_MAX;

	for (uint32_t l = 0; l < st->hdr.n_layers * H; l++) {
		uint64_t t = dropmark_first(st, seq, l, 0, seq->len[l / H]);

		first = t < first ? t : first;
	}
	return first;
}

/* evict_locked - the drop of seq (locked) under o, layers [l0, l1) */
static kvf_status evict_locked(kvf_store *st, struct seq *seq, uint32_t l0,
			       uint32_t l1, const kvf_h2o_evict_opts *o,
			       uint64_t *dropped, const char *call)
{
	uint32_t H = st->hdr.n_kv_heads, nl = st->hdr.n_layers * H; /* lanes */
	struct plan *plans = kvf_calloc(nl, sizeof(*plans));
	struct catalog_batch *b = NULL;
	struct dropmark_saved marks = { 0 };
	uint64_t total = 0, first = UINT64_MAX;
	int open = 0;
	kvf_status rc = KVF_OK;

	if (plans == NULL)
		return kvf_fail(KVF_ENOMEM, "%s: out of memory", call);
	for (uint32_t l = l0; l < l1 && rc == KVF_OK; l++)
		rc = scored(st, seq, l, call);
	for (uint32_t i = l0 * H; i < l1 * H && rc == KVF_OK; i++) {
		rc = plan_lane(st, seq, i / H, i % H, o, &plans[i], &open, call);
		total += plans[i].n;
	}
	if (rc != KVF_OK || total == 0)
		goto out;
	/* every page committed before its reference can be dropped */
	if ((open && (rc = openseg_flush_all(st, seq)) != KVF_OK) ||
	    (rc = seq_jobs_reap(st, seq, 1)) != KVF_OK) {
		kvf_fail_wrap(rc, call);
		goto out;
	}
	if ((rc = dropmark_save(st, seq, &marks)) != KVF_OK) {
		kvf_fail_wrap(rc, call);
		goto out;
	}
	for (uint32_t l = l0 * H; l < l1 * H && rc == KVF_OK; l++)
		for (uint64_t i = 0; i < plans[l].n && rc == KVF_OK; i++)
			rc = dropmark_set(st, seq, l, plans[l].g[i]);
	if (rc == KVF_OK && (b = catalog_batch_new()) == NULL)
		rc = kvf_fail(KVF_ENOMEM, "%s: out of memory", call);
	if (rc == KVF_OK)
		rc = dropmark_record(st, seq, b);
	/* the token ids registered for prefix reuse stop where a group
	 * goes: a sequence sharing its prefix must get every token */
	first = first_dropped(st, seq);
	if (rc == KVF_OK && seq->prefix && seq->prefix->n_tokens > first)
		rc = prefix_record(b, seq->id, seq->create_seqno,
				   seq->prefix->tokens, first, NULL, 0);
	if (rc == KVF_OK && seq->vbar) {
		/* the means count the dropped tokens: gone, rebuilt at use;
		 * the other lanes' are written again at the next sync
		 * (vbar_changes, below) */
		unsigned char key[9];

		meta_key_u64(key, META_TAG_VBAR, seq->id);
		catalog_batch_delete(b, key, sizeof(key));
	}
	if (rc != KVF_OK) {
		kvf_fail_wrap(rc, call);
		goto undo;
	}
	if ((rc = catalog_commit(st->cat, b, 0)) != KVF_OK) {
		rc = store_set_fatal(st, rc, call);
		goto undo;
	}
	for (uint32_t l = l0 * H; l < l1 * H; l++)
		for (uint64_t i = 0; i < plans[l].n; i++) {
			give_up(st, seq, l, plans[l].g[i]);
			forget(st, seq, l, plans[l].g[i]);
		}
	if (seq->vbar)
		seq->vbar_changes++; /* its "V" record was deleted */
	if (seq->prefix && seq->prefix->n_tokens > first)
		prefix_truncate(st, seq, first);
	goto out;
undo:
	dropmark_restore(st, seq, &marks); /* the marks as they were */
out:
	if (rc == KVF_OK && dropped) /* written only on success */
		*dropped = total * st->group_tokens;
	for (uint32_t l = 0; l < nl; l++)
		kvf_free(plans[l].g);
	kvf_free(plans);
	dropmark_saved_free(&marks);
	catalog_batch_free(b);
	return rc;
}

kvf_status kvf_h2o_evict(kvf_store *st, uint64_t id, uint32_t layer,
			 const kvf_h2o_evict_opts *opts, uint64_t *dropped)
{
	const char *call = "kvf_h2o_evict";
	kvf_h2o_evict_opts o;
	struct seq *seq;
	kvf_status rc;

	if ((rc = store_writable(st, call)) != KVF_OK)
		return rc;
	if (layer != KVF_LAYER_ALL && layer >= st->hdr.n_layers)
		return kvf_fail(KVF_ERANGE,
				"%s: layer %u out of range (store has %u layers; KVF_LAYER_ALL for all)",
				call, layer, st->hdr.n_layers);
	kvf_h2o_evict_opts_init(&o);
	if (opts) {
		if ((rc = kvf_struct_check(call, "opts", opts, sizeof(*opts))) != KVF_OK)
			return rc;
		memcpy(&o, opts, opts->struct_size < sizeof(o) ? opts->struct_size
							       : sizeof(o));
	}
	if (o.keep_tokens > 0 && !isfinite(o.keep))
		return kvf_fail(KVF_EINVAL,
				"%s: opts.keep %g is not finite (unused with keep_tokens, but kept valid)",
				call, o.keep);
	if (o.keep_tokens == 0 && !(isfinite(o.keep) && o.keep > 0 && o.keep <= 1))
		return kvf_fail(KVF_EINVAL,
				"%s: opts.keep %g must be in (0, 1] (or set keep_tokens)",
				call, o.keep);
	pthread_mutex_lock(&st->dur.lock);
	pthread_rwlock_rdlock(&st->world);
	if ((rc = seq_get_locked(st, call, id, &seq)) == KVF_OK) {
		rc = layer == KVF_LAYER_ALL
			     ? evict_locked(st, seq, 0, st->hdr.n_layers, &o,
					    dropped, call)
			     : evict_locked(st, seq, layer, layer + 1, &o, dropped,
					    call);
		seq_unlock_put(st, seq);
	}
	pthread_rwlock_unlock(&st->world);
	pthread_mutex_unlock(&st->dur.lock);
	return rc;
}
