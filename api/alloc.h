/*
 * alloc.h - the one place the library allocates heap memory.
 *
 * Every allocation goes through these calls so that a test can make the
 * Nth allocation fail (kvf_alloc_fail_at) and check that the caller gets
 * KVF_ENOMEM with nothing changed.  The library never aborts on OOM.
 */
#ifndef KVF_ALLOC_H
#define KVF_ALLOC_H

#include <stddef.h>
#include <stdint.h>

void *kvf_malloc(size_t size);
void *kvf_calloc(size_t n, size_t size);
void *kvf_realloc(void *p, size_t size);
/* kvf_aligned_alloc - size bytes at an address that is a multiple of align
 * (a power of two, at least sizeof(void *)); free with kvf_free. */
void *kvf_aligned_alloc(size_t align, size_t size);
void kvf_free(void *p);
char *kvf_strdup(const char *s);

/*
 * kvf_alloc_fail_at - fault injection for tests: the nth allocation from
 * now (1 = the next one) returns NULL, and so does every one after it
 * while `sticky` is set.  n = 0 turns injection off.
 */
void kvf_alloc_fail_at(uint64_t n, int sticky);

/* kvf_alloc_calls - allocation calls made so far, failed ones included
 * (for tests that a path allocates nothing) */
uint64_t kvf_alloc_calls(void);

#endif /* KVF_ALLOC_H */
