/*
 * dropmark.c - the dropped token groups of a sequence (dropmark.h).
 */
#include <string.h>

#include "api/alloc.h"
#include "api/status.h"
#include "engine/base/catalog.h"
#include "engine/base/meta.h"
#include "engine/sequences/dropmark.h"

/* lanes - lanes of the store */
static uint32_t lanes(const kvf_store *st)
{
	return st->hdr.n_layers * st->hdr.n_kv_heads;
}

int dropmark_any(const kvf_store *st, const struct seq *seq, uint32_t lane)
{
	uint32_t l0 = lane == DROP_ANY ? 0 : lane;
	uint32_t l1 = lane == DROP_ANY ? lanes(st) : lane + 1;

	if (seq->drop == NULL)
		return 0;
	for (uint32_t l = l0; l < l1; l++)
		for (uint32_t w = 0; w < seq->drop_words; w++)
			if (seq->drop[(size_t)l * seq->drop_words + w])
				return 1;
	return 0;
}

/* grow - room for words words per lane */
static kvf_status grow(kvf_store *st, struct seq *seq, uint32_t words)
{
	uint32_t nl = lanes(st);
	uint64_t *d;

	if (words <= seq->drop_words)
		return KVF_OK;
	d = kvf_calloc((size_t)nl * words, sizeof(uint64_t));
	if (d == NULL)
		return kvf_fail(KVF_ENOMEM, "out of memory for dropped-group marks");
	for (uint32_t l = 0; seq->drop && l < nl; l++)
		memcpy(d + (size_t)l * words, seq->drop + (size_t)l * seq->drop_words,
		       seq->drop_words * sizeof(uint64_t));
	kvf_free(seq->drop);
	seq->drop = d;
	seq->drop_words = words;
	return KVF_OK;
}

kvf_status dropmark_set(kvf_store *st, struct seq *seq, uint32_t lane,
			uint64_t g)
{
	kvf_status rc;

	if (g / 64 >= UINT32_MAX)
		return kvf_fail(KVF_ERANGE, "token group %llu is past the marks' range",
				(unsigned long long)g);
	if ((rc = grow(st, seq, (uint32_t)(g / 64 + 1))) != KVF_OK)
		return rc;
	seq->drop[(size_t)lane * seq->drop_words + g / 64] |= 1ull << (g % 64);
	return KVF_OK;
}

void dropmark_cut(kvf_store *st, struct seq *seq, uint64_t first_group)
{
	for (uint32_t l = 0; seq->drop && l < lanes(st); l++)
		for (uint64_t w = first_group / 64; w < seq->drop_words; w++) {
			uint64_t *x = &seq->drop[(size_t)l * seq->drop_words + w];

			if (w == first_group / 64)
				*x &= (1ull << (first_group % 64)) - 1;
			else
				*x = 0;
		}
}

int dropmark_trim(const kvf_store *st, struct seq *seq)
{
	uint32_t G = st->group_tokens;
	int any = 0;

	for (uint32_t l = 0; seq->drop && l < lanes(st); l++)
		for (uint64_t g = seq->len[l / st->hdr.n_kv_heads] / G;
		     g / 64 < seq->drop_words; g++)
			if (dropmark_is(seq, l, g)) {
				seq->drop[(size_t)l * seq->drop_words + g / 64] &=
					~(1ull << (g % 64));
				any = 1;
			}
	return any;
}

uint64_t dropmark_inside(const kvf_store *st, const struct seq *seq,
			 uint64_t n, uint32_t *lane)
{
	uint64_t g = n / st->group_tokens;

	if (n % st->group_tokens == 0)
		return UINT64_MAX;
	for (uint32_t l = 0; l < lanes(st); l++)
		if (dropmark_is(seq, l, g)) {
			*lane = l;
			return g;
		}
	return UINT64_MAX;
}

uint64_t dropmark_first(const kvf_store *st, const struct seq *seq,
			uint32_t lane, uint64_t t0, uint64_t t1)
{
	uint32_t G = st->group_tokens;

	if (seq->drop == NULL || t0 >= t1)
		return UINT64_MAX;
	for (uint64_t g = t0 / G; g <= (t1 - 1) / G && g / 64 < seq->drop_words; g++)
		if (dropmark_is(seq, lane, g))
			return g * G > t0 ? g * G : t0;
	return UINT64_MAX;
}

int dropmark_run(const kvf_store *st, const struct seq *seq, uint32_t lane,
		 uint64_t t, uint64_t t1, uint64_t *a, uint64_t *b)
{
	uint32_t G = st->group_tokens;
	uint64_t g = t / G;

	while (t < t1 && dropmark_is(seq, lane, g)) {
		g++;
		t = g * G;
	}
	if (t >= t1)
		return 0;
	*a = t;
	/* past the last word every group is kept: the run goes to t1 */
	while (g * G < t1 && g / 64 < seq->drop_words && !dropmark_is(seq, lane, g))
		g++;
	*b = g * G < t1 && g / 64 < seq->drop_words ? g * G : t1;
	return 1;
}

uint64_t dropmark_kept(const kvf_store *st, const struct seq *seq,
		       uint32_t lane, uint64_t t)
{
	uint64_t kept = 0, a, b, at = 0;

	while (dropmark_run(st, seq, lane, at, t, &a, &b)) {
		kept += b - a;
		at = b;
	}
	return kept;
}

uint64_t dropmark_at_kept(const kvf_store *st, const struct seq *seq,
			  uint32_t lane, uint64_t n, uint64_t t1)
{
	uint64_t a, b, at = 0;

	while (dropmark_run(st, seq, lane, at, t1, &a, &b)) {
		if (b - a >= n)
			return a + n;
		n -= b - a;
		at = b;
	}
	return t1;
}

kvf_status dropmark_copy(kvf_store *st, struct seq *child,
			 const struct seq *parent, uint64_t n_groups)
{
	kvf_status rc;

	for (uint32_t l = 0; parent->drop && l < lanes(st); l++)
		for (uint64_t g = 0; g < n_groups && g / 64 < parent->drop_words; g++)
			if (dropmark_is(parent, l, g) &&
			    (rc = dropmark_set(st, child, l, g)) != KVF_OK)
				return rc;
	return KVF_OK;
}

kvf_status dropmark_save(const kvf_store *st, const struct seq *seq,
			 struct dropmark_saved *sv)
{
	size_t bytes = (size_t)lanes(st) * seq->drop_words * sizeof(uint64_t);

	sv->bits = NULL;
	sv->words = 0;
	if (seq->drop == NULL)
		return KVF_OK;
	if ((sv->bits = kvf_malloc(bytes)) == NULL)
		return kvf_fail(KVF_ENOMEM, "out of memory for a copy of the dropped-group marks");
	memcpy(sv->bits, seq->drop, bytes);
	sv->words = seq->drop_words;
	return KVF_OK;
}

int dropmark_differs(const kvf_store *st, const struct seq *seq,
		     const struct dropmark_saved *sv)
{
	for (uint32_t l = 0; seq->drop && l < lanes(st); l++)
		for (uint32_t w = 0; w < seq->drop_words; w++) {
			uint64_t was = w < sv->words
					       ? sv->bits[(size_t)l * sv->words + w]
					       : 0;

			if (seq->drop[(size_t)l * seq->drop_words + w] != was)
				return 1;
		}
	return 0;
}

void dropmark_restore(const kvf_store *st, struct seq *seq,
		      const struct dropmark_saved *sv)
{
	if (seq->drop == NULL)
		return;
	/* room grown since stays, all zero */
	memset(seq->drop, 0, (size_t)lanes(st) * seq->drop_words * sizeof(uint64_t));
	for (uint32_t l = 0; sv->bits && l < lanes(st); l++)
		memcpy(seq->drop + (size_t)l * seq->drop_words,
		       sv->bits + (size_t)l * sv->words, sv->words * sizeof(uint64_t));
}

void dropmark_saved_free(struct dropmark_saved *sv)
{
	kvf_free(sv->bits);
	sv->bits = NULL;
	sv->words = 0;
}

kvf_status dropmark_record(kvf_store *st, const struct seq *seq,
			   struct catalog_batch *b)
{
	struct meta_drop m = { .create_seqno = seq->create_seqno,
			       .n_lanes = lanes(st),
			       .words = seq->drop_words };
	size_t bits = (size_t)m.n_lanes * m.words * sizeof(uint64_t);
	unsigned char key[9], *val;

	meta_key_u64(key, META_TAG_DROP, seq->id);
	if (!dropmark_any(st, seq, DROP_ANY)) {
		catalog_batch_delete(b, key, sizeof(key));
		return KVF_OK;
	}
	if ((val = kvf_malloc(sizeof(m) + bits)) == NULL)
		return kvf_fail(KVF_ENOMEM, "out of memory for a dropped-groups record");
	memcpy(val, &m, sizeof(m));
	memcpy(val + sizeof(m), seq->drop, bits);
	catalog_batch_put(b, key, sizeof(key), val, sizeof(m) + bits);
	kvf_free(val);
	return KVF_OK;
}

kvf_status dropmark_load(kvf_store *st, uint64_t id, struct seq *seq,
			 const void *val, size_t vlen)
{
	struct meta_drop m;
	uint32_t H = st->hdr.n_kv_heads;
	kvf_status rc;

	if (vlen < sizeof(m))
		goto bad;
	memcpy(&m, val, sizeof(m));
	if (m.n_lanes != lanes(st) ||
	    vlen != sizeof(m) + (size_t)m.n_lanes * m.words * sizeof(uint64_t))
		goto bad;
	if (seq == NULL || seq->create_seqno != m.create_seqno || m.words == 0)
		return KVF_OK; /* of a sequence freed since; or no mark */
	if ((rc = grow(st, seq, m.words)) != KVF_OK)
		return rc;
	memcpy(seq->drop, (const char *)val + sizeof(m),
	       (size_t)m.n_lanes * m.words * sizeof(uint64_t));
	/* a mean of V counts kept tokens: one of more is stale */
	for (uint32_t l = 0; seq->vbar_n && l < m.n_lanes; l++)
		if (seq->vbar_n[l] > dropmark_kept(st, seq, l, seq->len[l / H])) {
			seq->vbar_n[l] = 0;
			memset(seq->vbar + (size_t)l * st->hdr.head_dim, 0,
			       st->hdr.head_dim * sizeof(float));
		}
	return KVF_OK;
bad:
	return kvf_fail(KVF_ECORRUPT,
			"kvf_open: the dropped-groups record of sequence %llu is malformed (%zu bytes)",
			(unsigned long long)id, vlen);
}
