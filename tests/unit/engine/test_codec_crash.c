/*
 * test_codec_crash.c - a codec store's synced tail after its group seals
 * encoded, and a crash before the next sync: the last committed record
 * ends inside the group, so recovery reads that tail from the plain pages
 * the sync wrote.  They must outlive the seal (seq_hold_page) even when a
 * durable point in between (an optimizer step's) reclaims what is dead.
 */
#include <criterion/criterion.h>
#include <criterion/new/assert.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "compute/half.h"
#include "kvflash.h"
#include "store_fixture.h"
#include "testutil.h"

TestSuite(codec_crash, .init = fx_setup_dir, .fini = fx_teardown);

#define TAIL 8u /* tokens of group 1 the second sync writes */

static kvf_options crash_codec_opts(void)
{
	kvf_model md = { LAYERS, QH, KVH, DIM, KVF_DTYPE_F16 };
	kvf_options o = fx_options_for(&md, 256 * 1024, 64ull << 20, 1);

	o.codec = KVF_CODEC_INT8;
	return o;
}

/* row - token t, head h of kind k (0 K, 1 V) in layer l: f16 multiples
 * of 1/8 in [-1, 1], exact in f16 */
static void row(uint16_t *dst, uint32_t l, int k, uint64_t t, uint32_t h)
{
	for (uint32_t d = 0; d < DIM; d++) {
		int x = (int)((t * 7 + h * 3 + d * 5 + l * 11 + (uint64_t)k * 13) % 17) - 8;

		dst[d] = kvf_f32_to_f16((float)x / 8.0f);
	}
}

static kvf_status append_rows(kvf_store *st, uint64_t t0, uint32_t n)
{
	uint16_t *k = calloc((size_t)n * KVH * DIM, sizeof(uint16_t));
	uint16_t *v = calloc((size_t)n * KVH * DIM, sizeof(uint16_t));
	kvf_status rc = KVF_OK;

	for (uint32_t l = 0; l < LAYERS && rc == KVF_OK; l++) {
		for (uint32_t i = 0; i < n; i++)
			for (uint32_t h = 0; h < KVH; h++) {
				row(k + ((size_t)i * KVH + h) * DIM, l, 0, t0 + i, h);
				row(v + ((size_t)i * KVH + h) * DIM, l, 1, t0 + i, h);
			}
		rc = kvf_append(st, 1, l, n, k, v);
	}
	free(k);
	free(v);
	return rc;
}

/* writer - group 0 synced, then TAIL tokens of group 1 synced, then the
 * rest of group 1 appended (it seals encoded), an optimizer step (a
 * durable point that reclaims dead segments), and an exit without a
 * close: what a killed process leaves */
static void writer(const char *path)
{
	kvf_options o = crash_codec_opts();
	kvf_opt_config c;
	kvf_store_info si = { .struct_size = sizeof(si) };
	static float p[1024], g[1024];
	kvf_grad grad = { KVF_DTYPE_F32, g, NULL, 1024 };
	kvf_store *st;
	kvf_opt *opt;
	uint32_t gt;

	CHILD_MUST(kvf_open(path, &o, &st));
	CHILD_MUST(kvf_store_info_get(st, &si));
	gt = si.group_tokens;
	kvf_opt_config_init(&c, KVF_OPT_SGD);
	for (uint32_t i = 0; i < 1024; i++)
		g[i] = 1;
	CHILD_MUST(kvf_opt_create(st, "o", 1024, &c, p, &opt));
	CHILD_MUST(kvf_seq_create(st, 1));
	CHILD_MUST(append_rows(st, 0, gt));
	CHILD_MUST(kvf_sync(st));
	CHILD_MUST(append_rows(st, gt, TAIL));
	CHILD_MUST(kvf_sync(st));
	fx_child_say("S %u", gt + TAIL);
	CHILD_MUST(append_rows(st, gt + TAIL, gt - TAIL));
	CHILD_MUST(kvf_opt_step(opt, &grad, NULL));
	CHILD_MUST(kvf_opt_step(opt, &grad, NULL));
	fx_child_say("A %u", 2 * gt);
	_exit(0);
}

Test(codec_crash, a_synced_tail_outlives_its_group_sealing)
{
	kvf_options o = crash_codec_opts();
	unsigned synced = 0, appended = 0;
	uint16_t want[DIM];
	uint16_t *k, *v;
	char line[256];
	kvf_store *st;
	int fd, status;
	pid_t pid;

	pid = fx_spawn(&fd);
	if (pid == 0)
		writer(fx.path);
	while (fx_read_line(fd, line, sizeof(line))) {
		cr_assert(line[0] != 'E', "writer: %s", line);
		sscanf(line, "S %u", &synced);
		sscanf(line, "A %u", &appended);
	}
	close(fd);
	cr_assert(eq(int, (int)waitpid(pid, &status, 0), (int)pid));
	cr_assert(eq(int, WIFEXITED(status) && WEXITSTATUS(status) == 0, 1));
	cr_assert(synced > TAIL && appended > synced);

	OK(kvf_open(fx.path, &o, &st));
	k = malloc((size_t)appended * DIM * sizeof(uint16_t));
	v = malloc((size_t)appended * DIM * sizeof(uint16_t));
	for (uint32_t l = 0; l < LAYERS; l++) {
		uint64_t len;

		OK(kvf_seq_len(st, 1, l, &len));
		cr_assert(len >= synced && len <= appended,
			  "layer %u: %llu tokens after the crash; %u synced", l,
			  (unsigned long long)len, synced);
		for (uint32_t h = 0; h < KVH; h++) {
			OK(kvf_read(st, 1, l, h, 0, len, k, v));
			/* the synced tail: exact while it is a tail, within
			 * INT8's step once its group is whole */
			for (uint64_t t = synced - TAIL; t < synced; t++)
				for (int kind = 0; kind < 2; kind++) {
					const uint16_t *got = (kind ? v : k) + t * DIM;

					row(want, l, kind, t, h);
					for (uint32_t d = 0; d < DIM; d++) {
						float a = kvf_f16_to_f32(got[d]);
						float b = kvf_f16_to_f32(want[d]);

						cr_assert(len < appended ? a == b
									 : a - b < 0.01f && b - a < 0.01f,
							  "layer %u head %u %s token %llu dim %u: %g, appended %g",
							  l, h, kind ? "V" : "K",
							  (unsigned long long)t, d, a, b);
					}
				}
		}
	}
	free(k);
	free(v);
	OK(kvf_close(st));
}
