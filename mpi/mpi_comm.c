/*
 * mpi_comm.c - the library's thread-local message, the collectives it
 * uses (each counting the bytes it delivers, by kind), the status
 * agreement that makes every rank return the same status, and the
 * placement arithmetic (which rank holds which tokens) it checks lengths by.
 *
 * Counting rule (kvflash_mpi.h, kvf_mpi_stats): a message of s bytes
 * counts s sent at its source and s received at its destination; a
 * rank's own part of a scatter or gather never leaves it and is not
 * counted.  The byte counts are those of the call, not of whatever tree
 * Open MPI uses underneath.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mpi_int.h"

#define MSG_LEN 512

static _Thread_local char last_msg[MSG_LEN];

const char *kvf_mpi_last_error(void)
{
	return last_msg;
}

kvf_status mpi_fail(kvf_status status, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(last_msg, sizeof(last_msg), fmt, ap);
	va_end(ap);
	return status;
}

/* The local store failed: keep its message under the call's name. */
kvf_status mpi_fail_store(const struct kvf_mpi_store *s, kvf_status status,
			  const char *call)
{
	return mpi_fail(status, "%s: rank %d: %s", call, s->rank,
			kvf_last_error());
}

kvf_status mpi_call_failed(int rc, const char *what)
{
	char err[MPI_MAX_ERROR_STRING];
	int len = 0;

	if (MPI_Error_string(rc, err, &len) != MPI_SUCCESS)
		snprintf(err, sizeof(err), "MPI error %d", rc);
	return mpi_fail(KVF_EIO, "kvflash_mpi: %s failed: %s", what, err);
}

static void count(struct kvf_mpi_store *s, enum mpi_cat cat, uint64_t sent,
		  uint64_t recv)
{
	kvf_mpi_stats *t = &s->stats;

	switch (cat) {
	case CAT_Q:
		t->q_bytes_sent += sent;
		t->q_bytes_recv += recv;
		break;
	case CAT_OUT:
		t->out_bytes_sent += sent;
		t->out_bytes_recv += recv;
		break;
	case CAT_KV:
		t->kv_bytes_sent += sent;
		t->kv_bytes_recv += recv;
		break;
	case CAT_CTL:
		t->ctl_bytes_sent += sent;
		t->ctl_bytes_recv += recv;
		break;
	}
}

/* A failed MPI call leaves the ranks out of step: the handle stops. */
static kvf_status checked(struct kvf_mpi_store *s, int rc, const char *what)
{
	if (rc == MPI_SUCCESS)
		return KVF_OK;
	s->fatal = 1;
	return mpi_call_failed(rc, what);
}

kvf_status c_bcast(struct kvf_mpi_store *s, void *buf, int bytes,
		   enum mpi_cat cat)
{
	int rc = MPI_Bcast(buf, bytes, MPI_BYTE, s->root, s->comm);

	if (s->rank == s->root)
		count(s, cat, (uint64_t)bytes * (uint64_t)(s->n_ranks - 1), 0);
	else
		count(s, cat, 0, (uint64_t)bytes);
	return checked(s, rc, "MPI_Bcast");
}

kvf_status c_allgather(struct kvf_mpi_store *s, const void *mine, int bytes,
		       void *all, enum mpi_cat cat)
{
	int rc = MPI_Allgather(mine, bytes, MPI_BYTE, all, bytes, MPI_BYTE,
			       s->comm);
	uint64_t other = (uint64_t)bytes * (uint64_t)(s->n_ranks - 1);

	count(s, cat, other, other);
	return checked(s, rc, "MPI_Allgather");
}

kvf_status c_allreduce_max(struct kvf_mpi_store *s, const uint64_t *mine,
			   uint64_t *out, int n)
{
	int rc = MPI_Allreduce(mine, out, n, MPI_UINT64_T, MPI_MAX, s->comm);
	uint64_t bytes = (uint64_t)n * sizeof(*mine);

	count(s, CAT_CTL, bytes, bytes);
	return checked(s, rc, "MPI_Allreduce");
}

kvf_status c_scatterv(struct kvf_mpi_store *s, const void *src,
		      const int *counts, const int *displs, void *dst,
		      int bytes, enum mpi_cat cat)
{
	int rc = MPI_Scatterv(src, counts, displs, MPI_BYTE, dst, bytes,
			      MPI_BYTE, s->root, s->comm);

	if (s->rank == s->root) {
		uint64_t sent = 0;
		for (int r = 0; r < s->n_ranks; r++)
			if (r != s->root)
				sent += (uint64_t)counts[r];
		count(s, cat, sent, 0);
	} else {
		count(s, cat, 0, (uint64_t)bytes);
	}
	return checked(s, rc, "MPI_Scatterv");
}

kvf_status c_gatherv(struct kvf_mpi_store *s, const void *src, int bytes,
		     void *dst, const int *counts, const int *displs,
		     enum mpi_cat cat)
{
	int rc = MPI_Gatherv(src, bytes, MPI_BYTE, dst, counts, displs,
			     MPI_BYTE, s->root, s->comm);

	if (s->rank == s->root) {
		uint64_t recv = 0;
		for (int r = 0; r < s->n_ranks; r++)
			if (r != s->root)
				recv += (uint64_t)counts[r];
		count(s, cat, 0, recv);
	} else {
		count(s, cat, (uint64_t)bytes, 0);
	}
	return checked(s, rc, "MPI_Gatherv");
}

/*
 * agree_known - statuses already gathered (st[n_ranks]): the lowest
 * failing rank's status and message become every rank's.
 */
static kvf_status agree_known(struct kvf_mpi_store *s, const int32_t *st,
			      const char *call)
{
	char msg[MSG_LEN];
	kvf_status rc;
	int bad = -1, mpi_rc;

	for (int r = 0; r < s->n_ranks && bad < 0; r++)
		if (st[r] != KVF_OK)
			bad = r;
	if (bad < 0)
		return KVF_OK;
	/* the failing rank's message, as it stands, to everyone */
	memcpy(msg, last_msg, sizeof(msg));
	mpi_rc = MPI_Bcast(msg, (int)sizeof(msg), MPI_BYTE, bad, s->comm);
	if (s->rank == bad)
		count(s, CAT_CTL, sizeof(msg) * (size_t)(s->n_ranks - 1), 0);
	else
		count(s, CAT_CTL, 0, sizeof(msg));
	rc = checked(s, mpi_rc, "MPI_Bcast");
	if (rc != KVF_OK)
		return rc;
	msg[sizeof(msg) - 1] = '\0';
	if (strncmp(msg, call, strlen(call)) == 0)
		return mpi_fail((kvf_status)st[bad], "%s", msg);
	/* a message of another call (the repair at open, say) */
	return mpi_fail((kvf_status)st[bad], "%s: rank %d: %s", call, bad, msg);
}

/*
 * agree - every rank's status to every rank; the lowest failing rank's
 * status and message become every rank's.  KVF_OK only if all are.
 */
kvf_status agree(struct kvf_mpi_store *s, kvf_status local, const char *call)
{
	int32_t mine = (int32_t)local, *st;
	kvf_status rc;

	st = malloc(sizeof(*st) * (size_t)s->n_ranks);
	if (!st)
		return mpi_fail(KVF_ENOMEM, "%s: out of memory", call);
	rc = c_allgather(s, &mine, (int)sizeof(mine), st, CAT_CTL);
	if (rc == KVF_OK)
		rc = agree_known(s, st, call);
	free(st);
	return rc;
}

/*
 * start_op - broadcast the root's header: the root's arguments, and its
 * own argument check.  A refusal there ends the call on every rank
 * (returned, with the root's message).  Otherwise *local says whether
 * this rank made the same call; the caller agrees on it in its next
 * exchange (lookup_lens or agree), saving a round per call.
 * h holds the root's on entry at the root, the root's everywhere after.
 */
kvf_status start_op(struct kvf_mpi_store *s, struct op_hdr *h, enum mpi_op op,
		    const char *call, kvf_status *local)
{
	kvf_status rc;
	int32_t *st;

	*local = KVF_OK;
	if (s->fatal)
		return mpi_fail(KVF_EFATAL,
				"%s: an earlier MPI call failed; "
				"close and reopen",
				call);
	if (s->rank != s->root)
		memset(h, 0, sizeof(*h));
	rc = c_bcast(s, h, (int)sizeof(*h), CAT_CTL);
	if (rc != KVF_OK)
		return rc;
	if (h->status != KVF_OK) {
		/* every rank knows the root refused; only its message moves */
		st = calloc((size_t)s->n_ranks, sizeof(*st));
		if (!st) {
			s->fatal = 1;
			return mpi_fail(KVF_EFATAL, "%s: out of memory", call);
		}
		st[s->root] = h->status;
		rc = agree_known(s, st, call);
		free(st);
		return rc;
	}
	if (h->op != (uint32_t)op)
		*local = mpi_fail(KVF_EINVAL,
				  "%s: rank %d made this call while "
				  "the root made call %u: every rank must make "
				  "the same collective calls in the same order",
				  call, s->rank, h->op);
	return KVF_OK;
}

/* Tokens among the first n of a layer that rank r holds (TOKEN). */
uint64_t token_share(const struct kvf_mpi_store *s, int r, uint64_t n)
{
	uint64_t cycle = (uint64_t)s->block * (uint64_t)s->n_ranks;
	uint64_t rem = n % cycle, lo = (uint64_t)r * s->block, part = 0;

	if (rem > lo)
		part = rem - lo < s->block ? rem - lo : s->block;
	return n / cycle * s->block + part;
}

int token_owner(const struct kvf_mpi_store *s, uint64_t t)
{
	return (int)((t / s->block) % (uint64_t)s->n_ranks);
}

/* rank_share - what rank r should hold of a sequence layer whose ranks
 * hold lens[] (head sharding: the root's length; token: its share) */
static uint64_t rank_share(const struct kvf_mpi_store *s, const uint64_t *lens,
			   int r, uint64_t total)
{
	return s->shard == KVF_MPI_SHARD_HEAD ? lens[s->root] :
						token_share(s, r, total);
}

/*
 * check_shares - whether the ranks' lengths are the shares of one sharded
 * length (every rank computes the same verdict from the same lengths, so
 * no exchange is needed).  They are not after one rank's store refused an
 * append the others took, or after local calls that bypassed the
 * placement; appending or attending then would misplace tokens or mix
 * prefixes, so the sequence is refused until a reopen cuts it back.
 */
static kvf_status check_shares(struct kvf_mpi_store *s, const struct op_hdr *h,
			       const uint64_t *lens, const char *call)
{
	uint64_t total = 0;
	int bad = -1;

	for (int r = 0; r < s->n_ranks; r++)
		total += lens[r];
	/* name a rank holding more than its share if there is one (the
	 * one that took an append the others refused), else the first off */
	for (int r = 0; r < s->n_ranks && bad < 0; r++)
		if (lens[r] > rank_share(s, lens, r, total))
			bad = r;
	for (int r = 0; r < s->n_ranks && bad < 0; r++)
		if (lens[r] != rank_share(s, lens, r, total))
			bad = r;
	if (bad < 0)
		return KVF_OK;
	return mpi_fail(KVF_ECORRUPT,
			"%s: sequence %llu layer %u: rank %d holds %llu "
			"tokens, its share is %llu: the ranks disagree (an "
			"append failed on some rank); close and reopen to cut "
			"back to the common prefix",
			call, (unsigned long long)h->seq, h->layer, bad,
			(unsigned long long)lens[bad],
			(unsigned long long)rank_share(s, lens, bad, total));
}

/*
 * lookup_lens - each rank's length of (h->seq, h->layer), or the first
 * rank's reason why it has none (unknown seq: KVF_ENOENT), or
 * KVF_ECORRUPT when the lengths are not the shares of one length.
 * @lens: [n_ranks] out (NULL only where local is not KVF_OK).
 * @local: this rank's status so far (an allocation that failed, say):
 *         agreed on in the same exchange, saving a round.
 */
kvf_status lookup_lens(struct kvf_mpi_store *s, const struct op_hdr *h,
		       uint64_t *lens, kvf_status local, const char *call)
{
	struct {
		int32_t status;
		uint32_t pad;
		uint64_t len;
	} mine, *all;
	int32_t *st;
	kvf_status rc;

	memset(&mine, 0, sizeof(mine));
	mine.status = local;
	if (local == KVF_OK) {
		mine.status =
			kvf_seq_len(s->local, h->seq, h->layer, &mine.len);
		if (mine.status != KVF_OK)
			mpi_fail_store(s, (kvf_status)mine.status, call);
	}
	all = malloc((sizeof(*all) + sizeof(int32_t)) * (size_t)s->n_ranks);
	if (!all)
		return mpi_fail(KVF_ENOMEM, "%s: out of memory", call);
	st = (int32_t *)(all + s->n_ranks);
	rc = c_allgather(s, &mine, (int)sizeof(mine), all, CAT_CTL);
	for (int r = 0; rc == KVF_OK && r < s->n_ranks; r++) {
		if (lens)
			lens[r] = all[r].len;
		st[r] = all[r].status;
	}
	if (rc == KVF_OK)
		rc = agree_known(s, st, call);
	free(all);
	if (rc == KVF_OK && lens)
		rc = check_shares(s, h, lens, call);
	return rc;
}
