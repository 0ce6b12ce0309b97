/*
 * kvbench_mpi - append and attention throughput of a kvflash store
 * sharded over 1, 2, 4... MPI ranks, per rank, and the bytes each decode
 * step moves over MPI (only q in and outputs out: KV never moves).
 *
 *   mpirun -np 4 --oversubscribe kvbench_mpi [--dir DIR] [--ranks 1,2,4]
 *       [--shard head|token|both] [--tokens N] [--steps N] [--layers N]
 *       [--q-heads N] [--kv-heads N] [--head-dim N] [--block N]
 *       [--budget BYTES] [--threads N] [--json]
 *
 * One run launched with the most ranks measures each rank count in turn
 * on the first ranks of MPI_COMM_WORLD (a sub-communicator; the others
 * wait), so the rows sit side by side.  Each configuration: a fresh
 * sharded store in DIR/<shard>-<ranks>, one sequence, the prompt of
 * --tokens tokens appended per layer in chunks of 256 (append rate), a
 * sync, then --steps decode steps, each attending every layer (attention
 * rate) and appending one token per layer (not timed with attention).
 * --budget is each rank's memory tier (kvf_options.dram_budget; 1 GiB
 * holds the default sizes, so attention runs from DRAM); --budget 0 reads
 * every page from the media at every step (O_DIRECT where allowed).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "kvflash_mpi.h"

struct cfg {
	const char *dir;
	int ranks[8], n_ranks_list;
	int shards; /* bit 0 head, bit 1 token */
	uint64_t tokens;
	uint32_t steps, block, threads;
	uint64_t budget;
	kvf_model m;
	int json;
};

struct row {
	int shard, ranks;
	double append_s, attend_s; /* wall seconds, on the root */
	uint64_t tokens, steps;
	double q, out, ctl, kv; /* bytes over MPI per decode step */
	double kv_append;       /* bytes over MPI per appended token */
	uint64_t media_read;    /* bytes read from media, attention */
};

static int usage(const char *argv0)
{
	fprintf(stderr,
		"usage: mpirun -np N %s [--dir DIR] [--ranks 1,2,4] "
		"[--shard head|token|both] [--tokens N] [--steps N] "
		"[--layers N] [--q-heads N] [--kv-heads N] [--head-dim N] "
		"[--block N] [--budget BYTES] [--threads N] [--json]\n",
		argv0);
	return 2;
}

static char parse_error[256]; /* why parse refused, for the root to print */

/* num - flag's value v as a whole number in [lo, hi] (digits only: "-5"
 * and a value past hi are refused, not wrapped); 0 or -1 */
static int num(const char *flag, const char *v, uint64_t lo, uint64_t hi,
	       uint64_t *out)
{
	const char *d = v;
	uint64_t x = 0;

	for (; *d; d++) {
		if (*d < '0' || *d > '9' || x > (UINT64_MAX - 9) / 10)
			break;
		x = x * 10 + (uint64_t)(*d - '0');
	}
	if (*v == '\0' || *d != '\0' || x < lo || x > hi) {
		snprintf(parse_error, sizeof(parse_error),
			 "%s '%s' is not a whole number in [%llu, %llu]", flag,
			 v, (unsigned long long)lo, (unsigned long long)hi);
		return -1;
	}
	*out = x;
	return 0;
}

/* num32 - num into a uint32_t */
static int num32(const char *flag, const char *v, uint32_t lo, uint32_t hi,
		 uint32_t *out)
{
	uint64_t x;

	if (num(flag, v, lo, hi, &x) != 0)
		return -1;
	*out = (uint32_t)x;
	return 0;
}

static int parse(int argc, char **argv, struct cfg *c)
{
	int bad = 0;

	memset(c, 0, sizeof(*c));
	c->dir = "kvbench-mpi";
	c->ranks[0] = 1, c->ranks[1] = 2, c->ranks[2] = 4;
	c->n_ranks_list = 3;
	c->shards = 3;
	c->tokens = 4096;
	c->steps = 16;
	c->block = 256;
	c->threads = 1;
	c->budget = 1ull << 30;
	c->m = (kvf_model){ 2, 32, 8, 128, KVF_DTYPE_F16 };
	for (int i = 1; i < argc; i++) {
		const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
		if (!strcmp(a, "--json")) {
			c->json = 1;
			continue;
		}
		if (!v)
			return -1;
		i++;
		if (!strcmp(a, "--dir"))
			c->dir = v;
		else if (!strcmp(a, "--ranks")) {
			char item[32];
			const char *p = v;

			c->n_ranks_list = 0;
			while (!bad) {
				size_t len = strcspn(p, ",");
				uint32_t r = 0;

				snprintf(item, sizeof(item), "%.*s",
					 (int)(len < sizeof(item) - 1 ? len : sizeof(item) - 1), p);
				if (len >= sizeof(item) ||
				    c->n_ranks_list == 8) {
					snprintf(parse_error, sizeof(parse_error),
						 "--ranks '%s': at most 8 counts, each in [1, 4096]", v);
					bad = -1;
					break;
				}
				bad |= num32(a, item, 1, 4096, &r);
				c->ranks[c->n_ranks_list++] = (int)r;
				if (p[len] != ',')
					break;
				p += len + 1;
			}
		} else if (!strcmp(a, "--shard"))
			c->shards = !strcmp(v, "head")  ? 1 :
				    !strcmp(v, "token") ? 2 :
				    !strcmp(v, "both")  ? 3 :
							  -1;
		else if (!strcmp(a, "--tokens"))
			bad |= num(a, v, 1, 1u << 24, &c->tokens);
		else if (!strcmp(a, "--steps"))
			bad |= num32(a, v, 1, 1u << 20, &c->steps);
		else if (!strcmp(a, "--layers"))
			bad |= num32(a, v, 1, 65535, &c->m.n_layers);
		else if (!strcmp(a, "--q-heads"))
			bad |= num32(a, v, 1, 1024, &c->m.n_q_heads);
		else if (!strcmp(a, "--kv-heads"))
			bad |= num32(a, v, 1, 1024, &c->m.n_kv_heads);
		else if (!strcmp(a, "--head-dim"))
			bad |= num32(a, v, 1, 1024, &c->m.head_dim);
		else if (!strcmp(a, "--block"))
			bad |= num32(a, v, 1, 1u << 24, &c->block);
		else if (!strcmp(a, "--budget"))
			bad |= num(a, v, 0, 1ull << 40, &c->budget);
		else if (!strcmp(a, "--threads"))
			bad |= num32(a, v, 1, 256, &c->threads);
		else
			return -1;
		if (bad)
			return -1;
	}
	if (c->shards < 0)
		return -1;
	return 0;
}

/* the sums over the ranks of what they received, as doubles */
static void sum_recv(MPI_Comm comm, const kvf_mpi_stats *a,
		     const kvf_mpi_stats *b, double *q, double *out,
		     double *ctl, double *kv)
{
	double mine[4] = { (double)(b->q_bytes_recv - a->q_bytes_recv),
			   (double)(b->out_bytes_recv - a->out_bytes_recv),
			   (double)(b->ctl_bytes_recv - a->ctl_bytes_recv),
			   (double)(b->kv_bytes_recv - a->kv_bytes_recv) },
	       all[4];

	MPI_Reduce(mine, all, 4, MPI_DOUBLE, MPI_SUM, 0, comm);
	*q = all[0], *out = all[1], *ctl = all[2], *kv = all[3];
}

#define CK(expr)                                                        \
	do {                                                            \
		kvf_status rc_ = (expr);                                \
		if (rc_ != KVF_OK) {                                    \
			fprintf(stderr, "kvbench_mpi: %s: %s\n", #expr, \
				kvf_mpi_last_error());                  \
			return rc_;                                     \
		}                                                       \
	} while (0)

static kvf_status run(const struct cfg *c, MPI_Comm comm, int shard,
		      struct row *row)
{
	const kvf_model *m = &c->m;
	size_t elt = m->dtype == KVF_DTYPE_F32 ? 4 : 2;
	size_t tok = (size_t)m->n_kv_heads * m->head_dim * elt;
	size_t qn = (size_t)m->n_q_heads * m->head_dim;
	int rank, n;
	char dir[4096];
	kvf_options so;
	kvf_mpi_options o;
	kvf_mpi_store *st;
	kvf_mpi_stats s0 = { .struct_size = sizeof(s0) }, s1 = s0, s2 = s0;
	kvf_stats ls0 = { .struct_size = sizeof(ls0) }, ls1 = ls0;
	double t0, mread, lread;
	double dummy;
	char *k, *v;
	float *q, *out;

	MPI_Comm_rank(comm, &rank);
	MPI_Comm_size(comm, &n);
	snprintf(dir, sizeof(dir), "%s/%s-%d", c->dir, shard ? "token" : "head",
		 n);
	if (rank == 0) {
		char cmd[4200];
		snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
		if (system(cmd) != 0)
			fprintf(stderr, "kvbench_mpi: could not empty %s\n",
				dir);
	}
	MPI_Barrier(comm);
	mkdir(c->dir, 0755);
	kvf_options_init(&so, NULL);
	so.n_threads = c->threads;
	so.dram_budget = c->budget;
	kvf_mpi_options_init(&o, m);
	o.shard = shard ? KVF_MPI_SHARD_TOKEN : KVF_MPI_SHARD_HEAD;
	o.block_tokens = c->block;
	o.store = &so;
	CK(kvf_mpi_open(comm, dir, &o, &st));
	k = calloc(256, tok);
	v = calloc(256, tok);
	q = calloc(qn * 2, sizeof(float));
	if (!k || !v || !q) {
		fprintf(stderr, "kvbench_mpi: out of memory\n");
		return KVF_ENOMEM;
	}
	out = q + qn;
	for (size_t i = 0; i < 256 * tok; i++) {
		k[i] = (char)(i * 7 + 1);
		v[i] = (char)(i * 13 + 5);
	}
	for (size_t i = 0; i < 256 * tok / elt; i++) /* small finite halves */
		if (elt == 2) {
			((uint16_t *)k)[i] &= 0x3bff;
			((uint16_t *)v)[i] &= 0x3bff;
		}
	for (size_t i = 0; i < qn; i++)
		q[i] = (float)((i * 37) % 101) / 101.0f - 0.5f;
	CK(kvf_mpi_seq_create(st, 1));
	MPI_Barrier(comm);
	CK(kvf_mpi_stats_get(st, &s0));
	t0 = MPI_Wtime();
	for (uint32_t l = 0; l < m->n_layers; l++)
		for (uint64_t t = 0; t < c->tokens; t += 256) {
			uint32_t nt = c->tokens - t < 256 ?
					      (uint32_t)(c->tokens - t) :
					      256;
			CK(kvf_mpi_append(st, 1, l, nt, k, v));
		}
	CK(kvf_mpi_sync(st));
	row->append_s = MPI_Wtime() - t0;
	CK(kvf_mpi_stats_get(st, &s1));
	sum_recv(comm, &s0, &s1, &dummy, &dummy, &dummy, &row->kv_append);
	row->kv_append /= (double)(c->tokens * m->n_layers);
	/* decode: attention timed alone; one token appended per layer after */
	kvf_stats_get(kvf_mpi_local(st), &ls0);
	row->attend_s = 0;
	for (uint32_t step = 0; step < c->steps; step++) {
		kvf_mpi_stats a = { .struct_size = sizeof(a) }, b = a;
		double q_, o_, c_, kv_;
		kvf_mpi_stats_get(st, &a);
		MPI_Barrier(comm);
		t0 = MPI_Wtime();
		for (uint32_t l = 0; l < m->n_layers; l++)
			CK(kvf_mpi_attend(st, 1, l, q, out, NULL));
		row->attend_s += MPI_Wtime() - t0;
		kvf_mpi_stats_get(st, &b);
		sum_recv(comm, &a, &b, &q_, &o_, &c_, &kv_);
		row->q += q_, row->out += o_, row->ctl += c_, row->kv += kv_;
		for (uint32_t l = 0; l < m->n_layers; l++)
			CK(kvf_mpi_append(st, 1, l, 1, k, v));
	}
	kvf_stats_get(kvf_mpi_local(st), &ls1);
	lread = (double)(ls1.attend_bytes_read - ls0.attend_bytes_read);
	MPI_Reduce(&lread, &mread, 1, MPI_DOUBLE, MPI_SUM, 0, comm);
	row->media_read = (uint64_t)mread;
	row->q /= c->steps, row->out /= c->steps;
	row->ctl /= c->steps, row->kv /= c->steps;
	row->shard = shard;
	row->ranks = n;
	row->tokens = c->tokens;
	row->steps = c->steps;
	(void)s2;
	free(k);
	free(v);
	free(q);
	CK(kvf_mpi_close(st));
	return KVF_OK;
}

/* Per-rank rates of the one-rank run of the same policy (0 if none). */
static void base_rates(const struct cfg *c, const struct row *r, int n,
		       int shard, double *app, double *att)
{
	*app = *att = 0;
	for (int i = 0; i < n; i++)
		if (r[i].shard == shard && r[i].ranks == 1) {
			*app = (double)r[i].tokens * c->m.n_layers /
			       r[i].append_s;
			*att = (double)r[i].tokens * c->m.n_layers *
			       r[i].steps / r[i].attend_s;
		}
}

static double ratio(double a, double b)
{
	return b > 0 ? a / b : 0;
}

static void report(const struct cfg *c, const struct row *r, int n)
{
	const kvf_model *m = &c->m;
	double elt = m->dtype == KVF_DTYPE_F32 ? 4 : 2;
	double kv_tok = (double)m->n_kv_heads * m->head_dim * 2 * elt;

	if (c->json) {
		printf("{\n  \"model\": {\"layers\": %u, \"q_heads\": %u, "
		       "\"kv_heads\": %u, \"head_dim\": %u, \"dtype\": \"%s\"},\n"
		       "  \"tokens\": %llu, \"steps\": %u, \"block_tokens\": %u,\n"
		       "  \"runs\": [\n",
		       m->n_layers, m->n_q_heads, m->n_kv_heads, m->head_dim,
		       kvf_dtype_name(m->dtype), (unsigned long long)c->tokens,
		       c->steps, c->block);
		for (int i = 0; i < n; i++) {
			const struct row *x = &r[i];
			double app =
				(double)x->tokens * m->n_layers / x->append_s;
			double att = (double)x->tokens * m->n_layers *
				     x->steps / x->attend_s,
			       b_app, b_att;
			base_rates(c, r, n, x->shard, &b_app, &b_att);
			printf("    {\"shard\": \"%s\", \"ranks\": %d, "
			       "\"append_tokens_per_s\": %.0f, "
			       "\"append_tokens_per_s_per_rank\": %.0f, "
			       "\"attend_ms_per_step\": %.3f, "
			       "\"attend_tokens_per_s\": %.0f, "
			       "\"attend_tokens_per_s_per_rank\": %.0f, "
			       "\"attend_kv_gb_per_s_per_rank\": %.3f, "
			       "\"q_bytes_per_step\": %.0f, \"out_bytes_per_step\": %.0f, "
			       "\"ctl_bytes_per_step\": %.0f, \"kv_bytes_per_step\": %.0f, "
			       "\"append_kv_bytes_per_token\": %.0f, "
			       "\"media_bytes_read\": %llu, "
			       "\"append_per_rank_vs_1_rank\": %.3f, "
			       "\"attend_per_rank_vs_1_rank\": %.3f}%s\n",
			       x->shard ? "token" : "head", x->ranks, app,
			       app / x->ranks, x->attend_s * 1e3 / x->steps,
			       att, att / x->ranks,
			       att * kv_tok / x->ranks / 1e9, x->q, x->out,
			       x->ctl, x->kv, x->kv_append,
			       (unsigned long long)x->media_read,
			       ratio(app / x->ranks, b_app),
			       ratio(att / x->ranks, b_att),
			       i + 1 < n ? "," : "");
		}
		printf("  ]\n}\n");
		return;
	}
	printf("kvbench_mpi: %u layers, %u query heads, %u KV heads, head_dim "
	       "%u, %s; %llu tokens, %u decode steps\n",
	       m->n_layers, m->n_q_heads, m->n_kv_heads, m->head_dim,
	       kvf_dtype_name(m->dtype), (unsigned long long)c->tokens,
	       c->steps);
	printf("%-5s %5s | %11s %10s %5s | %9s %11s %10s %5s %9s %9s | %7s "
	       "%7s %7s %4s | %6s\n",
	       "shard", "ranks", "append/s", "per rank", "vs 1", "attend ms",
	       "attend/s", "per rank", "vs 1", "GB/s/rank", "media MiB", "q B",
	       "out B", "ctl B", "KV B", "app B/t");
	for (int i = 0; i < n; i++) {
		const struct row *x = &r[i];
		double app = (double)x->tokens * m->n_layers / x->append_s;
		double att = (double)x->tokens * m->n_layers * x->steps /
			     x->attend_s;
		double b_app, b_att;
		base_rates(c, r, n, x->shard, &b_app, &b_att);
		printf("%-5s %5d | %11.0f %10.0f %5.2f | %9.3f %11.0f %10.0f %5.2f "
		       "%9.3f %9.1f | %7.0f %7.0f %7.0f %4.0f | %6.0f\n",
		       x->shard ? "token" : "head", x->ranks, app,
		       app / x->ranks, ratio(app / x->ranks, b_app),
		       x->attend_s * 1e3 / x->steps, att, att / x->ranks,
		       ratio(att / x->ranks, b_att),
		       att * kv_tok / x->ranks / 1e9,
		       (double)x->media_read / x->steps / 1048576.0, x->q,
		       x->out, x->ctl, x->kv, x->kv_append);
	}
	printf("(append/s: tokens appended per second, all layers, with the "
	       "sync; attend/s: context tokens attended per second, all layers; "
	       "vs 1: per-rank rate against the one-rank run's; GB/s/rank: KV "
	       "bytes attended per second per rank; media MiB: read from the "
	       "ranks' media per step, all ranks)\n");
	printf("(bytes per decode step over MPI, summed over the ranks that "
	       "received them, all %u layers; KV B is always 0: attention moves "
	       "only q and outputs)\n",
	       m->n_layers);
}

/*
 * The verdict of every rank, waited for without spinning: Open MPI's
 * blocking collectives poll, and the ranks left out of a run would take
 * the cores (4 ranks share 2 here) from the ranks being measured.
 */
static int all_ok(int bad)
{
	MPI_Request req;
	int done = 0, any = 0;
	struct timespec ms = { 0, 1000000 };

	MPI_Iallreduce(&bad, &any, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD, &req);
	while (MPI_Test(&req, &done, MPI_STATUS_IGNORE) == MPI_SUCCESS && !done)
		nanosleep(&ms, NULL);
	return !any;
}

int main(int argc, char **argv)
{
	struct cfg c;
	struct row rows[16];
	int world, rank, n_rows = 0, bad = 0;

	MPI_Init(&argc, &argv);
	MPI_Comm_size(MPI_COMM_WORLD, &world);
	MPI_Comm_rank(MPI_COMM_WORLD, &rank);
	if (parse(argc, argv, &c) != 0) {
		if (rank == 0 && parse_error[0])
			fprintf(stderr, "kvbench_mpi: %s\n", parse_error);
		if (rank == 0)
			usage(argv[0]);
		MPI_Finalize();
		return 2;
	}
	for (int shard = 0; shard < 2 && !bad; shard++) {
		if (!(c.shards & (1 << shard)))
			continue;
		for (int i = 0; i < c.n_ranks_list; i++) {
			int n = c.ranks[i];
			MPI_Comm sub;
			if (n > world) {
				if (rank == 0)
					fprintf(stderr,
						"kvbench_mpi: %d ranks skipped "
						"(started with %d)\n",
						n, world);
				continue;
			}
			if (shard == 0 && (uint32_t)n > c.m.n_kv_heads)
				continue;
			MPI_Comm_split(MPI_COMM_WORLD,
				       rank < n ? 0 : MPI_UNDEFINED, rank,
				       &sub);
			if (sub != MPI_COMM_NULL) {
				struct row r;
				memset(&r, 0, sizeof(r));
				if (run(&c, sub, shard, &r) != KVF_OK)
					bad = 1;
				if (rank == 0 && n_rows < 16)
					rows[n_rows++] = r;
				MPI_Comm_free(&sub);
			}
			if (!all_ok(bad)) {
				bad = 1;
				break;
			}
		}
	}
	if (rank == 0 && !bad)
		report(&c, rows, n_rows);
	MPI_Finalize();
	return bad;
}
