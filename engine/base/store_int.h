/*
 * store_int.h - what the store's lifecycle files of engine/ share
 * (store.c, store_header.c, store_create.c): the checks of the caller's
 * options, the store header and its file, and the creation marker that
 * lets a creation cut short be removed.  store_sync.c (kvf_sync and the
 * durable point) and store_stats.c (kvf_stats_get) need none of it.  The
 * engine's entry points are in engine/lifecycle/store.h; the public calls in
 * kvflash.h.
 */
#ifndef KVF_ENGINE_STORE_INT_H
#define KVF_ENGINE_STORE_INT_H

#include "engine/base/store_state.h"

/* store_dtype_bytes - bytes of one element of dtype d */
static inline uint32_t store_dtype_bytes(kvf_dtype d)
{
	return d == KVF_DTYPE_F32 ? 4 : 2;
}

/* ---- options and header (store_header.c) -------------------------------- */

/* store_header_checksum - the checksum of h's bytes before its checksum */
uint64_t store_header_checksum(const struct store_header *h);

/* store_take_options - the caller's options (in, may be NULL) over our
 * defaults into o, each checked */
kvf_status store_take_options(const kvf_options *in, kvf_options *o);

/* store_build_header - describe a new store made with o (checked) */
kvf_status store_build_header(const kvf_options *o, struct store_header *h);

/* store_check_against - o (from the caller) must agree with the stored h,
 * read from path (KVF_EMISMATCH) */
kvf_status store_check_against(const kvf_options *o,
			       const struct store_header *h, const char *path);

/* store_write_header - write h, its checksum set, to path in dir
 * atomically (temp file, fsync, rename) */
kvf_status store_write_header(const char *dir, const char *path,
			      struct store_header *h);

/* ---- the directory (store_dir.c) and the creation marker (store_create.c) */

/* store_path_join - dir/leaf in a kvf_malloc'd string; NULL if out of
 * memory */
char *store_path_join(const char *dir, const char *leaf);

/* store_remove_tree - remove path and everything under it, best effort */
void store_remove_tree(const char *path);

/* store_dir_is_empty - dir holds nothing but what kvf_open makes (LOCK) */
int store_dir_is_empty(const char *dir);

/* store_sync_dir - make dir's entries (creations, renames, unlinks)
 * durable, best effort */
void store_sync_dir(const char *dir);

/* store_begin_create - write the creation marker cpath into dir */
kvf_status store_begin_create(const char *dir, const char *cpath);

/* store_is_creating - cpath is our creation marker */
int store_is_creating(const char *dir, const char *cpath);

/* store_clear_leftovers - remove all an unfinished creation left in dir */
void store_clear_leftovers(const char *dir);

/* store_finish_create - write the header to hpath, then remove the marker
 * cpath */
kvf_status store_finish_create(kvf_store *st, const char *hpath,
			       const char *cpath);

#endif /* KVF_ENGINE_STORE_INT_H */
