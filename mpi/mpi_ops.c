/*
 * mpi_ops.c - the collective sequence calls, append and read: the root
 * sends each rank its heads (HEAD) or its tokens (TOKEN) of an append,
 * and gathers a read from the ranks that hold the range.
 */
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mpi_int.h"

static kvf_status check_store(struct kvf_mpi_store *s, const char *call)
{
	if (!s)
		return mpi_fail(KVF_EINVAL, "%s: NULL store", call);
	return KVF_OK;
}

static kvf_status seq_change(struct kvf_mpi_store *s, uint64_t seq,
			     enum mpi_op op, const char *call)
{
	struct op_hdr h;
	uint64_t n;
	kvf_status rc, local = KVF_OK;

	if ((rc = check_store(s, call)) != KVF_OK)
		return rc;
	memset(&h, 0, sizeof(h));
	h.op = op;
	h.seq = seq;
	if (seq >= KVF_MPI_SEQ_RESERVED)
		h.status = mpi_fail(KVF_EINVAL,
				    "%s: sequence id %llu is "
				    "reserved (ids from %llu up)",
				    call, (unsigned long long)seq,
				    (unsigned long long)KVF_MPI_SEQ_RESERVED);
	rc = start_op(s, &h, op, call, &local);
	if (rc != KVF_OK)
		return rc;
	/* checked everywhere first, so a refusal changes nothing */
	if (local != KVF_OK)
		; /* a rank that made another call: its message is set */
	else if ((local = kvf_seq_len(s->local, h.seq, 0, &n)) == KVF_OK &&
		 op == OP_SEQ_CREATE)
		local = mpi_fail(KVF_EEXIST, "%s: rank %d: sequence %llu exists",
				 call, s->rank, (unsigned long long)h.seq);
	else if (op == OP_SEQ_CREATE && local == KVF_ENOENT)
		local = KVF_OK;
	else if (local != KVF_OK)
		mpi_fail_store(s, local, call);
	rc = agree(s, local, call);
	if (rc != KVF_OK)
		return rc;
	local = op == OP_SEQ_CREATE ? kvf_seq_create(s->local, h.seq) :
				      kvf_seq_free(s->local, h.seq);
	if (local != KVF_OK)
		mpi_fail_store(s, local, call);
	return agree(s, local, call);
}

kvf_status kvf_mpi_seq_create(kvf_mpi_store *s, uint64_t seq)
{
	return seq_change(s, seq, OP_SEQ_CREATE, "kvf_mpi_seq_create");
}

kvf_status kvf_mpi_seq_free(kvf_mpi_store *s, uint64_t seq)
{
	return seq_change(s, seq, OP_SEQ_FREE, "kvf_mpi_seq_free");
}

/* The sharded length from the ranks' local lengths. */
static uint64_t global_len(const struct kvf_mpi_store *s, const uint64_t *lens)
{
	uint64_t n = 0;

	if (s->shard == KVF_MPI_SHARD_HEAD)
		return lens[s->root];
	for (int r = 0; r < s->n_ranks; r++)
		n += lens[r];
	return n;
}

static kvf_status layer_check(struct kvf_mpi_store *s, struct op_hdr *h,
			      const char *call)
{
	if (h->layer >= s->model.n_layers)
		h->status = mpi_fail(KVF_ERANGE,
				     "%s: layer %u out of range "
				     "(the store has %u layers)",
				     call, h->layer, s->model.n_layers);
	return (kvf_status)h->status;
}

kvf_status kvf_mpi_seq_len(kvf_mpi_store *s, uint64_t seq, uint32_t layer,
			   uint64_t *n_tokens)
{
	const char *call = "kvf_mpi_seq_len";
	struct op_hdr h;
	uint64_t *lens;
	kvf_status rc, local;

	if ((rc = check_store(s, call)) != KVF_OK)
		return rc;
	memset(&h, 0, sizeof(h));
	h.op = OP_SEQ_LEN;
	h.seq = seq;
	h.layer = layer;
	if (layer_check(s, &h, call) == KVF_OK && !n_tokens &&
	    s->rank == s->root)
		h.status = mpi_fail(KVF_EINVAL, "%s: NULL n_tokens", call);
	rc = start_op(s, &h, OP_SEQ_LEN, call, &local);
	if (rc != KVF_OK)
		return rc;
	lens = malloc(sizeof(*lens) * (size_t)s->n_ranks);
	if (local == KVF_OK && !lens)
		local = mpi_fail(KVF_ENOMEM, "%s: out of memory", call);
	rc = lookup_lens(s, &h, lens, local, call);
	if (rc == KVF_OK && n_tokens)
		*n_tokens = global_len(s, lens);
	free(lens);
	return rc;
}

/* Per-rank byte counts and offsets of a scatter or gather. */
struct plan {
	int *cnt, *dsp;
	uint64_t *tok;  /* TOKEN: tokens of each rank */
	uint64_t *fill; /* TOKEN: tokens packed so far, per rank */
};

static kvf_status plan_alloc(struct kvf_mpi_store *s, struct plan *p,
			     const char *call)
{
	p->cnt = calloc((size_t)s->n_ranks, sizeof(*p->cnt));
	p->dsp = calloc((size_t)s->n_ranks, sizeof(*p->dsp));
	p->tok = calloc((size_t)s->n_ranks, sizeof(*p->tok));
	p->fill = calloc((size_t)s->n_ranks, sizeof(*p->fill));
	if (p->cnt && p->dsp && p->tok && p->fill)
		return KVF_OK;
	return mpi_fail(KVF_ENOMEM, "%s: out of memory", call);
}

static void plan_free(struct plan *p)
{
	free(p->cnt);
	free(p->dsp);
	free(p->tok);
	free(p->fill);
}

/*
 * Byte counts for tokens [t0, t0 + n) moved between the root and the
 * ranks: HEAD, every token of each rank's heads; TOKEN, each rank's
 * tokens of every head (heads = 1 for a read of one head).  One region
 * per rank, K then V.  KVF_ERANGE past INT_MAX bytes for one rank.
 */
static kvf_status plan_bytes(struct kvf_mpi_store *s, struct plan *p,
			     uint64_t t0, uint64_t n, uint32_t heads, int kinds,
			     const char *call)
{
	size_t row = (size_t)s->model.head_dim * s->elt;
	uint64_t off = 0;

	for (int r = 0; r < s->n_ranks; r++) {
		uint64_t b;
		if (s->shard == KVF_MPI_SHARD_HEAD) {
			p->tok[r] = n;
			b = n * (heads ? heads : s->nkv[r]) * row;
		} else {
			p->tok[r] = token_share(s, r, t0 + n) -
				    token_share(s, r, t0);
			b = p->tok[r] * (heads ? heads : s->model.n_kv_heads) *
			    row;
		}
		b *= (uint64_t)kinds;
		if (b > INT_MAX || off > INT_MAX)
			return mpi_fail(KVF_ERANGE,
					"%s: %llu bytes for rank %d "
					"in one call, more than MPI's %d; use "
					"fewer tokens per call",
					call, (unsigned long long)b, r,
					INT_MAX);
		p->cnt[r] = (int)b;
		p->dsp[r] = (int)off;
		off += b;
	}
	return KVF_OK;
}

/* At the root: pack k and v into each rank's region. */
static void pack_append(struct kvf_mpi_store *s, const struct plan *p,
			uint64_t t0, uint32_t n, const char *k, const char *v,
			char *dst)
{
	size_t row = (size_t)s->model.head_dim * s->elt;
	size_t tok = row * s->model.n_kv_heads;

	if (s->shard == KVF_MPI_SHARD_HEAD) {
		for (int r = 0; r < s->n_ranks; r++) {
			size_t part = row * s->nkv[r], half = part * n;
			char *d = dst + p->dsp[r];
			for (uint32_t i = 0; i < n; i++) {
				memcpy(d + i * part,
				       k + i * tok + s->kv0[r] * row, part);
				memcpy(d + half + i * part,
				       v + i * tok + s->kv0[r] * row, part);
			}
		}
		return;
	}
	uint64_t *fill = p->fill;

	memset(fill, 0, sizeof(*fill) * (size_t)s->n_ranks);
	for (uint32_t i = 0; i < n; i++) {
		int r = token_owner(s, t0 + i);
		char *d = dst + p->dsp[r];
		memcpy(d + fill[r] * tok, k + i * tok, tok);
		memcpy(d + (p->tok[r] + fill[r]) * tok, v + i * tok, tok);
		fill[r]++;
	}
}

/*
 * take_back - an append some rank's store refused after the checks (a
 * full device, an I/O error), rc its status on every rank: the ranks
 * whose part went in cut the layer back to the length they had, old (a
 * copy, as the repair at open cuts: mpi_repair.c), so every rank agrees
 * again without a reopen.  Returns rc with the failing rank's message, or
 * the status of a cut that failed too (the layer is then refused until a
 * reopen cuts it back, as before).
 */
static kvf_status take_back(struct kvf_mpi_store *s, const struct op_hdr *h,
			    const struct plan *p, uint64_t old, kvf_status mine,
			    kvf_status rc, const char *call)
{
	char why[1024];
	kvf_status back = KVF_OK;

	snprintf(why, sizeof(why), "%s", kvf_mpi_last_error());
	if (mine == KVF_OK && p->tok[s->rank])
		back = repair_cut_layer(s, h->seq, h->layer, old);
	back = agree(s, back, call);
	if (back != KVF_OK)
		return back;
	return mpi_fail(rc, "%s; the other ranks took their parts back", why);
}

kvf_status kvf_mpi_append(kvf_mpi_store *s, uint64_t seq, uint32_t layer,
			  uint32_t n_tokens, const void *k, const void *v)
{
	const char *call = "kvf_mpi_append";
	struct op_hdr h;
	struct plan p = { 0 };
	uint64_t *lens = NULL, L;
	char *send = NULL, *mine = NULL;
	size_t total;
	kvf_status rc, local = KVF_OK;

	if ((rc = check_store(s, call)) != KVF_OK)
		return rc;
	memset(&h, 0, sizeof(h));
	h.op = OP_APPEND;
	h.seq = seq;
	h.layer = layer;
	h.n_tokens = n_tokens;
	if (layer_check(s, &h, call) == KVF_OK && s->rank == s->root &&
	    (!k || !v))
		h.status = mpi_fail(KVF_EINVAL, "%s: NULL %s on the root", call,
				    !k ? "k" : "v");
	rc = start_op(s, &h, OP_APPEND, call, &local);
	if (rc != KVF_OK)
		return rc;
	s->stats.append_calls++;
	lens = malloc(sizeof(*lens) * (size_t)s->n_ranks);
	if (local == KVF_OK)
		local = lens ? plan_alloc(s, &p, call) :
			       mpi_fail(KVF_ENOMEM, "%s: out of memory", call);
	rc = lookup_lens(s, &h, lens, local, call);
	if (rc != KVF_OK)
		goto out;
	L = global_len(s, lens);
	local = plan_bytes(s, &p, L, h.n_tokens, 0, 2, call);
	total = local == KVF_OK ? (size_t)p.dsp[s->n_ranks - 1] +
					  (size_t)p.cnt[s->n_ranks - 1] :
				  0;
	if (local == KVF_OK && s->rank == s->root &&
	    !(send = malloc(total + 1)))
		local = mpi_fail(KVF_ENOMEM, "%s: out of memory", call);
	if (local == KVF_OK && !(mine = malloc((size_t)p.cnt[s->rank] + 1)))
		local = mpi_fail(KVF_ENOMEM, "%s: out of memory", call);
	rc = agree(s, local, call);
	if (rc != KVF_OK)
		goto out;
	if (s->rank == s->root)
		pack_append(s, &p, L, h.n_tokens, k, v, send);
	rc = c_scatterv(s, send, p.cnt, p.dsp, mine, p.cnt[s->rank], CAT_KV);
	if (rc != KVF_OK)
		goto out;
	if (p.tok[s->rank]) {
		size_t half = (size_t)p.cnt[s->rank] / 2;
		local = kvf_append(s->local, h.seq, h.layer,
				   (uint32_t)p.tok[s->rank], mine, mine + half);
		if (local != KVF_OK)
			mpi_fail_store(s, local, call);
	}
	rc = agree(s, local, call);
	if (rc != KVF_OK && rc != KVF_EFATAL)
		rc = take_back(s, &h, &p, lens[s->rank], local, rc, call);
out:
	free(send);
	free(mine);
	free(lens);
	plan_free(&p);
	return rc;
}

/* At the root: the ranks' parts of a read back into token order. */
static void unpack_read(struct kvf_mpi_store *s, const struct plan *p,
			const struct op_hdr *h, const char *src, char *k_out,
			char *v_out)
{
	size_t row = (size_t)s->model.head_dim * s->elt;
	uint64_t n = h->t1 - h->t0, *fill = p->fill;

	if (s->shard == KVF_MPI_SHARD_HEAD) {
		int r = 0;
		while (r + 1 < s->n_ranks && s->kv0[r + 1] <= h->kv_head)
			r++;
		if (k_out)
			memcpy(k_out, src + p->dsp[r], n * row);
		if (v_out)
			memcpy(v_out, src + p->dsp[r] + (k_out ? n * row : 0),
			       n * row);
		return;
	}
	memset(fill, 0, sizeof(*fill) * (size_t)s->n_ranks);
	for (uint64_t i = 0; i < n; i++) {
		int r = token_owner(s, h->t0 + i);
		const char *base = src + p->dsp[r];
		if (k_out)
			memcpy(k_out + i * row, base + fill[r] * row, row);
		if (v_out)
			memcpy(v_out + i * row,
			       base + (k_out ? p->tok[r] * row : 0) +
				       fill[r] * row,
			       row);
		fill[r]++;
	}
}

/* This rank's part of a read: its local token range of its head. */
static kvf_status read_part(struct kvf_mpi_store *s, const struct op_hdr *h,
			    const struct plan *p, char *mine)
{
	uint64_t a = h->t0, b = h->t1;
	uint32_t head = h->kv_head;
	size_t row = (size_t)s->model.head_dim * s->elt;
	kvf_status rc;

	if (s->shard == KVF_MPI_SHARD_HEAD) {
		if (head < s->kv0[s->rank] ||
		    head >= s->kv0[s->rank] + s->nkv[s->rank] ||
		    !p->cnt[s->rank])
			return KVF_OK;
		head -= s->kv0[s->rank];
	} else {
		a = token_share(s, s->rank, h->t0);
		b = token_share(s, s->rank, h->t1);
		if (a == b)
			return KVF_OK;
	}
	rc = kvf_read(s->local, h->seq, h->layer, head, a, b,
		      (h->want & 1) ? mine : NULL,
		      (h->want & 2) ?
			      mine + ((h->want & 1) ? (b - a) * row : 0) :
			      NULL);
	return rc == KVF_OK ? rc : mpi_fail_store(s, rc, "kvf_mpi_read");
}

kvf_status kvf_mpi_read(kvf_mpi_store *s, uint64_t seq, uint32_t layer,
			uint32_t kv_head, uint64_t t0, uint64_t t1, void *k_out,
			void *v_out)
{
	const char *call = "kvf_mpi_read";
	struct op_hdr h;
	struct plan p = { 0 };
	uint64_t *lens = NULL, L;
	char *recv = NULL, *mine = NULL;
	kvf_status rc, local;

	if ((rc = check_store(s, call)) != KVF_OK)
		return rc;
	memset(&h, 0, sizeof(h));
	h.op = OP_READ;
	h.seq = seq;
	h.layer = layer;
	h.kv_head = kv_head;
	h.t0 = t0;
	h.t1 = t1;
	h.want = (k_out ? 1u : 0u) | (v_out ? 2u : 0u);
	if (layer_check(s, &h, call) != KVF_OK)
		;
	else if (kv_head >= s->model.n_kv_heads)
		h.status = mpi_fail(KVF_ERANGE,
				    "%s: KV head %u out of range "
				    "(the model has %u)",
				    call, kv_head, s->model.n_kv_heads);
	else if (t0 > t1)
		h.status = mpi_fail(KVF_EINVAL,
				    "%s: reversed range [%llu, %llu)", call,
				    (unsigned long long)t0,
				    (unsigned long long)t1);
	else if (s->rank == s->root && !h.want)
		h.status = mpi_fail(KVF_EINVAL,
				    "%s: k_out and v_out both NULL "
				    "on the root",
				    call);
	rc = start_op(s, &h, OP_READ, call, &local);
	if (rc != KVF_OK)
		return rc;
	lens = malloc(sizeof(*lens) * (size_t)s->n_ranks);
	if (local == KVF_OK)
		local = lens ? plan_alloc(s, &p, call) :
			       mpi_fail(KVF_ENOMEM, "%s: out of memory", call);
	rc = lookup_lens(s, &h, lens, local, call);
	if (rc != KVF_OK)
		goto out;
	L = s->shard == KVF_MPI_SHARD_HEAD ? lens[s->root] :
					     global_len(s, lens);
	if (h.t1 > L)
		local = mpi_fail(KVF_ERANGE,
				 "%s: range [%llu, %llu) past the "
				 "end of layer %u (%llu tokens)",
				 call, (unsigned long long)h.t0,
				 (unsigned long long)h.t1, h.layer,
				 (unsigned long long)L);
	else
		local = plan_bytes(s, &p, h.t0, h.t1 - h.t0, 1,
				   (h.want & 1) + (h.want >> 1), call);
	if (local == KVF_OK && s->shard == KVF_MPI_SHARD_HEAD)
		for (int r = 0; r < s->n_ranks; r++)
			if (h.kv_head < s->kv0[r] ||
			    h.kv_head >= s->kv0[r] + s->nkv[r])
				p.cnt[r] = 0;
	if (local == KVF_OK && s->shard == KVF_MPI_SHARD_HEAD)
		for (int r = 0, off = 0; r < s->n_ranks; r++) {
			p.dsp[r] = off;
			off += p.cnt[r];
		}
	if (local == KVF_OK && s->rank == s->root &&
	    !(recv = malloc((size_t)p.dsp[s->n_ranks - 1] +
			    (size_t)p.cnt[s->n_ranks - 1] + 1)))
		local = mpi_fail(KVF_ENOMEM, "%s: out of memory", call);
	if (local == KVF_OK && !(mine = malloc((size_t)p.cnt[s->rank] + 1)))
		local = mpi_fail(KVF_ENOMEM, "%s: out of memory", call);
	if (local == KVF_OK)
		local = read_part(s, &h, &p, mine);
	rc = agree(s, local, call);
	if (rc == KVF_OK)
		rc = c_gatherv(s, mine, p.cnt[s->rank], recv, p.cnt, p.dsp,
			       CAT_KV);
	if (rc == KVF_OK && s->rank == s->root)
		unpack_read(s, &p, &h, recv, k_out, v_out);
out:
	free(recv);
	free(mine);
	free(lens);
	plan_free(&p);
	return rc;
}
