/*
 * optim_layout.c - where an optimizer's state lives: its "O" catalog
 * record, the six streams of its pseudo-sequence, and placing or finding
 * the page-sized chunks of a generation (engine/optim/optim_int.h has the
 * format).  A file of its own because the record and the chunk placement
 * are what every other optimizer file builds on.
 */
#include <string.h>

#include "api/alloc.h"
#include "api/status.h"
#include "engine/base/catalog.h"
#include "engine/base/key.h"
#include "engine/segments/openseg.h"
#include "engine/optim/optim_int.h"
#include "engine/sequences/seq_state.h"
#include "engine/sequences/seq_stream.h"

/* record - the "O" record of name (key in *key, value in *val) */
void optim_record_put(struct catalog_batch *b, const char *name,
		      const struct meta_optim *m, const kvf_opt_config *cfg)
{
	size_t nl = strlen(name);
	unsigned char key[1 + OPTIM_NAME_MAX], val[sizeof(*m) + sizeof(*cfg)];
	struct meta_optim mm = *m;

	key[0] = META_TAG_OPTIM;
	memcpy(key + 1, name, nl);
	mm.cfg_size = sizeof(*cfg);
	memcpy(val, &mm, sizeof(mm));
	memcpy(val + sizeof(mm), cfg, sizeof(*cfg));
	catalog_batch_put(b, key, nl + 1, val, sizeof(val));
}

kvf_status optim_record_get(kvf_store *st, const char *name,
			    struct meta_optim *m, kvf_opt_config *cfg)
{
	size_t nl = strlen(name), vlen;
	unsigned char key[1 + OPTIM_NAME_MAX];
	void *val;
	kvf_status rc;

	key[0] = META_TAG_OPTIM;
	memcpy(key + 1, name, nl);
	rc = catalog_get(st->cat, key, nl + 1, &val, &vlen);
	if (rc != KVF_OK)
		return rc;
	memcpy(m, val, vlen < sizeof(*m) ? vlen : sizeof(*m));
	if (vlen != sizeof(*m) + sizeof(*cfg) || m->cfg_size != sizeof(*cfg)) {
		kvf_free(val);
		return kvf_fail(KVF_ECORRUPT,
				"the catalog record of optimizer '%s' is malformed (%zu bytes)",
				name, vlen);
	}
	memcpy(cfg, (char *)val + sizeof(*m), sizeof(*cfg));
	kvf_free(val);
	return KVF_OK;
}

/* optim_streams_alloc - the six streams of a pseudo-sequence whose rule
 * keeps `states` (kvc_optim_states) */
kvf_status optim_streams_alloc(kvf_store *st, struct seq *seq, uint64_t n_chunks,
			       unsigned states)
{
	seq->optim_kept = 0;
	for (uint32_t s = 0; s < 3; s++)
		if (optim_state_kept(states, s))
			seq->optim_kept |= 1u << s;
	if (seq->optim == NULL)
		seq->optim = kvf_calloc(OPTIM_STREAMS, sizeof(struct stream));
	if (seq->optim == NULL)
		return kvf_fail(KVF_ENOMEM, "out of memory for optimizer streams");
	for (uint32_t i = 0; i < OPTIM_STREAMS; i++) {
		kvf_status rc = stream_reserve(st, &seq->optim[i], n_chunks);

		if (rc != KVF_OK)
			return rc;
	}
	seq->optim_chunks = n_chunks;
	return KVF_OK;
}

/* optim_place_batch - write chunks [c0, c0 + n) of every kept state (params
 * first) from the work buffers as generation gen */
kvf_status optim_place_batch(kvf_opt *o, struct seq *seq, uint64_t c0,
			     uint32_t n, uint32_t gen, uint32_t half)
{
	kvf_store *st = o->st;

	for (uint32_t s = 0; s < 3; s++) {
		uint32_t sid = optim_sid(s, gen);
		struct stream *str = &seq->optim[s * 2 + gen];

		if (!optim_state_kept(o->states, s))
			continue;
		for (uint32_t j = 0; j < n; j++) {
			uint64_t c = c0 + j;
			uint32_t old = c < str->n_groups ? stream_page(str, c).addr
							 : ADDR_NONE;
			struct page_ref ref;
			kvf_status rc;

			rc = openseg_place(st, seq, stream_stripe(st, sid, c),
					   optim_work_page(o, half, s, j),
					   page_key_make(seq->id, sid, (uint32_t)c),
					   old, &ref);
			if (rc != KVF_OK)
				return rc;
			stream_set_page(str, c, ref);
			if (c >= str->n_groups)
				str->n_groups = (uint32_t)c + 1;
			atomic_fetch_add(&st->c.optim_bytes, st->hdr.page_size);
		}
	}
	return KVF_OK;
}

/* optim_load_page - point src at the page where the memory media keeps it, or
 * copy it into work */
kvf_status optim_load_page(void *arg, uint64_t i, const unsigned char *page,
			   int in_place)
{
	struct load_ctx *l = arg;
	float *w = optim_work_page(l->o, l->half, l->state, (uint32_t)i);

	if (in_place) {
		l->o->src[l->half][l->state][i] = (const float *)page;
		return KVF_OK;
	}
	memcpy(w, page, l->o->st->hdr.page_size);
	l->o->src[l->half][l->state][i] = w;
	return KVF_OK;
}
