/*
 * bench_scale.c - `kvbench scale`: how the store's own costs grow with
 * what it holds (docs/store.md, "Scale").
 *
 * Two stores are grown step by step in DIR: one with many short
 * sequences (up to --seqs of --seq-tokens tokens each, the load of chat
 * turns and agents), one with many tokens (up to --tokens over --long
 * sequences).  At each step the store is synced and closed, and then:
 *
 * - open: kvf_open of the cleanly closed store (median of three), and
 *   the same store's kvf_close;
 * - index: kvf_stats.index_bytes (the index entries, the per-stream
 *   records, the segment table), as a share of the KV bytes the pages
 *   hold and per sequence; and the heap the open handle holds in all
 *   (malloc'd and mapped bytes, RocksDB's included);
 * - disk: blocks the store's files hold against the KV bytes;
 * - recovery: a child opens the store, appends --unsynced tokens to a new
 *   sequence without a sync (sealed pages reach the media), and is
 *   killed; kvf_open after the kill is timed.  At the last step of the
 *   long store it runs again with ten times the unsynced tokens: recovery
 *   should follow what was written since the last sync, not the store.
 *
 * The model is small (default 1 layer, 1 KV head of 8 f16 dims: 32 bytes
 * of K and V a token) so that 100 million tokens take 3.2 GB of sparse
 * stripe files.  Targets (issue 27): open <= 1 s at 10,000 sequences;
 * index <= 0.2 % of the KV bytes + 200 bytes a sequence.
 */
#include <malloc.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include <dirent.h>

#include "api/alloc.h"
#include "bench/bench_common.h"
#include "kvflash.h"

struct sargs {
	const char *dir;
	kvf_model model;
	uint64_t seqs;       /* short store: sequences at the last step */
	uint32_t seq_tokens; /* tokens of a short sequence */
	uint64_t tokens;     /* long store: tokens at the last step */
	uint32_t long_seqs;  /* sequences of the long store */
	uint64_t unsynced;   /* tokens a killed child leaves unsynced */
	int json, keep;
};

struct point {
	const char *store;   /* "short" or "long" */
	uint64_t seqs, tokens, kv_bytes, disk_bytes, live_bytes;
	uint64_t index_bytes, heap_bytes;
	double open_s, close_s, recover_s, recover10_s;
	uint64_t unsynced_bytes;
};

#define MAX_POINTS 16
#define SCALE_KILLED_ID (1ull << 40) /* the killed child's sequence */

struct sctx {
	const struct sargs *a;
	size_t row;          /* bytes of K (or V) of one token, all KV heads */
	unsigned char *k, *v;
	uint32_t chunk;      /* tokens in k and v */
	kvf_options o;
	struct point p[MAX_POINTS];
	uint32_t n;
};

static uint64_t disk_under(const char *path)
{
	struct stat sb;
	uint64_t sum = 0;
	struct dirent *e;
	DIR *d;

	if (lstat(path, &sb) != 0)
		return 0;
	if (!S_ISDIR(sb.st_mode))
		return (uint64_t)sb.st_blocks * 512;
	if ((d = opendir(path)) == NULL)
		return 0;
	while ((e = readdir(d)) != NULL) {
		char p[4352];

		if (strcmp(e->d_name, ".") && strcmp(e->d_name, ".."))
			snprintf(p, sizeof(p), "%s/%s", path, e->d_name),
				sum += disk_under(p);
	}
	closedir(d);
	return sum;
}

/* heap_now - bytes malloc holds for the process (arena and mapped) */
static uint64_t heap_now(void)
{
	struct mallinfo2 mi = mallinfo2();

	return (uint64_t)mi.uordblks + (uint64_t)mi.hblkhd;
}

static double secs(uint64_t ns)
{
	return (double)ns / 1e9;
}

/* grow - bring sequence ids [from, to) of st to n tokens each */
static int grow(struct sctx *c, kvf_store *st, uint64_t from, uint64_t to,
		uint64_t have, uint64_t n)
{
	for (uint64_t id = from; id < to; id++) {
		kvf_status rc = have ? KVF_OK : kvf_seq_create(st, id);

		if (rc != KVF_OK)
			return bench_fail("scale", "kvf_seq_create", rc);
		for (uint64_t t = have; t < n;) {
			uint32_t m = n - t < c->chunk ? (uint32_t)(n - t) : c->chunk;

			for (uint32_t l = 0; l < c->a->model.n_layers; l++)
				if ((rc = kvf_append(st, id, l, m, c->k, c->v)) != KVF_OK)
					return bench_fail("scale", "kvf_append", rc);
			t += m;
		}
	}
	return 0;
}

/* recover - a child appends `tokens` to a new sequence without a sync
 * and is killed; the time of the open that recovers the store */
static int recover(struct sctx *c, const char *path, uint64_t id,
		   uint64_t tokens, double *out)
{
	int fds[2], status;
	char ok = 0;
	pid_t pid;
	kvf_store *st;
	uint64_t t0;
	kvf_status rc;

	if (pipe(fds) != 0)
		return bench_fail("scale", "pipe", KVF_EIO);
	if ((pid = fork()) < 0)
		return bench_fail("scale", "fork", KVF_EIO);
	if (pid == 0) {
		close(fds[0]);
		if (kvf_open(path, &c->o, &st) == KVF_OK &&
		    grow(c, st, id, id + 1, 0, tokens) == 0) {
			ok = 1;
			/* the writer threads finish what was sealed */
			usleep(100000);
		}
		if (write(fds[1], &ok, 1) != 1)
			_exit(1);
		pause();
		_exit(0);
	}
	close(fds[1]);
	if (read(fds[0], &ok, 1) != 1)
		ok = 0;
	close(fds[0]);
	kill(pid, SIGKILL);
	waitpid(pid, &status, 0);
	if (!ok) {
		fprintf(stderr, "kvbench scale: the child that was to be killed failed\n");
		return -1;
	}
	t0 = bench_now_ns();
	rc = kvf_open(path, &c->o, &st);
	*out = secs(bench_now_ns() - t0);
	if (rc != KVF_OK)
		return bench_fail("scale", "kvf_open after a kill", rc);
	/* what came back of the child's sequence goes */
	if ((rc = kvf_seq_free(st, id)) != KVF_OK && rc != KVF_ENOENT) {
		kvf_close(st);
		return bench_fail("scale", "kvf_seq_free", rc);
	}
	if ((rc = kvf_close(st)) != KVF_OK)
		return bench_fail("scale", "kvf_close", rc);
	return 0;
}

/* measure - the figures of the closed store at path */
static int measure(struct sctx *c, const char *path, const char *store,
		   uint64_t seqs, uint64_t tokens, int last)
{
	struct point *p = &c->p[c->n];
	kvf_stats s = { .struct_size = sizeof(s) };
	double open[3];
	kvf_store *st;
	kvf_status rc;

	if (c->n == MAX_POINTS)
		return 0;
	memset(p, 0, sizeof(*p));
	p->store = store;
	p->seqs = seqs;
	p->tokens = tokens;
	p->kv_bytes = tokens * c->row * 2 * c->a->model.n_layers;
	for (int i = 0; i < 3; i++) {
		uint64_t h0 = heap_now(), t0 = bench_now_ns(), t1;

		if ((rc = kvf_open(path, &c->o, &st)) != KVF_OK)
			return bench_fail("scale", "kvf_open", rc);
		open[i] = secs(bench_now_ns() - t0);
		if (i == 0) {
			p->heap_bytes = heap_now() - h0;
			if ((rc = kvf_stats_get(st, &s)) != KVF_OK) {
				kvf_close(st);
				return bench_fail("scale", "kvf_stats_get", rc);
			}
		}
		t1 = bench_now_ns();
		if ((rc = kvf_close(st)) != KVF_OK)
			return bench_fail("scale", "kvf_close", rc);
		p->close_s = secs(bench_now_ns() - t1);
	}
	p->open_s = bench_median(open, 3);
	p->index_bytes = s.index_bytes;
	p->live_bytes = s.live_pages * c->o.page_size;
	p->disk_bytes = disk_under(path);
	p->unsynced_bytes = c->a->unsynced * c->row * 2 * c->a->model.n_layers;
	if (recover(c, path, SCALE_KILLED_ID, c->a->unsynced, &p->recover_s) != 0)
		return -1;
	if (last && recover(c, path, SCALE_KILLED_ID, c->a->unsynced * 10,
			    &p->recover10_s) != 0)
		return -1;
	c->n++;
	return 0;
}

/* the steps: 1, 10, 100 % ... of the last, at least one sequence */
static uint64_t step_of(uint64_t last, int i, int n)
{
	uint64_t v = last;

	for (int k = i; k < n - 1; k++)
		v /= 10;
	return v ? v : 1;
}

static int run_store(struct sctx *c, const char *name)
{
	const struct sargs *a = c->a;
	int is_short = strcmp(name, "short") == 0;
	uint64_t last = is_short ? a->seqs : a->tokens;
	char path[4096];
	uint64_t have_seqs = 0, have_tok = 0;
	int n = 3;

	snprintf(path, sizeof(path), "%s/%s", a->dir, name);
	if (bench_remove_store(path) != 0)
		return -1;
	for (int i = 0; i < n; i++) {
		uint64_t target = step_of(last, i, n);
		kvf_store *st;
		kvf_status rc;

		if ((rc = kvf_open(path, &c->o, &st)) != KVF_OK)
			return bench_fail("scale", "kvf_open", rc);
		if (is_short) {
			if (grow(c, st, 1 + have_seqs, 1 + target, 0, a->seq_tokens) != 0)
				goto fail;
			have_seqs = target;
			have_tok = target * a->seq_tokens;
		} else {
			uint64_t per = target / a->long_seqs;

			if (grow(c, st, 1, 1 + a->long_seqs, have_tok / a->long_seqs, per) != 0)
				goto fail;
			if (have_tok == 0)
				have_seqs = a->long_seqs;
			have_tok = per * a->long_seqs;
		}
		if ((rc = kvf_sync(st)) != KVF_OK) {
			bench_fail("scale", "kvf_sync", rc);
			goto fail;
		}
		if ((rc = kvf_close(st)) != KVF_OK)
			return bench_fail("scale", "kvf_close", rc);
		if (measure(c, path, name, have_seqs, have_tok, i == n - 1) != 0)
			return -1;
		continue;
fail:
		kvf_close(st);
		return -1;
	}
	if (!a->keep)
		bench_remove_store(path);
	return 0;
}

static void report(const struct sctx *c)
{
	const struct sargs *a = c->a;

	if (a->json) {
		struct bench_json j = { .f = stdout };

		bench_json_begin(&j, NULL);
		bench_json_str(&j, "bench", "scale");
		bench_json_model(&j, &a->model);
		bench_json_u64(&j, "unsynced_tokens", a->unsynced);
		bench_json_begin(&j, "points");
		for (uint32_t i = 0; i < c->n; i++) {
			const struct point *p = &c->p[i];
			char key[64];

			snprintf(key, sizeof(key), "%s_%u", p->store, i);
			bench_json_begin(&j, key);
			bench_json_str(&j, "store", p->store);
			bench_json_u64(&j, "sequences", p->seqs);
			bench_json_u64(&j, "tokens", p->tokens);
			bench_json_u64(&j, "kv_bytes", p->kv_bytes);
			bench_json_u64(&j, "live_bytes", p->live_bytes);
			bench_json_u64(&j, "disk_bytes", p->disk_bytes);
			bench_json_double(&j, "open_s", p->open_s);
			bench_json_double(&j, "close_s", p->close_s);
			bench_json_u64(&j, "index_bytes", p->index_bytes);
			bench_json_double(&j, "index_share", p->live_bytes
					  ? (double)p->index_bytes / p->live_bytes : 0);
			bench_json_double(&j, "index_per_sequence",
					  (double)p->index_bytes / p->seqs);
			bench_json_u64(&j, "heap_bytes", p->heap_bytes);
			bench_json_u64(&j, "unsynced_bytes", p->unsynced_bytes);
			bench_json_double(&j, "recovery_s", p->recover_s);
			if (p->recover10_s > 0)
				bench_json_double(&j, "recovery_10x_unsynced_s",
						  p->recover10_s);
			bench_json_end(&j);
		}
		bench_json_end(&j);
		bench_json_end(&j);
		fputc('\n', stdout);
		return;
	}
	printf("kvbench scale: model %u layers, %u KV heads of %u f16 dims (%zu bytes of K and V a token); a killed child leaves %llu tokens unsynced\n\n",
	       a->model.n_layers, a->model.n_kv_heads, a->model.head_dim,
	       c->row * 2 * a->model.n_layers, (unsigned long long)a->unsynced);
	printf("%-6s %9s %11s %10s %10s %9s %9s %10s %8s %9s %10s %10s\n",
	       "store", "seqs", "tokens", "KV MiB", "disk MiB", "open s", "close s",
	       "index KiB", "idx %", "B/seq", "heap MiB", "recover s");
	for (uint32_t i = 0; i < c->n; i++) {
		const struct point *p = &c->p[i];

		printf("%-6s %9llu %11llu %10.1f %10.1f %9.3f %9.3f %10.1f %8.3f %9.1f %10.1f %10.3f\n",
		       p->store, (unsigned long long)p->seqs,
		       (unsigned long long)p->tokens, p->kv_bytes / 1048576.0,
		       p->disk_bytes / 1048576.0, p->open_s, p->close_s,
		       p->index_bytes / 1024.0,
		       p->live_bytes ? 100.0 * p->index_bytes / p->live_bytes : 0,
		       (double)p->index_bytes / p->seqs, p->heap_bytes / 1048576.0,
		       p->recover_s);
	}
	for (uint32_t i = 0; i < c->n; i++)
		if (c->p[i].recover10_s > 0)
			printf("\nrecovery of the %s store with %llu tokens: %.3f s after %llu unsynced tokens, %.3f s after %llu\n",
			       c->p[i].store, (unsigned long long)c->p[i].tokens,
			       c->p[i].recover_s, (unsigned long long)a->unsynced,
			       c->p[i].recover10_s,
			       (unsigned long long)a->unsynced * 10);
	printf("\nindex %%: index_bytes over the bytes of the pages held live; B/seq: index_bytes per sequence;\n"
	       "heap: what malloc holds for an open handle (RocksDB included); targets: open <= 1 s at 10,000 sequences,\n"
	       "index <= 0.2 %% of the KV + 200 B a sequence\n");
}

static void usage(FILE *f)
{
	fprintf(f,
		"usage: kvbench scale [--dir DIR] [--seqs N] [--seq-tokens N] [--tokens N]\n"
		"                     [--long N] [--unsynced N]\n"
		"                     [--layers N] [--q-heads N] [--kv-heads N] [--head-dim N]\n"
		"                     [--json] [--keep]\n"
		"  --dir DIR        directory for the two stores (default ./kvbench-scale)\n"
		"  --seqs N         short sequences at the last step (default 10000; steps\n"
		"                   of 1 and 10 %% come first)\n"
		"  --seq-tokens N   tokens of a short sequence (default 32)\n"
		"  --tokens N       tokens of the long store at the last step (default 100M)\n"
		"  --long N         sequences of the long store (default 16)\n"
		"  --unsynced N     tokens a killed writer leaves unsynced (default 64K)\n"
		"  --layers N       layers (default 1); --q-heads (1), --kv-heads (1),\n"
		"                   --head-dim (8): the model, f16\n"
		"  --json           one JSON object instead of a table\n"
		"  --keep           leave the stores in DIR\n");
}

int bench_scale_main(int argc, char **argv)
{
	struct sargs a = { .dir = "./kvbench-scale", .seqs = 10000, .seq_tokens = 32,
			   .tokens = 100000000ull, .long_seqs = 16,
			   .unsynced = 65536, .model = { 1, 1, 1, 8, KVF_DTYPE_F16 } };
	const struct bench_opt opts[] = {
		BENCH_STR("--dir", a.dir),
		BENCH_U64("--seqs", a.seqs, 1, 10000000),
		BENCH_U32("--seq-tokens", a.seq_tokens, 1, 1u << 20),
		BENCH_U64("--tokens", a.tokens, 1, 1ull << 40),
		BENCH_U32("--long", a.long_seqs, 1, 1u << 16),
		BENCH_U64("--unsynced", a.unsynced, 1, 1ull << 32),
		BENCH_MODEL_OPTS(a.model),
		BENCH_BOOL("--json", a.json),
		BENCH_BOOL("--keep", a.keep),
		{ .name = NULL }
	};
	struct sctx *c;
	uint64_t cap;
	int rc, made;

	if ((rc = bench_parse_opts("scale", usage, opts, argc, argv)) != 0)
		return rc == 1 ? 0 : rc;
	if ((rc = bench_check_heads("scale", &a.model)) != 0)
		return rc;
	if (a.tokens < a.long_seqs)
		return bench_usage_error("scale", "--tokens %llu is fewer than --long %u sequences",
					 (unsigned long long)a.tokens, a.long_seqs);
	if ((c = kvf_calloc(1, sizeof(*c))) == NULL)
		{
		fprintf(stderr, "kvbench scale: out of memory\n");
		return 1;
	}
	c->a = &a;
	c->row = (size_t)a.model.n_kv_heads * a.model.head_dim * 2;
	c->chunk = 65536;
	c->k = kvf_malloc(c->chunk * c->row);
	c->v = kvf_malloc(c->chunk * c->row);
	rc = 1;
	if (!c->k || !c->v) {
		fprintf(stderr, "kvbench scale: out of memory\n");
		goto out;
	}
	for (size_t i = 0; i < c->chunk * c->row; i++) {
		c->k[i] = (unsigned char)(bench_mix64(i) & 0x3f);
		c->v[i] = (unsigned char)(bench_mix64(i + 7) & 0x3f);
	}
	/* the default options but the capacity: what the long store holds,
	 * with room, in sparse stripe files */
	kvf_options_init(&c->o, &a.model);
	cap = (a.tokens + a.unsynced * 12) * c->row * 2 * a.model.n_layers;
	cap += cap / 4 + (1ull << 30);
	if (cap > c->o.capacity_bytes)
		c->o.capacity_bytes = (cap + c->o.segment_size - 1) /
				      c->o.segment_size * c->o.segment_size;
	if (bench_make_dir("scale", a.dir, &made) != 0)
		goto out;
	if (run_store(c, "short") != 0 || run_store(c, "long") != 0)
		goto out;
	report(c);
	rc = 0;
out:
	kvf_free(c->k);
	kvf_free(c->v);
	kvf_free(c);
	return rc;
}
