/*
 * status.h - the shared error vocabulary every layer uses: set the
 * thread-local last-error message together with the status it explains.
 *
 * The message is formatted once, in one piece, into a thread-local buffer,
 * so a store shared by many threads gives each thread its own message.
 */
#ifndef KVF_STATUS_H
#define KVF_STATUS_H

#include "kvflash.h"

#define KVF_ERRMSG_CAP 512 /* bytes of the thread-local message buffer */

/*
 * kvf_fail - record a formatted message for this thread and return status.
 * Use: return kvf_fail(KVF_ERANGE, "kvf_x: layer %u out of range", l);
 */
kvf_status kvf_fail(kvf_status status, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));

/*
 * kvf_fail_errno - as kvf_fail, with ": <strerror(err)> (errno N)" appended;
 * err is a positive errno value.
 */
kvf_status kvf_fail_errno(kvf_status status, int err, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

/*
 * kvf_fail_wrap - prefix this thread's current message with "what: " and
 * return status (for a caller adding context to a callee's failure).
 */
kvf_status kvf_fail_wrap(kvf_status status, const char *what);

/* kvf_clear_error - forget this thread's message (tests use it). */
void kvf_clear_error(void);

#endif /* KVF_STATUS_H */
