/*
 * seq_import.c - kvf_seq_import: a sequence from the file of seqfile.h.
 *
 * Two passes over the file.  The first checks everything (header, model
 * shape, every chunk's header, order, sizes and checksum, the end, and on
 * a codec store that every K/V value is one it can encode) and changes
 * nothing; the second makes the sequence (with its token ids, in
 * the same catalog batch) and appends each layer's K/V and X through the
 * public append calls, checking every chunk again (the file may change
 * between the passes).  Any failure in the second pass frees the
 * sequence, so a failed import leaves nothing behind (a crash in the
 * middle of one can leave the part appended so far, as for any appends).
 *
 * Locking: none of its own.
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "api/alloc.h"
#include "api/status.h"
#include "engine/base/fatal.h"
#include "engine/sequences/prefix.h"
#include "engine/sequences/seq.h"
#include "engine/portable/seqfile.h"
#include "engine/writes/append.h"
#include "engine/base/store_state.h"

/* What one import holds while it runs. */
struct importer {
	kvf_store *st;
	const char *path;
	FILE *f;
	uint64_t off;            /* of the next byte to read */
	struct seqfile_header h;
	uint64_t n_chunks;       /* read so far */
	size_t cap;              /* bytes of raw, vraw and tmp */
	unsigned char *payload;  /* seqfile_pack_bound(cap) */
	unsigned char *raw, *vraw, *tmp;
	uint64_t *lens;          /* [2 * n_layers + 1]: len, x_len, ids */
	uint32_t *ids;           /* [lens[2L]] */
	uint64_t id;             /* pass 2: the sequence filled */
	int apply;               /* pass 2 */
};

static const char *const type_names[] = {
	[SF_LENGTHS] = "lengths", [SF_TOKENS] = "token ids", [SF_K] = "K",
	[SF_V] = "V", [SF_X] = "X", [SF_END] = "end"
};

static const char *type_name(uint32_t t)
{
	return t < sizeof(type_names) / sizeof(*type_names) && type_names[t]
		? type_names[t] : "unknown";
}

static kvf_status get(struct importer *x, void *buf, size_t len,
		      const char *what)
{
	size_t n = fread(buf, 1, len, x->f);

	if (n != len) {
		if (ferror(x->f))
			return kvf_fail_errno(KVF_EIO, errno, "kvf_seq_import: reading %s at offset %llu",
					      x->path, (unsigned long long)x->off);
		return kvf_fail(KVF_ECORRUPT, "kvf_seq_import: %s ends at offset %llu inside %s (%zu of %zu bytes)",
				x->path, (unsigned long long)(x->off + n),
				what, n, len);
	}
	x->off += len;
	return KVF_OK;
}

static kvf_status mismatch(struct importer *x, const char *field,
			   uint32_t file, uint32_t store)
{
	return kvf_fail(KVF_EMISMATCH, "kvf_seq_import: %s holds a model with %s %u; this store has %u",
			x->path, field, file, store);
}

static kvf_status header(struct importer *x)
{
	struct seqfile_header *h = &x->h;
	kvf_store *st = x->st;
	kvf_status rc;

	if ((rc = get(x, h, sizeof(*h), "the header")) != KVF_OK)
		return rc;
	if (memcmp(h->magic, SEQFILE_MAGIC, sizeof(h->magic)) != 0)
		return kvf_fail(KVF_ECORRUPT, "kvf_seq_import: %s is not a kvflash sequence export (magic at offset 0 is not \"KVFSEQX\\n\")",
				x->path);
	if (h->version != SEQFILE_VERSION)
		return kvf_fail(KVF_ENOTSUP, "kvf_seq_import: %s is export format version %u; this library reads version %u",
				x->path, h->version, SEQFILE_VERSION);
	if (h->check != seqfile_header_check(h))
		return kvf_fail(KVF_ECORRUPT, "kvf_seq_import: %s: the header (offset 0, 64 bytes) fails its checksum (stored %016llx, computed %016llx)",
				x->path, (unsigned long long)h->check,
				(unsigned long long)seqfile_header_check(h));
	if (h->header_bytes != sizeof(*h) || h->chunk_tokens == 0 ||
	    h->chunk_tokens > SEQFILE_MAX_CHUNK_TOKENS)
		return kvf_fail(KVF_ECORRUPT, "kvf_seq_import: %s: header of %u bytes with %u tokens a chunk (expected 64 bytes, 1 to %u tokens)",
				x->path, h->header_bytes, h->chunk_tokens,
				SEQFILE_MAX_CHUNK_TOKENS);
	if (h->n_layers != st->hdr.n_layers)
		return mismatch(x, "n_layers", h->n_layers, st->hdr.n_layers);
	if (h->n_q_heads != st->hdr.n_q_heads)
		return mismatch(x, "n_q_heads", h->n_q_heads, st->hdr.n_q_heads);
	if (h->n_kv_heads != st->hdr.n_kv_heads)
		return mismatch(x, "n_kv_heads", h->n_kv_heads, st->hdr.n_kv_heads);
	if (h->head_dim != st->hdr.head_dim)
		return mismatch(x, "head_dim", h->head_dim, st->hdr.head_dim);
	if (h->dtype != st->hdr.dtype)
		return kvf_fail(KVF_EMISMATCH, "kvf_seq_import: %s holds %s values; this store keeps %s",
				x->path, kvf_dtype_name((kvf_dtype)h->dtype),
				kvf_dtype_name((kvf_dtype)st->hdr.dtype));
	if (h->seq == KVF_SEQ_NONE)
		return kvf_fail(KVF_ECORRUPT, "kvf_seq_import: %s: header names sequence id %llu, which is reserved",
				x->path, (unsigned long long)h->seq);
	/* any store takes values a codec decoded: this one encodes them
	 * again, or keeps them as they are */
	if (h->kv_codec > KVF_CODEC_INT4)
		return kvf_fail(KVF_ECORRUPT, "kvf_seq_import: %s: header names codec %u, which is no kvf_codec",
				x->path, h->kv_codec);
	return KVF_OK;
}

/* chunk - read the next chunk, which must be of this type, layer, first
 * token, count and raw size; unpack it into dst */
static kvf_status chunk(struct importer *x, uint32_t type, uint32_t layer,
			uint64_t first, uint32_t n, size_t raw_bytes,
			void *dst)
{
	struct seqfile_chunk c;
	uint64_t at = x->off;
	uint32_t elt = type >= SF_K && type <= SF_X ? x->st->elt_bytes : 1;
	kvf_status rc;

	if ((rc = get(x, &c, sizeof(c), "a chunk header")) != KVF_OK)
		return rc;
	if (c.check != seqfile_chunk_check(&c))
		return kvf_fail(KVF_ECORRUPT, "kvf_seq_import: %s: the chunk header at offset %llu fails its checksum",
				x->path, (unsigned long long)at);
	if (c.type != type || c.layer != layer || c.first != first ||
	    c.n != n || c.raw_bytes != raw_bytes)
		return kvf_fail(KVF_ECORRUPT, "kvf_seq_import: %s: the chunk at offset %llu is %s of layer %u from %llu, %u entries, %u bytes; expected %s of layer %u from %llu, %u entries, %zu bytes",
				x->path, (unsigned long long)at, type_name(c.type),
				c.layer, (unsigned long long)c.first, c.n,
				c.raw_bytes, type_name(type), layer,
				(unsigned long long)first, n, raw_bytes);
	if (c.stored_bytes > seqfile_pack_bound(raw_bytes))
		return kvf_fail(KVF_ECORRUPT, "kvf_seq_import: %s: the chunk at offset %llu says %u stored bytes for %zu raw",
				x->path, (unsigned long long)at, c.stored_bytes,
				raw_bytes);
	if ((rc = get(x, x->payload, c.stored_bytes, "a chunk")) != KVF_OK)
		return rc;
	if (!seqfile_unpack(&c, x->payload, elt, dst, x->tmp))
		return kvf_fail(KVF_ECORRUPT, "kvf_seq_import: %s: the %s chunk of layer %u at offset %llu (tokens from %llu) fails its checksum (codec %u)",
				x->path, type_name(type), layer,
				(unsigned long long)at, (unsigned long long)first,
				c.codec);
	x->n_chunks++;
	return KVF_OK;
}

static kvf_status fail_wrap(kvf_status rc)
{
	return kvf_fail_wrap(rc, "kvf_seq_import");
}

/* layer - layer l's K/V and X chunks (appended in pass 2) */
static kvf_status layer(struct importer *x, uint32_t l)
{
	kvf_store *st = x->st;
	uint32_t L = st->hdr.n_layers, CT = x->h.chunk_tokens;
	size_t kv_row = (size_t)st->hdr.n_kv_heads * st->row_bytes;
	size_t x_row = (size_t)st->hdr.n_q_heads * st->row_bytes;
	kvf_status rc = KVF_OK;

	for (uint64_t t0 = 0; t0 < x->lens[l] && rc == KVF_OK; t0 += CT) {
		uint32_t n = (uint32_t)(x->lens[l] - t0 < CT ? x->lens[l] - t0 : CT);

		if ((rc = chunk(x, SF_K, l, t0, n, n * kv_row, x->raw)) != KVF_OK ||
		    (rc = chunk(x, SF_V, l, t0, n, n * kv_row, x->vraw)) != KVF_OK)
			return rc;
		/* values a codec store cannot encode are refused while
		 * checking, before the id is taken */
		if (!x->apply) {
			char call[64];

			snprintf(call, sizeof(call), "kvf_seq_import: layer %u", l);
			if ((rc = append_codec_check(st, call, t0, n, x->raw,
						     x->vraw)) != KVF_OK)
				return rc;
		}
		if (x->apply && (rc = kvf_append(st, x->id, l, n, x->raw,
						 x->vraw)) != KVF_OK)
			return fail_wrap(rc);
	}
	for (uint64_t t0 = 0; t0 < x->lens[L + l] && rc == KVF_OK; t0 += CT) {
		uint32_t n = (uint32_t)(x->lens[L + l] - t0 < CT
					? x->lens[L + l] - t0 : CT);

		if ((rc = chunk(x, SF_X, l, t0, n, n * x_row, x->raw)) != KVF_OK)
			return rc;
		if (x->apply && (rc = kvf_append_x(st, x->id, l, n, x->raw)) != KVF_OK)
			return fail_wrap(rc);
	}
	return rc;
}

/* lengths - the LENGTHS chunk and the token ids after it */
static kvf_status lengths(struct importer *x)
{
	uint32_t L = x->st->hdr.n_layers;
	uint64_t n_ids;
	kvf_status rc;

	if ((rc = chunk(x, SF_LENGTHS, 0, 0, 2 * L + 1,
			(2 * (size_t)L + 1) * sizeof(uint64_t),
			x->lens)) != KVF_OK)
		return rc;
	for (uint32_t i = 0; i < 2 * L; i++)
		if (x->lens[i] > UINT32_MAX)
			return kvf_fail(KVF_ECORRUPT, "kvf_seq_import: %s: a layer of %llu tokens (at most %u)",
					x->path, (unsigned long long)x->lens[i],
					UINT32_MAX);
	n_ids = x->lens[2 * L];
	if (n_ids > PREFIX_MAX_TOKENS)
		return kvf_fail(KVF_ECORRUPT, "kvf_seq_import: %s: %llu token ids (at most %llu)",
				x->path, (unsigned long long)n_ids,
				(unsigned long long)PREFIX_MAX_TOKENS);
	kvf_free(x->ids);
	if ((x->ids = kvf_malloc(n_ids ? n_ids * sizeof(uint32_t) : 1)) == NULL)
		return kvf_fail(KVF_ENOMEM, "kvf_seq_import: out of memory");
	for (uint64_t i = 0; i < n_ids; i += SEQFILE_IDS) {
		uint32_t n = (uint32_t)(n_ids - i < SEQFILE_IDS ? n_ids - i
								: SEQFILE_IDS);

		if ((rc = chunk(x, SF_TOKENS, 0, i, n, (size_t)n * 4,
				x->ids + i)) != KVF_OK)
			return rc;
	}
	return KVF_OK;
}

/* buffers - room for the largest chunk the header allows (once) */
static kvf_status buffers(struct importer *x)
{
	kvf_store *st = x->st;
	size_t CT = x->h.chunk_tokens, cap = (size_t)SEQFILE_IDS * 4;
	size_t kv = CT * st->hdr.n_kv_heads * st->row_bytes;
	size_t xr = CT * st->hdr.n_q_heads * st->row_bytes;
	size_t lens = (2 * (size_t)st->hdr.n_layers + 1) * sizeof(uint64_t);

	if (x->raw)
		return KVF_OK;
	cap = kv > cap ? kv : cap;
	cap = xr > cap ? xr : cap;
	cap = lens > cap ? lens : cap;
	x->cap = cap;
	x->payload = kvf_malloc(seqfile_pack_bound(cap));
	x->raw = kvf_malloc(cap);
	x->vraw = kvf_malloc(cap);
	x->tmp = kvf_malloc(cap);
	if (!x->payload || !x->raw || !x->vraw || !x->tmp)
		return kvf_fail(KVF_ENOMEM, "kvf_seq_import: out of memory");
	return KVF_OK;
}

/* pass - read the whole file; with x->apply, fill sequence x->id */
static kvf_status pass(struct importer *x)
{
	struct seqfile_chunk end;
	uint64_t at;
	kvf_status rc;

	if (fseek(x->f, 0, SEEK_SET) != 0)
		return kvf_fail_errno(KVF_EIO, errno, "kvf_seq_import: seeking in %s",
				      x->path);
	x->off = 0;
	x->n_chunks = 0;
	if ((rc = header(x)) != KVF_OK || (rc = buffers(x)) != KVF_OK ||
	    (rc = lengths(x)) != KVF_OK)
		return rc;
	if (x->apply) {
		struct prefix_seq *ps = NULL;

		if (x->lens[2 * x->st->hdr.n_layers] > 0 &&
		    (ps = prefix_seq_new(x->id, x->ids,
					 x->lens[2 * x->st->hdr.n_layers])) == NULL)
			return kvf_fail(KVF_ENOMEM, "kvf_seq_import: out of memory");
		if ((rc = seq_create_with(x->st, "kvf_seq_import", x->id, ps)) != KVF_OK) {
			prefix_seq_free(ps);
			x->apply = 0; /* nothing to undo */
			return rc;
		}
	}
	for (uint32_t l = 0; l < x->st->hdr.n_layers; l++)
		if ((rc = layer(x, l)) != KVF_OK)
			return rc;
	at = x->off;
	if ((rc = get(x, &end, sizeof(end), "the end chunk")) != KVF_OK)
		return rc;
	if (end.check != seqfile_chunk_check(&end) || end.type != SF_END ||
	    end.first != x->n_chunks)
		return kvf_fail(KVF_ECORRUPT, "kvf_seq_import: %s: no valid end chunk at offset %llu (after %llu chunks)",
				x->path, (unsigned long long)at,
				(unsigned long long)x->n_chunks);
	if (fgetc(x->f) != EOF)
		return kvf_fail(KVF_ECORRUPT, "kvf_seq_import: %s: bytes after the end chunk at offset %llu",
				x->path, (unsigned long long)x->off);
	return KVF_OK;
}

kvf_status kvf_seq_import(kvf_store *st, const char *path, uint64_t seq,
			  uint64_t *out_seq)
{
	const char *call = "kvf_seq_import";
	struct importer x = { .st = st, .path = path };
	struct seq *old;
	kvf_status rc;

	if (st == NULL || path == NULL)
		return kvf_fail(KVF_EINVAL, "%s: %s is NULL", call,
				st ? "path" : "store");
	if ((rc = store_check(st, call)) != KVF_OK)
		return rc;
	if ((x.f = fopen(path, "rb")) == NULL)
		return kvf_fail_errno(errno == ENOENT ? KVF_ENOENT : KVF_EIO, errno,
				      "%s: opening %s", call, path);
	x.lens = kvf_calloc(2 * (size_t)st->hdr.n_layers + 1, sizeof(*x.lens));
	if (x.lens == NULL) {
		rc = kvf_fail(KVF_ENOMEM, "%s: out of memory", call);
		goto out;
	}
	if ((rc = pass(&x)) != KVF_OK)
		goto out;
	x.id = seq == KVF_SEQ_NONE ? x.h.seq : seq;
	if ((old = seq_get(st, x.id)) != NULL && !old->cached) {
		seq_put(st, old);
		rc = kvf_fail(KVF_EEXIST, "%s: sequence %llu exists already", call,
			      (unsigned long long)x.id);
		goto out;
	}
	seq_put(st, old); /* a cached prefix, which the creation drops */
	/* a read-only store says so last: an import that answers
	 * KVF_ENOTSUP there would be taken by a writable one (kvtool
	 * import checks that before it opens the store for writing) */
	if ((rc = store_writable(st, call)) != KVF_OK)
		goto out;
	x.apply = 1;
	if ((rc = pass(&x)) != KVF_OK && x.apply) {
		/* a plain free: a part-made import leaves no cached prefix;
		 * the first message stays */
		(void)seq_free_id(st, call, x.id, 0);
		goto out;
	}
	if (rc == KVF_OK && out_seq)
		*out_seq = x.id;
out:
	fclose(x.f);
	kvf_free(x.lens);
	kvf_free(x.ids);
	kvf_free(x.payload);
	kvf_free(x.raw);
	kvf_free(x.vraw);
	kvf_free(x.tmp);
	return rc;
}
