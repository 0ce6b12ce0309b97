/*
 * seq_export.c - kvf_seq_export: one sequence into the file of seqfile.h.
 * It reads through the public read calls (kvf_read, kvf_read_x), so every
 * page is verified as any read is, and writes PATH.tmp, fsyncs it and
 * renames it over PATH: a failed export leaves no file and keeps an older
 * one.  Lengths are taken once at the start; appends meanwhile are not
 * exported.
 *
 * Locking: none of its own; each read takes what kvf_read takes.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>
#include <xxhash.h>

#include "api/alloc.h"
#include "api/status.h"
#include "engine/base/fatal.h"
#include "engine/sequences/dropmark.h"
#include "engine/sequences/prefix.h"
#include "engine/sequences/seq.h"
#include "engine/portable/seqfile.h"
#include "engine/base/store_state.h"

/* What one export holds while it runs. */
struct exporter {
	kvf_store *st;
	const char *path;   /* the final name (messages) */
	int fd;             /* PATH.tmp */
	uint64_t n_chunks;  /* written so far */
	unsigned char *raw; /* one chunk, raw */
	unsigned char *out; /* its payload */
	unsigned char *tmp; /* scratch, and one head's rows */
};

static kvf_status put(struct exporter *x, const void *buf, size_t len)
{
	const unsigned char *p = buf;

	while (len > 0) {
		ssize_t n = write(x->fd, p, len);

		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			return kvf_fail_errno(KVF_EIO, errno, "kvf_seq_export: writing %s.tmp",
					      x->path);
		p += n;
		len -= (size_t)n;
	}
	return KVF_OK;
}

/* chunk - pack raw_len bytes of x->raw as a chunk and write it */
static kvf_status chunk(struct exporter *x, uint32_t type, uint32_t layer,
			uint64_t first, uint32_t n, size_t raw_len)
{
	struct seqfile_chunk c = { .type = type, .layer = layer,
				   .first = first, .n = n };
	kvf_status rc;

	seqfile_pack(x->raw, raw_len, type >= SF_K && type <= SF_X
				     ? x->st->elt_bytes : 1,
		     x->out, x->tmp, &c);
	c.check = seqfile_chunk_check(&c);
	if ((rc = put(x, &c, sizeof(c))) == KVF_OK)
		rc = put(x, x->out, c.stored_bytes);
	x->n_chunks++;
	return rc;
}

/* kv_chunks - layer l's K and V, [0, len), chunk by chunk */
static kvf_status kv_chunks(struct exporter *x, uint64_t id, uint32_t l,
			    uint64_t len)
{
	kvf_store *st = x->st;
	uint32_t H = st->hdr.n_kv_heads, R = st->row_bytes;
	kvf_status rc = KVF_OK;

	for (uint64_t t0 = 0; t0 < len && rc == KVF_OK; t0 += SEQFILE_CHUNK_TOKENS) {
		uint32_t n = (uint32_t)(len - t0 < SEQFILE_CHUNK_TOKENS
					? len - t0 : SEQFILE_CHUNK_TOKENS);

		for (uint32_t kind = 0; kind < 2 && rc == KVF_OK; kind++) {
			for (uint32_t h = 0; h < H; h++) {
				rc = kvf_read(st, id, l, h, t0, t0 + n,
					      kind ? NULL : x->tmp,
					      kind ? x->tmp : NULL);
				if (rc != KVF_OK)
					return kvf_fail_wrap(rc, "kvf_seq_export");
				for (uint32_t t = 0; t < n; t++)
					memcpy(x->raw + ((size_t)t * H + h) * R,
					       x->tmp + (size_t)t * R, R);
			}
			rc = chunk(x, kind ? SF_V : SF_K, l, t0, n,
				   (size_t)n * H * R);
		}
	}
	return rc;
}

static kvf_status x_chunks(struct exporter *x, uint64_t id, uint32_t l,
			   uint64_t len)
{
	size_t row = (size_t)x->st->hdr.n_q_heads * x->st->row_bytes;
	kvf_status rc = KVF_OK;

	for (uint64_t t0 = 0; t0 < len && rc == KVF_OK; t0 += SEQFILE_CHUNK_TOKENS) {
		uint32_t n = (uint32_t)(len - t0 < SEQFILE_CHUNK_TOKENS
					? len - t0 : SEQFILE_CHUNK_TOKENS);

		if ((rc = kvf_read_x(x->st, id, l, t0, t0 + n, x->raw)) != KVF_OK)
			return kvf_fail_wrap(rc, "kvf_seq_export");
		rc = chunk(x, SF_X, l, t0, n, n * row);
	}
	return rc;
}

/* body - everything after the header */
static kvf_status body(struct exporter *x, uint64_t id, const uint64_t *lens,
		       const uint32_t *ids, uint64_t n_ids)
{
	uint32_t L = x->st->hdr.n_layers;
	kvf_status rc;

	memcpy(x->raw, lens, (2 * (size_t)L + 1) * sizeof(uint64_t));
	if ((rc = chunk(x, SF_LENGTHS, 0, 0, 2 * L + 1,
			(2 * (size_t)L + 1) * sizeof(uint64_t))) != KVF_OK)
		return rc;
	for (uint64_t i = 0; i < n_ids && rc == KVF_OK; i += SEQFILE_IDS) {
		uint32_t n = (uint32_t)(n_ids - i < SEQFILE_IDS ? n_ids - i
								: SEQFILE_IDS);

		memcpy(x->raw, ids + i, (size_t)n * sizeof(*ids));
		rc = chunk(x, SF_TOKENS, 0, i, n, (size_t)n * sizeof(*ids));
	}
	for (uint32_t l = 0; l < L && rc == KVF_OK; l++)
		if ((rc = kv_chunks(x, id, l, lens[l])) == KVF_OK)
			rc = x_chunks(x, id, l, lens[L + l]);
	if (rc == KVF_OK) {
		struct seqfile_chunk end = { .type = SF_END, .first = x->n_chunks };

		end.raw_check = XXH3_64bits(NULL, 0);
		end.check = seqfile_chunk_check(&end);
		rc = put(x, &end, sizeof(end));
	}
	return rc;
}

static size_t chunk_cap(const kvf_store *st)
{
	size_t kv = (size_t)SEQFILE_CHUNK_TOKENS * st->hdr.n_kv_heads * st->row_bytes;
	size_t xr = (size_t)SEQFILE_CHUNK_TOKENS * st->hdr.n_q_heads * st->row_bytes;
	size_t ids = (size_t)SEQFILE_IDS * sizeof(uint32_t);
	size_t m = kv > xr ? kv : xr;

	m = m > ids ? m : ids;
	return m > (2 * (size_t)st->hdr.n_layers + 1) * 8
		? m : (2 * (size_t)st->hdr.n_layers + 1) * 8;
}

/* no_drops - a sequence with groups kvf_h2o_evict dropped is refused: the
 * file format holds every token of a layer */
static kvf_status no_drops(kvf_store *st, const char *call, uint64_t id)
{
	struct seq *seq;
	kvf_status rc;

	pthread_rwlock_rdlock(&st->world);
	if ((rc = seq_get_locked(st, call, id, &seq)) == KVF_OK) {
		if (dropmark_any(st, seq, DROP_ANY))
			rc = kvf_fail(KVF_ENOTSUP,
				      "%s: sequence %llu has token groups kvf_h2o_evict dropped; a sequence file holds every token, so it cannot be exported",
				      call, (unsigned long long)id);
		seq_unlock_put(st, seq);
	}
	pthread_rwlock_unlock(&st->world);
	return rc;
}

kvf_status kvf_seq_export(kvf_store *st, uint64_t id, const char *path)
{
	const char *call = "kvf_seq_export";
	struct exporter x = { .st = st, .path = path, .fd = -1 };
	struct seqfile_header h;
	uint64_t *lens = NULL, n_ids = 0;
	uint32_t *ids = NULL, L;
	char *tmp_path = NULL;
	size_t cap;
	int made = 0; /* tmp_path exists */
	kvf_status rc;

	if (st == NULL || path == NULL)
		return kvf_fail(KVF_EINVAL, "%s: %s is NULL", call,
				st ? "path" : "store");
	if ((rc = store_check(st, call)) != KVF_OK)
		return rc;
	L = st->hdr.n_layers;
	if ((rc = no_drops(st, call, id)) != KVF_OK)
		return rc;
	if ((rc = prefix_tokens_copy(st, call, id, &ids, &n_ids)) != KVF_OK)
		return rc;
	cap = chunk_cap(st);
	lens = kvf_calloc(2 * (size_t)L + 1, sizeof(*lens));
	tmp_path = kvf_malloc(strlen(path) + 5);
	x.raw = kvf_malloc(cap);
	x.out = kvf_malloc(seqfile_pack_bound(cap));
	x.tmp = kvf_malloc(cap);
	if (!lens || !tmp_path || !x.raw || !x.out || !x.tmp) {
		rc = kvf_fail(KVF_ENOMEM, "%s: out of memory", call);
		goto out;
	}
	for (uint32_t l = 0; l < L && rc == KVF_OK; l++)
		if ((rc = kvf_seq_len(st, id, l, &lens[l])) == KVF_OK)
			rc = kvf_seq_x_len(st, id, l, &lens[L + l]);
	if (rc != KVF_OK)
		goto out;
	lens[2 * L] = n_ids;
	sprintf(tmp_path, "%s.tmp", path);
	x.fd = open(tmp_path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	if (x.fd < 0) {
		rc = kvf_fail_errno(KVF_EIO, errno, "%s: creating %s", call, tmp_path);
		goto out;
	}
	made = 1;
	memset(&h, 0, sizeof(h));
	memcpy(h.magic, SEQFILE_MAGIC, sizeof(h.magic));
	h.version = SEQFILE_VERSION;
	h.header_bytes = sizeof(h);
	h.n_layers = L;
	h.n_q_heads = st->hdr.n_q_heads;
	h.n_kv_heads = st->hdr.n_kv_heads;
	h.head_dim = st->hdr.head_dim;
	h.dtype = st->hdr.dtype;
	h.chunk_tokens = SEQFILE_CHUNK_TOKENS;
	h.seq = id;
	h.kv_codec = (uint32_t)st->codec;
	h.check = seqfile_header_check(&h);
	if ((rc = put(&x, &h, sizeof(h))) != KVF_OK ||
	    (rc = body(&x, id, lens, ids, n_ids)) != KVF_OK)
		goto out;
	if (fsync(x.fd) != 0) {
		rc = kvf_fail_errno(KVF_EIO, errno, "%s: fsync of %s", call, tmp_path);
		goto out;
	}
	if (close(x.fd) != 0) {
		x.fd = -1;
		rc = kvf_fail_errno(KVF_EIO, errno, "%s: closing %s", call, tmp_path);
		goto out;
	}
	x.fd = -1;
	if (rename(tmp_path, path) != 0)
		rc = kvf_fail_errno(KVF_EIO, errno, "%s: renaming %s to %s",
				    call, tmp_path, path);
out:
	if (x.fd >= 0)
		close(x.fd);
	if (rc != KVF_OK && made)
		unlink(tmp_path);
	kvf_free(tmp_path);
	kvf_free(lens);
	kvf_free(ids);
	kvf_free(x.raw);
	kvf_free(x.out);
	kvf_free(x.tmp);
	return rc;
}
