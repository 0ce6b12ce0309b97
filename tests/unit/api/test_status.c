/*
 * test_status.c - status codes, kvf_strerror and the thread-local last
 * error (api/kvflash.h, api/status.h).
 *
 * What is pinned here: the numeric value of every code (they are never
 * renumbered), its kvf_strerror text (a user-visible string), "unknown
 * status N" for any other value, and that kvf_last_error() is per thread:
 * "" until a call fails on that thread, then the message kvf_fail or
 * kvf_fail_errno formatted, never another thread's.
 *
 * Criterion asserts only from the test's main thread: helper threads
 * record what they saw and the main thread checks it after the join.
 */
#include <criterion/criterion.h>
#include <criterion/new/assert.h>
#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "api/status.h"

struct code_name {
	kvf_status code;  /* the enum value */
	int value;        /* its pinned number */
	const char *name; /* kvf_strerror(code) */
};

static const struct code_name codes[] = {
	{ KVF_OK, 0, "success" },
	{ KVF_EINVAL, 10, "invalid argument" },
	{ KVF_ERANGE, 11, "value out of range" },
	{ KVF_ENOENT, 12, "no such object" },
	{ KVF_EEXIST, 13, "object exists" },
	{ KVF_EMISMATCH, 14, "options contradict the stored configuration" },
	{ KVF_EVERSION, 15, "unsupported version" },
	{ KVF_ECLOSED, 16, "handle is closed" },
	{ KVF_ENOTSUP, 17, "not supported" },
	{ KVF_ENOMEM, 30, "out of memory" },
	{ KVF_ENOSPC, 31, "no space left on media" },
	{ KVF_EBUSY, 32, "resource busy" },
	{ KVF_EIO, 40, "I/O error" },
	{ KVF_ECORRUPT, 41, "stored data is corrupt" },
	{ KVF_EFATAL, 50, "fatal error: close and reopen the store" },
};

#define N_CODES (sizeof(codes) / sizeof(codes[0]))

static int is_known(int v)
{
	for (size_t i = 0; i < N_CODES; i++)
		if (codes[i].value == v)
			return 1;
	return 0;
}

Test(status, codes_are_pinned)
{
	for (size_t i = 0; i < N_CODES; i++)
		cr_assert(eq(int, (int)codes[i].code, codes[i].value),
			  "code for \"%s\"", codes[i].name);
}

Test(status, strerror_names_every_code)
{
	for (size_t i = 0; i < N_CODES; i++) {
		const char *s = kvf_strerror(codes[i].code);

		cr_assert(not(zero(ptr, (void *)s)), "code %d", codes[i].value);
		cr_assert(eq(str, (char *)s, (char *)codes[i].name), "code %d",
			  codes[i].value);
		/* static: the same string every time, on every thread */
		cr_assert(eq(ptr, (void *)s,
			     (void *)kvf_strerror(codes[i].code)));
	}
}

Test(status, strerror_names_are_distinct)
{
	for (size_t i = 0; i < N_CODES; i++)
		for (size_t j = i + 1; j < N_CODES; j++)
			cr_assert(ne(str, (char *)codes[i].name,
				     (char *)codes[j].name));
}

Test(status, strerror_unknown_codes)
{
	static const int unknown[] = { -1, 1,  9,  18,  29,   33,      39,
				       42, 49, 51, 100, 1000, INT_MAX, INT_MIN };

	for (size_t i = 0; i < sizeof(unknown) / sizeof(unknown[0]); i++) {
		char want[64];
		const char *s = kvf_strerror((kvf_status)unknown[i]);

		snprintf(want, sizeof(want), "unknown status %d", unknown[i]);
		cr_assert(not(zero(ptr, (void *)s)), "code %d", unknown[i]);
		cr_assert(eq(str, (char *)s, want));
	}
}

Test(status, strerror_never_null_over_a_range)
{
	for (int v = -300; v <= 300; v++) {
		const char *s = kvf_strerror((kvf_status)v);

		cr_assert(not(zero(ptr, (void *)s)), "code %d", v);
		cr_assert(strlen(s) > (0), "code %d", v);
		if (!is_known(v))
			cr_assert(eq(int, strncmp(s, "unknown status ", 15), 0),
				  "code %d gives \"%s\"", v, s);
	}
}

Test(status, last_error_is_empty_initially)
{
	const char *s = kvf_last_error();

	cr_assert(not(zero(ptr, (void *)s)));
	cr_assert(eq(str, (char *)s, ""));
}

Test(status, fail_returns_status_and_formats)
{
	for (size_t i = 0; i < N_CODES; i++)
		cr_assert(eq(int, (int)kvf_fail(codes[i].code, "x"),
			     codes[i].value));
	cr_assert(
		eq(int,
		   kvf_fail(KVF_ERANGE,
			    "kvf_append: layer %u out of range (store has %u layers)",
			    40u, 32u),
		   KVF_ERANGE));
	cr_assert(
		eq(str, (char *)kvf_last_error(),
		   "kvf_append: layer 40 out of range (store has 32 layers)"));
	/* the next failure replaces the message, in one piece */
	kvf_fail(KVF_EINVAL, "%s: %s is NULL", "kvf_open", "dir");
	cr_assert(eq(str, (char *)kvf_last_error(), "kvf_open: dir is NULL"));
}

Test(status, fail_errno_appends_strerror_and_number)
{
	char want[256];
	kvf_status rc;

	rc = kvf_fail_errno(KVF_EIO, EIO, "pwrite %s at offset %llu",
			    "/tmp/x/stripe0", 4096ull);
	cr_assert(eq(int, rc, KVF_EIO));
	snprintf(want, sizeof(want),
		 "pwrite /tmp/x/stripe0 at offset 4096: %s (errno %d)",
		 strerror(EIO), EIO);
	cr_assert(eq(str, (char *)kvf_last_error(), want));

	rc = kvf_fail_errno(KVF_ENOENT, ENOENT, "open %s", "a");
	cr_assert(eq(int, rc, KVF_ENOENT));
	snprintf(want, sizeof(want), "open a: %s (errno %d)", strerror(ENOENT),
		 ENOENT);
	cr_assert(eq(str, (char *)kvf_last_error(), want));
}

Test(status, clear_error_empties_the_message)
{
	kvf_fail(KVF_EINVAL, "something");
	cr_assert(eq(str, (char *)kvf_last_error(), "something"));
	kvf_clear_error();
	cr_assert(eq(str, (char *)kvf_last_error(), ""));
}

Test(status, long_messages_are_truncated_not_overrun)
{
	char big[3 * KVF_ERRMSG_CAP];
	const char *s;

	memset(big, 'a', sizeof(big) - 1);
	big[sizeof(big) - 1] = '\0';
	kvf_fail(KVF_EINVAL, "%s", big);
	s = kvf_last_error();
	cr_assert(eq(sz, strlen(s), KVF_ERRMSG_CAP - 1));
	cr_assert(eq(int, strncmp(s, big, KVF_ERRMSG_CAP - 1), 0));

	/* a prefix that fills the buffer leaves no room for the errno */
	kvf_fail_errno(KVF_EIO, EIO, "%s", big);
	cr_assert(eq(sz, strlen(kvf_last_error()), KVF_ERRMSG_CAP - 1));

	/* a prefix that nearly fills it gets a cut errno suffix */
	big[KVF_ERRMSG_CAP - 5] = '\0';
	kvf_fail_errno(KVF_EIO, EIO, "%s", big);
	s = kvf_last_error();
	cr_assert(eq(sz, strlen(s), KVF_ERRMSG_CAP - 1));
	cr_assert(eq(int, strncmp(s + KVF_ERRMSG_CAP - 5, ": ", 2), 0));
}

/* What a helper thread saw, checked by the main thread after the join. */
struct seen {
	char before[KVF_ERRMSG_CAP]; /* kvf_last_error() before failing */
	char after[KVF_ERRMSG_CAP];  /* after its own kvf_fail */
	char late[KVF_ERRMSG_CAP];   /* after the other thread failed */
	const char *buf;             /* its kvf_last_error() pointer */
	pthread_barrier_t *barrier;  /* shared by the racing threads */
	int id;                      /* which thread */
};

static void *fail_in_thread(void *arg)
{
	struct seen *t = arg;

	snprintf(t->before, sizeof(t->before), "%s", kvf_last_error());
	kvf_fail(KVF_ERANGE, "thread %d failed", t->id);
	snprintf(t->after, sizeof(t->after), "%s", kvf_last_error());
	t->buf = kvf_last_error();
	if (t->barrier) {
		/* both threads have failed; each must still see its own */
		pthread_barrier_wait(t->barrier);
	}
	snprintf(t->late, sizeof(t->late), "%s", kvf_last_error());
	return NULL;
}

Test(status, last_error_is_thread_local)
{
	struct seen t = { .id = 1 };
	pthread_t th;

	kvf_fail(KVF_EINVAL, "main failed");
	cr_assert(eq(int, pthread_create(&th, NULL, fail_in_thread, &t), 0));
	cr_assert(eq(int, pthread_join(th, NULL), 0));

	cr_assert(eq(str, t.before, ""), "a new thread starts with \"\"");
	cr_assert(eq(str, t.after, "thread 1 failed"));
	cr_assert(eq(str, (char *)kvf_last_error(), "main failed"),
		  "the thread's failure must not touch main's message");
	cr_assert(ne(ptr, (void *)t.buf, (void *)kvf_last_error()));
}

Test(status, last_error_of_racing_threads)
{
	pthread_barrier_t barrier;
	struct seen t[2] = { { .id = 1 }, { .id = 2 } };
	pthread_t th[2];

	cr_assert(eq(int, pthread_barrier_init(&barrier, NULL, 2), 0));
	for (int i = 0; i < 2; i++) {
		t[i].barrier = &barrier;
		cr_assert(
			eq(int,
			   pthread_create(&th[i], NULL, fail_in_thread, &t[i]),
			   0));
	}
	for (int i = 0; i < 2; i++)
		cr_assert(eq(int, pthread_join(th[i], NULL), 0));
	pthread_barrier_destroy(&barrier);

	cr_assert(eq(str, t[0].late, "thread 1 failed"));
	cr_assert(eq(str, t[1].late, "thread 2 failed"));
	cr_assert(eq(str, (char *)kvf_last_error(), ""));
}
