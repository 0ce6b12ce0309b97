/*
 * test_pack_power.c - packs keep the crash contract (docs/store.md,
 * "Packs"): a writer with PACK_SEQS sequences (more than a sync packs
 * from) appends a few tokens to each and syncs, again and again, and
 * reports each sync's lengths; it is killed at a random moment and the
 * power is cut under it (powercut.h: pages written since their file's last
 * fdatasync revert, tear or stay, logs are cut).  The store must open, and
 * every sequence must hold at least the tokens of the last sync reported,
 * each of them the one appended (fx_data_ok).
 */
#include <criterion/criterion.h>
#include <criterion/new/assert.h>
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

#include "powercut.h"
#include "store_fixture.h"
#include "testutil.h"

#define PACK_SEQS 48 /* above SYNC_PACK_SEQS (32): syncs pack */

static kvf_options pack_options(void)
{
	kvf_model m = { LAYERS, QH, KVH, DIM, KVF_DTYPE_F16 };
	kvf_options o;

	kvf_options_init(&o, &m);
	o.n_threads = 1;
	o.capacity_bytes = 256ull << 20;
	return o;
}

/* writer - in the child: rounds of a few tokens to every sequence and a
 * sync, "S n" after each (every sequence then holds n tokens a layer) */
static void writer(const char *path, const char *journal, uint64_t seed)
{
	kvf_options o = pack_options();
	kvf_store *st;
	uint64_t n = 0;

	if (powercut_arm(journal, path) != 0) {
		fx_child_say("E powercut_arm failed");
		_exit(3);
	}
	CHILD_MUST(kvf_open(path, &o, &st));
	for (;;) {
		uint32_t k = 1 + (uint32_t)rng_below(&seed, 5);

		for (uint64_t id = 1; id <= PACK_SEQS; id++)
			for (uint32_t l = 0; l < LAYERS; l++)
				CHILD_MUST(fx_append(st, id, id, l, n, k));
		n += k;
		CHILD_MUST(kvf_sync(st));
		fx_child_say("S %" PRIu64, n);
	}
}

TestSuite(pack_power, .timeout = 600);

Test(pack_power, synced_tails_in_packs_survive_a_power_cut)
{
	uint64_t rng = rng_seed("pack_power");
	unsigned rounds = 12, packed_rounds = 0;

	for (unsigned r = 0; r < rounds; r++) {
		char *dir = tmpdir_make("pack_power");
		char *path = strdup(tmp_path(dir, "s"));
		char *journal = strdup(tmp_path(dir, "journal"));
		uint64_t seed = rng_next(&rng), synced = 0;
		kvf_options o = pack_options();
		struct powercut_stats cs;
		kvf_stats s = { .struct_size = sizeof(s) };
		char why[300], *text, *line;
		kvf_store *st;
		int fd, status;
		pid_t pid;

		/* made and closed cleanly before the power can go */
		OK(kvf_open(path, &o, &st));
		for (uint64_t id = 1; id <= PACK_SEQS; id++)
			OK(kvf_seq_create(st, id));
		OK(kvf_close(st));
		pid = fx_spawn(&fd);
		if (pid == 0)
			writer(path, journal, seed);
		fx_sleep_us(50000 + rng_below(&rng, 400000));
		kill(pid, SIGKILL);
		text = fx_collect(fd);
		cr_assert(eq(int, waitpid(pid, &status, 0), pid));
		cr_assert(eq(int, fx_has_error(text), 0), "writer: %s", text);
		for (line = text; *line; line = strchr(line, '\n') + 1) {
			uint64_t v;

			if (sscanf(line, "S %" SCNu64, &v) == 1)
				synced = v;
			if (strchr(line, '\n') == NULL)
				break;
		}
		free(text);
		cr_assert(eq(int, powercut_apply(journal, rng_next(&rng), &cs, why,
						 sizeof(why)), 0), "%s", why);
		OK(kvf_open(path, &o, &st));
		for (uint64_t id = 1; id <= PACK_SEQS; id++)
			for (uint32_t l = 0; l < LAYERS; l++) {
				uint64_t len = 0;

				OK(kvf_seq_len(st, id, l, &len));
				cr_assert(ge(u64, len, synced),
					  "round %u: sequence %llu layer %u holds %llu tokens, %llu were synced",
					  r, (unsigned long long)id, l,
					  (unsigned long long)len,
					  (unsigned long long)synced);
				cr_assert(fx_data_ok(st, id, l, len),
					  "round %u: sequence %llu layer %u: a token differs",
					  r, (unsigned long long)id, l);
			}
		/* the synced state holds fewer segments than sequences: packed */
		OK(kvf_stats_get(st, &s));
		if (synced > 0 && s.segments_sealed < PACK_SEQS)
			packed_rounds++;
		OK(kvf_close(st));
		free(journal);
		free(path);
		tmpdir_remove(dir);
	}
	cr_assert(packed_rounds > 0, "no round synced into packs");
}
