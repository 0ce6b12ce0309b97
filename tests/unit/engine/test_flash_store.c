/*
 * test_flash_store.c - the store on the emulated NAND device: it runs
 * unchanged (append, read, sync, free, device WA in the stats); a power
 * cut in the middle of writing leaves, after power-on and reopen,
 * exactly the state of the last sync, with the torn page's segment
 * dropped rather than read as data; and the device persists in its image
 * (DIR/flash.img): a flash store closed, or killed, and reopened returns
 * every synced token, with the device's FTL checked after each reopen.
 */
#include <criterion/criterion.h>
#include <criterion/new/assert.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "engine/lifecycle/store.h"
#include "engine/base/store_state.h"
#include "ftl/media_flash.h"
#include "kvflash.h"
#include "store_fixture.h"
#include "testutil.h"

#define SEG (64 * 1024)
#define CAP (4ull << 20)
#define STRIPES 2

TestSuite(flash_store, .init = fx_setup_dir, .fini = fx_teardown, .timeout = 60);

static kvf_options flash_opts(void)
{
	kvf_model m = { LAYERS, KVH, KVH, DIM, KVF_DTYPE_F16 };
	kvf_options o;

	kvf_options_init(&o, &m);
	o.media = KVF_MEDIA_FLASH;
	o.segment_size = SEG;
	o.capacity_bytes = CAP;
	o.n_stripes = STRIPES;
	return o;
}

/* append - n tokens (seq's values, fx_append) to every layer of seq from
 * t0; the first failure's status */
static kvf_status append(kvf_store *st, uint64_t seq, uint64_t t0, uint32_t n)
{
	kvf_status rc = KVF_OK;

	for (uint32_t l = 0; l < LAYERS && rc == KVF_OK; l++)
		rc = fx_append(st, seq, seq, l, t0, n);
	return rc;
}

/* check - every layer of seq holds exactly t1 tokens, with seq's values */
static void check(kvf_store *st, uint64_t seq, uint64_t t1)
{
	uint64_t n;

	for (uint32_t l = 0; l < LAYERS; l++) {
		cr_assert(eq(int, kvf_seq_len(st, seq, l, &n), KVF_OK));
		cr_assert(eq(u64, n, t1), "seq %llu layer %u",
			  (unsigned long long)seq, l);
		fx_check_tokens(st, seq, seq, l, 0, t1);
	}
}

Test(flash_store, runs_on_the_emulator)
{
	kvf_options o = flash_opts();
	kvf_stats s = { .struct_size = sizeof(s) };
	kvf_store *st = NULL;

	cr_assert(eq(int, kvf_open(fx.path, &o, &st), KVF_OK), "%s",
		  kvf_last_error());
	for (uint64_t seq = 1; seq <= 3; seq++) {
		cr_assert(eq(int, kvf_seq_create(st, seq), KVF_OK));
		cr_assert(eq(int, append(st, seq, 0, 500), KVF_OK), "%s", kvf_last_error());
	}
	cr_assert(eq(int, kvf_sync(st), KVF_OK), "%s", kvf_last_error());
	cr_assert(eq(int, kvf_seq_free(st, 2), KVF_OK));
	cr_assert(eq(int, kvf_sync(st), KVF_OK));
	check(st, 1, 500);
	check(st, 3, 500);
	cr_assert(eq(int, kvf_stats_get(st, &s), KVF_OK));
	cr_assert(ge(dbl, s.device_wa, 1.0));
	cr_assert(lt(dbl, s.device_wa, 1.5), "device WA %g: whole-segment trims should keep it near 1",
		  s.device_wa);
	cr_assert(eq(int, kvf_close(st), KVF_OK));
}

/* Power cut at each of several points in a run of appends after a sync. */
/* file_bytes - the whole of path, malloc'ed; *n its size */
static unsigned char *file_bytes(const char *path, size_t *n)
{
	FILE *f = fopen(path, "rb");
	unsigned char *b;
	struct stat sb;

	cr_assert_not_null(f);
	cr_assert(eq(int, fstat(fileno(f), &sb), 0));
	*n = (size_t)sb.st_size;
	b = malloc(*n ? *n : 1);
	cr_assert(eq(sz, fread(b, 1, *n, f), *n));
	fclose(f);
	return b;
}

/* read-only handles share the image and never write it (a read-only open
 * used to rewrite a sync slot at close, needed write permission, and
 * locked the image against a second reader) */
Test(flash_store, read_only_opens_share_the_image_and_leave_it_as_it_was)
{
	kvf_options o = flash_opts(), ro;
	kvf_store *st = NULL, *a = NULL, *b = NULL;
	unsigned char *before, *after;
	size_t n0, n1;
	char img[4200];

	OK(kvf_open(fx.path, &o, &st));
	OK(kvf_seq_create(st, 1));
	OK(append(st, 1, 0, 100));
	OK(kvf_close(st));
	snprintf(img, sizeof(img), "%s/flash.img", fx.path);
	before = file_bytes(img, &n0);
	kvf_options_init(&ro, NULL);
	ro.read_only = 1;
	OK(kvf_open(fx.path, &ro, &a));
	cr_assert(eq(int, kvf_open(fx.path, &ro, &b), KVF_OK), "%s", kvf_last_error());
	check(a, 1, 100);
	check(b, 1, 100);
	OK(kvf_close(b));
	/* a writer waits for the readers to go */
	cr_assert(eq(int, kvf_open(fx.path, &o, &st), KVF_EBUSY));
	OK(kvf_close(a));
	after = file_bytes(img, &n1);
	cr_assert(eq(sz, n1, n0));
	cr_assert(eq(int, memcmp(before, after, n0), 0), "a read-only open changed flash.img");
	free(before);
	free(after);
	OK(kvf_open(fx.path, &o, &st));
	check(st, 1, 100);
	OK(kvf_close(st));
}

Test(flash_store, power_cut_keeps_the_synced_state)
{
	kvf_options o = flash_opts();
	struct kvf_media_config cfg = {
		.kind = KVF_MEDIA_FLASH,
		.geo = { .n_stripes = STRIPES, .page_size = 4096,
			 .pages_per_segment = SEG / 4096,
			 .segs_per_stripe = CAP / STRIPES / SEG },
	};

	struct kvf_flash_config fc;

	kvf_flash_config_init(&fc); /* as kvf_open sets it up */
	fc.channels = STRIPES;
	fc.pages_per_block = SEG / 4096;
	cfg.flash = &fc;
	for (uint64_t cut = 1; cut <= 61; cut += 15) {
		struct kvf_media *m = NULL;
		kvf_store *st = NULL;
		kvf_status rc = KVF_OK;
		char name[32];

		snprintf(name, sizeof(name), "s%llu", (unsigned long long)cut);
		cr_assert(eq(int, kvf_media_open(&cfg, &m), KVF_OK), "%s", kvf_last_error());
		cr_assert(eq(int, store_open_media(tmp_path(fx.dir, name), &o, m, &st), KVF_OK),
			  "%s", kvf_last_error());
		cr_assert(eq(int, kvf_seq_create(st, 1), KVF_OK));
		cr_assert(eq(int, append(st, 1, 0, 300), KVF_OK));
		cr_assert(eq(int, kvf_sync(st), KVF_OK), "%s", kvf_last_error());
		cr_assert(eq(int, kvf_flash_power_cut(m, cut), KVF_OK));
		for (uint64_t t = 300; t < 2000 && rc == KVF_OK; t += 50)
			rc = append(st, 1, t, 50);
		if (rc == KVF_OK)
			rc = kvf_sync(st);
		cr_assert(eq(int, rc, KVF_EFATAL), "cut %llu: %s",
			  (unsigned long long)cut, kvf_last_error());
		cr_assert(eq(int, kvf_append(st, 1, 0, 1, "x", "y"), KVF_EFATAL));
		kvf_close(st);
		cr_assert(eq(int, kvf_flash_power_on(m), KVF_OK));
		st = NULL;
		cr_assert(eq(int, store_open_media(tmp_path(fx.dir, name), &o, m, &st), KVF_OK),
			  "cut %llu: %s", (unsigned long long)cut, kvf_last_error());
		check(st, 1, 300);
		cr_assert(eq(int, append(st, 1, 300, 100), KVF_OK), "%s", kvf_last_error());
		check(st, 1, 400);
		kvf_close(st);
		kvf_media_free(m);
	}
}

static kvf_store *reopen(const char *path, const kvf_options *o)
{
	kvf_store *st = NULL;

	cr_assert(eq(int, kvf_open(path, o, &st), KVF_OK), "%s", kvf_last_error());
	cr_assert(eq(int, kvf_flash_check(st->media), KVF_OK), "%s",
		  kvf_last_error());
	return st;
}

Test(flash_store, close_and_reopen_keeps_the_tokens)
{
	kvf_options o = flash_opts();
	const char *path = fx.path;
	char img[4096];
	struct stat sb;
	kvf_store *st = reopen(path, &o);

	snprintf(img, sizeof(img), "%s/flash.img", path);
	cr_assert(eq(int, stat(img, &sb), 0), "the device image %s", img);
	for (uint64_t seq = 1; seq <= 3; seq++) {
		cr_assert(eq(int, kvf_seq_create(st, seq), KVF_OK));
		cr_assert(eq(int, append(st, seq, 0, 300), KVF_OK), "%s", kvf_last_error());
	}
	cr_assert(eq(int, kvf_sync(st), KVF_OK), "%s", kvf_last_error());
	cr_assert(eq(int, kvf_close(st), KVF_OK), "%s", kvf_last_error());

	st = reopen(path, &o);
	for (uint64_t seq = 1; seq <= 3; seq++)
		check(st, seq, 300);
	/* more work on the reopened device: appends, a free, the cleaner's
	 * and the device's GC; closed without an explicit sync */
	cr_assert(eq(int, kvf_seq_free(st, 2), KVF_OK));
	for (uint64_t t = 300; t < 1500; t += 100) {
		cr_assert(eq(int, append(st, 1, t, 100), KVF_OK), "%s", kvf_last_error());
		cr_assert(eq(int, append(st, 3, t, 100), KVF_OK), "%s", kvf_last_error());
	}
	cr_assert(eq(int, kvf_close(st), KVF_OK), "%s", kvf_last_error());

	/* options may be left out: the store and its device say it all */
	st = reopen(path, NULL);
	check(st, 1, 1500);
	check(st, 3, 1500);
	cr_assert(eq(int, kvf_seq_len(st, 2, 0, &(uint64_t){ 0 }), KVF_ENOENT));
	cr_assert(eq(int, kvf_close(st), KVF_OK));
}

/* A writer killed after a sync: the reopened store has every synced token. */
Test(flash_store, kill_then_reopen_keeps_the_synced_tokens)
{
	kvf_options o = flash_opts();
	const char *path = tmp_path(fx.dir, "k");
	int fds[2], status, killed;
	uint64_t synced = 0, got, n;
	pid_t pid;

	cr_assert(eq(int, pipe(fds), 0));
	pid = fork();
	cr_assert(ge(int, pid, 0));
	if (pid == 0) {
		kvf_store *st = NULL;

		close(fds[0]);
		if (kvf_open(path, &o, &st) != KVF_OK || kvf_seq_create(st, 1) != KVF_OK)
			_exit(2);
		for (uint64_t t = 0;; t += 64) {
			if (append(st, 1, t, 64) != KVF_OK)
				_exit(3);
			if (t % 256 == 0) {
				uint64_t len = t + 64;

				if (kvf_sync(st) != KVF_OK)
					_exit(4);
				if (write(fds[1], &len, sizeof(len)) != sizeof(len))
					_exit(5);
			}
			if (t == 2048 + 128)
				raise(SIGKILL);
		}
	}
	close(fds[1]);
	while (read(fds[0], &got, sizeof(got)) == sizeof(got))
		synced = got;
	close(fds[0]);
	cr_assert(eq(int, waitpid(pid, &status, 0), pid));
	killed = WIFSIGNALED(status);
	cr_assert(killed, "the writer exited with %d", status >> 8);
	cr_assert(eq(u64, synced, 2048 + 64));
	{
		kvf_store *st = reopen(path, &o);

		cr_assert(eq(int, kvf_seq_len(st, 1, 0, &n), KVF_OK));
		cr_assert(ge(u64, n, synced), "synced %llu tokens, %llu came back",
			  (unsigned long long)synced, (unsigned long long)n);
		check(st, 1, n);
		/* and it goes on */
		cr_assert(eq(int, append(st, 1, n, 100), KVF_OK), "%s", kvf_last_error());
		cr_assert(eq(int, kvf_close(st), KVF_OK));
		st = reopen(path, &o);
		check(st, 1, n + 100);
		cr_assert(eq(int, kvf_close(st), KVF_OK));
	}
}
