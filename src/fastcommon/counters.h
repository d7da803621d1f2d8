/* The call counters of `run --report`, one per replaceable at its place in the registry. Process-wide on purpose: a
 * fork child inherits its parent's counts, and the report subtracts them. Atomic where threads run at once. */
#ifndef FASTCOMMON_COUNTERS_H
#define FASTCOMMON_COUNTERS_H

#include <Python.h>

#define FASTCOMMON_MAX_COUNTERS 32
static unsigned long long fastcommon_calls[FASTCOMMON_MAX_COUNTERS];

#ifdef Py_GIL_DISABLED  /* CPython's own atomics (3.13+): on 32-bit MSVC, where no 64-bit intrinsic adds, a CAS loop */
#define FASTCOMMON_ADD(slot, n) _Py_atomic_add_uint64((uint64_t *)(slot), (uint64_t)(n))
#define FASTCOMMON_LOAD(slot) ((unsigned long long)_Py_atomic_load_uint64_relaxed((uint64_t *)(slot)))
#else
#define FASTCOMMON_ADD(slot, n) (*(slot) += (unsigned long long)(n))
#define FASTCOMMON_LOAD(slot) (*(slot))
#endif

/* 0 if `counter` is one (or, where `none_allowed`, -1: none); else -1 with ValueError. The one check of a counter. */
static int
fastcommon_check_counter(Py_ssize_t counter, int none_allowed)
{
    if ((counter == -1 && none_allowed) || (counter >= 0 && counter < FASTCOMMON_MAX_COUNTERS)) {
        return 0;
    }
    PyErr_Format(PyExc_ValueError, "no counter %zd", counter);
    return -1;
}

/* count n calls at a checked `counter` (-1: none) */
#define fastcommon_count_by(counter, n) do { if ((counter) >= 0) { FASTCOMMON_ADD(&fastcommon_calls[(counter)], (n)); } } while (0)
#define fastcommon_count(counter) fastcommon_count_by((counter), 1)

#define fastcommon_count_of(counter) FASTCOMMON_LOAD(&fastcommon_calls[(counter)])
/* Where a checked counter that counts on every call counts: one increment a call, no test. */
#define fastcommon_counter_at(counter) (&fastcommon_calls[(counter)])
#define fastcommon_increment(slot) FASTCOMMON_ADD((slot), 1)

#endif /* FASTCOMMON_COUNTERS_H */
