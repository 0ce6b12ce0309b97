/*
 * test_open_damage.c - opening a damaged store: the store header, the
 * catalog of another store, and malformed segment records, on the
 * fixture's "store to damage" (store_fixture.h) with the store closed.
 *
 * What must hold: a damaged header is refused with the file named (bad
 * magic or checksum KVF_ECORRUPT, newer or older format KVF_EVERSION);
 * another store's catalog is KVF_ECORRUPT.  A segment record ("G") whose
 * length does not match its n_runs, or with a run outside its segment, is
 * refused at open with KVF_ECORRUPT naming the record.  Put back, each
 * store opens and reads.
 */
#include <criterion/criterion.h>
#include <criterion/new/assert.h>
#include <fcntl.h>
#include <ftw.h>
#include <inttypes.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>

#include "api/alloc.h"
#include "engine/base/catalog.h"
#include "engine/base/meta.h"
#include "engine/base/segfmt.h"
#include "engine/base/store_state.h"
#include "kvflash.h"
#include "store_fixture.h"
#include "testutil.h"

TestSuite(open_damage, .init = fx_setup_dir, .fini = fx_teardown,
	  .timeout = 60);

/* ---- the store header ---------------------------------------------------- */

static void header_rw(struct store_header *h, int write)
{
	int fd = open(tmp_path(fx.path, STORE_HEADER_FILE),
		      write ? O_WRONLY : O_RDONLY);

	cr_assert(fd >= 0);
	if (write)
		cr_assert(eq(int, (int)pwrite(fd, h, sizeof(*h), 0),
			     (int)sizeof(*h)));
	else
		cr_assert(eq(int, (int)pread(fd, h, sizeof(*h), 0),
			     (int)sizeof(*h)));
	close(fd);
}

/* header_sum - the checksum h needs (the store's header_checksum) */
static uint64_t header_sum(const struct store_header *h)
{
	return XXH3_64bits(h, offsetof(struct store_header, checksum));
}

/* refused - kvf_open (read-write and read-only) fails with code and a
 * message naming the header file and containing what */
static void refused(kvf_status code, const char *what)
{
	kvf_options o = fx_filled_opts();
	kvf_store *st = (kvf_store *)&o;

	for (int ro = 0; ro < 2; ro++) {
		o.read_only = (uint32_t)ro;
		cr_assert(eq(int, kvf_open(fx.path, ro ? &o : NULL, &st), code),
			  "%s", kvf_last_error());
		cr_assert_null(st);
		cr_assert(strstr(kvf_last_error(), what) != NULL &&
				  strstr(kvf_last_error(), "/s/KVFLASH") !=
					  NULL,
			  "\"%s\" lacks \"%s\" or the file", kvf_last_error(),
			  what);
	}
}

Test(open_damage, header)
{
	struct store_header good, bad;
	kvf_store *st;

	fx_make_damage_store(fx.path);
	header_rw(&good, 0);

	bad = good;
	bad.magic[0] ^= 0x20;
	header_rw(&bad, 1);
	refused(KVF_ECORRUPT, "without the KVFLASH magic");

	bad = good;
	bad.n_layers ^= 0x100; /* the checksum no longer matches */
	header_rw(&bad, 1);
	refused(KVF_ECORRUPT, "is damaged: checksum");

	bad = good;
	bad.checksum ^= 1;
	header_rw(&bad, 1);
	refused(KVF_ECORRUPT, "is damaged: checksum");

	/* a version field damaged in a header of our layout is damage */
	bad = good;
	bad.format_version = STORE_FORMAT_VERSION + 1;
	header_rw(&bad, 1);
	refused(KVF_ECORRUPT, "is damaged: checksum");

	/* a newer format's header checks out by its own checksum */
	bad = good;
	bad.format_version = STORE_FORMAT_VERSION + 1;
	bad.checksum = header_sum(&bad);
	header_rw(&bad, 1);
	{
		char msg[80];

		snprintf(msg, sizeof(msg),
			 "has format version %u; this library reads up to %u",
			 STORE_FORMAT_VERSION + 1, STORE_FORMAT_VERSION);
		refused(KVF_EVERSION, msg);
	}

	/* a token group other than the model's, or a codec, is damage */
	bad = good;
	bad.group_tokens += 1;
	bad.checksum = header_sum(&bad);
	header_rw(&bad, 1);
	refused(KVF_ECORRUPT, "token group of");
	bad = good;
	bad.codec = 1;
	bad.checksum = header_sum(&bad);
	header_rw(&bad, 1);
	refused(KVF_ECORRUPT, "codec 1");

	/* a format-3 header of a head whose rows do not divide the page
	 * describes no store format 3 made */
	bad = good;
	bad.format_version = 3;
	bad.head_dim = 80;
	bad.checksum = header_sum(&bad);
	header_rw(&bad, 1);
	refused(KVF_ECORRUPT, "rows of 160 bytes that do not divide");

	/* an older format: refused by version once the header checks out */
	bad = good;
	bad.format_version = STORE_FORMAT_OLDEST - 1;
	bad.checksum = header_sum(&bad);
	header_rw(&bad, 1);
	{
		char msg[128];

		snprintf(msg, sizeof(msg),
			 "has format version %u, which this library no longer reads (it reads %u to %u)",
			 STORE_FORMAT_OLDEST - 1, STORE_FORMAT_OLDEST,
			 STORE_FORMAT_VERSION);
		refused(KVF_EVERSION, msg);
	}

	bad = good;
	bad.header_size = 64;
	header_rw(&bad, 1);
	refused(KVF_ECORRUPT, "is damaged");

	cr_assert(eq(int, truncate(tmp_path(fx.path, STORE_HEADER_FILE), 100),
		     0));
	refused(KVF_ECORRUPT, "is damaged: 100 bytes");

	/* put back, it opens and reads */
	header_rw(&good, 1);
	st = fx_reopen(fx.path);
	OK(fx_read_check(st, 1, 0, 1, 0, DMG_LEN0, 3));
	OK(kvf_close(st));
}

/* ---- the catalog ----------------------------------------------------------- */

static void move_dir(const char *from, const char *to)
{
	cr_assert(eq(int, rename(from, to), 0), "rename %s %s", from, to);
}

Test(open_damage, catalog_of_another_store)
{
	kvf_options o = fx_filled_opts();
	char *other = strdup(tmp_path(fx.dir, "other"));
	char *meta = strdup(tmp_path(fx.path, "meta"));
	char *saved = strdup(tmp_path(fx.dir, "meta-saved"));
	kvf_store *st = NULL;

	fx_make_damage_store(fx.path);
	/* same options, so only the catalog tells them apart */
	OK(kvf_open(other, &o, &st));
	OK(kvf_seq_create(st, 1));
	OK(kvf_close(st));
	move_dir(meta, saved);
	move_dir(tmp_path(other, "meta"), meta);
	st = (kvf_store *)&o;
	cr_assert(eq(int, kvf_open(fx.path, &o, &st), KVF_ECORRUPT), "%s",
		  kvf_last_error());
	cr_assert_null(st);
	cr_assert(strstr(kvf_last_error(), "meta belongs to another store") !=
			  NULL,
		  "%s", kvf_last_error());

	/* a catalog with no configuration at all */
	{
		struct catalog *c = NULL;

		cr_assert(eq(int, fx_rm_tree(meta), 0));
		OK(catalog_open(meta, 1, 0, CATALOG_FSYNC, &c));
		catalog_close(c);
	}
	cr_assert(eq(int, kvf_open(fx.path, &o, &st), KVF_ECORRUPT), "%s",
		  kvf_last_error());
	cr_assert(strstr(kvf_last_error(),
			 "meta has no configuration record") != NULL,
		  "%s", kvf_last_error());

	/* its own catalog back: fine */
	cr_assert(eq(int, fx_rm_tree(meta), 0));
	move_dir(saved, meta);
	st = fx_reopen(fx.path);
	OK(fx_read_check(st, 1, 0, 1, 0, DMG_LEN0, 3));
	OK(kvf_close(st));
	free(other);
	free(meta);
	free(saved);
}

/* ---- segment records ------------------------------------------------------ */

/* seg_record_get - the "G" record of segid (kvf_malloc'd), store closed */
static void *seg_record_get(uint32_t segid, size_t *vlen)
{
	struct catalog *c = NULL;
	unsigned char key[5];
	void *val;

	OK(catalog_open(tmp_path(fx.path, "meta"), 0, 1, CATALOG_FSYNC, &c));
	meta_key_u32(key, META_TAG_SEG, segid);
	OK(catalog_get(c, key, sizeof(key), &val, vlen));
	catalog_close(c);
	return val;
}

/* seg_record_put - replace the "G" record of segid, store closed */
static void seg_record_put(uint32_t segid, const void *val, size_t vlen)
{
	struct catalog *c = NULL;
	struct catalog_batch *b = catalog_batch_new();
	unsigned char key[5];

	cr_assert_not_null(b);
	OK(catalog_open(tmp_path(fx.path, "meta"), 0, 0, CATALOG_FSYNC, &c));
	meta_key_u32(key, META_TAG_SEG, segid);
	catalog_batch_put(b, key, sizeof(key), val, vlen);
	OK(catalog_commit(c, b, 1));
	catalog_batch_free(b);
	catalog_close(c);
}

/* record_refused - case k: open, read-write and read-only, fails with
 * KVF_ECORRUPT, a message holding msg, and no handle */
static void record_refused(int k, const char *msg)
{
	for (int ro = 0; ro < 2; ro++) {
		kvf_options o = fx_filled_opts();
		kvf_store *st = (kvf_store *)&o;

		o.read_only = (uint32_t)ro;
		cr_assert(eq(int, kvf_open(fx.path, &o, &st), KVF_ECORRUPT),
			  "case %d: %s", k, kvf_last_error());
		cr_assert_null(st);
		cr_assert(strstr(kvf_last_error(), msg) != NULL,
			  "case %d: \"%s\" lacks \"%s\"", k, kvf_last_error(),
			  msg);
	}
}

/* A "G" record whose length is not sizeof(meta_seg) + n_runs runs: open
 * (read-write and read-only) fails with KVF_ECORRUPT naming the record
 * and its length, and leaves no handle; put back, the store opens. */
Test(open_damage, segment_record_length_mismatch)
{
	struct fx_spot p;
	struct meta_seg rec;
	unsigned char *good, *bad;
	size_t len;
	kvf_store *st;

	fx_make_damage_store(fx.path);
	p = fx_find_group(fx.path, 1, 0, 0, 1, 3, G);
	good = seg_record_get(p.segid, &len);
	memcpy(&rec, good, sizeof(rec));
	cr_assert(eq(sz, len,
		     sizeof(rec) + rec.n_runs * sizeof(struct meta_run)));
	bad = malloc(len + 1);
	for (int k = 0; k < 3; k++) {
		struct meta_seg r = rec;
		size_t bad_len = len;
		char msg[80];

		memcpy(bad, good, len);
		if (k == 0)
			r.n_runs++; /* one run more than the record holds */
		else if (k == 1)
			bad[bad_len++] = 0; /* a byte more than its runs */
		else
			r.n_runs = UINT32_MAX; /* far more runs than bytes */
		memcpy(bad, &r, sizeof(r));
		seg_record_put(p.segid, bad, bad_len);
		snprintf(msg, sizeof(msg),
			 "catalog record segment %u is malformed (%zu bytes)",
			 p.segid, bad_len);
		record_refused(k, msg);
	}
	seg_record_put(p.segid, good, len);
	st = fx_reopen(fx.path);
	OK(fx_read_check(st, 1, 0, 1, 0, DMG_LEN0, 3));
	OK(kvf_close(st));
	free(bad);
	kvf_free(good);
}

/*
 * A "G" record of the right length whose last run is malformed: it
 * reaches past the segment's data pages, is empty, has stride 0, names
 * groups that wrap past 2^32, or an unknown namespace.  Open (read-write
 * and read-only) fails with KVF_ECORRUPT naming the record and the run;
 * put back, the store opens and reads.
 */
Test(open_damage, segment_record_bad_run)
{
	struct fx_spot p;
	struct meta_seg rec;
	struct meta_run last;
	unsigned char *good, *bad;
	size_t len, at;
	kvf_store *st;

	fx_make_damage_store(fx.path);
	p = fx_find_group(fx.path, 1, 0, 0, 1, 3, G);
	good = seg_record_get(p.segid, &len);
	memcpy(&rec, good, sizeof(rec));
	cr_assert(rec.n_runs > (0));
	at = sizeof(rec) + (rec.n_runs - 1) * sizeof(last);
	memcpy(&last, good + at, sizeof(last));
	/* the runs are in page order: the last one ends at the last page */
	cr_assert(eq(u32, last.page + last.n, rec.n_data_pages));
	bad = malloc(len);
	for (int k = 0; k < 5; k++) {
		struct meta_run r = last;
		char msg[96];

		if (k == 0)
			r.n += 3; /* past the data pages */
		else if (k == 1)
			r.n = 0;
		else if (k == 2)
			r.stride = 0;
		else if (k == 3)
			r.group = UINT32_MAX; /* the run's second group wraps */
		else
			r.ns = 7;
		cr_assert(ge(u16, last.n, 2));
		memcpy(bad, good, len);
		memcpy(bad + at, &r, sizeof(r));
		seg_record_put(p.segid, bad, len);
		snprintf(msg, sizeof(msg),
			 "catalog record segment %u is malformed: run %u names",
			 p.segid, rec.n_runs - 1);
		record_refused(k, msg);
	}
	seg_record_put(p.segid, good, len);
	st = fx_reopen(fx.path);
	OK(fx_read_check(st, 1, 0, 1, 0, DMG_LEN0, 3));
	OK(kvf_close(st));
	free(bad);
	kvf_free(good);
}

/* An existing store's stripe file that is missing or cut short holds its
 * data no more: every open refuses it, read-only or not, and makes no
 * file (a writable open made a blank stripe and answered KVF_OK, with the
 * lost segments counted corrupt, and a later open took it as whole).  So
 * does a flash store whose image is gone. */
Test(open_damage, a_missing_or_cut_stripe_is_refused)
{
	char *stripe = strdup(tmp_path(fx.path, "stripe-000.kvf"));
	char *saved = strdup(tmp_path(fx.dir, "stripe-saved"));
	char *fpath = strdup(tmp_path(fx.dir, "flash"));
	kvf_options ro, fo = fx_small_opts();
	kvf_store *st;

	kvf_options_init(&ro, NULL);
	ro.read_only = 1;
	fx_make_store(fx.path);
	cr_assert(eq(int, rename(stripe, saved), 0));
	fx_refused(fx.path, NULL, KVF_ECORRUPT, "stripe-000.kvf is missing",
		   "gone", "a missing stripe");
	fx_refused(fx.path, &ro, KVF_ECORRUPT, "stripe-000.kvf is missing",
		   "gone", "a missing stripe, read-only");
	cr_assert(eq(int, rename(saved, stripe), 0));
	{
		struct stat sb;

		cr_assert(eq(int, stat(stripe, &sb), 0));
		cr_assert(eq(int, truncate(stripe, 65536), 0));
		fx_refused(fx.path, NULL, KVF_ECORRUPT, "holds 65536 bytes",
			   "cut short", "a cut stripe");
		fx_refused(fx.path, &ro, KVF_ECORRUPT, "holds 65536 bytes",
			   "cut short", "a cut stripe, read-only");
	}
	fo.media = KVF_MEDIA_FLASH;
	OK(kvf_open(fpath, &fo, &st));
	OK(kvf_close(st));
	cr_assert(eq(int, unlink(tmp_path(fpath, "flash.img")), 0));
	fx_refused(fpath, NULL, KVF_ECORRUPT, "flash.img is missing", "gone",
		   "a missing flash image");
	free(stripe);
	free(saved);
	free(fpath);
}
