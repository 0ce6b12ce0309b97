/*
 * test_catalog_damage.c - damage to the catalog's write-ahead log never
 * rolls the store back silently.
 *
 * A store takes several syncs of appends, forks and frees, and is closed;
 * its catalog log (meta/NNNNNN.log) then gets one byte flipped, at one
 * position after another over the whole file.  Each reopen must either
 * give back every synced token (each sequence at least as long as it was
 * synced, every token the one appended) or refuse with KVF_ECORRUPT and
 * a message naming the catalog.  Before the durable-point mark (SYNCED),
 * a flip in an early record made RocksDB drop every later record, and the
 * store opened shorter without a word.
 */
#include <criterion/criterion.h>
#include <criterion/new/assert.h>
#include <dirent.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "kvflash.h"
#include "store_fixture.h"
#include "testutil.h"

#define CD_QH 2 /* query heads: the fixture's model with 2, not 4 */
#define N_SEQ 6

static kvf_options opts(void)
{
	kvf_model m = { LAYERS, CD_QH, KVH, DIM, KVF_DTYPE_F16 };
	kvf_options o = fx_options_for(&m, 64 * 1024, 64ull * 64 * 1024, 0);

	o.n_threads = 1;
	return o;
}

/* synced[s][l]: tokens of sequence s+1, layer l, as of the last sync;
 * 0 for a freed or never made sequence (free[s] = 1 when freed) */
static uint64_t synced[N_SEQ][LAYERS];
static int freed[N_SEQ];

/* build - several syncs, each after appends (whole and partial groups),
 * a fork of whole groups, a free */
static void build(const char *path)
{
	kvf_options o = opts();
	kvf_store *st;
	uint64_t len[N_SEQ][LAYERS] = { { 0 } };

	OK(kvf_open(path, &o, &st));
	for (int round = 0; round < 5; round++) {
		for (uint64_t s = 0; s < N_SEQ; s++) {
			if (freed[s] || s > (uint64_t)round + 1)
				continue;
			if (len[s][0] == 0 && len[s][1] == 0)
				OK(kvf_seq_create(st, s + 1));
			for (uint32_t l = 0; l < LAYERS; l++) {
				uint32_t n = 13 + 7 * (uint32_t)((s + l + round) % 5);

				OK(fx_append(st, s + 1, s + 1, l, len[s][l], n));
				len[s][l] += n;
			}
		}
		if (round == 3) {
			OK(kvf_seq_free(st, 2));
			freed[1] = 1;
			memset(len[1], 0, sizeof(len[1]));
		}
		OK(kvf_sync(st));
		memcpy(synced, len, sizeof(synced));
	}
	OK(kvf_close(st));
}

/* log_path - the catalog's newest write-ahead log in dir/meta */
static char *log_path(const char *dir)
{
	char meta[4096], *best = NULL;
	DIR *d;
	struct dirent *e;

	snprintf(meta, sizeof(meta), "%s/meta", dir);
	d = opendir(meta);
	cr_assert_not_null(d);
	while ((e = readdir(d)) != NULL) {
		size_t n = strlen(e->d_name);

		if (n > 4 && !strcmp(e->d_name + n - 4, ".log") &&
		    (best == NULL || strcmp(strrchr(best, '/') + 1, e->d_name) < 0)) {
			free(best);
			best = malloc(strlen(meta) + n + 2);
			sprintf(best, "%s/%s", meta, e->d_name);
		}
	}
	closedir(d);
	cr_assert_not_null(best, "no write-ahead log in %s", meta);
	return best;
}

/* check - every synced token of every live sequence is there and right;
 * returns the number of tokens checked */
static uint64_t check(kvf_store *st, long off)
{
	unsigned char k[64 * ROW], v[64 * ROW];
	uint64_t checked = 0;

	for (uint64_t s = 0; s < N_SEQ; s++) {
		for (uint32_t l = 0; l < LAYERS && !freed[s]; l++) {
			uint64_t n = 0;

			if (synced[s][l] == 0)
				continue;
			cr_assert(eq(int, kvf_seq_len(st, s + 1, l, &n), KVF_OK),
				  "flip at %ld: sequence %llu is gone: %s", off,
				  (unsigned long long)s + 1, kvf_last_error());
			cr_assert(n >= synced[s][l],
				  "flip at %ld: sequence %llu layer %u holds %llu tokens, %llu were synced",
				  off, (unsigned long long)s + 1, l,
				  (unsigned long long)n,
				  (unsigned long long)synced[s][l]);
			for (uint32_t h = 0; h < KVH; h++)
				for (uint64_t t0 = 0; t0 < synced[s][l]; t0 += 64) {
					uint64_t t1 = t0 + 64 < synced[s][l] ? t0 + 64 : synced[s][l];

					OK(kvf_read(st, s + 1, l, h, t0, t1, k, v));
					for (uint64_t t = t0; t < t1; t++)
						for (uint32_t b = 0; b < ROW; b++)
							cr_assert(k[(t - t0) * ROW + b] == fx_byte(s + 1, l, 0, t, h, b) &&
								  v[(t - t0) * ROW + b] == fx_byte(s + 1, l, 1, t, h, b),
								  "flip at %ld: wrong byte in sequence %llu", off,
								  (unsigned long long)s + 1);
					checked += (t1 - t0);
				}
		}
	}
	return checked;
}

static void copy_file(const char *from, const char *to)
{
	char cmd[16384];

	snprintf(cmd, sizeof(cmd), "rm -rf '%s' && cp -a '%s' '%s'", to, from, to);
	cr_assert(eq(int, system(cmd), 0));
}

TestSuite(catalog_damage, .timeout = 240);

Test(catalog_damage, flipped_log_byte_never_rolls_back)
{
	char *dir = tmpdir_make("catdmg");
	char gold[4096], work[4096];
	uint64_t seed = rng_seed("catalog_damage"), rng = seed;
	unsigned refused = 0, whole = 0;
	uint64_t tokens = 0;
	struct stat sb;
	char *log;
	long size, step;

	snprintf(gold, sizeof(gold), "%s/gold", dir);
	snprintf(work, sizeof(work), "%s/work", dir);
	build(gold);
	log = log_path(gold);
	cr_assert(eq(int, stat(log, &sb), 0));
	size = (long)sb.st_size;
	cr_assert(size > 0, "the catalog log is empty");
	/* about 120 positions spread over the log, each shifted at random */
	step = size / 120 + 1;
	for (long base = 0; base < size; base += step) {
		long off = base + (long)rng_below(&rng, (uint64_t)step);
		char *wlog;
		unsigned char c;
		kvf_store *st = NULL;
		kvf_status rc;
		int fd;

		if (off >= size)
			break;
		copy_file(gold, work);
		wlog = log_path(work);
		fd = open(wlog, O_RDWR);
		cr_assert(fd >= 0);
		cr_assert(eq(int, (int)pread(fd, &c, 1, off), 1));
		c ^= (unsigned char)(1u << rng_below(&rng, 8));
		cr_assert(eq(int, (int)pwrite(fd, &c, 1, off), 1));
		close(fd);
		free(wlog);
		rc = kvf_open(work, NULL, &st);
		if (rc == KVF_OK) {
			whole++;
			tokens += check(st, off);
			OK(kvf_close(st));
		} else {
			cr_assert(eq(int, rc, KVF_ECORRUPT),
				  "seed %llu: flip at %ld: kvf_open gave %s: %s",
				  (unsigned long long)seed, off, kvf_strerror(rc),
				  kvf_last_error());
			cr_assert(strstr(kvf_last_error(), "meta") != NULL,
				  "flip at %ld: the message does not name the catalog: %s",
				  off, kvf_last_error());
			cr_assert_null(st);
			refused++;
		}
	}
	cr_log_info("catalog log of %ld bytes: %u flips refused with KVF_ECORRUPT, %u opened whole (%llu synced tokens checked), seed %llu",
		    size, refused, whole, (unsigned long long)tokens,
		    (unsigned long long)seed);
	cr_assert(refused > 0, "no flip was refused: the test damaged nothing");
	free(log);
	tmpdir_remove(dir);
}

/* The mark itself: a store whose SYNCED is gone or garbage is refused. */
Test(catalog_damage, missing_or_damaged_mark_is_refused)
{
	char *dir = tmpdir_make("catmark");
	char path[4096], mark[4200];
	kvf_store *st = NULL;
	int fd;

	snprintf(path, sizeof(path), "%s/s", dir);
	snprintf(mark, sizeof(mark), "%s/SYNCED", path);
	build(path);
	fd = open(mark, O_RDWR);
	cr_assert(fd >= 0);
	cr_assert(eq(int, (int)pwrite(fd, "garbage!", 8, 0), 8));
	cr_assert(eq(int, (int)pwrite(fd, "garbage!", 8, 4096), 8));
	close(fd);
	cr_assert(eq(int, kvf_open(path, NULL, &st), KVF_ECORRUPT));
	cr_assert(strstr(kvf_last_error(), "SYNCED is damaged") != NULL, "%s",
		  kvf_last_error());
	cr_assert_null(st);
	cr_assert(eq(int, unlink(mark), 0));
	cr_assert(eq(int, kvf_open(path, NULL, &st), KVF_ECORRUPT));
	cr_assert(strstr(kvf_last_error(), "SYNCED is missing") != NULL, "%s",
		  kvf_last_error());
	tmpdir_remove(dir);
}

/* check_prefix - every token a live sequence holds is the one appended,
 * and none holds more than was appended; returns tokens checked */
static uint64_t check_prefix(kvf_store *st, long off)
{
	unsigned char k[64 * ROW], v[64 * ROW];
	uint64_t checked = 0, ids[N_SEQ + 4];
	size_t n_ids = 0;

	OK(kvf_seq_list(st, ids, N_SEQ + 4, &n_ids));
	for (size_t i = 0; i < n_ids; i++) {
		uint64_t s = ids[i] - 1;

		cr_assert(s < N_SEQ, "flip at %ld: unknown sequence %llu", off,
			  (unsigned long long)ids[i]);
		for (uint32_t l = 0; l < LAYERS; l++) {
			uint64_t n = 0;

			OK(kvf_seq_len(st, ids[i], l, &n));
			for (uint32_t h = 0; h < KVH; h++)
				for (uint64_t t0 = 0; t0 < n; t0 += 64) {
					uint64_t t1 = t0 + 64 < n ? t0 + 64 : n;

					OK(kvf_read(st, ids[i], l, h, t0, t1, k, v));
					for (uint64_t t = t0; t < t1; t++)
						for (uint32_t b = 0; b < ROW; b++)
							cr_assert(k[(t - t0) * ROW + b] == fx_byte(ids[i], l, 0, t, h, b) &&
								  v[(t - t0) * ROW + b] == fx_byte(ids[i], l, 1, t, h, b),
								  "flip at %ld: wrong byte in sequence %llu after repair",
								  off, (unsigned long long)ids[i]);
					checked += t1 - t0;
				}
		}
	}
	return checked;
}

/* kvf_repair on a catalog that lost records: the store opens again, and
 * every token it then holds is the one appended. */
Test(catalog_damage, repair_salvages_from_the_summaries)
{
	char *dir = tmpdir_make("catrep");
	char gold[4096], work[4096];
	uint64_t seed = rng_seed("catalog_repair"), rng = seed;
	uint64_t restored = 0, tokens = 0;
	unsigned repaired = 0;
	char *log;
	struct stat sb;

	snprintf(gold, sizeof(gold), "%s/gold", dir);
	snprintf(work, sizeof(work), "%s/work", dir);
	build(gold);
	log = log_path(gold);
	cr_assert(eq(int, stat(log, &sb), 0));
	for (int trial = 0; trial < 24; trial++) {
		long off = (long)rng_below(&rng, (uint64_t)sb.st_size);
		kvf_repair_report r = { .struct_size = sizeof(r) }, again = r, dry = r;
		kvf_store *st = NULL;
		char *wlog;
		unsigned char c;
		int fd;

		copy_file(gold, work);
		wlog = log_path(work);
		fd = open(wlog, O_RDWR);
		cr_assert(fd >= 0);
		cr_assert(eq(int, (int)pread(fd, &c, 1, off), 1));
		c ^= 0x10;
		cr_assert(eq(int, (int)pwrite(fd, &c, 1, off), 1));
		close(fd);
		free(wlog);
		if (kvf_open(work, NULL, &st) == KVF_OK) {
			check_prefix(st, off);
			OK(kvf_close(st));
			continue;
		}
		cr_assert(eq(int, kvf_repair(work, NULL, 1, &dry), KVF_OK), "%s",
			  kvf_last_error());
		cr_assert(eq(u32, dry.changed, 0));
		cr_assert(eq(int, kvf_open(work, NULL, &st), KVF_ECORRUPT),
			  "a dry run changed the store");
		OK(kvf_repair(work, NULL, 0, &r));
		cr_assert(r.catalog_points < r.marked_points);
		/* the dry run counted what the repair did */
		cr_assert(eq(u64, r.catalog_points, dry.catalog_points), "flip at %ld", off);
		cr_assert(eq(u32, r.segments_restored, dry.segments_restored), "flip at %ld", off);
		cr_assert(eq(u64, r.sequences_restored, dry.sequences_restored), "flip at %ld", off);
		cr_assert(eq(u64, r.tokens_restored, dry.tokens_restored), "flip at %ld", off);
		cr_assert(eq(u64, r.x_tokens_restored, dry.x_tokens_restored), "flip at %ld", off);
		OK(kvf_open(work, NULL, &st));
		/* no sequence the store held at its last sync is lost: its
		 * pages are on media, the repair gives back its whole groups */
		for (uint64_t q = 0; q < N_SEQ; q++) {
			uint64_t n;

			if (!freed[q] && (synced[q][0] >= 2 * G || synced[q][1] >= 2 * G))
				cr_assert(eq(int, kvf_seq_len(st, q + 1, 0, &n), KVF_OK),
					  "flip at %ld: sequence %llu is gone", off,
					  (unsigned long long)q + 1);
		}
		tokens += check_prefix(st, off);
		OK(kvf_close(st));
		/* a second repair has nothing to do */
		OK(kvf_repair(work, NULL, 0, &again));
		cr_assert(eq(u64, again.catalog_points, again.marked_points));
		restored += r.tokens_restored;
		repaired++;
	}
	cr_log_info("repair: %u damaged catalogs repaired, %llu tokens given back, %llu tokens checked, seed %llu",
		    repaired, (unsigned long long)restored,
		    (unsigned long long)tokens, (unsigned long long)seed);
	cr_assert(repaired > 0);
	cr_assert(restored > 0, "no repair gave anything back");
	free(log);
	tmpdir_remove(dir);
}

/* A byte flipped early in a long log (past its first 32 KiB block: 60
 * sequences with X, a sync after each).  RocksDB's own repair skipped the
 * damaged record and kept the later ones, sync records among them: the
 * catalog then counted every durable point, the repair said "nothing to
 * repair", and the sequences of the skipped record were gone (their pages
 * reclaimed), while the dry run had promised them back.  The repair now
 * keeps what the log replays to before the damage, as the dry run reads
 * it, and gives back the rest from the summaries, X too. */
Test(catalog_damage, repair_of_a_flipped_log_byte_loses_no_sequence)
{
	enum { NS = 60, LEN = 40 };
	char *dir = tmpdir_make("catflip");
	kvf_model m = { LAYERS, QH, KVH, DIM, KVF_DTYPE_F16 };
	kvf_options o = fx_options_for(&m, 64 * 1024, 16ull << 20, 0);
	kvf_repair_report r = { .struct_size = sizeof(r) }, dry = r;
	kvf_store *st;
	unsigned char c;
	char *log;
	int fd;

	OK(kvf_open(dir, &o, &st));
	for (uint64_t q = 1; q <= NS; q++) {
		OK(kvf_seq_create(st, q));
		for (uint32_t l = 0; l < LAYERS; l++) {
			OK(fx_append(st, q, q, l, 0, LEN));
			OK(fx_append_x(st, q, l, 0, LEN));
		}
		OK(kvf_sync(st));
	}
	OK(kvf_close(st));
	log = log_path(dir);
	fd = open(log, O_RDWR);
	cr_assert(fd >= 0);
	cr_assert(eq(int, (int)pread(fd, &c, 1, 20000), 1));
	c ^= 0x10;
	cr_assert(eq(int, (int)pwrite(fd, &c, 1, 20000), 1));
	close(fd);
	{
		/* the refusal changes nothing: the log is still there, as it was */
		char meta[4096], *before;
		struct stat a, b;

		snprintf(meta, sizeof(meta), "%s/meta", dir);
		before = strdup(fx_dir_listing(meta));
		cr_assert(eq(int, stat(log, &a), 0));
		cr_assert(eq(int, kvf_open(dir, NULL, &st), KVF_ECORRUPT));
		cr_assert(eq(str, (char *)fx_dir_listing(meta), before));
		cr_assert(eq(int, stat(log, &b), 0));
		cr_assert(eq(i64, (int64_t)a.st_size, (int64_t)b.st_size));
		cr_assert(a.st_mtim.tv_sec == b.st_mtim.tv_sec &&
			  a.st_mtim.tv_nsec == b.st_mtim.tv_nsec);
		free(before);
	}
	OK(kvf_repair(dir, NULL, 1, &dry));
	OK(kvf_repair(dir, NULL, 0, &r));
	cr_assert(r.catalog_points < r.marked_points, "%llu of %llu points",
		  (unsigned long long)r.catalog_points,
		  (unsigned long long)r.marked_points);
	cr_assert(eq(u64, r.sequences_restored, dry.sequences_restored));
	cr_assert(eq(u64, r.tokens_restored, dry.tokens_restored));
	cr_assert(eq(u64, r.x_tokens_restored, dry.x_tokens_restored));
	cr_assert(r.x_tokens_restored > (0));
	OK(kvf_open(dir, NULL, &st));
	for (uint64_t q = 1; q <= NS; q++)
		for (uint32_t l = 0; l < LAYERS; l++) {
			uint64_t n = 0, x = 0;

			cr_assert(eq(int, kvf_seq_len(st, q, l, &n), KVF_OK),
				  "sequence %llu is gone", (unsigned long long)q);
			OK(kvf_seq_x_len(st, q, l, &x));
			/* the whole group, at least: the tail's length was in
			 * the lost records */
			cr_assert(n >= G && x >= G, "sequence %llu layer %u: %llu K/V, %llu X",
				  (unsigned long long)q, l, (unsigned long long)n,
				  (unsigned long long)x);
			fx_check_tokens(st, q, q, l, 0, n);
		}
	OK(kvf_close(st));
	free(log);
	tmpdir_remove(dir);
}

/* one sync of two sequences (174 and 137 tokens), then the catalog's log
 * cut short at one place after another: the segment records, committed
 * as their segments were written, often outlive the sync's records after
 * them.  Repair must still give each sequence back the whole groups its
 * segments prove (the last one, part-filled, was in the lost records),
 * whether the catalog kept those segments' records or not.  It gave back
 * nothing when it had kept them, and left their segments to be reclaimed;
 * and the refused kvf_open before it had trimmed the segments the catalog
 * no longer counted live (the mark was checked after recovery). */
Test(catalog_damage, repair_of_a_cut_log_takes_segments_it_kept)
{
	static const uint64_t len[2] = { 174, 137 };
	char *dir = tmpdir_make("catcut");
	char gold[4096], work[4096];
	unsigned repaired = 0;
	kvf_options o = opts();
	kvf_store *st;
	struct stat sb;
	char *log;

	snprintf(gold, sizeof(gold), "%s/gold", dir);
	snprintf(work, sizeof(work), "%s/work", dir);
	OK(kvf_open(gold, &o, &st));
	for (uint64_t s = 1; s <= 2; s++) {
		OK(kvf_seq_create(st, s));
		for (uint32_t l = 0; l < LAYERS; l++)
			OK(fx_append(st, s, s, l, 0, (uint32_t)len[s - 1]));
	}
	OK(kvf_sync(st));
	OK(kvf_close(st));
	log = log_path(gold);
	cr_assert(eq(int, stat(log, &sb), 0));
	for (long cut = 0; cut < sb.st_size; cut += 97) {
		kvf_repair_report r = { .struct_size = sizeof(r) };
		char *wlog;
		uint64_t n;

		copy_file(gold, work);
		wlog = log_path(work);
		cr_assert(eq(int, truncate(wlog, cut), 0));
		free(wlog);
		if (kvf_open(work, NULL, &st) == KVF_OK) {
			check_prefix(st, cut);
			OK(kvf_close(st));
			continue;
		}
		OK(kvf_repair(work, NULL, 0, &r));
		OK(kvf_open(work, NULL, &st));
		check_prefix(st, cut);
		for (uint64_t s = 1; s <= 2; s++)
			for (uint32_t l = 0; l < LAYERS; l++) {
				cr_assert(eq(int, kvf_seq_len(st, s, l, &n), KVF_OK),
					  "cut at %ld: sequence %llu is gone", cut,
					  (unsigned long long)s);
				/* its whole groups at least (the records
				 * that survived may know more) */
				cr_assert(n >= len[s - 1] / G * G && n <= len[s - 1],
					  "cut at %ld: sequence %llu layer %u came back with %llu tokens",
					  cut, (unsigned long long)s, l, (unsigned long long)n);
			}
		OK(kvf_close(st));
		repaired++;
	}
	cr_assert(repaired > 0);
	free(log);
	tmpdir_remove(dir);
}

Test(catalog_damage, repair_refuses_bad_input)
{
	char *dir = tmpdir_make("catrepbad");
	char path[4096];
	kvf_repair_report r = { .struct_size = sizeof(r) };
	kvf_store *st;

	snprintf(path, sizeof(path), "%s/s", dir);
	cr_assert(eq(int, kvf_repair(NULL, NULL, 0, &r), KVF_EINVAL));
	cr_assert(eq(int, kvf_repair(path, NULL, 0, NULL), KVF_EINVAL));
	cr_assert(eq(int, kvf_repair(path, NULL, 0, &r), KVF_ENOENT));
	build(path);
	OK(kvf_open(path, NULL, &st));
	cr_assert(eq(int, kvf_repair(path, NULL, 0, &r), KVF_EBUSY));
	OK(kvf_close(st));
	/* a healthy store: nothing to do, nothing changed */
	OK(kvf_repair(path, NULL, 0, &r));
	cr_assert(eq(u64, r.catalog_points, r.marked_points));
	cr_assert(eq(u32, r.changed, 0));
	OK(kvf_open(path, NULL, &st));
	OK(kvf_close(st));
	tmpdir_remove(dir);
}
