/*
 * read_calls.h - the argument checks the public token-range reads share
 * (kvf_read, kvf_read_x in read_calls.c; the attention calls).
 */
#ifndef KVF_ENGINE_READ_CALLS_H
#define KVF_ENGINE_READ_CALLS_H

#include <stdint.h>

#include "api/status.h"
#include "kvflash.h"

struct seq;

/*
 * read_args_check - the checks every token-range read makes before it
 * looks a sequence up: store state, layer, *kv_head (NULL: none to
 * check), range order.  read_past_end - the KVF_ERANGE for a range past
 * a sequence's end (what: "" or "the X of ").
 */
kvf_status read_args_check(kvf_store *st, const char *call, uint32_t layer,
			   const uint32_t *kv_head, uint64_t t0, uint64_t t1);
kvf_status read_past_end(const char *call, uint64_t t0, uint64_t t1,
			 uint64_t seq_id, const char *what, uint32_t layer,
			 uint64_t len);

#endif /* KVF_ENGINE_READ_CALLS_H */
