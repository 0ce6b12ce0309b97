/*
 * mpi_open.c - opening and closing a sharded store: the ranks agree on
 * the model and policy, each rank checks (or writes) its placement file
 * and opens its local store, and a reopen makes the sequences consistent
 * across ranks (mpi_repair.c).
 *
 * Placement file DIR/rank-R.placement, text, written once at creation
 * (to a temporary name, synced, renamed) before the local store:
 *   kvflash_mpi placement 1
 *   shard head|token
 *   ranks N
 *   rank R
 *   block_tokens B
 *   model LAYERS Q_HEADS KV_HEADS HEAD_DIM DTYPE
 */
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "mpi_int.h"

#define PLACEMENT_PREFIX "kvflash_mpi placement "
#define PLACEMENT_MAGIC PLACEMENT_PREFIX "1"
#define BLOCK_DEFAULT 256u

void kvf_mpi_options_init_sized(kvf_mpi_options *o, const kvf_model *m,
				size_t struct_size)
{
	kvf_mpi_options d;

	memset(&d, 0, sizeof(d));
	d.struct_size = sizeof(d);
	if (m)
		d.model = *m;
	d.shard = KVF_MPI_SHARD_HEAD;
	if (!o)
		return;
	memset(o, 0, struct_size);
	memcpy(o, &d, struct_size < sizeof(d) ? struct_size : sizeof(d));
	if (struct_size >= sizeof(o->struct_size))
		o->struct_size = struct_size;
}

const char *kvf_mpi_shard_name(kvf_mpi_shard shard)
{
	switch (shard) {
	case KVF_MPI_SHARD_HEAD:
		return "head";
	case KVF_MPI_SHARD_TOKEN:
		return "token";
	}
	return "unknown";
}

/* What every rank must open the store with alike: the model, the policy,
 * and the store options that decide what kind of part each rank keeps (a
 * rank on memory media loses its part at close, and the next open's
 * repair cuts every sequence to what all hold; another codec or K^T
 * setting answers differently; read-only, eviction and admission decide
 * whether a rank may drop or hold back parts on its own).  The local
 * layout may differ: page and segment size, capacity, stripes, devices,
 * threads, DRAM (and with them where eviction's watermarks fall). */
struct open_args {
	uint32_t n_layers, n_q_heads, n_kv_heads, head_dim, dtype;
	uint32_t shard, block;
	int32_t root;
	uint32_t media, kt_pages, read_only, codec, evict_policy;
	uint64_t admit_tokens;
};

/* store_args - the store options open_args compares (NULL: the
 * defaults) */
static void store_args(const kvf_options *so, struct open_args *a)
{
	kvf_options def;

	kvf_options_init(&def, NULL);
	if (so == NULL)
		so = &def;
	a->media = (uint32_t)so->media;
	a->kt_pages = so->kt_pages;
	a->read_only = so->read_only;
	a->codec = so->codec;
	a->evict_policy = so->evict_policy;
	a->admit_tokens = so->admit_tokens;
}

static kvf_status check_args(const kvf_mpi_options *o, int n_ranks,
			     struct open_args *a)
{
	const kvf_model *m = &o->model;

	if (o->struct_size < sizeof(*o)) {
		if (o->struct_size < offsetof(kvf_mpi_options, store))
			return mpi_fail(KVF_EINVAL,
					"kvf_mpi_open: "
					"opts->struct_size %zu is too small",
					o->struct_size);
	} else if (o->struct_size > sizeof(*o)) {
		return mpi_fail(KVF_EVERSION,
				"kvf_mpi_open: opts->struct_size "
				"%zu is newer than this library's %zu",
				o->struct_size, sizeof(*o));
	}
	if (o->shard != KVF_MPI_SHARD_HEAD && o->shard != KVF_MPI_SHARD_TOKEN)
		return mpi_fail(KVF_EINVAL,
				"kvf_mpi_open: shard %d is not "
				"KVF_MPI_SHARD_HEAD or KVF_MPI_SHARD_TOKEN",
				(int)o->shard);
	if (m->n_layers == 0 || m->n_kv_heads == 0 || m->head_dim == 0 ||
	    m->n_q_heads == 0 || m->n_q_heads % m->n_kv_heads != 0 ||
	    (unsigned)m->dtype > KVF_DTYPE_F32)
		return mpi_fail(KVF_EINVAL,
				"kvf_mpi_open: model %u layers, "
				"%u query heads, %u KV heads, head_dim %u, dtype "
				"%d is not a model (each nonzero, query heads a "
				"multiple of KV heads)",
				m->n_layers, m->n_q_heads, m->n_kv_heads,
				m->head_dim, (int)m->dtype);
	if (o->root < 0 || o->root >= n_ranks)
		return mpi_fail(KVF_EINVAL,
				"kvf_mpi_open: root %d out of range "
				"(%d ranks)",
				o->root, n_ranks);
	if (o->shard == KVF_MPI_SHARD_HEAD && (uint32_t)n_ranks > m->n_kv_heads)
		return mpi_fail(KVF_EINVAL,
				"kvf_mpi_open: head sharding needs "
				"a KV head for every rank: %d ranks, %u KV heads "
				"(use fewer ranks or token sharding)",
				n_ranks, m->n_kv_heads);
	if (o->store && o->store->struct_size != sizeof(kvf_options))
		return mpi_fail(KVF_EVERSION,
				"kvf_mpi_open: opts->store has "
				"struct_size %zu, this library's kvf_options has "
				"%zu",
				o->store->struct_size, sizeof(kvf_options));
	memset(a, 0, sizeof(*a));
	a->n_layers = m->n_layers;
	a->n_q_heads = m->n_q_heads;
	a->n_kv_heads = m->n_kv_heads;
	a->head_dim = m->head_dim;
	a->dtype = (uint32_t)m->dtype;
	a->shard = (uint32_t)o->shard;
	a->block = o->shard == KVF_MPI_SHARD_TOKEN ?
			   (o->block_tokens ? o->block_tokens : BLOCK_DEFAULT) :
			   0;
	a->root = o->root;
	store_args(o->struct_size > offsetof(kvf_mpi_options, store) ?
			   o->store : NULL, a);
	return KVF_OK;
}

/* The first field in which rank r's arguments differ from rank 0's. */
static const char *args_differ(const struct open_args *a,
			       const struct open_args *b)
{
	if (a->n_layers != b->n_layers || a->n_q_heads != b->n_q_heads ||
	    a->n_kv_heads != b->n_kv_heads || a->head_dim != b->head_dim ||
	    a->dtype != b->dtype)
		return "model";
	if (a->shard != b->shard)
		return "shard";
	if (a->block != b->block)
		return "block_tokens";
	if (a->root != b->root)
		return "root";
	if (a->media != b->media)
		return "store->media";
	if (a->kt_pages != b->kt_pages)
		return "store->kt_pages";
	if (a->read_only != b->read_only)
		return "store->read_only";
	if (a->codec != b->codec)
		return "store->codec";
	if (a->evict_policy != b->evict_policy)
		return "store->evict_policy";
	if (a->admit_tokens != b->admit_tokens)
		return "store->admit_tokens";
	return NULL;
}

static void placement_text(const struct kvf_mpi_store *s, char *buf, size_t cap)
{
	snprintf(buf, cap,
		 "%s\nshard %s\nranks %d\nrank %d\nblock_tokens %u\n"
		 "model %u %u %u %u %s\n",
		 PLACEMENT_MAGIC, kvf_mpi_shard_name(s->shard), s->n_ranks,
		 s->rank, s->block, s->model.n_layers, s->model.n_q_heads,
		 s->model.n_kv_heads, s->model.head_dim,
		 kvf_dtype_name(s->model.dtype));
}

static kvf_status write_placement(const char *path, const char *text)
{
	char tmp[4200];
	size_t len = strlen(text);
	int fd;

	snprintf(tmp, sizeof(tmp), "%s.tmp", path);
	fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	if (fd < 0)
		return mpi_fail(KVF_EIO, "kvf_mpi_open: cannot create %s: %s",
				tmp, strerror(errno));
	if (write(fd, text, len) != (ssize_t)len || fsync(fd) != 0) {
		int e = errno;
		close(fd);
		unlink(tmp);
		return mpi_fail(KVF_EIO, "kvf_mpi_open: cannot write %s: %s",
				tmp, strerror(e));
	}
	close(fd);
	if (rename(tmp, path) != 0) {
		int e = errno;
		unlink(tmp);
		return mpi_fail(KVF_EIO, "kvf_mpi_open: cannot rename %s: %s",
				tmp, strerror(e));
	}
	return KVF_OK;
}

static size_t lines(const char *text)
{
	size_t n = 0;

	if (*text == '\0')
		return 0;
	for (; *text; text++)
		n += *text == '\n';
	return n + (text[-1] != '\n'); /* a last line without its end */
}

/* Compare a stored placement with this open's; *found = 0 if none. */
static kvf_status check_placement(const char *path, const char *want,
				  int *found)
{
	char have[1024];
	FILE *f = fopen(path, "r");
	size_t n;

	*found = 0;
	if (!f) {
		if (errno == ENOENT)
			return KVF_OK;
		return mpi_fail(KVF_EIO, "kvf_mpi_open: cannot read %s: %s",
				path, strerror(errno));
	}
	*found = 1;
	n = fread(have, 1, sizeof(have) - 1, f);
	fclose(f);
	have[n] = '\0';
	if (strncmp(have, PLACEMENT_PREFIX, strlen(PLACEMENT_PREFIX)) == 0 &&
	    strncmp(have, PLACEMENT_MAGIC "\n", strlen(PLACEMENT_MAGIC) + 1))
		return mpi_fail(KVF_EVERSION,
				"kvf_mpi_open: %s is a placement file of "
				"another version ('%.*s'); this library reads "
				"'%s'",
				path, (int)strcspn(have, "\n"), have,
				PLACEMENT_MAGIC);
	if (strncmp(have, PLACEMENT_MAGIC "\n", strlen(PLACEMENT_MAGIC) + 1))
		return mpi_fail(KVF_ECORRUPT,
				"kvf_mpi_open: %s is not a "
				"kvflash_mpi placement file (no '%s' line)",
				path, PLACEMENT_MAGIC);
	if (lines(have) != lines(want) || have[n - 1] != '\n')
		return mpi_fail(KVF_ECORRUPT,
				"kvf_mpi_open: %s is damaged: %zu lines%s, a "
				"placement file has %zu",
				path, lines(have),
				have[n - 1] != '\n' ? ", the last cut short" : "",
				lines(want));
	if (strcmp(have, want) != 0) {
		/* name the first line that differs */
		const char *a = have, *b = want;
		while (*a && *a == *b) {
			a++;
			b++;
		}
		while (a > have && a[-1] != '\n') {
			a--;
			b--;
		}
		return mpi_fail(KVF_EMISMATCH,
				"kvf_mpi_open: %s says '%.*s', "
				"this open asks '%.*s'",
				path, (int)strcspn(a, "\n"), a,
				(int)strcspn(b, "\n"), b);
	}
	return KVF_OK;
}

static int rm_entry(const char *path, const struct stat *sb, int flag,
		    struct FTW *ftw)
{
	(void)sb;
	(void)flag;
	(void)ftw;
	return remove(path);
}

static void split_heads(struct kvf_mpi_store *s)
{
	uint32_t base = s->model.n_kv_heads / (uint32_t)s->n_ranks;
	uint32_t extra = s->model.n_kv_heads % (uint32_t)s->n_ranks, h = 0;

	for (int r = 0; r < s->n_ranks; r++) {
		s->kv0[r] = h;
		s->nkv[r] = base + ((uint32_t)r < extra);
		h += s->nkv[r];
	}
}

/* Where a rank's part stands before the open makes anything. */
enum part { PART_NONE = 0, PART_PLACED = 1, PART_WHOLE = 2 };

/* probe_local - this rank's placement, checked, made nothing but dir:
 * *part says whether the placement (PART_PLACED: a create cut short
 * after it) and the store (PART_WHOLE) are there */
static kvf_status probe_local(struct kvf_mpi_store *s, const char *dir,
			      enum part *part)
{
	char pl[4096], sd[4096], kf[4200], text[512];
	struct stat sb;
	kvf_status rc;
	int found;

	*part = PART_NONE;
	if (mkdir(dir, 0755) != 0 && errno != EEXIST)
		return mpi_fail(KVF_EIO, "kvf_mpi_open: rank %d cannot create %s: %s",
				s->rank, dir, strerror(errno));
	snprintf(pl, sizeof(pl), "%s/rank-%d.placement", dir, s->rank);
	snprintf(sd, sizeof(sd), "%s/rank-%d", dir, s->rank);
	placement_text(s, text, sizeof(text));
	if ((rc = check_placement(pl, text, &found)) != KVF_OK)
		return rc;
	if (!found && stat(sd, &sb) == 0)
		return mpi_fail(KVF_ECORRUPT,
				"kvf_mpi_open: %s exists "
				"without its placement file %s",
				sd, pl);
	snprintf(kf, sizeof(kf), "%s/KVFLASH", sd);
	*part = !found ? PART_NONE : stat(kf, &sb) == 0 ? PART_WHOLE : PART_PLACED;
	return KVF_OK;
}

/* held_local - the sequences this rank's store holds, looked at read-only
 * (0 without a store) */
static kvf_status held_local(struct kvf_mpi_store *s, const char *dir,
			     const kvf_options *store_opts, enum part part,
			     uint64_t *held)
{
	char sd[4096];
	kvf_options ro;
	kvf_store *st;
	size_t n = 0;
	kvf_status rc;

	*held = 0;
	if (part != PART_WHOLE)
		return KVF_OK;
	snprintf(sd, sizeof(sd), "%s/rank-%d", dir, s->rank);
	if (store_opts)
		ro = *store_opts;
	else
		kvf_options_init(&ro, NULL);
	ro.model = s->local_model;
	ro.read_only = 1;
	if ((rc = kvf_open(sd, &ro, &st)) != KVF_OK)
		return mpi_fail_store(s, rc, "kvf_mpi_open");
	rc = kvf_seq_list(st, NULL, 0, &n);
	kvf_close(st);
	if (rc != KVF_OK)
		return mpi_fail_store(s, rc, "kvf_mpi_open");
	*held = n;
	return KVF_OK;
}

/*
 * whole_or_new - every rank holds its part (a reopen) or none does (a
 * new store).  Between the two, some rank lost its directory or
 * placement, or a create was cut short: the open goes on (and makes what
 * is missing) only if no rank's store holds a sequence, since one made
 * empty for a lost rank would have the repair cut every sequence of the
 * others to nothing; else it is refused on every rank, nothing changed.
 */
static kvf_status whole_or_new(struct kvf_mpi_store *s, const char *dir,
			       const kvf_options *store_opts, enum part part)
{
	/* [0]: some rank lacks its part (its rank + 1, the lowest as the
	 * largest of n_ranks - rank); [1]: some rank has one */
	uint64_t mine[2] = { part != PART_WHOLE ? (uint64_t)(s->n_ranks - s->rank) : 0,
			     part != PART_NONE },
		 all[2], held = 0, most = 0;
	kvf_status rc;
	int lack;

	if ((rc = c_allreduce_max(s, mine, all, 2)) != KVF_OK)
		return rc;
	if (all[0] == 0 || all[1] == 0)
		return KVF_OK; /* whole, or new */
	lack = s->n_ranks - (int)all[0];
	rc = agree(s, held_local(s, dir, store_opts, part, &held),
		   "kvf_mpi_open");
	if (rc == KVF_OK)
		rc = c_allreduce_max(s, &held, &most, 1);
	if (rc == KVF_OK && most > 0)
		rc = mpi_fail(KVF_ECORRUPT,
			      "kvf_mpi_open: rank %d's part of the store is "
			      "missing (%s/rank-%d or its placement file) while "
			      "other ranks hold sequences: a rank's directory "
			      "lost or moved; nothing was changed",
			      lack, dir, lack);
	return rc;
}

/* open_local - this rank's local store, its placement written first if
 * it has none (*created = 1) */
static kvf_status open_local(struct kvf_mpi_store *s, const char *dir,
			     const kvf_options *store_opts, enum part part,
			     int *created)
{
	int found = part != PART_NONE;
	char pl[4096], sd[4096], text[512];
	kvf_options lo;
	kvf_status rc;

	*created = 0;
	snprintf(pl, sizeof(pl), "%s/rank-%d.placement", dir, s->rank);
	snprintf(sd, sizeof(sd), "%s/rank-%d", dir, s->rank);
	if (!found) {
		placement_text(s, text, sizeof(text));
		rc = write_placement(pl, text);
		if (rc != KVF_OK)
			return rc;
		*created = 1;
	}
	if (store_opts)
		lo = *store_opts;
	else
		kvf_options_init(&lo, NULL);
	lo.model = s->local_model;
	rc = kvf_open(sd, &lo, &s->local);
	if (rc != KVF_OK) {
		mpi_fail_store(s, rc, "kvf_mpi_open");
		if (*created)
			unlink(pl);
		*created = 0;
		return rc;
	}
	if (!found)
		return KVF_OK;
	return repair_resume(s, dir);
}

/* Undo what open_local made (a create that another rank refused). */
static void undo_local(struct kvf_mpi_store *s, const char *dir, int created)
{
	char p[4096];

	kvf_close(s->local);
	s->local = NULL;
	if (!created)
		return;
	snprintf(p, sizeof(p), "%s/rank-%d", dir, s->rank);
	nftw(p, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
	snprintf(p, sizeof(p), "%s/rank-%d.placement", dir, s->rank);
	unlink(p);
}

static void release(struct kvf_mpi_store *s)
{
	if (!s)
		return;
	if (s->comm != MPI_COMM_NULL)
		MPI_Comm_free(&s->comm);
	free(s->kv0);
	free(s->nkv);
	free(s->dir);
	free(s);
}

static kvf_status setup(struct kvf_mpi_store *s, const struct open_args *a)
{
	s->root = a->root;
	s->shard = (kvf_mpi_shard)a->shard;
	s->block = a->block;
	s->model.n_layers = a->n_layers;
	s->model.n_q_heads = a->n_q_heads;
	s->model.n_kv_heads = a->n_kv_heads;
	s->model.head_dim = a->head_dim;
	s->model.dtype = (kvf_dtype)a->dtype;
	s->group = a->n_q_heads / a->n_kv_heads;
	s->elt = s->model.dtype == KVF_DTYPE_F32 ? 4 : 2;
	s->kv0 = calloc((size_t)s->n_ranks, sizeof(*s->kv0));
	s->nkv = calloc((size_t)s->n_ranks, sizeof(*s->nkv));
	if (!s->kv0 || !s->nkv)
		return mpi_fail(KVF_ENOMEM, "kvf_mpi_open: out of memory");
	s->local_model = s->model;
	if (s->shard == KVF_MPI_SHARD_HEAD) {
		split_heads(s);
		s->local_model.n_kv_heads = s->nkv[s->rank];
		s->local_model.n_q_heads = s->nkv[s->rank] * s->group;
	}
	s->stats.rank = s->rank;
	s->stats.n_ranks = s->n_ranks;
	s->stats.shard = s->shard;
	s->stats.kv_head0 = s->shard == KVF_MPI_SHARD_HEAD ? s->kv0[s->rank] :
							     0;
	s->stats.n_kv_heads = s->local_model.n_kv_heads;
	return KVF_OK;
}

kvf_status kvf_mpi_open(MPI_Comm comm, const char *dir,
			const kvf_mpi_options *opts, kvf_mpi_store **out)
{
	struct kvf_mpi_store *s;
	struct open_args mine, *all = NULL;
	kvf_status rc, local = KVF_OK;
	const kvf_options *store_opts;
	enum part part = PART_NONE;
	int created = 0, mrc;

	if (out)
		*out = NULL;
	/* a rank a split left out has no communicator to fail on together:
	 * refused here, alone, before MPI_Comm_dup would abort the job */
	if (comm == MPI_COMM_NULL)
		return mpi_fail(KVF_EINVAL, "kvf_mpi_open: comm is MPI_COMM_NULL");
	s = calloc(1, sizeof(*s));
	if (!s)
		return mpi_fail(KVF_ENOMEM, "kvf_mpi_open: out of memory");
	s->comm = MPI_COMM_NULL;
	/* every later failure is collective, so the ranks must get here */
	mrc = MPI_Comm_dup(comm, &s->comm);
	if (mrc != MPI_SUCCESS) {
		s->comm = MPI_COMM_NULL;
		release(s);
		return mpi_call_failed(mrc, "MPI_Comm_dup");
	}
	MPI_Comm_set_errhandler(s->comm, MPI_ERRORS_RETURN);
	MPI_Comm_rank(s->comm, &s->rank);
	MPI_Comm_size(s->comm, &s->n_ranks);
	memset(&mine, 0, sizeof(mine));
	if (!dir || !opts || !out)
		local = mpi_fail(KVF_EINVAL, "kvf_mpi_open: NULL %s on rank %d",
				 !dir  ? "dir" :
				 !opts ? "opts" :
					 "out",
				 s->rank);
	else
		local = check_args(opts, s->n_ranks, &mine);
	rc = agree(s, local, "kvf_mpi_open");
	if (rc != KVF_OK)
		goto fail;
	all = calloc((size_t)s->n_ranks, sizeof(*all));
	if (!all)
		local = mpi_fail(KVF_ENOMEM, "kvf_mpi_open: out of memory");
	rc = agree(s, local, "kvf_mpi_open");
	if (rc != KVF_OK)
		goto fail;
	rc = c_allgather(s, &mine, (int)sizeof(mine), all, CAT_CTL);
	if (rc != KVF_OK)
		goto fail;
	for (int r = 1; r < s->n_ranks && local == KVF_OK; r++) {
		const char *f = args_differ(&all[0], &all[r]);
		if (f && s->rank == 0)
			local = mpi_fail(KVF_EMISMATCH,
					 "kvf_mpi_open: rank %d "
					 "passed another %s than rank 0: every "
					 "rank must open the store with the "
					 "same model and options",
					 r, f);
		else if (f)
			local = KVF_EMISMATCH;
	}
	if (local == KVF_OK)
		local = setup(s, &mine);
	rc = agree(s, s->rank == 0 || local != KVF_EMISMATCH ? local : KVF_OK,
		   "kvf_mpi_open");
	if (rc != KVF_OK)
		goto fail;
	store_opts = opts->struct_size > offsetof(kvf_mpi_options, store) ?
			     opts->store :
			     NULL;
	local = probe_local(s, dir, &part);
	rc = agree(s, local, "kvf_mpi_open");
	if (rc == KVF_OK)
		rc = whole_or_new(s, dir, store_opts, part);
	if (rc != KVF_OK)
		goto fail;
	local = open_local(s, dir, store_opts, part, &created);
	rc = agree(s, local, "kvf_mpi_open");
	if (rc == KVF_OK)
		rc = repair_all(s, dir);
	if (rc == KVF_OK && !(s->dir = strdup(dir)))
		rc = mpi_fail(KVF_ENOMEM, "kvf_mpi_open: out of memory");
	if (rc != KVF_OK) {
		if (s->local)
			undo_local(s, dir, created);
		goto fail;
	}
	free(all);
	*out = s;
	return KVF_OK;
fail:
	free(all);
	release(s);
	return rc;
}

kvf_status kvf_mpi_close(kvf_mpi_store *s)
{
	struct op_hdr h;
	kvf_status rc, local, other;

	if (!s)
		return KVF_OK;
	memset(&h, 0, sizeof(h));
	h.op = OP_CLOSE;
	rc = start_op(s, &h, OP_CLOSE, "kvf_mpi_close", &other);
	local = kvf_close(s->local);
	s->local = NULL;
	if (local != KVF_OK)
		mpi_fail_store(s, local, "kvf_mpi_close");
	if (rc == KVF_OK)
		rc = agree(s, other != KVF_OK ? other : local, "kvf_mpi_close");
	release(s);
	return rc;
}

kvf_status kvf_mpi_sync(kvf_mpi_store *s)
{
	struct op_hdr h;
	kvf_status rc, local;

	if (!s)
		return mpi_fail(KVF_EINVAL, "kvf_mpi_sync: NULL store");
	memset(&h, 0, sizeof(h));
	h.op = OP_SYNC;
	rc = start_op(s, &h, OP_SYNC, "kvf_mpi_sync", &local);
	if (rc != KVF_OK)
		return rc;
	if (local == KVF_OK && (local = kvf_sync(s->local)) != KVF_OK)
		mpi_fail_store(s, local, "kvf_mpi_sync");
	return agree(s, local, "kvf_mpi_sync");
}

kvf_status kvf_mpi_stats_get(kvf_mpi_store *s, kvf_mpi_stats *out)
{
	kvf_mpi_stats t;

	if (!s || !out)
		return mpi_fail(KVF_EINVAL, "kvf_mpi_stats_get: NULL %s",
				!s ? "store" : "out");
	if (out->struct_size < sizeof(size_t) + 2 * sizeof(int))
		return mpi_fail(KVF_EINVAL,
				"kvf_mpi_stats_get: struct_size %zu "
				"too small",
				out->struct_size);
	if (out->struct_size > sizeof(t))
		return mpi_fail(KVF_EVERSION,
				"kvf_mpi_stats_get: struct_size "
				"%zu is newer than this library's %zu",
				out->struct_size, sizeof(t));
	t = s->stats;
	t.struct_size = out->struct_size;
	memcpy(out, &t, out->struct_size);
	return KVF_OK;
}

kvf_store *kvf_mpi_local(kvf_mpi_store *s)
{
	return s ? s->local : NULL;
}
