/*
 * crash_mpi.c - a sharded store's ranks killed mid-run, then reopened.
 *
 *   mpirun -np 4 crash_mpi write DIR head|token   appends to three
 *       sequences until killed; after each kvf_mpi_sync rank 0 records
 *       the synced lengths in DIR/synced (atomically), and every rank
 *       writes its pid to DIR/pid-R.  Every seventh step one rank also
 *       syncs its own store halfway through a step, so the ranks hold
 *       different prefixes when they die.
 *   mpirun -np 4 crash_mpi verify DIR head|token  reopens every rank's
 *       store: each layer holds at least its synced tokens, every token
 *       read back is the one appended, attention equals a single store's
 *       over the same tokens (1e-5 relative), and appends go on.
 * crash_mpi.sh kills the writer's ranks with SIGKILL at a random moment.
 */
#include <stdint.h>
#include <unistd.h>

#include "mpi_test.h"

static const kvf_model model = { 2, 8, 4, 16, KVF_DTYPE_F32 };
#define N_SEQS 3
#define MAX_STEP 8

static kvf_mpi_store *open_store(const char *dir, kvf_mpi_shard shard)
{
	kvf_options so;
	kvf_mpi_options o;
	kvf_mpi_store *st = NULL;

	kvf_options_init(&so, NULL);
	so.n_threads = 1;
	so.capacity_bytes = 256ull << 20;
	so.dram_budget = 8ull << 20;
	kvf_mpi_options_init(&o, &model);
	o.shard = shard;
	o.block_tokens = 8;
	o.store = &so;
	if (kvf_mpi_open(MPI_COMM_WORLD, dir, &o, &st) != KVF_OK)
		CHECK(0, "open: %s", kvf_mpi_last_error());
	return st;
}

static void write_file(const char *dir, const char *name, const char *text)
{
	char p[4200], tmp[4300];
	FILE *f;

	snprintf(p, sizeof(p), "%s/%s", dir, name);
	snprintf(tmp, sizeof(tmp), "%s.tmp", p);
	f = fopen(tmp, "w");
	if (!f)
		return;
	fputs(text, f);
	fflush(f);
	fsync(fileno(f));
	fclose(f);
	rename(tmp, p);
}

static int do_write(const char *dir, kvf_mpi_shard shard)
{
	float k[MAX_STEP * 4 * 16], v[MAX_STEP * 4 * 16];
	uint64_t len[N_SEQS + 1] = { 0 };
	kvf_mpi_store *st = open_store(dir, shard);
	int root = test_rank == 0;

	if (!st)
		return test_exit();
	for (uint64_t s = 1; s <= N_SEQS; s++)
		CHECK(kvf_mpi_seq_create(st, s) == KVF_OK, "%s",
		      kvf_mpi_last_error());
	for (uint64_t step = 0; !test_failed; step++) {
		for (uint64_t s = 1; s <= N_SEQS; s++) {
			uint32_t n = 1 + (uint32_t)((step + s) % MAX_STEP);
			for (uint32_t l = 0; l < model.n_layers; l++) {
				tok_fill(&model, s, l, len[s], n, k, v);
				kvf_status rc = kvf_mpi_append(st, s, l, n,
							       root ? k : NULL,
							       root ? v : NULL);
				CHECK(rc == KVF_OK, "%s", kvf_mpi_last_error());
				/* one rank makes a step durable that the others
				 * do not, halfway through its layers (as its
				 * own write-back might): after the kill the
				 * ranks disagree, and the open must cut back */
				if (step % 7 == 3 && s == 2 && l == 0 &&
				    test_rank == (int)(step / 7 % 4))
					CHECK(kvf_sync(kvf_mpi_local(st)) ==
						      KVF_OK,
					      "%s", kvf_last_error());
			}
			len[s] += n;
		}
		if (step % 7 == 6) {
			char text[256], name[32];
			CHECK(kvf_mpi_sync(st) == KVF_OK, "%s",
			      kvf_mpi_last_error());
			snprintf(text, sizeof(text), "%llu %llu %llu %llu\n",
				 (unsigned long long)step,
				 (unsigned long long)len[1],
				 (unsigned long long)len[2],
				 (unsigned long long)len[3]);
			if (root)
				write_file(dir, "synced", text);
			snprintf(name, sizeof(name), "pid-%d", test_rank);
			snprintf(text, sizeof(text), "%d\n", (int)getpid());
			write_file(dir, name, text);
		}
	}
	kvf_mpi_close(st);
	return test_exit();
}

static void verify_seq(kvf_mpi_store *st, kvf_store *ref, uint64_t s,
		       uint64_t synced)
{
	uint32_t hd = model.head_dim, nq = model.n_q_heads;
	float *k = NULL, *v = NULL, *kw = NULL, *vw = NULL;
	float q[8 * 16], out[8 * 16], want[8 * 16];
	uint64_t len = 0;

	for (uint32_t l = 0; l < model.n_layers; l++) {
		kvf_status rc = kvf_mpi_seq_len(st, s, l, &len);
		CHECK(rc == KVF_OK && len >= synced,
		      "seq %llu layer %u: %llu "
		      "tokens, %llu were synced (%s)",
		      (unsigned long long)s, l, (unsigned long long)len,
		      (unsigned long long)synced, kvf_mpi_last_error());
		if (rc != KVF_OK || len == 0)
			continue;
		k = realloc(k, len * hd * 4);
		v = realloc(v, len * hd * 4);
		kw = realloc(kw, len * model.n_kv_heads * hd * 4);
		vw = realloc(vw, len * model.n_kv_heads * hd * 4);
		tok_fill(&model, s, l, 0, (uint32_t)len, kw, vw);
		for (uint32_t h = 0; h < model.n_kv_heads; h++) {
			rc = kvf_mpi_read(st, s, l, h, 0, len, k, v);
			CHECK(rc == KVF_OK, "read: %s", kvf_mpi_last_error());
			for (uint64_t t = 0;
			     test_rank == 0 && rc == KVF_OK && t < len; t++) {
				size_t o = (t * model.n_kv_heads + h) * hd;
				if (memcmp(k + t * hd, kw + o, hd * 4) ||
				    memcmp(v + t * hd, vw + o, hd * 4)) {
					CHECK(0,
					      "seq %llu layer %u head %u token "
					      "%llu is not the one appended",
					      (unsigned long long)s, l, h,
					      (unsigned long long)t);
					break;
				}
			}
		}
		for (uint32_t i = 0; i < nq * hd; i++)
			q[i] = tok_val(s, l, i, 0, 0, 3);
		rc = kvf_mpi_attend(st, s, l, q, out, NULL);
		CHECK(rc == KVF_OK, "attend: %s", kvf_mpi_last_error());
		if (ref && rc == KVF_OK) {
			kvf_seq_create(ref, s * 10 + l);
			kvf_append(ref, s * 10 + l, 0, (uint32_t)len, kw, vw);
			kvf_attend(ref, s * 10 + l, 0, q, want, NULL);
			double e = rel_err(out, want, nq, hd);
			CHECK(e <= 1e-5,
			      "seq %llu layer %u: attention error %.3g",
			      (unsigned long long)s, l, e);
		}
	}
	free(k);
	free(v);
	free(kw);
	free(vw);
}

static int do_verify(const char *dir, kvf_mpi_shard shard)
{
	unsigned long long step = 0, syn[N_SEQS + 1] = { 0 };
	kvf_mpi_store *st;
	kvf_store *ref = NULL;
	char p[4200];
	FILE *f;

	snprintf(p, sizeof(p), "%s/synced", dir);
	f = fopen(p, "r");
	CHECK(f && fscanf(f, "%llu %llu %llu %llu", &step, &syn[1], &syn[2],
			  &syn[3]) == 4,
	      "no synced lengths in %s", p);
	if (f)
		fclose(f);
	st = open_store(dir, shard);
	if (!st)
		return test_exit();
	if (test_rank == 0) {
		kvf_options ro;
		kvf_model one = model;
		one.n_layers = 1;
		kvf_options_init(&ro, &one);
		ro.media = KVF_MEDIA_MEMORY;
		ro.n_threads = 1;
		snprintf(p, sizeof(p), "%s/ref", dir);
		CHECK(kvf_open(p, &ro, &ref) == KVF_OK, "%s", kvf_last_error());
	}
	for (uint64_t s = 1; s <= N_SEQS; s++)
		verify_seq(st, ref, s, syn[s]);
	kvf_close(ref);
	ref = NULL;
	/* the sequences take appends again, at their common length */
	for (uint64_t s = 1; s <= N_SEQS && !test_failed; s++) {
		float k[3 * 4 * 16], v[3 * 4 * 16];
		for (uint32_t l = 0; l < model.n_layers; l++) {
			uint64_t len = 0;
			kvf_mpi_seq_len(st, s, l, &len);
			tok_fill(&model, s, l, len, 3, k, v);
			CHECK(kvf_mpi_append(st, s, l, 3, k, v) == KVF_OK, "%s",
			      kvf_mpi_last_error());
		}
		verify_seq(st, NULL, s, syn[s] + 3);
	}
	kvf_mpi_stats stats = { .struct_size = sizeof(stats) };
	unsigned long long mine, total = 0;
	kvf_mpi_stats_get(st, &stats);
	mine = stats.repaired_seqs;
	MPI_Reduce(&mine, &total, 1, MPI_UNSIGNED_LONG_LONG, MPI_SUM, 0,
		   MPI_COMM_WORLD);
	if (test_rank == 0)
		printf("crash_mpi verify %s: synced at step %llu (%llu %llu %llu "
		       "tokens), %llu sequence cuts over the ranks: %s\n",
		       kvf_mpi_shard_name(shard), step, syn[1], syn[2], syn[3],
		       total, test_failed ? "FAILED" : "ok");
	CHECK(kvf_mpi_close(st) == KVF_OK, "%s", kvf_mpi_last_error());
	return test_exit();
}

int main(int argc, char **argv)
{
	kvf_mpi_shard shard;

	MPI_Init(&argc, &argv);
	MPI_Comm_rank(MPI_COMM_WORLD, &test_rank);
	if (argc != 4 ||
	    (strcmp(argv[1], "write") && strcmp(argv[1], "verify")) ||
	    (strcmp(argv[3], "head") && strcmp(argv[3], "token"))) {
		if (test_rank == 0)
			fprintf(stderr,
				"usage: %s write|verify DIR head|token\n",
				argv[0]);
		MPI_Finalize();
		return 2;
	}
	shard = strcmp(argv[3], "head") ? KVF_MPI_SHARD_TOKEN :
					  KVF_MPI_SHARD_HEAD;
	if (!strcmp(argv[1], "write"))
		return do_write(argv[2], shard);
	return do_verify(argv[2], shard);
}
