/*
 * store_faults_model.c - the model and the script of the store_faults
 * tests (store_faults.h): what the store must hold, the checks of every
 * call and of every read, the reopen with the real sysio that compares
 * the store with the model, the seeded script of creates, appends, forks,
 * frees, syncs and reads, and one trial.  One thread runs a trial; the
 * store's own threads meet the injector's hooks.
 */
#include <criterion/criterion.h>
#include <criterion/new/assert.h>
#include <errno.h>
#include <inttypes.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "store_faults.h"
#include "testutil.h"

/* ---- the model -------------------------------------------------------------- */

static const char *const call_names[8] = {
	"open", "create", "fork", "free", "append", "read", "sync", "close"
};

static void fill_row(unsigned char *dst, const struct faults *f, int i,
		     uint32_t layer, int kind, uint64_t t, uint32_t h)
{
	uint64_t x;

	while (f->seqs[i].parent >= 0 && t < f->seqs[i].fork_n[layer])
		i = f->seqs[i].parent;
	x = faults_mix(faults_mix(f->seqs[i].id) + layer * 0x100000001b3ull +
		       (uint64_t)kind * 0x3c6ef372fe94f82bull +
		       h * 0x2545f4914f6cdd1dull) +
	    t * 0x9e3779b97f4a7c15ull;
	for (uint32_t j = 0; j < ROW; j += 8) {
		uint64_t w = faults_mix(x + j);

		memcpy(dst + j, &w, 8);
	}
}

static kvf_options faults_opts(void)
{
	/* 16-page segments; small: the cleaner runs */
	kvf_options o = fx_options(2ull * 24 * 64 * 1024, 2);

	return o;
}

void faults_init(struct faults *f, const char *name)
{
	size_t cap = (size_t)MAX_TOKENS * KVH * ROW;

	memset(f, 0, sizeof(*f));
	f->name = name;
	f->dir = tmpdir_make(name);
	cr_assert_not_null(f->dir);
	snprintf(f->path, sizeof(f->path), "%s", tmp_path(f->dir, "s"));
	f->opts = faults_opts();
	f->rng = rng_seed(name);
	atomic_store(&fi.rng, f->rng);
	f->next_id = 100;
	f->k = malloc(cap);
	f->v = malloc(cap);
	f->want = malloc(ROW);
	cr_assert(f->k && f->v && f->want);
	inject = kvf_sysio_real;
	inject.fault = fault_hook;
	inject.fallocate = fallocate_hook;
	inject.fdatasync = fdatasync_hook;
	fi.align = 1;
	for (int k = 0; k < F_KINDS; k++)
		atomic_store(&fi.fired[k], 0);
	atomic_store(&fi.xfers[0], 0);
	atomic_store(&fi.xfers[1], 0);
	fi_disarm();
}

void faults_done(struct faults *f, int kind)
{
	char by[256];
	size_t at = 0;

	by[0] = '\0';
	for (int c = 0; c < 8; c++)
		if (f->failed_by[c] && at < sizeof(by))
			at += (size_t)snprintf(by + at, sizeof(by) - at,
					       " %s %lu", call_names[c],
					       f->failed_by[c]);
	printf("store_faults %s: faults %lu (%s), reopens %lu, tokens checked %lu, "
	       "lost 0; fatal handles %lu, failed calls %lu (%s), recovered reads %lu, "
	       "transfers %lu read %lu written, segments cleaned %lu, "
	       "refused for space %lu\n",
	       f->name, atomic_load(&fi.fired[kind]), kind_name[kind],
	       f->reopens, f->tokens_checked, f->fatal_handles, f->calls_failed,
	       at ? by + 1 : "none", f->recovered, atomic_load(&fi.xfers[0]),
	       atomic_load(&fi.xfers[1]), f->cleaned, f->enospc);
	fflush(stdout);
	kvf_sysio_set(NULL);
	free(f->k);
	free(f->v);
	free(f->want);
	tmpdir_remove(f->dir);
}

uint64_t faults_below(struct faults *f, uint64_t n)
{
	return rng_below(&f->rng, n);
}

/* ---- checks ----------------------------------------------------------------- */

/* rows_match - k and v hold tokens [t0, t1) of head h of model seq i */
static int rows_match(struct faults *f, int i, uint32_t layer, uint32_t h,
		      uint64_t t0, uint64_t t1, uint64_t *bad)
{
	for (uint64_t t = t0; t < t1; t++) {
		fill_row(f->want, f, i, layer, 0, t, h);
		if (memcmp(f->k + (t - t0) * ROW, f->want, ROW) != 0)
			goto wrong;
		fill_row(f->want, f, i, layer, 1, t, h);
		if (memcmp(f->v + (t - t0) * ROW, f->want, ROW) != 0)
			goto wrong;
	}
	return 1;
wrong:
	return *bad = t0, 0; /* caller names the range */
}

static int is_media_status(kvf_status rc)
{
	return rc == KVF_EIO || rc == KVF_ECORRUPT || rc == KVF_EFATAL;
}

/* failed_ok - a call failed with rc: allowed only after a fault fired
 * and only with a media or fatal status */
static void failed_ok(struct faults *f, const char *what, kvf_status rc)
{
	f->calls_failed++;
	for (int c = 0; c < 8; c++)
		if (strstr(what, call_names[c]))
			f->failed_by[c]++;
	cr_assert(fired_total() > (0),
		  "%s failed with no fault injected: %s (%s)", what,
		  kvf_strerror(rc), kvf_last_error());
	cr_assert(is_media_status(rc), "%s failed with %s: %s", what,
		  kvf_strerror(rc), kvf_last_error());
}

/*
 * check_read - read [t0, t1) of one head of model seq i and compare.
 * Returns the status; wrong bytes fail the test at once.
 */
static kvf_status check_read(struct faults *f, kvf_store *st, int i,
			     uint32_t layer, uint32_t h, uint64_t t0,
			     uint64_t t1)
{
	kvf_status rc =
		kvf_read(st, f->seqs[i].id, layer, h, t0, t1, f->k, f->v);
	uint64_t bad;

	if (rc == KVF_OK)
		cr_assert(rows_match(f, i, layer, h, t0, t1, &bad),
			  "%s: sequence %" PRIu64
			  " layer %u head %u tokens [%" PRIu64 ", %" PRIu64
			  ") read back wrong",
			  f->name, f->seqs[i].id, layer, h, t0, t1);
	return rc;
}

/* ---- reopen and compare ------------------------------------------------------ */

static int model_find(const struct faults *f, uint64_t id)
{
	for (int i = 0; i < f->n_seqs; i++)
		if (f->seqs[i].id == id)
			return i;
	return -1;
}

/*
 * verify_reopened - the store (opened with the real sysio) against the
 * model; then the model takes what the store holds as its lengths.
 */
static void verify_reopened(struct faults *f, kvf_store *st)
{
	uint64_t ids[MAX_SEQS];
	size_t n_ids = 0;

	cr_assert(eq(int, kvf_seq_list(st, ids, MAX_SEQS, &n_ids), KVF_OK),
		  "%s", kvf_last_error());
	cr_assert(le(u64, n_ids, MAX_SEQS));
	for (size_t j = 0; j < n_ids; j++)
		cr_assert(ge(int, model_find(f, ids[j]), 0),
			  "%s: sequence %" PRIu64 " was never made", f->name,
			  ids[j]);
	for (int i = 0; i < f->n_seqs; i++) {
		struct mseq *s = &f->seqs[i];
		uint64_t n;
		kvf_status rc = kvf_seq_len(st, s->id, 0, &n);

		if (rc == KVF_ENOENT) {
			cr_assert(eq(int, s->live && s->live_at_sync, 0),
				  "%s: sequence %" PRIu64
				  " synced and never freed is gone (lost %" PRIu64
				  " synced tokens of layer 0)",
				  f->name, s->id, s->synced[0]);
			s->live = 0;
			s->live_at_sync = 0;
			continue;
		}
		cr_assert(eq(int, rc, KVF_OK), "%s", kvf_last_error());
		for (uint32_t l = 0; l < LAYERS; l++) {
			cr_assert(
				eq(int, kvf_seq_len(st, s->id, l, &n), KVF_OK));
			if (s->live_at_sync)
				cr_assert(ge(u64, n, s->synced[l]),
					  "%s: sequence %" PRIu64
					  " layer %u has %" PRIu64
					  " tokens, the last sync covered %" PRIu64
					  " (lost %" PRIu64 ")",
					  f->name, s->id, l, n, s->synced[l],
					  s->synced[l] - n);
			cr_assert(le(u64, n, s->max[l]),
				  "%s: sequence %" PRIu64
				  " layer %u has %" PRIu64
				  " tokens, only %" PRIu64 " were appended",
				  f->name, s->id, l, n, s->max[l]);
			for (uint32_t h = 0; h < KVH; h++)
				for (uint64_t t0 = 0; t0 < n;
				     t0 += MAX_TOKENS) {
					uint64_t t1 = t0 + MAX_TOKENS < n ?
							      t0 + MAX_TOKENS :
							      n;

					rc = check_read(f, st, i, l, h, t0, t1);
					cr_assert(eq(int, rc, KVF_OK),
						  "%s: after reopen, sequence %" PRIu64
						  " layer %u head %u: %s",
						  f->name, s->id, l, h,
						  kvf_last_error());
				}
			f->tokens_checked += n;
			if (s->parent >= 0 && s->fork_n[l] > n)
				s->fork_n[l] =
					n; /* its own tokens start here */
			s->len[l] = n;
			s->max[l] = n;
		}
		s->live = 1;
	}
}

static kvf_store *open_real(struct faults *f)
{
	kvf_store *st = NULL;

	kvf_sysio_set(NULL);
	cr_assert(eq(int, kvf_open(f->path, &f->opts, &st), KVF_OK),
		  "%s: reopen with the real sysio: %s", f->name,
		  kvf_last_error());
	return st;
}

/* reopen_check - reopen with the real sysio, verify, close */
static void reopen_check(struct faults *f)
{
	kvf_store *st = open_real(f);

	f->reopens++;
	verify_reopened(f, st);
	cr_assert(eq(int, kvf_close(st), KVF_OK), "%s", kvf_last_error());
}

/* ---- the script --------------------------------------------------------------- */

/* note - a call returned rc; returns 1 if the script may go on */
static int note(struct faults *f, struct trial *tr, const char *what,
		kvf_status rc)
{
	if (rc == KVF_OK) {
		cr_assert(eq(int, tr->fatal, 0),
			  "%s: %s succeeded after KVF_EFATAL", f->name, what);
		return 1;
	}
	if (rc == KVF_ENOSPC && !tr->fatal) {
		f->enospc++; /* the small store is full: the script frees */
		return 1;
	}
	failed_ok(f, what, rc);
	if (rc == KVF_EFATAL) {
		cr_assert(ne(ptr, strstr(kvf_last_error(), "close and reopen"),
			     NULL),
			  "%s: fatal message: %s", f->name, kvf_last_error());
		tr->fatal = 1;
	} else {
		cr_assert(eq(int, tr->fatal, 0),
			  "%s: %s said %s after KVF_EFATAL", f->name, what,
			  kvf_strerror(rc));
	}
	return !tr->fatal;
}

static int pick_live(struct faults *f)
{
	int live[MAX_SEQS], n = 0;

	for (int i = 0; i < f->n_seqs; i++)
		if (f->seqs[i].live)
			live[n++] = i;
	return n ? live[faults_below(f, (uint64_t)n)] : -1;
}

static int n_live(const struct faults *f)
{
	int n = 0;

	for (int i = 0; i < f->n_seqs; i++)
		n += f->seqs[i].live;
	return n;
}

static struct mseq *new_seq(struct faults *f, int parent, uint64_t n)
{
	struct mseq *s;

	cr_assert(lt(int, f->n_seqs, MAX_SEQS), "model full");
	s = &f->seqs[f->n_seqs++];
	memset(s, 0, sizeof(*s));
	s->id = f->next_id++;
	s->parent = parent;
	for (uint32_t l = 0; l < LAYERS; l++)
		s->fork_n[l] = s->len[l] = s->max[l] = n;
	return s;
}

static void op_create(struct faults *f, struct trial *tr)
{
	struct mseq *s = new_seq(f, -1, 0);
	kvf_status rc = kvf_seq_create(tr->st, s->id);

	s->live = rc == KVF_OK;
	note(f, tr, "kvf_seq_create", rc);
}

static void op_fork(struct faults *f, struct trial *tr)
{
	int p = pick_live(f);
	uint64_t n = UINT64_MAX;
	struct mseq *s;
	kvf_status rc;

	if (p < 0)
		return;
	for (uint32_t l = 0; l < LAYERS; l++)
		if (f->seqs[p].len[l] < n)
			n = f->seqs[p].len[l];
	n = faults_below(f, n + 1);
	s = new_seq(f, p, n);
	rc = kvf_seq_fork(tr->st, f->seqs[p].id, s->id, n);
	s->live = rc == KVF_OK;
	note(f, tr, "kvf_seq_fork", rc);
}

static void op_free(struct faults *f, struct trial *tr)
{
	int i = pick_live(f);

	if (i < 0)
		return;
	f->seqs[i].live = 0; /* freed or not: either is allowed on failure */
	note(f, tr, "kvf_seq_free", kvf_seq_free(tr->st, f->seqs[i].id));
}

static void op_append(struct faults *f, struct trial *tr)
{
	int i = pick_live(f);
	uint32_t layer, n;
	struct mseq *s;
	uint64_t t0;
	kvf_status rc;

	if (i < 0)
		return;
	s = &f->seqs[i];
	layer = (uint32_t)faults_below(f, LAYERS);
	t0 = s->len[layer];
	if (t0 >= MAX_TOKENS) {
		op_free(f, tr);
		return;
	}
	n = 1 + (uint32_t)faults_below(f, faults_below(f, 4) ? 5 : 2 * G);
	if (t0 + n > MAX_TOKENS)
		n = (uint32_t)(MAX_TOKENS - t0);
	for (uint32_t j = 0; j < n; j++)
		for (uint32_t h = 0; h < KVH; h++) {
			fill_row(f->k + ((size_t)j * KVH + h) * ROW, f, i,
				 layer, 0, t0 + j, h);
			fill_row(f->v + ((size_t)j * KVH + h) * ROW, f, i,
				 layer, 1, t0 + j, h);
		}
	rc = kvf_append(tr->st, s->id, layer, n, f->k, f->v);
	if (rc == KVF_OK) {
		s->len[layer] += n;
		if (s->max[layer] < s->len[layer])
			s->max[layer] = s->len[layer];
	} else if (s->max[layer] < t0 + n) {
		s->max[layer] = t0 + n; /* may have landed before it failed */
	}
	if (note(f, tr, "kvf_append", rc) && rc == KVF_ENOSPC)
		op_free(f, tr);
}

static void op_read(struct faults *f, struct trial *tr)
{
	int i = pick_live(f);
	uint32_t layer, h;
	uint64_t len, t0, t1;
	kvf_status rc;

	if (i < 0)
		return;
	layer = (uint32_t)faults_below(f, LAYERS);
	h = (uint32_t)faults_below(f, KVH);
	len = f->seqs[i].len[layer];
	if (len == 0)
		return;
	t0 = faults_below(f, len);
	t1 = t0 + 1 + faults_below(f, len - t0);
	rc = check_read(f, tr->st, i, layer, h, t0, t1);
	if (rc == KVF_OK || !note(f, tr, "kvf_read", rc))
		return;
	/* a media error that did not stop the store: the read works again
	 * once the fault has passed */
	fi_disarm();
	rc = check_read(f, tr->st, i, layer, h, t0, t1);
	cr_assert(rc == KVF_OK || rc == KVF_EFATAL,
		  "%s: a read failed again once the fault had passed: %s",
		  f->name, kvf_last_error());
	if (rc == KVF_OK)
		f->recovered++;
	note(f, tr, "kvf_read (again)", rc);
}

static void op_sync(struct faults *f, struct trial *tr)
{
	kvf_status rc = kvf_sync(tr->st);

	if (rc == KVF_OK) {
		for (int i = 0; i < f->n_seqs; i++) {
			struct mseq *s = &f->seqs[i];

			s->live_at_sync = s->live;
			for (uint32_t l = 0; l < LAYERS; l++)
				s->synced[l] = s->live ? s->len[l] : 0;
		}
	}
	note(f, tr, "kvf_sync", rc);
}

/* run_script - OPS seeded steps, stopping once the handle is fatal */
static void run_script(struct faults *f, struct trial *tr)
{
	for (int op = 0; op < OPS && !tr->fatal; op++) {
		uint64_t r = faults_below(f, 100);

		if (n_live(f) < 2 || (r < 6 && n_live(f) < MAX_LIVE))
			op_create(f, tr);
		else if (r < 12 && n_live(f) < MAX_LIVE)
			op_fork(f, tr);
		else if (r < 16)
			op_free(f, tr);
		else if (r < 24)
			op_sync(f, tr);
		else if (r < 60)
			op_append(f, tr);
		else
			op_read(f, tr);
	}
}

/* close_trial - a fatal handle says so at close, and keeps saying it */
static void close_trial(struct faults *f, struct trial *tr)
{
	kvf_stats stats = { .struct_size = sizeof(stats) };
	kvf_status rc;

	cr_assert(eq(int, kvf_stats_get(tr->st, &stats), KVF_OK));
	f->cleaned += stats.segments_cleaned;
	if (tr->fatal) {
		uint64_t n;

		cr_assert(eq(int, kvf_sync(tr->st), KVF_EFATAL));
		cr_assert(eq(int, kvf_seq_create(tr->st, f->next_id++),
			     KVF_EFATAL));
		cr_assert(eq(int, kvf_seq_x_len(tr->st, f->seqs[0].id, 0, &n),
			     KVF_EFATAL));
	}
	rc = kvf_close(tr->st);
	tr->st = NULL;
	if (tr->fatal)
		cr_assert(eq(int, rc, KVF_EFATAL),
			  "%s: kvf_close of a fatal handle said %s", f->name,
			  kvf_strerror(rc));
	if (rc == KVF_EFATAL) {
		f->fatal_handles++;
		cr_assert(fired_total() > (0), "fatal with no fault");
		return;
	}
	if (rc == KVF_ENOSPC) {
		/* the final sync found the small store full (kvf_close
		 * returns its status): nothing more than the last sync is
		 * promised */
		f->enospc++;
		return;
	}
	if (rc != KVF_OK) {
		failed_ok(f, "kvf_close", rc);
		return;
	}
	/* a close that succeeded synced everything */
	for (int i = 0; i < f->n_seqs; i++) {
		struct mseq *s = &f->seqs[i];

		s->live_at_sync = s->live;
		for (uint32_t l = 0; l < LAYERS; l++)
			s->synced[l] = s->live ? s->len[l] : 0;
	}
}

/*
 * trial - open with the injecting table, arm kind at the nth event, run
 * the script, close, and check after a reopen with the real sysio.
 * `at_open`: arm before the open, so recovery meets the fault.
 */
void faults_trial(struct faults *f, int kind, long nth, int at_open)
{
	struct trial tr = { 0 };
	kvf_status rc;

	fi_disarm();
	kvf_sysio_set(&inject);
	if (at_open)
		fi_arm(kind, nth);
	rc = kvf_open(f->path, &f->opts, &tr.st);
	if (rc != KVF_OK) {
		/* the fault hit the open: refused cleanly, nothing changed */
		fi_disarm();
		failed_ok(f, "kvf_open", rc);
		cr_assert_null(tr.st);
		reopen_check(f);
		return;
	}
	if (!at_open)
		fi_arm(kind, nth);
	run_script(f, &tr);
	close_trial(f, &tr);
	fi_disarm();
	reopen_check(f);
}

/* first_store - create the store and give it some synced content */
void faults_first_store(struct faults *f)
{
	struct trial tr = { 0 };

	tr.st = open_real(f);
	run_script(f, &tr);
	close_trial(f, &tr);
	reopen_check(f);
}
