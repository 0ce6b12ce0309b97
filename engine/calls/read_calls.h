/*
 * read_calls.h - the argument checks the public token-range reads share
 * (kvf_read, kvf_read_x in read_calls.c; the attention calls), and those
 * reads on behalf of another call.
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

/*
 * read_kv_as / read_x_as - kvf_read and kvf_read_x for another public
 * call (the typed reads): the same, every message naming call.
 */
kvf_status read_kv_as(kvf_store *st, const char *call, uint64_t seq_id,
		      uint32_t layer, uint32_t kv_head, uint64_t t0,
		      uint64_t t1, void *k_out, void *v_out);
kvf_status read_x_as(kvf_store *st, const char *call, uint64_t seq_id,
		     uint32_t layer, uint64_t t0, uint64_t t1, void *x_out);

#endif /* KVF_ENGINE_READ_CALLS_H */
