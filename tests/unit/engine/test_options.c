/*
 * test_options.c - the options of kvf_open, checked before anything is
 * made.
 *
 * Suite options: each bad option at create is refused with its status and
 * message, leaves no files behind (at a fresh path, and in an existing
 * empty directory) and leaves the filled store (store_fixture.h) as it was.
 *
 * Suite options_check: each bad option is refused three ways, with
 * KVF_EINVAL and a message naming the field: at a missing path (still
 * missing afterwards), under a regular file (where a mkdir would fail
 * first) and on an existing store (left as it was, its data reading back).
 *
 * Options that contradict an existing store are test_open.c's.
 */
#include <criterion/criterion.h>
#include <criterion/new/assert.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "store_fixture.h"
#include "testutil.h"

TestSuite(options, .init = fx_setup, .fini = fx_teardown, .timeout = 60);
TestSuite(options_check, .timeout = 90);

/* ---- bad options at create: nothing left behind ------------------------ */

struct bad_option {
	const char *what; /* for messages */
	void (*set)(kvf_options *o);
	kvf_status code;
	const char *message; /* substring */
};

static void n_layers_0(kvf_options *o)
{
	o->model.n_layers = 0;
}

static void n_layers_big(kvf_options *o)
{
	o->model.n_layers = 65536;
}

static void n_kv_heads_0(kvf_options *o)
{
	o->model.n_kv_heads = 0;
}

static void n_kv_heads_big(kvf_options *o)
{
	o->model.n_kv_heads = 4096;
	o->model.n_q_heads = 4096;
}

static void n_q_heads_0(kvf_options *o)
{
	o->model.n_q_heads = 0;
}

static void n_q_heads_odd(kvf_options *o)
{
	o->model.n_q_heads = 5;
}

static void dtype_bad(kvf_options *o)
{
	o->model.dtype = (kvf_dtype)7;
}

static void page_odd(kvf_options *o)
{
	o->page_size = 6144;
}

static void page_small(kvf_options *o)
{
	o->page_size = 2048;
}

static void page_big(kvf_options *o)
{
	o->page_size = 131072;
}

static void head_dim_0(kvf_options *o)
{
	o->model.head_dim = 0;
}

static void head_dim_big(kvf_options *o)
{
	o->model.head_dim = 4096;
}

static void head_dim_odd(kvf_options *o)
{
	o->model.head_dim = 1025; /* one past KVF_HEAD_DIM_MAX */
}

static void seg_unaligned(kvf_options *o)
{
	o->segment_size = 64 * 1024 + 512;
}

static void seg_small(kvf_options *o)
{
	o->segment_size = 3 * 4096;
}

static void seg_big(kvf_options *o)
{
	o->segment_size = 65537ull * 4096;
	o->capacity_bytes = 1ull << 40;
}

static void media_bad(kvf_options *o)
{
	o->media = (kvf_media_kind)9;
}

static void kt_bad(kvf_options *o)
{
	o->kt_pages = 2;
}

static void stripes_big(kvf_options *o)
{
	o->n_stripes = 65;
}

static void paths_short(kvf_options *o)
{
	static const char *const p[1] = { "/dev/null" };

	o->device_paths = p;
	o->n_device_paths = 1;
}

static void paths_null(kvf_options *o)
{
	o->n_device_paths = 2;
	o->device_paths = NULL;
}

static void capacity_small(kvf_options *o)
{
	o->capacity_bytes = 2 * 64 * 1024;
}

static void capacity_huge(kvf_options *o)
{
	o->capacity_bytes = 1ull << 50;
}

static const struct bad_option bad_options[] = {
	{ "n_layers 0", n_layers_0, KVF_EINVAL,
	  "kvf_open: model.n_layers 0 out of range (1..65535)" },
	{ "n_layers 65536", n_layers_big, KVF_EINVAL,
	  "model.n_layers 65536 out of range" },
	{ "n_kv_heads 0", n_kv_heads_0, KVF_EINVAL,
	  "model.n_kv_heads 0 out of range (1..4095)" },
	{ "n_kv_heads 4096", n_kv_heads_big, KVF_EINVAL,
	  "model.n_kv_heads 4096 out of range" },
	{ "n_q_heads 0", n_q_heads_0, KVF_EINVAL,
	  "model.n_q_heads 0 must be a multiple of n_kv_heads 2" },
	{ "n_q_heads 5", n_q_heads_odd, KVF_EINVAL,
	  "model.n_q_heads 5 must be a multiple of n_kv_heads 2" },
	{ "dtype 7", dtype_bad, KVF_EINVAL,
	  "model.dtype 7 is not a kvf_dtype" },
	{ "page_size 6144", page_odd, KVF_EINVAL,
	  "page_size 6144 must be a power of two in 4096..65536" },
	{ "page_size 2048", page_small, KVF_EINVAL, "page_size 2048 must be" },
	{ "page_size 131072", page_big, KVF_EINVAL,
	  "page_size 131072 must be" },
	{ "head_dim 0", head_dim_0, KVF_EINVAL, "model.head_dim 0" },
	{ "head_dim 4096", head_dim_big, KVF_EINVAL,
	  "model.head_dim 4096 out of range (1..1024)" },
	{ "head_dim 1025", head_dim_odd, KVF_EINVAL,
	  "model.head_dim 1025 out of range (1..1024)" },
	{ "segment_size unaligned", seg_unaligned, KVF_EINVAL,
	  "segment_size 66048 must be" },
	{ "segment_size 3 pages", seg_small, KVF_EINVAL,
	  "segment_size 12288 must be" },
	{ "segment_size 65537 pages", seg_big, KVF_EINVAL,
	  "segment_size 268439552 must be" },
	{ "media 9", media_bad, KVF_EINVAL,
	  "kvf_open: media 9 is not a kvf_media_kind" },
	{ "kt_pages 2", kt_bad, KVF_EINVAL,
	  "kvf_open: kt_pages 2 must be 0 or 1" },
	{ "n_stripes 65", stripes_big, KVF_EINVAL,
	  "kvf_open: n_stripes 65 / n_device_paths 0 out of range (0..64)" },
	{ "1 path for 2 stripes", paths_short, KVF_EINVAL,
	  "device_paths set with n_device_paths 1 for 2 stripes" },
	{ "paths NULL", paths_null, KVF_EINVAL,
	  "device_paths NULL with n_device_paths 2 for 2 stripes" },
	{ "capacity 2 segments", capacity_small, KVF_EINVAL,
	  "capacity_bytes 131072 holds fewer than 2 segments of 65536 bytes per stripe" },
	{ "capacity 1 PiB", capacity_huge, KVF_EINVAL,
	  "capacity_bytes 1125899906842624 is too many segments of 65536 bytes" },
};

/* zero in a field means its default (kvflash.h's conventions) */
Test(options, zero_fields_take_their_defaults)
{
	kvf_options o = fx_filled_opts();
	kvf_store_info info = { .struct_size = sizeof(info) };
	kvf_store *st;

	o.page_size = 0;
	o.segment_size = 0;
	o.capacity_bytes = 0;
	o.evict_policy = KVF_EVICT_LRU;
	o.evict_high = 0;
	o.evict_low = 0;
	OK(kvf_open(tmp_path(fx.dir, "zeros"), &o, &st));
	OK(kvf_store_info_get(st, &info));
	cr_assert(eq(u32, info.page_size, 4096));
	cr_assert(eq(u64, info.segment_size, 1u << 20));
	cr_assert(eq(u64, info.capacity_bytes, 4ull << 30));
	OK(kvf_close(st));
}

Test(options, create_bad_options)
{
	char *fresh = strdup(tmp_path(fx.dir, "fresh"));
	char *empty = strdup(tmp_path(fx.dir, "empty"));

	cr_assert(eq(int, mkdir(empty, 0755), 0));
	for (size_t i = 0; i < sizeof(bad_options) / sizeof(bad_options[0]);
	     i++) {
		const struct bad_option *b = &bad_options[i];
		kvf_options o = fx_filled_opts();
		kvf_store *h = (kvf_store *)&o;

		b->set(&o);
		REFUSED(kvf_open(fresh, &o, &h), b->code, b->message);
		cr_assert_null(h, "%s: out not cleared", b->what);
		cr_assert(eq(str, (char *)fx_leftovers(fresh, ""), ""),
			  "%s: a failed create left %s", b->what,
			  fx_dir_listing(fresh));
		/* an existing empty directory stays empty */
		REFUSED(kvf_open(empty, &o, &h), b->code, b->message);
		cr_assert(eq(str, (char *)fx_leftovers(empty, ""), ""),
			  "%s: a failed create left files: %s", b->what,
			  fx_dir_listing(empty));
	}
	free(fresh);
	free(empty);
}

/* ---- every field validated before anything is made ---------------------- */

struct bad_field {
	const char *what; /* for messages */
	void (*set)(kvf_options *o);
	const char *field; /* the message names it ... */
	const char *why;   /* ... and says this */
};

static const char *dev_paths_null[2]; /* set per test: { dir/dev0, NULL } */
static const char *dev_paths_one[1];  /* { dir/dev0 } */

static void direct_io_7(kvf_options *o)
{
	o->direct_io = 7;
}

static void read_only_5(kvf_options *o)
{
	o->read_only = 5;
}

static void media_9(kvf_options *o)
{
	o->media = (kvf_media_kind)9;
}

static void threads_huge(kvf_options *o)
{
	o->n_threads = 1u << 30;
}

static void page_5000(kvf_options *o)
{
	o->page_size = 5000;
}

static void page_2048(kvf_options *o)
{
	o->page_size = 2048;
}

static void page_131072(kvf_options *o)
{
	o->page_size = 131072;
}

/* seg_unaligned: as above */

static void seg_3_pages(kvf_options *o)
{
	o->segment_size = 3 * 4096;
}

static void capacity_1_seg(kvf_options *o)
{
	o->capacity_bytes = 64 * 1024 + 4096;
}

static void stripes_65(kvf_options *o)
{
	o->n_stripes = 65;
}

static void qd_5000(kvf_options *o)
{
	o->queue_depth = 5000;
}

static void cell_9(kvf_options *o)
{
	o->flash_cell = 9;
}

static void spare_095(kvf_options *o)
{
	o->flash_spare = 0.95f;
}

static void spare_nan(kvf_options *o)
{
	o->flash_spare = NAN;
}

static void channels_1000(kvf_options *o)
{
	o->flash_channels = 1000;
}

static void trim_3(kvf_options *o)
{
	o->trim = 3;
}

static void verify_2(kvf_options *o)
{
	o->verify_reads = 2;
}

static void kt_2(kvf_options *o)
{
	o->kt_pages = 2;
}

static void layers_0(kvf_options *o)
{
	o->model.n_layers = 0;
}

static void q_heads_5(kvf_options *o)
{
	o->model.n_q_heads = 5;
}

/* capacity for 2 stripes that holds 3 segments: 1 on one of them */
static void capacity_2_stripes(kvf_options *o)
{
	o->n_stripes = 2;
	o->capacity_bytes = 3 * 64 * 1024;
}

static void paths_null_entry(kvf_options *o)
{
	o->n_stripes = 2;
	o->n_device_paths = 2;
	o->device_paths = dev_paths_null;
}

static void paths_on_memory(kvf_options *o)
{
	o->media = KVF_MEDIA_MEMORY;
	o->n_device_paths = 1;
	o->device_paths = dev_paths_one;
}

/* the first rows are options the code before issue 12 never checked, so
 * it fails there at once (not at n_threads, which it would try to start) */
static const struct bad_field bad_fields[] = {
	{ "direct_io 7", direct_io_7, "kvf_open: direct_io 7", "must be 0" },
	{ "read_only 5", read_only_5, "kvf_open: read_only 5",
	  "must be 0 or 1" },
	{ "media 9", media_9, "kvf_open: media 9", "is not a kvf_media_kind" },
	{ "page_size 5000", page_5000, "kvf_open: page_size 5000",
	  "must be a power of two in 4096..65536" },
	{ "page_size 2048", page_2048, "page_size 2048", "must be a power" },
	{ "page_size 131072", page_131072, "page_size 131072",
	  "must be a power" },
	{ "segment_size unaligned", seg_unaligned, "segment_size 66048",
	  "must be 4 to 65536 pages of 4096 bytes" },
	{ "segment_size 3 pages", seg_3_pages, "segment_size 12288",
	  "must be 4 to 65536 pages" },
	{ "capacity of 1 segment", capacity_1_seg, "capacity_bytes 69632",
	  "holds fewer than 2 segments of 65536 bytes per stripe" },
	{ "capacity of 1 segment a stripe", capacity_2_stripes,
	  "capacity_bytes 196608", "fewer than 2 segments" },
	{ "n_stripes 65", stripes_65, "n_stripes 65", "out of range (0..64)" },
	{ "queue_depth 5000", qd_5000, "queue_depth 5000", "out of range" },
	{ "flash_cell 9", cell_9, "flash_cell 9", "out of range (0..4)" },
	{ "flash_spare 0.95", spare_095, "flash_spare 0.95",
	  "out of range [0, 0.9)" },
	{ "flash_spare NaN", spare_nan, "flash_spare ",
	  "nan out of range [0, 0.9)" },
	{ "flash_channels 1000", channels_1000, "flash_channels 1000",
	  "out of range" },
	{ "trim 3", trim_3, "kvf_open: trim 3", "must be 0, 1 or 2" },
	{ "verify_reads 2", verify_2, "verify_reads 2", "must be 0 or 1" },
	{ "kt_pages 2", kt_2, "kt_pages 2", "must be 0 or 1" },
	{ "device_paths with a NULL", paths_null_entry, "device_paths[1]",
	  "is NULL" },
	{ "device_paths on memory media", paths_on_memory, "device_paths",
	  "are for media KVF_MEDIA_FILE" },
	{ "model.n_layers 0", layers_0, "model.n_layers 0",
	  "out of range (1..65535)" },
	{ "model.head_dim 1025", head_dim_odd, "model.head_dim 1025",
	  "out of range (1..1024)" },
	{ "model.n_q_heads 5", q_heads_5, "model.n_q_heads 5",
	  "must be a multiple of n_kv_heads 2" },
	{ "n_threads 2^30", threads_huge, "n_threads 1073741824",
	  "out of range" },
};

/*
 * Each bad option is refused three ways, with KVF_EINVAL and a message
 * naming the field: (1) a path that does not exist, which must still not
 * exist afterwards; (2) a path under a regular file, where making anything
 * would fail first (with KVF_EIO) had the check come later; (3) a closed
 * store, whose files stay as they were and whose data still reads back.
 */
Test(options_check, bad_options_make_nothing)
{
	char *dir = tmpdir_make("open-opts");
	char *path = strdup(tmp_path(dir, "s"));
	char *missing = strdup(tmp_path(dir, "missing"));
	char *plain = strdup(tmp_path(dir, "plain"));
	char *under = strdup(tmp_path(plain, "s"));
	char *dev0 = strdup(tmp_path(dir, "dev0"));
	char *before;

	dev_paths_null[0] = dev0;
	dev_paths_null[1] = NULL;
	dev_paths_one[0] = dev0;
	fx_put_file(plain, 0x70, 10);
	fx_make_store(path);
	before = fx_tree_of(dir);
	for (size_t i = 0; i < sizeof(bad_fields) / sizeof(bad_fields[0]);
	     i++) {
		const struct bad_field *b = &bad_fields[i];
		kvf_options o = fx_small_opts();
		char what[160];

		b->set(&o);
		snprintf(what, sizeof(what), "%s, at a path that is not there",
			 b->what);
		fx_refused(missing, &o, KVF_EINVAL, b->field, b->why, what);
		cr_assert(fx_path_gone(missing), "%s: made it", what);
		snprintf(what, sizeof(what), "%s, under a regular file",
			 b->what);
		fx_refused(under, &o, KVF_EINVAL, b->field, b->why, what);
		snprintf(what, sizeof(what), "%s, on a store", b->what);
		fx_refused(path, &o, KVF_EINVAL, b->field, b->why, what);
		fx_same_tree(dir, before, b->what);
		cr_assert(fx_path_gone(dev0), "%s: made a device path", b->what);
	}
	free(before);
	fx_store_intact(path, "after the refused options");
	free(dev0);
	free(under);
	free(plain);
	free(missing);
	free(path);
	tmpdir_remove(dir);
}
