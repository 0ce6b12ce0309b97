/*
 * store_model_ref.c - the reference of the store_model test
 * (store_model.h): token values as a pure function of (tag, layer, kind,
 * token, head), and sequences as runs of tagged tokens, so that a fork
 * copies the parent's runs and the reference stores no bytes.
 */
#include <criterion/criterion.h>
#include <criterion/new/assert.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "store_model.h"

/* fill_row - the bytes of token t of head h (kind 0 K, 1 V, 2 X) */
void ref_fill_row(unsigned char *dst, uint32_t row_bytes, uint64_t tag,
		  uint32_t layer, int kind, uint64_t t, uint32_t h)
{
	uint64_t x = model_mix(model_mix(tag + 0x9e3779b97f4a7c15ull) +
			       layer * 0x100000001b3ull +
			       (uint64_t)kind * 0x3c6ef372fe94f82bull +
			       h * 0x2545f4914f6cdd1dull);

	x = model_mix(x + t);
	for (uint32_t j = 0; j < row_bytes; j += 8) {
		uint64_t w = model_mix(x + j);

		memcpy(dst + j, &w, 8);
	}
}

void ref_track_push(struct track *t, uint64_t n, uint64_t tag)
{
	if (n == 0)
		return;
	if (t->n == t->cap) {
		t->cap = t->cap ? t->cap * 2 : 8;
		t->runs = realloc(t->runs, t->cap * sizeof(*t->runs));
		cr_assert_not_null(t->runs);
	}
	t->len += n;
	t->runs[t->n++] = (struct run){ t->len, tag };
}

/* track_prefix - dst becomes the first n tokens of src */
void ref_track_prefix(struct track *dst, const struct track *src, uint64_t n)
{
	uint64_t at = 0;

	free(dst->runs);
	memset(dst, 0, sizeof(*dst));
	for (uint32_t i = 0; i < src->n && at < n; i++) {
		uint64_t end = src->runs[i].end < n ? src->runs[i].end : n;

		ref_track_push(dst, end - at, src->runs[i].tag);
		at = end;
	}
}

uint64_t ref_track_tag(const struct track *t, uint64_t tok)
{
	uint32_t lo = 0, hi = t->n;

	while (lo < hi) {
		uint32_t mid = (lo + hi) / 2;

		if (t->runs[mid].end > tok)
			hi = mid;
		else
			lo = mid + 1;
	}
	cr_assert(lo < t->n, "token %" PRIu64 " past the reference", tok);
	return t->runs[lo].tag;
}

void ref_mseq_clear(struct mseq *s, uint32_t n_layers)
{
	for (uint32_t l = 0; s->kv && l < n_layers; l++) {
		free(s->kv[l].runs);
		free(s->x[l].runs);
	}
	free(s->kv);
	free(s->x);
	s->kv = s->x = NULL;
	s->live = 0;
}

void ref_mseq_init(struct mseq *s, uint32_t n_layers)
{
	ref_mseq_clear(s, n_layers);
	s->kv = calloc(n_layers, sizeof(*s->kv));
	s->x = calloc(n_layers, sizeof(*s->x));
	cr_assert(s->kv && s->x);
	s->live = 1;
}

void ref_model_copy(struct model *dst, const struct model *src)
{
	for (uint32_t i = 0; i < ID_POOL; i++) {
		ref_mseq_clear(&dst->seqs[i], dst->n_layers);
		dst->seqs[i].id = src->seqs[i].id;
		if (!src->seqs[i].live)
			continue;
		ref_mseq_init(&dst->seqs[i], src->n_layers);
		for (uint32_t l = 0; l < src->n_layers; l++) {
			ref_track_prefix(&dst->seqs[i].kv[l],
					 &src->seqs[i].kv[l],
					 src->seqs[i].kv[l].len);
			ref_track_prefix(&dst->seqs[i].x[l], &src->seqs[i].x[l],
					 src->seqs[i].x[l].len);
		}
	}
	dst->n_layers = src->n_layers;
	dst->user_bytes = src->user_bytes;
}

void ref_model_reset(struct model *m)
{
	for (uint32_t i = 0; i < ID_POOL; i++)
		ref_mseq_clear(&m->seqs[i], m->n_layers);
	m->user_bytes = 0;
}

uint32_t ref_model_count(const struct model *m)
{
	uint32_t n = 0;

	for (uint32_t i = 0; i < ID_POOL; i++)
		n += m->seqs[i].live;
	return n;
}

/* min_len - the most tokens a fork of s may take */
uint64_t ref_min_len(const struct model *m, const struct mseq *s)
{
	uint64_t n = UINT64_MAX;

	for (uint32_t l = 0; l < m->n_layers; l++)
		if (s->kv[l].len < n)
			n = s->kv[l].len;
	return n;
}
