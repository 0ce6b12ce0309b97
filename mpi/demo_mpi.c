/*
 * demo_mpi - a kvflash store sharded over MPI ranks, both ways.
 *
 *   mpirun -np 4 --oversubscribe demo_mpi [DIR]
 *
 * For head sharding and then token sharding: open a sharded store in
 * DIR/head or DIR/token (each rank keeps its part in DIR/<policy>/rank-R),
 * append a 1000-token prompt to one sequence (the root holds the K/V;
 * each rank receives only its heads or its token blocks), attend one
 * decode step on every rank next to its data, and compare the root's
 * result with the same attention on a single local store.  Prints where
 * the tokens went and the bytes moved over MPI.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "kvflash_mpi.h"

static const kvf_model model = { 1, 16, 8, 64, KVF_DTYPE_F32 };
#define PROMPT 1000

static float val(uint64_t i, int kind)
{
	return sinf((float)(i * (kind ? 0.37 : 0.11))) * 0.5f;
}

static int demo(const char *base, kvf_mpi_shard shard, int rank, int n,
		const float *k, const float *v, const float *q,
		const float *want)
{
	char dir[4096];
	kvf_options so;
	kvf_mpi_options o;
	kvf_mpi_store *st;
	kvf_mpi_stats s = { .struct_size = sizeof(s) }, a = s;
	float out[16 * 64];
	uint64_t held;
	double err = 0;

	snprintf(dir, sizeof(dir), "%s/%s", base, kvf_mpi_shard_name(shard));
	kvf_options_init(&so, NULL);
	so.n_threads = 1;
	so.capacity_bytes = 64ull << 20;
	kvf_mpi_options_init(&o, &model);
	o.shard = shard;
	o.block_tokens = 64;
	o.store = &so;
	if (kvf_mpi_open(MPI_COMM_WORLD, dir, &o, &st) != KVF_OK ||
	    (kvf_mpi_seq_create(st, 1) != KVF_OK &&
	     (kvf_mpi_seq_free(st, 1) != KVF_OK ||
	      kvf_mpi_seq_create(st, 1) != KVF_OK)) ||
	    kvf_mpi_append(st, 1, 0, PROMPT, k, v) != KVF_OK ||
	    kvf_mpi_stats_get(st, &a) != KVF_OK ||
	    kvf_mpi_attend(st, 1, 0, q, out, NULL) != KVF_OK ||
	    kvf_mpi_stats_get(st, &s) != KVF_OK) {
		fprintf(stderr, "demo_mpi: %s\n", kvf_mpi_last_error());
		return 1;
	}
	kvf_seq_len(kvf_mpi_local(st), 1, 0, &held);
	if (rank == 0) {
		for (int i = 0; i < 16 * 64; i++)
			err = fmax(err, fabs(out[i] - want[i]));
		printf("\n%s sharding over %d ranks:\n",
		       kvf_mpi_shard_name(shard), n);
	}
	for (int r = 0; r < n; r++) {
		MPI_Barrier(MPI_COMM_WORLD);
		if (r == rank && shard == KVF_MPI_SHARD_HEAD)
			printf("  rank %d: KV heads %u..%u, %llu tokens each; the "
			       "step moved %llu B of q in, %llu B of output out, "
			       "%llu B of KV\n",
			       rank, s.kv_head0, s.kv_head0 + s.n_kv_heads - 1,
			       (unsigned long long)held,
			       (unsigned long long)(s.q_bytes_recv -
						    a.q_bytes_recv),
			       (unsigned long long)(s.out_bytes_sent -
						    a.out_bytes_sent),
			       (unsigned long long)(s.kv_bytes_recv -
						    a.kv_bytes_recv +
						    s.kv_bytes_sent -
						    a.kv_bytes_sent));
		else if (r == rank)
			printf("  rank %d: token blocks %d, %d, ... (64 tokens each), "
			       "%llu tokens of all heads; the step moved %llu B of q "
			       "in, %llu B of output and LSE out, %llu B of KV\n",
			       rank, rank, rank + n, (unsigned long long)held,
			       (unsigned long long)(s.q_bytes_recv -
						    a.q_bytes_recv),
			       (unsigned long long)(s.out_bytes_sent -
						    a.out_bytes_sent),
			       (unsigned long long)(s.kv_bytes_recv -
						    a.kv_bytes_recv +
						    s.kv_bytes_sent -
						    a.kv_bytes_sent));
		fflush(stdout);
	}
	MPI_Barrier(MPI_COMM_WORLD);
	if (rank == 0)
		printf("  root (rank 0): sent %llu B of q, received %llu B of "
		       "outputs; largest difference from one local store: %.2g\n",
		       (unsigned long long)(s.q_bytes_sent - a.q_bytes_sent),
		       (unsigned long long)(s.out_bytes_recv -
					    a.out_bytes_recv),
		       err);
	kvf_mpi_close(st);
	return err > 1e-5 ? 1 : 0;
}

int main(int argc, char **argv)
{
	const char *base = argc == 2 ? argv[1] : "kvflash-mpi-demo";
	size_t tok = (size_t)model.n_kv_heads * model.head_dim;
	float *k = malloc(PROMPT * tok * 4), *v = malloc(PROMPT * tok * 4);
	float q[16 * 64], want[16 * 64];
	int rank, n, bad = 0;
	kvf_store *ref = NULL;
	kvf_options ro;

	MPI_Init(&argc, &argv);
	MPI_Comm_rank(MPI_COMM_WORLD, &rank);
	MPI_Comm_size(MPI_COMM_WORLD, &n);
	/* one argument, a directory: not an option, not empty */
	if (argc > 2 || (argc == 2 && (base[0] == '\0' || base[0] == '-'))) {
		if (rank == 0)
			fprintf(stderr, "usage: mpirun -np N %s [DIR]   (default DIR: ./kvflash-mpi-demo)\n",
				argv[0]);
		free(k);
		free(v);
		MPI_Finalize();
		return 2;
	}
	for (size_t i = 0; i < PROMPT * tok; i++) {
		k[i] = val(i, 0);
		v[i] = val(i, 1);
	}
	for (int i = 0; i < 16 * 64; i++)
		q[i] = val((uint64_t)i * 3, 1);
	mkdir(base, 0755);
	if (rank == 0) {
		/* the same attention on one local store, for comparison */
		char rdir[4096];
		snprintf(rdir, sizeof(rdir), "%s/single", base);
		kvf_options_init(&ro, &model);
		ro.media = KVF_MEDIA_MEMORY;
		if (kvf_open(rdir, &ro, &ref) != KVF_OK ||
		    kvf_seq_create(ref, 1) != KVF_OK ||
		    kvf_append(ref, 1, 0, PROMPT, k, v) != KVF_OK ||
		    kvf_attend(ref, 1, 0, q, want, NULL) != KVF_OK) {
			fprintf(stderr, "demo_mpi: %s\n", kvf_last_error());
			MPI_Abort(MPI_COMM_WORLD, 1);
		}
		kvf_close(ref);
		printf("demo_mpi: one sequence of %d tokens, %u KV heads, head_dim "
		       "%u, over %d ranks; stores in %s/\n",
		       PROMPT, model.n_kv_heads, model.head_dim, n, base);
	}
	bad |= demo(base, KVF_MPI_SHARD_HEAD, rank, n, k, v, q, want);
	bad |= demo(base, KVF_MPI_SHARD_TOKEN, rank, n, k, v, q, want);
	free(k);
	free(v);
	MPI_Finalize();
	return bad;
}
