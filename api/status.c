/*
 * status.c - status names and the thread-local last-error message.
 *
 * kvf_strerror's table covers every pinned code; anything else is
 * described as unknown in a small thread-local buffer, so the result is
 * never NULL and never changes under another thread.
 */
#include "api/status.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

static _Thread_local char last_error[KVF_ERRMSG_CAP];
static _Thread_local char unknown_name[40];

const char *kvf_strerror(kvf_status status)
{
	switch (status) {
	case KVF_OK:
		return "success";
	case KVF_EINVAL:
		return "invalid argument";
	case KVF_ERANGE:
		return "value out of range";
	case KVF_ENOENT:
		return "no such object";
	case KVF_EEXIST:
		return "object exists";
	case KVF_EMISMATCH:
		return "options contradict the stored configuration";
	case KVF_EVERSION:
		return "unsupported version";
	case KVF_ECLOSED:
		return "handle is closed";
	case KVF_ENOTSUP:
		return "not supported";
	case KVF_ENOMEM:
		return "out of memory";
	case KVF_ENOSPC:
		return "no space left on media";
	case KVF_EBUSY:
		return "resource busy";
	case KVF_EIO:
		return "I/O error";
	case KVF_ECORRUPT:
		return "stored data is corrupt";
	case KVF_EFATAL:
		return "fatal error: close and reopen the store";
	}
	snprintf(unknown_name, sizeof(unknown_name), "unknown status %d",
		 (int)status);
	return unknown_name;
}

const char *kvf_last_error(void)
{
	return last_error;
}

void kvf_clear_error(void)
{
	last_error[0] = '\0';
}

kvf_status kvf_fail(kvf_status status, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(last_error, sizeof(last_error), fmt, ap);
	va_end(ap);
	return status;
}

kvf_status kvf_fail_wrap(kvf_status status, const char *what)
{
	char prev[KVF_ERRMSG_CAP];

	size_t n, rest;

	memcpy(prev, last_error, sizeof(prev));
	n = strlen(what);
	if (n > sizeof(last_error) - 3)
		n = sizeof(last_error) - 3;
	memcpy(last_error, what, n);
	memcpy(last_error + n, ": ", 2);
	n += 2;
	rest = strnlen(prev, sizeof(prev) - 1);
	if (rest > sizeof(last_error) - 1 - n)
		rest = sizeof(last_error) - 1 - n; /* truncated, like kvf_fail */
	memcpy(last_error + n, prev, rest);
	last_error[n + rest] = '\0';
	return status;
}

kvf_status kvf_fail_errno(kvf_status status, int err, const char *fmt, ...)
{
	va_list ap;
	int n;

	va_start(ap, fmt);
	n = vsnprintf(last_error, sizeof(last_error), fmt, ap);
	va_end(ap);
	if (n >= 0 && (size_t)n < sizeof(last_error))
		snprintf(last_error + n, sizeof(last_error) - (size_t)n,
			 ": %s (errno %d)", strerror(err), err);
	return status;
}
