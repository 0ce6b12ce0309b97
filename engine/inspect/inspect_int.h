/*
 * inspect_int.h - what the inspection files of engine/ share (inspect.c,
 * inspect_seq.c, verify.c, verify_message.c): the argument checks and
 * result copy every inspection call makes, the list of live sequences,
 * and kvf_verify's record of a damage waiting to be reported.  The public
 * calls are in kvflash.h; summary_load is in engine/inspect/inspect.h.
 */
#ifndef KVF_ENGINE_INSPECT_INT_H
#define KVF_ENGINE_INSPECT_INT_H

#include "engine/base/store_state.h"

/* inspect_publish - copy the filled local struct to the caller's, whose
 * struct_size (checked already) says how much of it the caller has */
void inspect_publish(void *out, void *local, size_t lib_size);

/* inspect_common - the checks every inspection call makes first (out of
 * lib_size bytes with struct_size; lib_size 0: no out struct) */
kvf_status inspect_common(kvf_store *st, const char *call, const void *out,
			  size_t lib_size);

/* inspect_live_ids - the ids of the live sequences of namespace ns,
 * ascending, in a kvf_malloc'd array (*ids, *n).  ns may carry one of
 * the flags below; without, the store's cached prefixes are listed with
 * the caller's sequences.  Caller holds world shared. */
#define INSPECT_CALLERS 0x100u /* not the cached prefixes */
#define INSPECT_CACHED 0x200u  /* only the cached prefixes */
kvf_status inspect_live_ids(kvf_store *st, const char *call, uint64_t **ids,
			    size_t *n, uint32_t ns);

/* ---- kvf_verify (verify.c, verify_message.c) ----------------------------- */

/* What is wrong with a page; the message is made from these when the
 * damage is reported. */
enum problem {
	P_NONE,         /* nothing wrong */
	P_HOLE,         /* the index has no page for the group */
	P_IO,           /* the page could not be read (text) */
	P_SUMMARY,      /* the segment's summary is damaged (text) */
	P_SEG_CORRUPT,  /* the segment failed verification at open */
	P_SEG_STATE,    /* the index names a page of a free/dying segment */
	P_PAST_SUMMARY, /* the page is past the summary's pages */
	P_DATA,         /* page bytes match neither index nor summary */
	P_DATA_INDEX,   /* page bytes do not match the index (no summary) */
	P_INDEX_CHECK,  /* the index check disagrees with page and summary */
	P_SUMMARY_HASH, /* the summary hash disagrees with page and index */
	P_KEY,          /* the summary's key names another stream or group */
	P_WRITER        /* the summary's key names an unrelated sequence */
};

/* One damage waiting to be reported. */
struct pending {
	kvf_verify_damage d;   /* message still NULL */
	enum problem problem;
	uint32_t check;        /* the index's check (page_check) */
	uint32_t n_sum;        /* P_PAST_SUMMARY: the summary's pages */
	uint8_t state;         /* P_SEG_STATE: the segment's state */
	uint64_t sum_hash;     /* the summary's hash of the page */
	uint64_t page_hash;    /* the hash of the bytes read */
	uint64_t key_hi, key_lo; /* P_KEY, P_WRITER: the summary's key */
	char *text;            /* P_IO, P_SUMMARY: the error (kvf_malloc'd) */
};

/* verify_describe - the message of pending damage p into buf */
void verify_describe(kvf_store *st, const struct pending *p, char *buf,
		     size_t cap);

#endif /* KVF_ENGINE_INSPECT_INT_H */
