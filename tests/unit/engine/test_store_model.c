/*
 * test_store_model.c - a model-based random test of the store: seeded
 * random sequences of public calls run against the store and against a
 * small in-memory reference, and every answer of the store must match the
 * reference's.
 *
 * The reference is compact because token values are a pure function of
 * (tag, layer, kind, token, head): each append draws a fresh tag, and a
 * layer of a sequence is a list of runs "tokens up to END carry TAG".  A
 * fork copies the parent's runs below the fork point, so the child reads
 * the parent's bytes without the reference storing any.
 *
 * Operations: create, append (n_tokens 0, 1, G-1, G, G+1, random and
 * large), append_x, read of random ranges of random heads (K, V, or both),
 * read_x, fork at random points, free, sync, stats, clean close + reopen,
 * read-only reopen, and an "abandoned" handle: a catalog commit failure is
 * injected (engine/base/catalog.h's seam) so the handle goes fatal and closes
 * without syncing, as a crashed process would leave it.  The reference
 * keeps the state of the last sync: after a clean close it is the current
 * state (close syncs), after an abandoned handle it is the last sync's,
 * and a KVF_MEDIA_MEMORY store starts empty at every open.
 *
 * Refusals are part of the model: reads past the end (KVF_ERANGE), ids
 * that exist (KVF_EEXIST) or do not (KVF_ENOENT), forks past the end; a
 * KVF_ENOSPC append or sync must change nothing, and is answered by
 * freeing a sequence and syncing.
 *
 * Each test runs several cases; each case prints its seed.  Reproduce one
 * run with KVF_SEED=<the printed base seed>, or one case with
 * KVF_MODEL_CASE=<its seed>; KVF_MODEL_TRACE=1 prints every operation.
 *
 * Two parts are off by default because they fail on known engine bugs
 * (reported; turn them on to reproduce):
 *  - KVF_MODEL_META_CRASH=1 abandons a handle even when sequences were
 *    created, forked or freed since the last sync.  Those calls commit to
 *    the catalog at once, so the reopened store shows them although the
 *    last sync did not include them.
 *  - KVF_MODEL_TIGHT=1 gives a third of the cases a capacity small enough
 *    to hit KVF_ENOSPC.  A kvf_sync refused for space has already marked
 *    the sequences it got through as clean without committing their
 *    lengths, so a later successful sync and close lose them.
 */
#include <criterion/criterion.h>
#include <criterion/new/assert.h>
#include <stdlib.h>

#include "kvflash.h"
#include "store_model.h"
#include "testutil.h"

/* ---- geometry ------------------------------------------------------------ */

static const struct geometry geometries[] = {
	{ { 3, 4, 2, 64, KVF_DTYPE_F16 }, 4096, 2, 2, 128, 32 },
	{ { 2, 6, 3, 128, KVF_DTYPE_F32 }, 4096, 3, 4, 512, 8 },
	{ { 2, 2, 1, 64, KVF_DTYPE_BF16 }, 8192, 3, 2, 128, 64 },
};

#define N_GEOMETRIES (sizeof(geometries) / sizeof(geometries[0]))

/* run_cases - CASES_PER_TEST cases from the run's seed; KVF_MODEL_CASE
 * runs just the one case seed it names */
static void run_cases(kvf_media_kind media, const char *name)
{
	const char *one = getenv("KVF_MODEL_CASE");
	uint64_t base = one ? 0 : rng_seed(name);

	model_tracing = getenv("KVF_MODEL_TRACE") != NULL;
	for (uint64_t i = 0; i < (one ? 1 : CASES_PER_TEST); i++) {
		char *dir = tmpdir_make("model");
		uint64_t seed = one ? strtoull(one, NULL, 0) :
				      model_mix(base + i);

		cr_assert_not_null(dir);
		model_run_case(&geometries[seed % N_GEOMETRIES], media, seed,
			       dir);
		tmpdir_remove(dir);
	}
}

TestSuite(store_model, .timeout = 60);

Test(store_model, file_media)
{
	run_cases(KVF_MEDIA_FILE, "store_model/file_media");
}

Test(store_model, memory_media)
{
	run_cases(KVF_MEDIA_MEMORY, "store_model/memory_media");
}
