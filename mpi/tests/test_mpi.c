/*
 * test_mpi.c - kvflash_mpi under mpirun -np 4: results equal to a single
 * store's (within 1e-5 relative), for head and token sharding, before
 * and after a reopen, at head sizes 32, 80 and 192; every bad placement or argument refused with its
 * status and message on every rank, changing nothing; ranks that
 * disagree on a length refused until a reopen cuts them back; and a
 * repair cut short by a crash finished at the next open.
 *
 * Usage: mpirun -np 4 test_mpi DIR   (DIR is emptied first by rank 0)
 */
#include <ftw.h>
#include <sys/stat.h>
#include <unistd.h>

#include "mpi_test.h"

static const kvf_model model = { 2, 8, 4, 32, KVF_DTYPE_F32 };
#define HD_MAX 192 /* the largest head_dim of a run (good_path, check) */
static const uint32_t chunks[] = { 37, 1, 1, 1, 1, 1, 1, 50, 3, 17 };
#define N_CHUNKS (sizeof(chunks) / sizeof(chunks[0]))

static int rm_entry(const char *p, const struct stat *sb, int f, struct FTW *w)
{
	(void)sb;
	(void)f;
	(void)w;
	return remove(p);
}

static kvf_options store_opts(void)
{
	kvf_options so;

	kvf_options_init(&so, NULL);
	so.n_threads = 1;
	so.capacity_bytes = 64ull << 20;
	so.dram_budget = 16ull << 20;
	return so;
}

static kvf_status open_on(MPI_Comm comm, const char *dir, kvf_mpi_shard shard,
			  uint32_t block, const kvf_model *m, int root,
			  kvf_codec codec, kvf_mpi_store **st)
{
	kvf_options so = store_opts();
	kvf_mpi_options o;

	so.codec = codec;
	kvf_mpi_options_init(&o, m);
	o.shard = shard;
	o.block_tokens = block;
	o.store = &so;
	o.root = root;
	return kvf_mpi_open(comm, dir, &o, st);
}

static kvf_status open_sharded(const char *dir, kvf_mpi_shard shard,
			       uint32_t block, const kvf_model *m,
			       kvf_mpi_store **st)
{
	return open_on(MPI_COMM_WORLD, dir, shard, block, m, 0, KVF_CODEC_NONE,
		       st);
}

/* One good-path run: its ranks, root, model, name and codec. */
struct run {
	MPI_Comm comm;
	int n_ranks;
	int root;
	kvf_model m;
	char name[64];
	kvf_codec codec;
};

/* exact - whether a run's ranks must give the single store's bits: they
 * do unless a codec encodes groups the two cut differently (token
 * blocks), when they agree within the codec's rounding */
static int exact(const struct run *run, kvf_mpi_shard shard)
{
	return run->codec == KVF_CODEC_NONE || shard == KVF_MPI_SHARD_HEAD;
}

/* close_rows - a and b (n values) agree within tol of the largest |b| */
static int close_rows(const float *a, const float *b, size_t n, double tol)
{
	double e = 0, m = 1e-30;

	for (size_t i = 0; i < n; i++) {
		e = fabs(a[i] - b[i]) > e ? fabs(a[i] - b[i]) : e;
		m = fabs(b[i]) > m ? fabs(b[i]) : m;
	}
	return e <= tol * m;
}

/* k, v as floats to the store's dtype (f16 by truncation: the sharded
 * and the single store get the same bytes, which is all that counts) */
static const void *as_dtype(const kvf_model *m, const float *x, size_t n,
			    uint16_t *buf)
{
	if (m->dtype == KVF_DTYPE_F32)
		return x;
	for (size_t i = 0; i < n; i++) {
		uint32_t b, sign, mant;
		int32_t e;
		memcpy(&b, &x[i], 4);
		sign = (b >> 16) & 0x8000u;
		e = (int32_t)((b >> 23) & 0xff) - 127 + 15;
		mant = (b & 0x7fffffu) >> 13;
		buf[i] = (uint16_t)(e <= 0 ? sign :
				    e >= 31 ?
					     sign | 0x7c00u :
					     sign | ((uint32_t)e << 10) | mant);
	}
	return buf;
}

/* Attention of every (seq, layer) against the reference, with and
 * without a window; reads of one head against the reference. */
static void compare(kvf_mpi_store *st, kvf_store *ref, const struct run *run,
		    kvf_mpi_shard shard, const char *what)
{
	/* INT8 rounds a value to 1/254 of its channel's (K) or token's (V)
	 * largest: attention and rows stay within 2 % (0.4 % measured) */
	double tol = exact(run, shard) ? 1e-5 : 0.02;
	const kvf_model *m = &run->m;
	uint32_t nq = m->n_q_heads, hd = m->head_dim;
	size_t row = (size_t)hd * (m->dtype == KVF_DTYPE_F32 ? 4 : 2);
	float q[8 * HD_MAX], out[8 * HD_MAX], want[8 * HD_MAX], lse[8], lse_want[8];
	float kr[120 * HD_MAX], vr[120 * HD_MAX], kw[120 * HD_MAX], vw[120 * HD_MAX];
	uint64_t windows[] = { 0, 40, 1 };
	kvf_attn_opts o, ro;
	kvf_mpi_stats before = { .struct_size = sizeof(before) },
		      after = before;
	kvf_status rc;

	kvf_mpi_stats_get(st, &before);
	for (uint64_t seq = 1; seq <= 2; seq++)
		for (uint32_t l = 0; l < m->n_layers; l++)
			for (int w = 0; w < 3; w++) {
				for (uint32_t i = 0; i < nq * hd; i++)
					q[i] = tok_val(seq + 100, l,
						       (uint64_t)w, 0, i, 2);
				kvf_attn_opts_init(&o);
				o.lse = lse;
				o.window = windows[w];
				rc = kvf_mpi_attend(st, seq, l, q, out, &o);
				CHECK(rc == KVF_OK, "%s %s attend: %s",
				      run->name, what, kvf_mpi_last_error());
				if (!ref || rc != KVF_OK)
					continue;
				kvf_attn_opts_init(&ro);
				ro.lse = lse_want;
				ro.window = windows[w];
				rc = kvf_attend(ref, seq, l, q, want, &ro);
				CHECK(rc == KVF_OK, "ref: %s",
				      kvf_last_error());
				double e = rel_err(out, want, nq, hd);
				double el = rel_err(lse, lse_want, 1, nq);
				CHECK(e <= tol && el <= tol,
				      "%s %s seq %llu layer "
				      "%u window %llu: error %.3g, lse %.3g",
				      run->name, what, (unsigned long long)seq,
				      l, (unsigned long long)windows[w], e, el);
			}
	/* attention moved q and outputs, never K or V */
	kvf_mpi_stats_get(st, &after);
	CHECK(after.kv_bytes_sent == before.kv_bytes_sent &&
		      after.kv_bytes_recv == before.kv_bytes_recv &&
		      after.attend_calls == before.attend_calls + 12 &&
		      (before.rank == run->root ?
			       after.q_bytes_sent > before.q_bytes_sent :
			       after.q_bytes_recv > before.q_bytes_recv),
	      "%s: attention moved %llu bytes of KV", what,
	      (unsigned long long)(after.kv_bytes_sent + after.kv_bytes_recv -
				   before.kv_bytes_sent -
				   before.kv_bytes_recv));
	for (uint32_t h = 0; h < m->n_kv_heads; h++) {
		rc = kvf_mpi_read(st, 1, 1, h, 5, 110, kr, vr);
		CHECK(rc == KVF_OK, "%s read: %s", what, kvf_mpi_last_error());
		if (!ref || rc != KVF_OK)
			continue;
		kvf_read(ref, 1, 1, h, 5, 110, kw, vw);
		if (exact(run, shard))
			CHECK(!memcmp(kr, kw, 105 * row) &&
				      !memcmp(vr, vw, 105 * row),
			      "%s read of head %u differs", what, h);
		else /* f32 rows (the codec runs' dtype) */
			CHECK(m->dtype == KVF_DTYPE_F32 &&
				      close_rows(kr, kw, 105 * hd, tol) &&
				      close_rows(vr, vw, 105 * hd, tol),
			      "%s read of head %u is not within %.2g", what, h,
			      tol);
	}
}

static void good_path(const char *base, kvf_mpi_shard shard,
		      const struct run *run)
{
	const kvf_model *m = &run->m;
	char dir[4096];
	kvf_mpi_store *st = NULL;
	kvf_store *ref = NULL;
	float k[50 * 4 * HD_MAX], v[50 * 4 * HD_MAX];
	uint16_t kh[50 * 4 * HD_MAX], vh[50 * 4 * HD_MAX];
	const void *kb, *vb;
	uint64_t len;
	kvf_status rc;
	int rank;

	if (run->comm == MPI_COMM_NULL)
		return;
	MPI_Comm_rank(run->comm, &rank);
	snprintf(dir, sizeof(dir), "%s/%s-%s", base, run->name,
		 kvf_mpi_shard_name(shard));
	rc = open_on(run->comm, dir, shard, 16, m, run->root, run->codec, &st);
	CHECK(rc == KVF_OK, "open: %s", kvf_mpi_last_error());
	if (rc != KVF_OK)
		return;
	if (rank == run->root) {
		kvf_options ro;
		kvf_options_init(&ro, m);
		ro.media = KVF_MEDIA_MEMORY;
		ro.n_threads = 1;
		ro.codec = run->codec;
		snprintf(dir, sizeof(dir), "%s/ref-%s-%s", base, run->name,
			 kvf_mpi_shard_name(shard));
		CHECK(kvf_open(dir, &ro, &ref) == KVF_OK, "ref: %s",
		      kvf_last_error());
	}
	for (uint64_t seq = 1; seq <= 2; seq++) {
		CHECK(kvf_mpi_seq_create(st, seq) == KVF_OK, "%s",
		      kvf_mpi_last_error());
		if (ref)
			kvf_seq_create(ref, seq);
		for (uint32_t l = 0; l < m->n_layers; l++) {
			uint64_t t = 0;
			/* layer 1 of seq 2 gets fewer tokens than layer 0; a
			 * codec run goes over the chunks eight times, so
			 * that every rank seals groups (INT8's hold 124
			 * tokens of this head) */
			size_t n = N_CHUNKS * (run->codec ? 8 : 1) -
				   (seq == 2 && l == 1);

			for (size_t i = 0; i < n; i++) {
				size_t c = i % N_CHUNKS;
				size_t nv = (size_t)chunks[c] * m->n_kv_heads *
					    m->head_dim;
				tok_fill(m, seq, l, t, chunks[c], k, v);
				kb = as_dtype(m, k, nv, kh);
				vb = as_dtype(m, v, nv, vh);
				rc = kvf_mpi_append(st, seq, l, chunks[c],
						    rank == run->root ? kb :
									NULL,
						    rank == run->root ? vb :
									NULL);
				CHECK(rc == KVF_OK, "append: %s",
				      kvf_mpi_last_error());
				if (ref)
					kvf_append(ref, seq, l, chunks[c], kb,
						   vb);
				t += chunks[c];
			}
			rc = kvf_mpi_seq_len(st, seq, l, &len);
			CHECK(rc == KVF_OK && len == t, "len %llu, want %llu",
			      (unsigned long long)len, (unsigned long long)t);
		}
	}
	compare(st, ref, run, shard, kvf_mpi_shard_name(shard));
	CHECK(kvf_mpi_sync(st) == KVF_OK, "%s", kvf_mpi_last_error());
	CHECK(kvf_mpi_close(st) == KVF_OK, "%s", kvf_mpi_last_error());
	/* reopened, every rank's store gives the same answers */
	snprintf(dir, sizeof(dir), "%s/%s-%s", base, run->name,
		 kvf_mpi_shard_name(shard));
	rc = open_on(run->comm, dir, shard, 16, m, run->root, run->codec, &st);
	CHECK(rc == KVF_OK, "reopen: %s", kvf_mpi_last_error());
	if (rc == KVF_OK) {
		kvf_mpi_stats s = { .struct_size = sizeof(s) };
		compare(st, ref, run, shard, "reopened");
		CHECK(kvf_mpi_stats_get(st, &s) == KVF_OK &&
			      s.repaired_seqs == 0 && s.n_ranks == run->n_ranks,
		      "stats: repaired %llu",
		      (unsigned long long)s.repaired_seqs);
		/* attention moved no KV: only appends and reads count there */
		CHECK(s.q_bytes_sent + s.q_bytes_recv > 0,
		      "no q bytes counted");
		CHECK(kvf_mpi_seq_free(st, 2) == KVF_OK, "%s",
		      kvf_mpi_last_error());
		rc = kvf_mpi_seq_len(st, 2, 0, &len);
		CHECK_RC(rc, KVF_ENOENT, "rank 0");
		CHECK(kvf_mpi_close(st) == KVF_OK, "%s", kvf_mpi_last_error());
	}
	kvf_close(ref);
}

/* A directory holds no file of a failed create. */
static int empty_dir(const char *dir)
{
	char p[4200];
	struct stat sb;

	snprintf(p, sizeof(p), "%s/rank-%d.placement", dir, test_rank);
	if (stat(p, &sb) == 0)
		return 0;
	snprintf(p, sizeof(p), "%s/rank-%d", dir, test_rank);
	return stat(p, &sb) != 0;
}

static void lost_rank(const char *good);

static void refusals(const char *base)
{
	char dir[4096], good[4096];
	kvf_model two = model, other = model;
	kvf_mpi_store *st = (kvf_mpi_store *)1;
	float q[8 * 32] = { 0 }, out[8 * 32], k[4 * 32] = { 0 },
		    v[4 * 32] = { 0 };
	uint8_t mask[4] = { 1, 1, 1, 1 };
	uint64_t len = 0;
	kvf_attn_opts o;
	kvf_status rc;
	int root = test_rank == 0;

	/* head sharding over more ranks than KV heads */
	two.n_kv_heads = 2;
	snprintf(dir, sizeof(dir), "%s/few-heads", base);
	rc = open_sharded(dir, KVF_MPI_SHARD_HEAD, 0, &two, &st);
	CHECK_RC(rc, KVF_EINVAL, "4 ranks, 2 KV heads");
	CHECK(st == NULL && empty_dir(dir), "a refused open left something");
	/* ranks that disagree on the model */
	if (test_rank == 3)
		other.head_dim = 64;
	rc = open_sharded(dir, KVF_MPI_SHARD_TOKEN, 16, &other, &st);
	CHECK_RC(rc, KVF_EMISMATCH, "rank 3 passed another model");
	CHECK(st == NULL && empty_dir(dir), "a refused open left something");

	snprintf(good, sizeof(good), "%s/placed", base);
	rc = open_sharded(good, KVF_MPI_SHARD_TOKEN, 16, &model, &st);
	CHECK(rc == KVF_OK, "open: %s", kvf_mpi_last_error());
	if (rc != KVF_OK)
		return;
	CHECK(kvf_mpi_seq_create(st, 1) == KVF_OK, "%s", kvf_mpi_last_error());
	CHECK(kvf_mpi_append(st, 1, 0, 1, root ? k : NULL, root ? v : NULL) ==
		      KVF_OK,
	      "%s", kvf_mpi_last_error());
	rc = kvf_mpi_seq_create(st, 1);
	CHECK_RC(rc, KVF_EEXIST, "sequence 1 exists");
	rc = kvf_mpi_seq_create(st, KVF_MPI_SEQ_RESERVED);
	CHECK_RC(rc, KVF_EINVAL, "reserved");
	/* unknown sequence: every call, every rank */
	rc = kvf_mpi_append(st, 7, 0, 1, root ? k : NULL, root ? v : NULL);
	CHECK_RC(rc, KVF_ENOENT, "kvf_mpi_append: rank 0");
	rc = kvf_mpi_attend(st, 7, 0, q, out, NULL);
	CHECK_RC(rc, KVF_ENOENT, "kvf_mpi_attend: rank 0");
	rc = kvf_mpi_read(st, 7, 0, 0, 0, 1, k, v);
	CHECK_RC(rc, KVF_ENOENT, "kvf_mpi_read");
	rc = kvf_mpi_seq_free(st, 7);
	CHECK_RC(rc, KVF_ENOENT, "kvf_mpi_seq_free");
	/* arguments */
	rc = kvf_mpi_append(st, 1, 5, 1, root ? k : NULL, root ? v : NULL);
	CHECK_RC(rc, KVF_ERANGE, "layer 5 out of range");
	rc = kvf_mpi_append(st, 1, 0, 1, NULL, NULL);
	CHECK_RC(rc, KVF_EINVAL, "NULL k on the root");
	rc = kvf_mpi_attend(st, 1, 0, NULL, out, NULL);
	CHECK_RC(rc, KVF_EINVAL, "NULL q on the root");
	kvf_attn_opts_init(&o);
	o.mask = mask;
	o.mask_len = 4;
	rc = kvf_mpi_attend(st, 1, 0, q, out, &o);
	CHECK_RC(rc, KVF_ENOTSUP, "mask");
	kvf_attn_opts_init(&o);
	o.sparse = 1;
	rc = kvf_mpi_attend(st, 1, 0, q, out, &o);
	CHECK_RC(rc, KVF_ENOTSUP, "token sharding");
	rc = kvf_mpi_read(st, 1, 0, 0, 0, 2, k, v);
	CHECK_RC(rc, KVF_ERANGE, "past the end");
	rc = kvf_mpi_read(st, 1, 0, 9, 0, 1, k, v);
	CHECK_RC(rc, KVF_ERANGE, "KV head 9");
	/* nothing changed */
	rc = kvf_mpi_seq_len(st, 1, 0, &len);
	CHECK(rc == KVF_OK && len == 1, "len %llu after refusals",
	      (unsigned long long)len);
	rc = kvf_mpi_seq_len(st, 7, 0, &len);
	CHECK_RC(rc, KVF_ENOENT, "7");
	CHECK(kvf_mpi_close(st) == KVF_OK, "%s", kvf_mpi_last_error());

	/* reopen against the stored placement */
	rc = open_sharded(good, KVF_MPI_SHARD_HEAD, 0, &model, &st);
	CHECK_RC(rc, KVF_EMISMATCH, "shard token");
	rc = open_sharded(good, KVF_MPI_SHARD_TOKEN, 32, &model, &st);
	CHECK_RC(rc, KVF_EMISMATCH, "block_tokens 16");
	other = model;
	other.n_layers = 3;
	rc = open_sharded(good, KVF_MPI_SHARD_TOKEN, 16, &other, &st);
	CHECK_RC(rc, KVF_EMISMATCH, "model 2 8 4 32");
	{
		/* two of the four ranks reopen what four made */
		MPI_Comm half;
		kvf_options so = store_opts();
		kvf_mpi_options mo;
		MPI_Comm_split(MPI_COMM_WORLD,
			       test_rank < 2 ? 0 : MPI_UNDEFINED, test_rank,
			       &half);
		if (half != MPI_COMM_NULL) {
			kvf_mpi_options_init(&mo, &model);
			mo.shard = KVF_MPI_SHARD_TOKEN;
			mo.block_tokens = 16;
			mo.store = &so;
			rc = kvf_mpi_open(half, good, &mo, &st);
			CHECK_RC(rc, KVF_EMISMATCH, "ranks 4");
			MPI_Comm_free(&half);
		}
	}
	/* a rank with another codec: its part of every sequence would be
	 * encoded differently (accepted before, as was memory media, whose
	 * rank lost its part at close) */
	rc = open_on(MPI_COMM_WORLD, good, KVF_MPI_SHARD_TOKEN, 16, &model, 0,
		     test_rank == 3 ? KVF_CODEC_INT8 : KVF_CODEC_NONE, &st);
	CHECK_RC(rc, KVF_EMISMATCH, "rank 3 passed another store->codec");
	/* a rank opening without a communicator is refused alone, at once
	 * (MPI_Comm_dup aborted the job) */
	if (test_rank == 1) {
		kvf_mpi_options mo;
		kvf_mpi_store *none = (kvf_mpi_store *)1;

		kvf_mpi_options_init(&mo, &model);
		rc = kvf_mpi_open(MPI_COMM_NULL, good, &mo, &none);
		CHECK_RC(rc, KVF_EINVAL, "MPI_COMM_NULL");
		CHECK(none == NULL, "a refused open set *out");
	}
	rc = open_sharded(good, KVF_MPI_SHARD_TOKEN, 16, &model, &st);
	CHECK(rc == KVF_OK, "reopen after refusals: %s", kvf_mpi_last_error());
	if (rc == KVF_OK) {
		rc = kvf_mpi_seq_len(st, 1, 0, &len);
		CHECK(rc == KVF_OK && len == 1, "len %llu after reopen",
		      (unsigned long long)len);
		kvf_mpi_close(st);
	}
	lost_rank(good);
}

/* move_aside - rank r's store directory (and placement) out of dir and
 * back (back = 1), as a moved or lost node-local directory would */
static void move_aside(const char *dir, int r, int placement, int back)
{
	char a[4200], b[4300];

	MPI_Barrier(MPI_COMM_WORLD); /* every rank done with what is there */
	if (test_rank == 0) {
		snprintf(a, sizeof(a), "%s/rank-%d", dir, r);
		snprintf(b, sizeof(b), "%s.aside", a);
		CHECK(rename(back ? b : a, back ? a : b) == 0, "rename %s", a);
		if (placement) {
			snprintf(a, sizeof(a), "%s/rank-%d.placement", dir, r);
			snprintf(b, sizeof(b), "%s.aside", a);
			CHECK(rename(back ? b : a, back ? a : b) == 0,
			      "rename %s", a);
		}
	}
	MPI_Barrier(MPI_COMM_WORLD);
}

/*
 * A rank whose store directory is gone: the open is refused on every
 * rank and nothing changes.  It made a new, empty store there, and the
 * repair then cut the sequence to nothing on every rank, synced tokens
 * and all.  Also a damaged and a newer placement file.
 */
static void lost_rank(const char *good)
{
	kvf_mpi_store *st = NULL;
	uint64_t len = 0;
	kvf_status rc;
	char p[4200], saved[1024] = "";
	FILE *f;

	move_aside(good, 2, 0, 0); /* the store, its placement kept */
	rc = open_sharded(good, KVF_MPI_SHARD_TOKEN, 16, &model, &st);
	CHECK_RC(rc, KVF_ECORRUPT, "rank 2's part of the store is missing");
	move_aside(good, 2, 0, 1);
	move_aside(good, 1, 1, 0); /* the store and its placement */
	rc = open_sharded(good, KVF_MPI_SHARD_TOKEN, 16, &model, &st);
	CHECK_RC(rc, KVF_ECORRUPT, "rank 1's part of the store is missing");
	CHECK(empty_dir(good) == (test_rank == 1), "the refused open made rank %d's store",
	      test_rank);
	move_aside(good, 1, 1, 1);
	/* a placement file cut short, then one of a newer version */
	snprintf(p, sizeof(p), "%s/rank-3.placement", good);
	for (int damage = 0; damage < 2; damage++) {
		if (test_rank == 3) {
			size_t n = 0;

			if ((f = fopen(p, "r"))) {
				n = fread(saved, 1, sizeof(saved) - 1, f);
				fclose(f);
			}
			saved[n] = '\0';
			CHECK(strchr(saved, '\n') != NULL, "read %s", p);
			if (strchr(saved, '\n') && (f = fopen(p, "w"))) {
				if (damage == 0)
					fwrite(saved, 1, n / 2, f);
				else
					fprintf(f, "kvflash_mpi placement 9\n%s",
						strchr(saved, '\n') + 1);
				fclose(f);
			}
		}
		MPI_Barrier(MPI_COMM_WORLD);
		rc = open_sharded(good, KVF_MPI_SHARD_TOKEN, 16, &model, &st);
		if (damage == 0)
			CHECK_RC(rc, KVF_ECORRUPT, "rank-3.placement is damaged");
		else
			CHECK_RC(rc, KVF_EVERSION, "another version");
		if (test_rank == 3 && saved[0] && (f = fopen(p, "w"))) {
			fputs(saved, f);
			fclose(f);
		}
		MPI_Barrier(MPI_COMM_WORLD);
	}
	rc = open_sharded(good, KVF_MPI_SHARD_TOKEN, 16, &model, &st);
	CHECK(rc == KVF_OK, "reopen with every rank back: %s",
	      kvf_mpi_last_error());
	if (rc == KVF_OK) {
		rc = kvf_mpi_seq_len(st, 1, 0, &len);
		CHECK(rc == KVF_OK && len == 1,
		      "len %llu after the refused opens (was cut to nothing)",
		      (unsigned long long)len);
		kvf_mpi_close(st);
	}
	/* a store that holds no sequence: a missing part (a create cut
	 * short, say) is made again, nothing being there to lose */
	snprintf(p, sizeof(p), "%s-empty", good);
	rc = open_sharded(p, KVF_MPI_SHARD_TOKEN, 16, &model, &st);
	CHECK(rc == KVF_OK, "create: %s", kvf_mpi_last_error());
	if (rc == KVF_OK)
		kvf_mpi_close(st);
	move_aside(p, 3, 1, 0);
	rc = open_sharded(p, KVF_MPI_SHARD_TOKEN, 16, &model, &st);
	CHECK(rc == KVF_OK, "an empty store's missing part: %s",
	      kvf_mpi_last_error());
	if (rc == KVF_OK) {
		CHECK(kvf_mpi_seq_create(st, 2) == KVF_OK, "%s", kvf_mpi_last_error());
		kvf_mpi_close(st);
	}
}

/*
 * The state a crash in the middle of the open's repair leaves: on rank 1
 * the original freed, its copy in the reserved sequence and the record
 * naming it; on rank 2 a half-made copy without a record.  The next open
 * rebuilds rank 1's sequence from the copy and drops rank 2's.
 */
static void repair_resume(const char *base)
{
	char dir[4096], rec[4200];
	float k[40 * 4 * 32], v[40 * 4 * 32], kr[40 * 32], vr[40 * 32];
	kvf_mpi_store *st = NULL;
	uint64_t len = 0;
	kvf_status rc;

	snprintf(dir, sizeof(dir), "%s/resume", base);
	rc = open_sharded(dir, KVF_MPI_SHARD_TOKEN, 8, &model, &st);
	CHECK(rc == KVF_OK, "open: %s", kvf_mpi_last_error());
	if (rc != KVF_OK)
		return;
	CHECK(kvf_mpi_seq_create(st, 5) == KVF_OK, "%s", kvf_mpi_last_error());
	for (uint32_t l = 0; l < model.n_layers; l++) {
		tok_fill(&model, 5, l, 0, 40, k, v);
		CHECK(kvf_mpi_append(st, 5, l, 40, k, v) == KVF_OK, "%s",
		      kvf_mpi_last_error());
	}
	CHECK(kvf_mpi_sync(st) == KVF_OK, "%s", kvf_mpi_last_error());
	if (test_rank == 1 || test_rank == 2) {
		kvf_store *lo = kvf_mpi_local(st);
		kvf_seq_len(lo, 5, 0, &len);
		CHECK(kvf_seq_fork(lo, 5, KVF_MPI_SEQ_RESERVED,
				   test_rank == 1 ? len : 3) == KVF_OK,
		      "%s", kvf_last_error());
		if (test_rank == 1) {
			FILE *f;
			CHECK(kvf_seq_free(lo, 5) == KVF_OK, "%s",
			      kvf_last_error());
			snprintf(rec, sizeof(rec), "%s/rank-1.repair", dir);
			f = fopen(rec, "w");
			CHECK(f != NULL, "cannot write %s", rec);
			if (f) {
				fputs("5\n", f);
				fclose(f);
			}
		}
		CHECK(kvf_sync(lo) == KVF_OK, "%s", kvf_last_error());
	}
	CHECK(kvf_mpi_close(st) == KVF_OK, "%s", kvf_mpi_last_error());
	rc = open_sharded(dir, KVF_MPI_SHARD_TOKEN, 8, &model, &st);
	CHECK(rc == KVF_OK, "reopen: %s", kvf_mpi_last_error());
	if (rc != KVF_OK)
		return;
	for (uint32_t l = 0; l < model.n_layers; l++) {
		rc = kvf_mpi_seq_len(st, 5, l, &len);
		CHECK(rc == KVF_OK && len == 40, "layer %u: %llu tokens (%s)",
		      l, (unsigned long long)len, kvf_mpi_last_error());
		tok_fill(&model, 5, l, 0, 40, k, v);
		for (uint32_t h = 0; rc == KVF_OK && h < model.n_kv_heads;
		     h++) {
			rc = kvf_mpi_read(st, 5, l, h, 0, 40, kr, vr);
			CHECK(rc == KVF_OK, "read: %s", kvf_mpi_last_error());
			for (uint32_t t = 0;
			     test_rank == 0 && rc == KVF_OK && t < 40; t++)
				if (memcmp(kr + t * 32, k + (t * 4 + h) * 32,
					   128) ||
				    memcmp(vr + t * 32, v + (t * 4 + h) * 32,
					   128)) {
					CHECK(0,
					      "layer %u head %u token %u differs "
					      "after the resumed repair",
					      l, h, t);
					break;
				}
		}
	}
	rc = kvf_seq_len(kvf_mpi_local(st), KVF_MPI_SEQ_RESERVED, 0, &len);
	CHECK(rc == KVF_ENOENT, "the repair's copy is still there");
	snprintf(rec, sizeof(rec), "%s/rank-%d.repair", dir, test_rank);
	CHECK(access(rec, F_OK) != 0, "%s is still there", rec);
	CHECK(kvf_mpi_close(st) == KVF_OK, "%s", kvf_mpi_last_error());
}

/*
 * Ranks that disagree: one rank's store takes a token the others do not
 * (as when a rank's append fails with KVF_ENOSPC after the checks).  The
 * layer is refused until a reopen cuts it back; the other layer goes on.
 */
static void disagree(const char *base, kvf_mpi_shard shard)
{
	char dir[4096];
	float k[21 * 4 * 32], v[21 * 4 * 32], kr[21 * 32], vr[21 * 32];
	float q[8 * 32] = { 0 }, out[8 * 32];
	kvf_mpi_store *st = NULL;
	kvf_mpi_stats stats = { .struct_size = sizeof(stats) };
	unsigned long long cuts = 0, mine;
	uint64_t len = 0;
	kvf_status rc;

	snprintf(dir, sizeof(dir), "%s/disagree-%s", base,
		 kvf_mpi_shard_name(shard));
	rc = open_sharded(dir, shard, 8, &model, &st);
	CHECK(rc == KVF_OK, "open: %s", kvf_mpi_last_error());
	if (rc != KVF_OK)
		return;
	CHECK(kvf_mpi_seq_create(st, 3) == KVF_OK, "%s", kvf_mpi_last_error());
	for (uint32_t l = 0; l < model.n_layers; l++) {
		tok_fill(&model, 3, l, 0, 20, k, v);
		CHECK(kvf_mpi_append(st, 3, l, 20, k, v) == KVF_OK, "%s",
		      kvf_mpi_last_error());
	}
	/* rank 1: with token sharding (blocks of 8) the next token is rank
	 * 2's, so an extra token there would look like a valid length */
	if (test_rank == 1)
		CHECK(kvf_append(kvf_mpi_local(st), 3, 0, 1, k, v) == KVF_OK,
		      "%s", kvf_last_error());
	rc = kvf_mpi_append(st, 3, 0, 1, k, v);
	CHECK_RC(rc, KVF_ECORRUPT, "rank 1 holds");
	rc = kvf_mpi_attend(st, 3, 0, q, out, NULL);
	CHECK_RC(rc, KVF_ECORRUPT, "close and reopen");
	tok_fill(&model, 3, 1, 20, 1, k, v);
	CHECK(kvf_mpi_append(st, 3, 1, 1, k, v) == KVF_OK, "other layer: %s",
	      kvf_mpi_last_error());
	CHECK(kvf_mpi_sync(st) == KVF_OK, "%s", kvf_mpi_last_error());
	CHECK(kvf_mpi_close(st) == KVF_OK, "%s", kvf_mpi_last_error());
	rc = open_sharded(dir, shard, 8, &model, &st);
	CHECK(rc == KVF_OK, "reopen: %s", kvf_mpi_last_error());
	if (rc != KVF_OK)
		return;
	for (uint32_t l = 0; l < model.n_layers; l++) {
		uint64_t want = 20 + l;
		rc = kvf_mpi_seq_len(st, 3, l, &len);
		CHECK(rc == KVF_OK && len == want,
		      "layer %u: %llu tokens, want "
		      "%llu (%s)",
		      l, (unsigned long long)len, (unsigned long long)want,
		      kvf_mpi_last_error());
		tok_fill(&model, 3, l, 0, (uint32_t)want, k, v);
		for (uint32_t h = 0; h < model.n_kv_heads; h++) {
			rc = kvf_mpi_read(st, 3, l, h, 0, want, kr, vr);
			CHECK(rc == KVF_OK, "read: %s", kvf_mpi_last_error());
			for (uint32_t t = 0;
			     test_rank == 0 && rc == KVF_OK && t < want; t++)
				CHECK(!memcmp(kr + t * 32, k + (t * 4 + h) * 32,
					      128) &&
					      !memcmp(vr + t * 32,
						      v + (t * 4 + h) * 32,
						      128),
				      "layer %u head %u token %u differs", l, h,
				      t);
		}
	}
	rc = kvf_mpi_attend(st, 3, 0, q, out, NULL);
	CHECK(rc == KVF_OK, "attend after the cut: %s", kvf_mpi_last_error());
	kvf_mpi_stats_get(st, &stats);
	mine = stats.repaired_seqs;
	MPI_Allreduce(&mine, &cuts, 1, MPI_UNSIGNED_LONG_LONG, MPI_SUM,
		      MPI_COMM_WORLD);
	CHECK(cuts == 1, "%llu cuts, want 1 (on rank 1)", cuts);
	CHECK(kvf_mpi_close(st) == KVF_OK, "%s", kvf_mpi_last_error());
}

/*
 * An append one rank's store refuses after the checks (rank 1's store is
 * small and fills; the others have room): the other ranks take their
 * parts back, so every rank agrees on the old length at once, without a
 * reopen, and the sequence goes on.
 */
static void rollback(const char *base, kvf_mpi_shard shard)
{
	enum { BIG = 20000, OLD = 40 };
	char dir[4096];
	float *k = malloc((size_t)BIG * 4 * 32 * 4), *v = malloc((size_t)BIG * 4 * 32 * 4);
	float kr[OLD * 32], vr[OLD * 32], q[8 * 32] = { 0 }, out[8 * 32];
	kvf_options so = store_opts();
	kvf_mpi_options o;
	kvf_mpi_store *st = NULL;
	uint64_t len = 0;
	kvf_status rc;

	snprintf(dir, sizeof(dir), "%s/rollback-%s", base, kvf_mpi_shard_name(shard));
	if (test_rank == 1) {
		so.capacity_bytes = 4ull << 20;
		so.segment_size = 256u << 10;
		so.dram_budget = 0;
	}
	kvf_mpi_options_init(&o, &model);
	o.shard = shard;
	o.block_tokens = 8;
	o.store = &so;
	rc = kvf_mpi_open(MPI_COMM_WORLD, dir, &o, &st);
	CHECK(rc == KVF_OK && k && v, "open: %s", kvf_mpi_last_error());
	if (rc != KVF_OK || !k || !v) {
		kvf_mpi_close(st);
		free(k);
		free(v);
		return;
	}
	CHECK(kvf_mpi_seq_create(st, 5) == KVF_OK, "%s", kvf_mpi_last_error());
	for (uint32_t l = 0; l < model.n_layers; l++) {
		tok_fill(&model, 5, l, 0, OLD, k, v);
		CHECK(kvf_mpi_append(st, 5, l, OLD, k, v) == KVF_OK, "%s",
		      kvf_mpi_last_error());
	}
	tok_fill(&model, 5, 0, OLD, BIG, k, v);
	rc = kvf_mpi_append(st, 5, 0, BIG, k, v);
	CHECK_RC(rc, KVF_ENOSPC, "rank 1");
	for (uint32_t l = 0; l < model.n_layers; l++) {
		rc = kvf_mpi_seq_len(st, 5, l, &len);
		CHECK(rc == KVF_OK && len == OLD, "layer %u after the refused append: %llu tokens (%s)",
		      l, (unsigned long long)len, kvf_mpi_last_error());
	}
	rc = kvf_mpi_attend(st, 5, 0, q, out, NULL);
	CHECK(rc == KVF_OK, "attend: %s", kvf_mpi_last_error());
	tok_fill(&model, 5, 0, OLD, 1, k, v);
	CHECK(kvf_mpi_append(st, 5, 0, 1, k, v) == KVF_OK, "append after: %s",
	      kvf_mpi_last_error());
	tok_fill(&model, 5, 0, 0, OLD, k, v);
	for (uint32_t h = 0; h < model.n_kv_heads; h++) {
		rc = kvf_mpi_read(st, 5, 0, h, 0, OLD, kr, vr);
		CHECK(rc == KVF_OK, "read: %s", kvf_mpi_last_error());
		for (uint32_t t = 0; test_rank == 0 && rc == KVF_OK && t < OLD; t++)
			CHECK(!memcmp(kr + t * 32, k + (t * 4 + h) * 32, 128) &&
			      !memcmp(vr + t * 32, v + (t * 4 + h) * 32, 128),
			      "head %u token %u differs", h, t);
	}
	CHECK(kvf_mpi_close(st) == KVF_OK, "%s", kvf_mpi_last_error());
	free(k);
	free(v);
}

int main(int argc, char **argv)
{
	MPI_Init(&argc, &argv);
	MPI_Comm_rank(MPI_COMM_WORLD, &test_rank);
	if (argc != 2) {
		if (test_rank == 0)
			fprintf(stderr, "usage: mpirun -np 4 %s DIR\n",
				argv[0]);
		MPI_Finalize();
		return 2;
	}
	int n;
	MPI_Comm_size(MPI_COMM_WORLD, &n);
	if (n != 4) {
		if (test_rank == 0)
			fprintf(stderr, "%s: run with 4 ranks, not %d\n",
				argv[0], n);
		MPI_Finalize();
		return 2;
	}
	if (test_rank == 0) {
		nftw(argv[1], rm_entry, 16, FTW_DEPTH | FTW_PHYS);
		mkdir(argv[1], 0755);
	}
	MPI_Barrier(MPI_COMM_WORLD);
	/* 4 ranks, f32, root 0; 3 ranks (4 KV heads split 2, 1, 1), f16,
	 * root 2 */
	struct run four = { MPI_COMM_WORLD, 4, 0, model, "f32x4",
			    KVF_CODEC_NONE };
	struct run three = { MPI_COMM_NULL, 3, 2, model, "f16x3",
			     KVF_CODEC_NONE };
	three.m.dtype = KVF_DTYPE_F16;
	MPI_Comm_split(MPI_COMM_WORLD, test_rank < 3 ? 0 : MPI_UNDEFINED,
		       test_rank, &three.comm);
	for (int shard = 0; shard < 2; shard++) {
		good_path(argv[1], (kvf_mpi_shard)shard, &four);
		good_path(argv[1], (kvf_mpi_shard)shard, &three);
		MPI_Barrier(MPI_COMM_WORLD);
	}
	if (three.comm != MPI_COMM_NULL)
		MPI_Comm_free(&three.comm);
	/* head sizes whose token groups are no power of two (80 in f16: 25
	 * tokens a page) or take several pages (80 in f32: 2; 192 in f16:
	 * 2), under both policies (blocks of 16 tokens cut their groups) */
	{
		struct run odd[] = {
			{ MPI_COMM_WORLD, 4, 0, { 2, 8, 4, 80, KVF_DTYPE_F16 }, "f16x4-hd80", KVF_CODEC_NONE },
			{ MPI_COMM_WORLD, 4, 1, { 2, 8, 4, 80, KVF_DTYPE_F32 }, "f32x4-hd80", KVF_CODEC_NONE },
			{ MPI_COMM_WORLD, 4, 3, { 2, 8, 4, 192, KVF_DTYPE_F16 }, "f16x4-hd192", KVF_CODEC_NONE },
		};

		for (size_t i = 0; i < sizeof(odd) / sizeof(odd[0]); i++)
			for (int shard = 0; shard < 2; shard++) {
				good_path(argv[1], (kvf_mpi_shard)shard, &odd[i]);
				MPI_Barrier(MPI_COMM_WORLD);
			}
	}
	/* compressed KV: every rank's store encodes what it holds; under
	 * head sharding a head's groups are the single store's, so the
	 * answers are its bits, under token blocks they agree within INT8's
	 * rounding (docs/compression.md) */
	{
		struct run coded = { MPI_COMM_WORLD, 4, 0, model, "int8x4",
				     KVF_CODEC_INT8 };

		for (int shard = 0; shard < 2; shard++) {
			good_path(argv[1], (kvf_mpi_shard)shard, &coded);
			MPI_Barrier(MPI_COMM_WORLD);
		}
	}
	refusals(argv[1]);
	repair_resume(argv[1]);
	disagree(argv[1], KVF_MPI_SHARD_HEAD);
	disagree(argv[1], KVF_MPI_SHARD_TOKEN);
	rollback(argv[1], KVF_MPI_SHARD_HEAD);
	rollback(argv[1], KVF_MPI_SHARD_TOKEN);
	if (test_rank == 0)
		printf("test_mpi: %s\n", test_failed ? "FAILED" : "ok");
	return test_exit();
}
