/*
 * optim_commit.c - how a generation of optimizer state becomes the
 * committed one, and is found again: reserve what writing it whole needs
 * (so a step does not fail for room half way), retry after the cleaner
 * made room, commit the "O" record naming it at a durable point, and at
 * open load each record's sequence, generation and steps.  A file of its
 * own: this is the crash handling, what makes a crash leave either the
 * old step or the new one.
 *
 * Locking: optim_commit_gen's caller holds dur.lock, world shared and the
 * sequence lock; optim_recovery_load runs at open, alone.
 */
#include <stdio.h>
#include <string.h>

#include "api/status.h"
#include "engine/base/catalog.h"
#include "engine/cleaning/cleaner.h"
#include "engine/durability/durable.h"
#include "engine/segments/openseg.h"
#include "engine/optim/optim_int.h"
#include "engine/optim/optim_store.h"
#include "engine/sequences/seq.h"
#include "engine/sequences/seq_stream.h"
#include "engine/segments/writer.h"

/*
 * optim_reserve_gen - reserve the segments one whole generation needs, and put
 * in the pool the segment buffers writing it holds at once: one open per
 * stripe it touches, and the writer's jobs in flight (no more than the
 * segments it fills), whose buffers go back to the pool at each reap.  A
 * step then neither allocates a buffer nor fails for one half way, as
 * long as no other sequence draws from the pool meanwhile.
 */
kvf_status optim_reserve_gen(kvf_opt *o, struct seq *seq, uint32_t gen,
			     const char *call, uint32_t *want)
{
	kvf_store *st = o->st;
	uint32_t pages[KVF_MEDIA_MAX_STRIPES] = { 0 };
	uint64_t segs = 0, open = 0;
	kvf_status rc;

	for (uint32_t s = 0; s < 3; s++)
		if (optim_state_kept(o->states, s))
			for (uint64_t c = 0; c < o->n_chunks; c++)
				pages[stream_stripe(st, optim_sid(s, gen), c)]++;
	*want = 0;
	for (uint32_t s = 0; s < st->hdr.n_stripes; s++) {
		uint32_t n = (pages[s] + st->data_per_seg - 1) / st->data_per_seg;

		segs += n;
		open += pages[s] > 0;
		*want = n > *want ? n : *want;
	}
	rc = segbuf_reserve(st, (uint32_t)(open + (segs < WRITER_MAX_INFLIGHT
							  ? segs
							  : WRITER_MAX_INFLIGHT)));
	if (rc != KVF_OK)
		return kvf_fail_wrap(rc, call);
	return openseg_reserve(st, seq, pages, NULL, call);
}

/* optim_make_room - a create or step of optimizer name was refused: whether
 * to try again once the cleaner made want free segments a stripe
 * (cleaner_make_room) */
int optim_make_room(kvf_store *st, int attempt, uint32_t want,
		    const char *call, const char *name, kvf_status *rc)
{
	char what[OPTIM_NAME_MAX + 64];

	if (*rc != KVF_ENOSPC)
		return 0;
	snprintf(what, sizeof(what), "%s: optimizer '%s'", call, name);
	return cleaner_make_room(st, attempt, want, KVF_SEQ_NONE, what, rc);
}

/* optim_commit_gen - flush seq's segments, then durably name gen as current.
 * Caller holds dur.lock, world shared and seq->lock. */
kvf_status optim_commit_gen(kvf_opt *o, struct seq *seq, uint64_t steps,
			    uint32_t gen, int with_seq_record)
{
	kvf_store *st = o->st;
	struct meta_optim m = { .seq = seq->id, .n_params = o->n_params,
				.steps = steps, .gen = gen };
	struct catalog_batch *b = o->commit;
	kvf_status rc;

	if ((rc = openseg_flush_all(st, seq)) != KVF_OK)
		return rc;
	catalog_batch_clear(b);
	optim_record_put(b, o->name, &m, &o->cfg);
	rc = with_seq_record ? seq_record(st, seq, b) : KVF_OK;
	if (rc == KVF_OK)
		rc = store_durable_point(st, b, 0);
	if (rc == KVF_OK) {
		seq->optim_gen = gen;
		seq->optim_steps = steps;
	}
	return rc;
}

/* ---- recovery ------------------------------------------------------------ */

static int load_record(void *arg, const void *key, size_t klen, const void *val,
		       size_t vlen)
{
	kvf_store *st = arg;
	struct meta_optim m;
	struct seq *seq;
	kvf_opt_config cfg;
	kvf_status rc;
	uint64_t per;

	(void)key;
	if (vlen != sizeof(m) + sizeof(kvf_opt_config) || klen < 2)
		return kvf_fail(KVF_ECORRUPT, "kvf_open: an optimizer record is malformed (%zu bytes)",
				vlen);
	memcpy(&m, val, sizeof(m));
	per = st->hdr.page_size / sizeof(float);
	/* kvf_opt_create's limits, and a state that fits on the media */
	if (m.cfg_size != sizeof(kvf_opt_config) || m.n_params == 0 ||
	    m.n_params > UINT32_MAX ||
	    (m.n_params + per - 1) / per >
		    (uint64_t)st->n_segments * st->data_per_seg)
		return kvf_fail(KVF_ECORRUPT,
				"kvf_open: an optimizer record is malformed: %llu parameters, %u bytes of configuration",
				(unsigned long long)m.n_params, m.cfg_size);
	if ((seq = seq_get_ns(st, SEQ_NS_OPTIM, m.seq)) == NULL)
		return 0; /* its sequence went: the record is left over */
	memcpy(&cfg, (const char *)val + sizeof(m), sizeof(cfg));
	rc = optim_streams_alloc(st, seq, (m.n_params + per - 1) / per,
				 kvc_optim_states(&cfg));
	seq->optim_gen = m.gen & 1;
	seq->optim_steps = m.steps;
	if (m.seq >= atomic_load(&st->optims.next_id))
		atomic_store(&st->optims.next_id, m.seq + 1);
	(void)key;
	seq_put(st, seq);
	return rc;
}

kvf_status optim_recovery_load(kvf_store *st)
{
	unsigned char tag = META_TAG_OPTIM;

	return catalog_scan(st->cat, &tag, 1, load_record, st);
}
