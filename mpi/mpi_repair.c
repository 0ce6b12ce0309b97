/*
 * mpi_repair.c - making the ranks' sequences consistent at open, after a
 * crash of some or all ranks.
 *
 * Each rank's store keeps, per sequence and layer, a prefix of what was
 * appended to it that covers at least its last kvf_sync.  After a kill
 * the ranks may hold different prefixes; the sharded sequence is then
 * the longest global prefix L that every rank holds its share of, and a
 * rank holding more than its share of L is cut back.  kvflash has no
 * truncate, so the cut is a copy: fork the first n tokens (n the least
 * target over the layers) into the reserved sequence TMP, append each
 * layer's tokens [n, target) from the original, sync; record the repair
 * in DIR/rank-R.repair; free the original, rebuild it from TMP the same
 * way, sync, free TMP, remove the record.  A crash at any point leaves
 * either the original (TMP is then dropped at the next open) or TMP and
 * the record (the rebuild is then redone).
 * A sequence missing on some rank (a create or free cut short) is freed
 * on every rank.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "mpi_int.h"

#define TMP_SEQ KVF_MPI_SEQ_RESERVED
#define COPY_TOKENS 256u

static void record_path(const struct kvf_mpi_store *s, const char *dir,
			char *buf, size_t cap)
{
	snprintf(buf, cap, "%s/rank-%d.repair", dir, s->rank);
}

/* Tokens [from, to) of one layer of src_seq appended to dst_seq. */
static kvf_status copy_tokens(struct kvf_mpi_store *s, uint64_t src_seq,
			      uint64_t dst_seq, uint32_t layer, uint64_t from,
			      uint64_t to)
{
	uint32_t nkv = s->local_model.n_kv_heads;
	size_t row = (size_t)s->local_model.head_dim * s->elt;
	size_t tok = row * nkv;
	char *k = malloc(tok * COPY_TOKENS * 2), *v, *hk, *hv;
	kvf_status rc = KVF_OK;

	if (!k)
		return mpi_fail(KVF_ENOMEM, "kvf_mpi_open: out of memory");
	v = k + tok * COPY_TOKENS;
	hk = malloc(row * COPY_TOKENS * 2);
	if (!hk) {
		free(k);
		return mpi_fail(KVF_ENOMEM, "kvf_mpi_open: out of memory");
	}
	hv = hk + row * COPY_TOKENS;
	for (uint64_t t = from; t < to && rc == KVF_OK; t += COPY_TOKENS) {
		uint32_t n =
			(uint32_t)(to - t < COPY_TOKENS ? to - t : COPY_TOKENS);
		for (uint32_t h = 0; h < nkv && rc == KVF_OK; h++) {
			rc = kvf_read(s->local, src_seq, layer, h, t, t + n, hk,
				      hv);
			for (uint32_t i = 0; rc == KVF_OK && i < n; i++) {
				memcpy(k + i * tok + h * row, hk + i * row,
				       row);
				memcpy(v + i * tok + h * row, hv + i * row,
				       row);
			}
		}
		if (rc == KVF_OK)
			rc = kvf_append(s->local, dst_seq, layer, n, k, v);
	}
	free(hk);
	free(k);
	if (rc != KVF_OK)
		mpi_fail_store(s, rc, "kvf_mpi_open: repair");
	return rc;
}

/* dst becomes src's first target[l] tokens of each layer l. */
static kvf_status rebuild(struct kvf_mpi_store *s, uint64_t src, uint64_t dst,
			  const uint64_t *target)
{
	uint64_t n = UINT64_MAX;
	kvf_status rc;

	for (uint32_t l = 0; l < s->model.n_layers; l++)
		n = target[l] < n ? target[l] : n;
	rc = kvf_seq_fork(s->local, src, dst, n);
	if (rc != KVF_OK)
		return mpi_fail_store(s, rc, "kvf_mpi_open: repair");
	for (uint32_t l = 0; l < s->model.n_layers && rc == KVF_OK; l++)
		if (target[l] > n)
			rc = copy_tokens(s, src, dst, l, n, target[l]);
	if (rc == KVF_OK && (rc = kvf_sync(s->local)) != KVF_OK)
		mpi_fail_store(s, rc, "kvf_mpi_open: repair");
	return rc;
}

static kvf_status layer_lens(struct kvf_mpi_store *s, uint64_t seq,
			     uint64_t *lens)
{
	kvf_status rc = KVF_OK;

	for (uint32_t l = 0; l < s->model.n_layers && rc == KVF_OK; l++)
		rc = kvf_seq_len(s->local, seq, l, &lens[l]);
	if (rc != KVF_OK)
		mpi_fail_store(s, rc, "kvf_mpi_open: repair");
	return rc;
}

/* Second half of a cut: seq from TMP, then TMP and the record go. */
static kvf_status finish(struct kvf_mpi_store *s, const char *rec, uint64_t seq,
			 uint64_t *lens)
{
	kvf_status rc = layer_lens(s, TMP_SEQ, lens);

	if (rc == KVF_OK && (rc = kvf_seq_free(s->local, seq)) == KVF_ENOENT)
		rc = KVF_OK;
	if (rc != KVF_OK)
		return mpi_fail_store(s, rc, "kvf_mpi_open: repair");
	rc = rebuild(s, TMP_SEQ, seq, lens);
	if (rc == KVF_OK && (rc = kvf_seq_free(s->local, TMP_SEQ)) == KVF_OK)
		rc = kvf_sync(s->local);
	if (rc != KVF_OK)
		return mpi_fail_store(s, rc, "kvf_mpi_open: repair");
	if (unlink(rec) != 0)
		return mpi_fail(KVF_EIO, "kvf_mpi_open: cannot remove %s: %s",
				rec, strerror(errno));
	return KVF_OK;
}

/* Cut seq back to target[layer] tokens (local; the record makes it safe). */
static kvf_status cut(struct kvf_mpi_store *s, const char *dir, uint64_t seq,
		      const uint64_t *target, uint64_t *scratch)
{
	char rec[4096], text[64];
	int fd, len;
	kvf_status rc;

	rc = rebuild(s, seq, TMP_SEQ, target);
	if (rc != KVF_OK)
		return rc;
	record_path(s, dir, rec, sizeof(rec));
	len = snprintf(text, sizeof(text), "%llu\n", (unsigned long long)seq);
	fd = open(rec, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	if (fd < 0 || write(fd, text, (size_t)len) != len || fsync(fd) != 0) {
		int e = errno;
		if (fd >= 0)
			close(fd);
		return mpi_fail(KVF_EIO, "kvf_mpi_open: cannot write %s: %s",
				rec, strerror(e));
	}
	close(fd);
	s->stats.repaired_seqs++;
	return finish(s, rec, seq, scratch);
}

kvf_status repair_cut_layer(struct kvf_mpi_store *s, uint64_t seq,
			    uint32_t layer, uint64_t len)
{
	uint64_t *target = calloc(2 * (size_t)s->model.n_layers, sizeof(*target));
	kvf_status rc;

	if (!target)
		return mpi_fail(KVF_ENOMEM, "kvf_mpi_append: out of memory");
	rc = layer_lens(s, seq, target);
	if (rc == KVF_OK && target[layer] > len) {
		target[layer] = len;
		rc = cut(s, s->dir, seq, target, target + s->model.n_layers);
	}
	free(target);
	return rc;
}

/* At open, before anything else: finish or drop an interrupted cut. */
kvf_status repair_resume(struct kvf_mpi_store *s, const char *dir)
{
	char rec[4096], text[64];
	unsigned long long seq;
	uint64_t *lens, n;
	FILE *f;
	kvf_status rc = KVF_OK;

	record_path(s, dir, rec, sizeof(rec));
	f = fopen(rec, "r");
	if (!f) {
		rc = kvf_seq_len(s->local, TMP_SEQ, 0, &n);
		if (rc == KVF_ENOENT)
			return KVF_OK;
		if (rc == KVF_OK &&
		    (rc = kvf_seq_free(s->local, TMP_SEQ)) == KVF_OK)
			rc = kvf_sync(s->local);
		return rc == KVF_OK ? rc :
				      mpi_fail_store(s, rc, "kvf_mpi_open");
	}
	if (!fgets(text, sizeof(text), f) || sscanf(text, "%llu", &seq) != 1 ||
	    seq >= TMP_SEQ) {
		fclose(f);
		return mpi_fail(KVF_ECORRUPT,
				"kvf_mpi_open: %s does not name "
				"a sequence",
				rec);
	}
	fclose(f);
	lens = calloc(s->model.n_layers, sizeof(*lens));
	if (!lens)
		return mpi_fail(KVF_ENOMEM, "kvf_mpi_open: out of memory");
	rc = finish(s, rec, seq, lens);
	free(lens);
	return rc;
}

/* The longest global length whose share rank r holds with len tokens. */
static uint64_t longest(const struct kvf_mpi_store *s, int r, uint64_t len)
{
	if (s->shard == KVF_MPI_SHARD_HEAD)
		return len;
	return ((len / s->block) * (uint64_t)s->n_ranks + (uint64_t)r) *
		       s->block +
	       len % s->block;
}

static uint64_t share(const struct kvf_mpi_store *s, int r, uint64_t n)
{
	return s->shard == KVF_MPI_SHARD_HEAD ? n : token_share(s, r, n);
}

/* Sequences every rank has; the rest are freed here.  *ids is sorted. */
static kvf_status common_seqs(struct kvf_mpi_store *s, uint64_t **ids,
			      size_t *n_ids)
{
	size_t n = 0, cap, total = 0, kept = 0;
	uint64_t *mine = NULL, *all = NULL, n64;
	uint64_t *counts = NULL;
	int *cnt = NULL, *dsp = NULL, mrc;
	kvf_status rc;

	rc = kvf_seq_list(s->local, NULL, 0, &n);
	cap = n;
	mine = malloc((cap + 1) * sizeof(*mine));
	if (rc == KVF_OK && !mine)
		rc = KVF_ENOMEM;
	if (rc == KVF_OK)
		rc = kvf_seq_list(s->local, mine, cap, &n);
	if (rc != KVF_OK)
		mpi_fail_store(s, rc, "kvf_mpi_open");
	n = n < cap ? n : cap;
	rc = agree(s, rc, "kvf_mpi_open");
	counts = calloc((size_t)s->n_ranks, sizeof(*counts));
	cnt = calloc((size_t)s->n_ranks, sizeof(*cnt));
	dsp = calloc((size_t)s->n_ranks, sizeof(*dsp));
	rc = agree(s,
		   rc == KVF_OK && (!counts || !cnt || !dsp) ?
			   mpi_fail(KVF_ENOMEM, "kvf_mpi_open: out of memory") :
			   rc,
		   "kvf_mpi_open");
	n64 = n;
	if (rc == KVF_OK)
		rc = c_allgather(s, &n64, sizeof(n64), counts, CAT_CTL);
	for (int r = 0; rc == KVF_OK && r < s->n_ranks; r++) {
		cnt[r] = (int)(counts[r] * sizeof(uint64_t));
		dsp[r] = (int)(total * sizeof(uint64_t));
		total += counts[r];
	}
	all = malloc((total + 1) * sizeof(*all));
	if (rc == KVF_OK)
		rc = agree(s,
			   all ? KVF_OK :
				 mpi_fail(KVF_ENOMEM, "kvf_mpi_open: "
						      "out of memory"),
			   "kvf_mpi_open");
	if (rc == KVF_OK) {
		mrc = MPI_Allgatherv(mine, (int)(n * sizeof(uint64_t)),
				     MPI_BYTE, all, cnt, dsp, MPI_BYTE,
				     s->comm);
		s->stats.ctl_bytes_sent += n * 8 * (uint64_t)(s->n_ranks - 1);
		s->stats.ctl_bytes_recv += (total - n) * 8;
		if (mrc != MPI_SUCCESS)
			rc = mpi_call_failed(mrc, "MPI_Allgatherv");
	}
	/* a seq of mine is kept if every rank lists it (lists are sorted) */
	for (size_t i = 0; rc == KVF_OK && i < n; i++) {
		int everywhere = 1;
		for (int r = 0; r < s->n_ranks && everywhere; r++) {
			uint64_t *lo = all + dsp[r] / 8, *hi = lo + counts[r];
			while (lo < hi && *lo < mine[i])
				lo++;
			everywhere = lo < hi && *lo == mine[i];
		}
		if (mine[i] >= TMP_SEQ)
			continue;
		if (everywhere) {
			mine[kept++] = mine[i];
		} else if ((rc = kvf_seq_free(s->local, mine[i])) != KVF_OK) {
			mpi_fail_store(s, rc, "kvf_mpi_open: repair");
		} else {
			s->stats.repaired_seqs++;
		}
	}
	free(all);
	free(counts);
	free(cnt);
	free(dsp);
	if (rc != KVF_OK) {
		free(mine);
		return rc;
	}
	*ids = mine;
	*n_ids = kept;
	return KVF_OK;
}

/* At open, collectively: common sequences, each cut to a common prefix. */
kvf_status repair_all(struct kvf_mpi_store *s, const char *dir)
{
	uint32_t nl = s->model.n_layers;
	uint64_t *ids = NULL, *lens = NULL, *all = NULL, *target = NULL;
	size_t n = 0;
	kvf_status rc;

	rc = agree(s, common_seqs(s, &ids, &n), "kvf_mpi_open");
	if (rc != KVF_OK)
		return rc;
	lens = calloc(n * nl + 1, sizeof(*lens));
	all = calloc((n * nl + 1) * (size_t)s->n_ranks, sizeof(*all));
	target = calloc(2 * (size_t)nl, sizeof(*target));
	if (!lens || !all || !target)
		rc = mpi_fail(KVF_ENOMEM, "kvf_mpi_open: out of memory");
	for (size_t i = 0; rc == KVF_OK && i < n; i++)
		rc = layer_lens(s, ids[i], lens + i * nl);
	rc = agree(s, rc, "kvf_mpi_open");
	if (rc == KVF_OK)
		rc = c_allgather(s, lens, (int)((n * nl + 1) * sizeof(*lens)),
				 all, CAT_CTL);
	for (size_t i = 0; rc == KVF_OK && i < n; i++) {
		int need = 0;
		for (uint32_t l = 0; l < nl; l++) {
			uint64_t g = UINT64_MAX;
			for (int r = 0; r < s->n_ranks; r++) {
				uint64_t x =
					longest(s, r,
						all[(size_t)r * (n * nl + 1) +
						    i * nl + l]);
				g = x < g ? x : g;
			}
			target[l] = share(s, s->rank, g);
			need |= target[l] < lens[i * nl + l];
		}
		if (need)
			rc = cut(s, dir, ids[i], target, target + nl);
	}
	rc = agree(s, rc, "kvf_mpi_open");
	free(ids);
	free(lens);
	free(all);
	free(target);
	return rc;
}
