/*
 * optim_handle.c - the optimizer calls other than the step: kvf_opt_create,
 * kvf_opt_open, kvf_opt_read, kvf_opt_steps, kvf_opt_close, kvf_opt_free,
 * and the handles they make (the store's list of open handles, detached
 * at kvf_close).  A file of its own: these calls check arguments, take the
 * locks and create or drop the state whole, and share nothing with the
 * step's batching beyond engine/optim/optim_int.h.
 *
 * Locking: as engine/optim/optim_int.h says; the list of open handles is under
 * st->optims.lock.
 */
#include <math.h>
#include <stddef.h>
#include <string.h>

#include "api/alloc.h"
#include "api/options.h"
#include "api/status.h"
#include "engine/base/catalog.h"
#include "engine/base/fatal.h"
#include "engine/base/meta.h"
#include "engine/segments/openseg.h"
#include "engine/optim/optim_int.h"
#include "engine/optim/optim_store.h"
#include "engine/reads/readpath.h"
#include "engine/segments/segtable.h"
#include "engine/sequences/seq.h"

static kvf_status check_name(const char *call, const char *name)
{
	if (name == NULL || name[0] == '\0')
		return kvf_fail(KVF_EINVAL, "%s: name is %s", call,
				name ? "empty" : "NULL");
	if (strlen(name) > OPTIM_NAME_MAX)
		return kvf_fail(KVF_EINVAL, "%s: name is %zu bytes, more than %u",
				call, strlen(name), OPTIM_NAME_MAX);
	return KVF_OK;
}

/* handle_link, handle_unlink - keep the store's list of open handles, so
 * that closing the store can detach them */
static void handle_link(kvf_opt *o)
{
	kvf_store *st = o->st;

	pthread_mutex_lock(&st->optims.lock);
	o->next = st->optims.open;
	if (o->next)
		o->next->prev = o;
	st->optims.open = o;
	pthread_mutex_unlock(&st->optims.lock);
}

static void handle_unlink(kvf_opt *o)
{
	kvf_store *st = o->st;

	pthread_mutex_lock(&st->optims.lock);
	if (o->prev)
		o->prev->next = o->next;
	else if (st->optims.open == o)
		st->optims.open = o->next;
	if (o->next)
		o->next->prev = o->prev;
	o->prev = o->next = NULL;
	pthread_mutex_unlock(&st->optims.lock);
}

void optim_registry_init(kvf_store *st)
{
	pthread_mutex_init(&st->optims.lock, NULL);
	atomic_init(&st->optims.next_id, 1);
}

void optim_registry_free(kvf_store *st)
{
	pthread_mutex_destroy(&st->optims.lock);
}

void optim_detach_all(kvf_store *st)
{
	pthread_mutex_lock(&st->optims.lock);
	while (st->optims.open) {
		kvf_opt *o = st->optims.open;

		st->optims.open = o->next;
		o->prev = o->next = NULL;
		o->st = NULL;
	}
	pthread_mutex_unlock(&st->optims.lock);
}

/* optim_enter - the checks every call on a handle starts with */
kvf_status optim_enter(kvf_opt *o, const char *call)
{
	if (o == NULL)
		return kvf_fail(KVF_EINVAL, "%s: opt is NULL", call);
	if (o->st == NULL)
		return kvf_fail(KVF_ECLOSED,
				"%s: the store of optimizer '%s' was closed; only kvf_opt_close may follow",
				call, o->name);
	return store_check(o->st, call);
}

static void handle_free(kvf_opt *o)
{
	if (o->st)
		handle_unlink(o);
	kvf_free(o->name);
	kvf_free(o->work);
	catalog_batch_free(o->commit);
	kvf_free(o);
}

/* handle_new - a handle with its work buffers */
static kvf_status handle_new(kvf_store *st, const char *name, uint64_t seq_id,
			     uint64_t n_params, const kvf_opt_config *cfg,
			     kvf_opt **out)
{
	kvf_opt *o = kvf_calloc(1, sizeof(*o));

	if (o == NULL)
		return kvf_fail(KVF_ENOMEM, "out of memory for an optimizer handle");
	o->st = st;
	o->name = kvf_strdup(name);
	o->seq_id = seq_id;
	o->n_params = n_params;
	o->per_chunk = st->hdr.page_size / sizeof(float);
	o->n_chunks = (n_params + o->per_chunk - 1) / o->per_chunk;
	o->cfg = *cfg;
	o->states = kvc_optim_states(cfg);
	o->k = kvc_optim();
	o->batch = (uint32_t)(o->n_chunks < OPTIM_BATCH ? o->n_chunks : OPTIM_BATCH);
	o->work = kvf_aligned_alloc(KVF_MEDIA_ALIGN, (size_t)2 * 3 * o->batch *
						     st->hdr.page_size);
	o->commit = catalog_batch_new();
	if (o->name == NULL || o->work == NULL || o->commit == NULL) {
		o->st = NULL; /* not linked yet */
		handle_free(o);
		return kvf_fail(KVF_ENOMEM, "out of memory for optimizer buffers");
	}
	handle_link(o);
	*out = o;
	return KVF_OK;
}

/* create_once - kvf_opt_create after its checks: make the state and
 * commit it, or change nothing; *want: the free segments a stripe the
 * state needs, when that is what it lacked (KVF_ENOSPC) */
static kvf_status create_once(kvf_store *st, const char *name,
			      uint64_t n_params, const kvf_opt_config *cfg_in,
			      const float *init, kvf_opt **out, uint32_t *want)
{
	const char *call = "kvf_opt_create";
	kvf_opt_config cfg = *cfg_in, old_cfg;
	struct meta_optim m;
	struct seq *seq = NULL;
	kvf_opt *o = NULL;
	kvf_status rc;

	pthread_mutex_lock(&st->dur.lock); /* dur.lock, then world */
	pthread_rwlock_rdlock(&st->world);
	rc = optim_record_get(st, name, &m, &old_cfg);
	if (rc == KVF_OK) {
		rc = kvf_fail(KVF_EEXIST, "%s: an optimizer called '%s' exists already",
			      call, name);
		goto out;
	}
	if (rc != KVF_ENOENT)
		goto out;
	seq = seq_alloc(st, atomic_fetch_add(&st->optims.next_id, 1));
	if (seq == NULL) {
		rc = kvf_fail(KVF_ENOMEM, "%s: out of memory", call);
		goto out;
	}
	seq->ns = SEQ_NS_OPTIM;
	seq->create_seqno = atomic_fetch_add(&st->writer.next_seqno, 1);
	if ((rc = handle_new(st, name, seq->id, n_params, &cfg, &o)) != KVF_OK ||
	    (rc = optim_streams_alloc(st, seq, o->n_chunks, o->states)) != KVF_OK)
		goto out_seq;
	if ((rc = seq_insert(st, seq)) != KVF_OK)
		goto out_seq;
	pthread_mutex_lock(&seq->lock);
	rc = optim_reserve_gen(o, seq, 0, call, want);
	for (uint64_t c0 = 0; rc == KVF_OK && c0 < o->n_chunks; c0 += o->batch) {
		uint32_t n = optim_batch_len(o, c0);

		memset(o->work, 0, (size_t)3 * o->batch * st->hdr.page_size);
		for (uint32_t j = 0; j < n; j++) {
			uint64_t i0 = (c0 + j) * o->per_chunk;
			uint64_t cnt = n_params - i0 < o->per_chunk ? n_params - i0
								    : o->per_chunk;

			if (init)
				memcpy(optim_work_page(o, 0, ST_PARAM, j), init + i0,
				       cnt * sizeof(float));
			kvc_optim_state_init(&cfg,
					     (o->states & KVC_OPTIM_M) ? optim_work_page(o, 0, ST_M, j) : NULL,
					     (o->states & KVC_OPTIM_V) ? optim_work_page(o, 0, ST_V, j) : NULL,
					     cnt);
		}
		rc = optim_place_batch(o, seq, c0, n, 0, 0);
	}
	seg_unreserve(st, seq);
	if (rc == KVF_OK)
		rc = optim_commit_gen(o, seq, 0, 0, 1);
	if (rc != KVF_OK) {
		/* nothing was committed: drop the pages and the sequence */
		seq->dead = 1;
		seq_drop_all(st, seq);
		pthread_mutex_unlock(&seq->lock);
		seq_remove(st, seq);
		seq = NULL;
		goto out_handle;
	}
	seq->optim_handles++;
	pthread_mutex_unlock(&seq->lock);
	*out = o;
	pthread_rwlock_unlock(&st->world);
	pthread_mutex_unlock(&st->dur.lock);
	return KVF_OK;

out_seq:
	if (seq)
		seq_destroy(st, seq);
out_handle:
	if (o)
		handle_free(o);
out:
	pthread_rwlock_unlock(&st->world);
	pthread_mutex_unlock(&st->dur.lock);
	return rc;
}

kvf_status optim_config_take(const char *call, const kvf_opt_config *in,
			     kvf_opt_config *out)
{
	kvf_opt_config cfg;
	char why[160];
	kvf_status rc;

	if ((rc = kvf_struct_check(call, "cfg", in, sizeof(cfg))) != KVF_OK)
		return rc;
	/* the rest defaults by kind: a struct must hold that much */
	if (in->struct_size < offsetof(kvf_opt_config, kind) + sizeof(in->kind))
		return kvf_fail(KVF_EINVAL,
				"%s: cfg.struct_size %zu does not reach its kind (use kvf_opt_config_init)",
				call, in->struct_size);
	kvf_opt_config_init(&cfg, in->kind);
	memcpy(&cfg, in, in->struct_size < sizeof(cfg) ? in->struct_size
						       : sizeof(cfg));
	cfg.struct_size = sizeof(cfg);
	if (!kvc_optim_config_check(&cfg, why, sizeof(why)))
		return kvf_fail(KVF_EINVAL, "%s: %s", call, why);
	if ((unsigned)cfg.out_dtype > KVF_DTYPE_F32)
		return kvf_fail(KVF_EINVAL, "%s: out_dtype %d is not a kvf_dtype",
				call, (int)cfg.out_dtype);
	if (!(cfg.max_grad_norm >= 0) || !isfinite(cfg.max_grad_norm) ||
	    !(cfg.grad_scale >= 0) || !isfinite(cfg.grad_scale))
		return kvf_fail(KVF_EINVAL,
				"%s: max_grad_norm %g and grad_scale %g must be finite and >= 0",
				call, (double)cfg.max_grad_norm, (double)cfg.grad_scale);
	*out = cfg;
	return KVF_OK;
}

kvf_status kvf_opt_create(kvf_store *st, const char *name, uint64_t n_params,
			  const kvf_opt_config *cfg_in, const float *init,
			  kvf_opt **out)
{
	const char *call = "kvf_opt_create";
	kvf_opt_config cfg;
	kvf_status rc;

	if (out == NULL || st == NULL)
		return kvf_fail(KVF_EINVAL, "%s: %s is NULL", call,
				st ? "out" : "store");
	*out = NULL;
	if ((rc = store_writable(st, call)) != KVF_OK ||
	    (rc = check_name(call, name)) != KVF_OK)
		return rc;
	if (n_params == 0 || n_params > UINT32_MAX)
		return kvf_fail(KVF_EINVAL, "%s: n_params %llu out of range (1..%u)",
				call, (unsigned long long)n_params, UINT32_MAX);
	if ((rc = optim_config_take(call, cfg_in, &cfg)) != KVF_OK)
		return rc;
	for (int attempt = 0;; attempt++) {
		uint32_t want = 1;

		rc = create_once(st, name, n_params, &cfg, init, out, &want);
		if (!optim_make_room(st, attempt, want, call, name, &rc))
			return rc;
	}
}

kvf_status kvf_opt_open(kvf_store *st, const char *name, kvf_opt **out)
{
	const char *call = "kvf_opt_open";
	kvf_opt_config cfg;
	struct meta_optim m;
	struct seq *seq;
	kvf_opt *o;
	kvf_status rc;

	if (out == NULL || st == NULL)
		return kvf_fail(KVF_EINVAL, "%s: %s is NULL", call,
				st ? "out" : "store");
	*out = NULL;
	if ((rc = store_check(st, call)) != KVF_OK || (rc = check_name(call, name)) != KVF_OK)
		return rc;
	pthread_rwlock_rdlock(&st->world);
	rc = optim_record_get(st, name, &m, &cfg);
	if (rc == KVF_ENOENT)
		rc = kvf_fail(KVF_ENOENT, "%s: no optimizer called '%s'", call, name);
	if (rc != KVF_OK)
		goto out;
	seq = seq_get_ns(st, SEQ_NS_OPTIM, m.seq);
	if (seq == NULL) {
		rc = kvf_fail(KVF_ECORRUPT, "%s: optimizer '%s' names sequence %llu, which is missing",
			      call, name, (unsigned long long)m.seq);
		goto out;
	}
	rc = handle_new(st, name, m.seq, m.n_params, &cfg, &o);
	if (rc == KVF_OK) {
		pthread_mutex_lock(&seq->lock);
		seq->optim_handles++;
		pthread_mutex_unlock(&seq->lock);
		*out = o;
	}
	seq_put(st, seq);
out:
	pthread_rwlock_unlock(&st->world);
	return rc;
}

kvf_status kvf_opt_read(kvf_opt *o, uint64_t i0, uint64_t n, float *out)
{
	const char *call = "kvf_opt_read";
	kvf_store *st;
	struct seq *seq;
	kvf_status rc = KVF_OK;

	if ((rc = optim_enter(o, call)) != KVF_OK)
		return rc;
	if (out == NULL && n > 0)
		return kvf_fail(KVF_EINVAL, "%s: out is NULL", call);
	st = o->st;
	if (i0 > o->n_params || n > o->n_params - i0)
		return kvf_fail(KVF_ERANGE, "%s: [%llu, %llu) past the %llu parameters",
				call, (unsigned long long)i0,
				(unsigned long long)(i0 + n),
				(unsigned long long)o->n_params);
	pthread_rwlock_rdlock(&st->world);
	seq = seq_get_ns(st, SEQ_NS_OPTIM, o->seq_id);
	if (seq == NULL) {
		pthread_rwlock_unlock(&st->world);
		return kvf_fail(KVF_ENOENT, "%s: optimizer '%s' was freed", call, o->name);
	}
	pthread_mutex_lock(&seq->lock);
	for (uint64_t c0 = i0 / o->per_chunk; rc == KVF_OK && n > 0 &&
	     c0 <= (i0 + n - 1) / o->per_chunk; c0 += o->batch) {
		uint64_t last = (i0 + n - 1) / o->per_chunk;
		uint32_t cnt = (uint32_t)(last - c0 + 1 < o->batch ? last - c0 + 1
								  : o->batch);
		uint64_t idx[OPTIM_BATCH];
		struct load_ctx l = { o, 0, ST_PARAM };

		for (uint32_t j = 0; j < cnt; j++)
			idx[j] = c0 + j;
		rc = stream_read_entries(st, seq, &seq->optim[ST_PARAM * 2 + seq->optim_gen],
					 idx, cnt, optim_load_page, &l);
		for (uint32_t j = 0; rc == KVF_OK && j < cnt; j++) {
			uint64_t a = (c0 + j) * o->per_chunk, z = a + o->per_chunk;

			a = a > i0 ? a : i0;
			z = z < i0 + n ? z : i0 + n;
			memcpy(out + (a - i0), o->src[0][ST_PARAM][j] +
						       (a - (c0 + j) * o->per_chunk),
			       (size_t)(z - a) * sizeof(float));
		}
	}
	seq_unlock_put(st, seq);
	pthread_rwlock_unlock(&st->world);
	return rc;
}

kvf_status kvf_opt_steps(kvf_opt *o, uint64_t *steps, uint64_t *n_params)
{
	struct meta_optim m;
	kvf_opt_config cfg;
	kvf_status rc;

	if ((rc = optim_enter(o, "kvf_opt_steps")) != KVF_OK)
		return rc;
	if (steps == NULL)
		return kvf_fail(KVF_EINVAL, "kvf_opt_steps: steps is NULL");
	pthread_rwlock_rdlock(&o->st->world);
	rc = optim_record_get(o->st, o->name, &m, &cfg);
	pthread_rwlock_unlock(&o->st->world);
	if (rc == KVF_ENOENT)
		return kvf_fail(KVF_ENOENT, "kvf_opt_steps: optimizer '%s' was freed",
				o->name);
	if (rc != KVF_OK)
		return rc;
	*steps = m.steps;
	if (n_params)
		*n_params = o->n_params;
	return KVF_OK;
}

kvf_status kvf_opt_close(kvf_opt *o)
{
	struct seq *seq;

	if (o == NULL)
		return KVF_OK;
	if (o->st == NULL) { /* its store was closed: only the handle is left */
		handle_free(o);
		return KVF_OK;
	}
	pthread_rwlock_rdlock(&o->st->world);
	if ((seq = seq_get_ns(o->st, SEQ_NS_OPTIM, o->seq_id)) != NULL) {
		pthread_mutex_lock(&seq->lock);
		seq->optim_handles--;
		seq_unlock_put(o->st, seq);
	}
	pthread_rwlock_unlock(&o->st->world);
	handle_free(o);
	return KVF_OK;
}

kvf_status kvf_opt_free(kvf_store *st, const char *name)
{
	const char *call = "kvf_opt_free";
	struct catalog_batch *b;
	unsigned char key[9];
	kvf_opt_config cfg;
	struct meta_optim m;
	struct seq *seq;
	kvf_status rc;

	if ((rc = store_writable(st, call)) != KVF_OK ||
	    (rc = check_name(call, name)) != KVF_OK)
		return rc;
	pthread_mutex_lock(&st->dur.lock); /* dur.lock, then world */
	pthread_rwlock_rdlock(&st->world);
	rc = optim_record_get(st, name, &m, &cfg);
	if (rc == KVF_ENOENT)
		rc = kvf_fail(KVF_ENOENT, "%s: no optimizer called '%s'", call, name);
	if (rc != KVF_OK)
		goto out;
	if ((seq = seq_get_ns(st, SEQ_NS_OPTIM, m.seq)) == NULL) {
		rc = kvf_fail(KVF_ECORRUPT, "%s: optimizer '%s' names a missing sequence",
			      call, name);
		goto out;
	}
	pthread_mutex_lock(&seq->lock);
	if (seq->optim_handles > 0) {
		rc = kvf_fail(KVF_EBUSY, "%s: optimizer '%s' has %d open handle(s)",
			      call, name, seq->optim_handles);
		seq_unlock_put(st, seq);
		goto out;
	}
	if ((rc = openseg_flush_all(st, seq)) != KVF_OK) {
		seq_unlock_put(st, seq);
		goto out;
	}
	b = catalog_batch_new();
	if (b == NULL) {
		seq_unlock_put(st, seq);
		rc = kvf_fail(KVF_ENOMEM, "%s: out of memory", call);
		goto out;
	}
	{
		size_t nl = strlen(name);
		unsigned char *okey = kvf_malloc(nl + 1);

		if (okey == NULL) {
			catalog_batch_free(b);
			seq_unlock_put(st, seq);
			rc = kvf_fail(KVF_ENOMEM, "%s: out of memory", call);
			goto out;
		}
		okey[0] = META_TAG_OPTIM;
		memcpy(okey + 1, name, nl);
		catalog_batch_delete(b, okey, nl + 1);
		kvf_free(okey);
	}
	meta_key_u64(key, META_TAG_OPTIM_SEQ, seq->id);
	catalog_batch_delete(b, key, sizeof(key));
	rc = catalog_commit(st->cat, b, 0);
	catalog_batch_free(b);
	if (rc != KVF_OK) {
		seq_unlock_put(st, seq);
		rc = store_set_fatal(st, rc, call);
		goto out;
	}
	seq->dead = 1;
	seq_drop_all(st, seq);
	pthread_mutex_unlock(&seq->lock);
	seq_remove(st, seq);
	seq_put(st, seq);
out:
	pthread_rwlock_unlock(&st->world);
	pthread_mutex_unlock(&st->dur.lock);
	return rc;
}
