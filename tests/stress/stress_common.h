/*
 * stress_common.h - what several stress programs share: the values they
 * append and check, and the thread they run beside their workers, which
 * syncs the store, reads kvf_stats and verifies it (no page missing or
 * damaged) until the workers are done or one has failed.
 */
#ifndef KVF_TEST_STRESS_COMMON_H
#define KVF_TEST_STRESS_COMMON_H

#include <stdatomic.h>
#include <stdint.h>

#include "kvflash.h"

/* stress_val - the f16 bits of element i of head h of token t of layer l
 * of seq (finite, below 1) */
uint16_t stress_val(uint64_t seq, uint64_t t, uint32_t l, uint32_t h,
		    uint32_t i);

/* stress_append - tokens [t0, t0 + n) of seq's every layer, stress_val's
 * values for both K and V, a store of `layers` layers of kvh KV heads of
 * dim */
kvf_status stress_append(kvf_store *st, uint64_t seq, uint64_t t0,
			 uint64_t n, uint32_t layers, uint32_t kvh,
			 uint32_t dim);

struct stress_beside {
	kvf_store *st;
	const char *name;        /* the program, for messages */
	_Atomic int *done;       /* set by the program: stop */
	_Atomic int *failed;     /* set by anyone on a failure */
	_Atomic uint64_t syncs;  /* syncs made */
};

/* stress_beside - the thread's body (arg: a struct stress_beside) */
void *stress_beside(void *arg);

#endif /* KVF_TEST_STRESS_COMMON_H */
