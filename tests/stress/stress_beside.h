/*
 * stress_beside.h - the thread several stress programs run beside their
 * workers: it syncs the store, reads kvf_stats and verifies it (no page
 * missing or damaged) until the workers are done or one has failed.
 */
#ifndef KVF_TEST_STRESS_BESIDE_H
#define KVF_TEST_STRESS_BESIDE_H

#include <stdatomic.h>
#include <stdint.h>

#include "kvflash.h"

struct stress_beside {
	kvf_store *st;
	const char *name;        /* the program, for messages */
	_Atomic int *done;       /* set by the program: stop */
	_Atomic int *failed;     /* set by anyone on a failure */
	_Atomic uint64_t syncs;  /* syncs made */
};

/* stress_beside - the thread's body (arg: a struct stress_beside) */
void *stress_beside(void *arg);

#endif /* KVF_TEST_STRESS_BESIDE_H */
