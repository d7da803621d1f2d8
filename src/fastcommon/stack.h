/* Whether this thread's C stack is nearly used up, where CPython counts recursion but does not measure the stack
 * (before 3.14, which checks it in Py_EnterRecursiveCall). A Metadata nested in another recurses through C as well
 * as grpc's frames, and a raised recursion limit or a small thread stack (threading.stack_size) could let it
 * overflow where stock grpc's frames end in RecursionError. The bounds come from pthreads, once per thread (glibc,
 * musl, macOS); the process's first thread's from its rlimit below its top. Elsewhere (Windows) nothing is low. */
#ifndef FASTCOMMON_STACK_H
#define FASTCOMMON_STACK_H

#include <Python.h>

#if PY_VERSION_HEX < 0x030E0000 && (defined(__linux__) || defined(__APPLE__))
#include <pthread.h>
#include <stdint.h>
#if defined(__linux__)
#include <sys/auxv.h>
#include <sys/resource.h>
#endif

#define FASTCOMMON_STACK_MARGIN (64 * 1024) /* room left for what a RecursionError runs; a quarter of a small stack */

static char * /* the lowest address this thread's stack may reach, plus the margin; or 1, below every stack */
fastcommon_stack_floor(void)
{
    uintptr_t top, size;
#if defined(__APPLE__)
    top = (uintptr_t)pthread_get_stackaddr_np(pthread_self()); /* its top */
    size = pthread_get_stacksize_np(pthread_self());
#else
    /* The process's first thread holds AT_RANDOM near its top (argv and the environment above it: at most a quarter
       of its rlimit), and grows to its rlimit; musl's pthreads give what is mapped of it so far, glibc's need /proc. */
    uintptr_t random = (uintptr_t)getauxval(AT_RANDOM);
    pthread_attr_t attributes;
    struct rlimit limit;
    void *low = NULL;
    size_t found = 0; /* the size pthreads gives; 0: none */
    if (pthread_getattr_np(pthread_self(), &attributes) == 0) {
        if (pthread_attr_getstack(&attributes, &low, &found) != 0) {
            found = 0;
        }
        pthread_attr_destroy(&attributes);
    }
    top = (uintptr_t)low + found;
    if (found == 0 || ((uintptr_t)low <= random && random < top)) { /* the first thread's, or none known */
        if (found == 0) {
            top = random; /* from AT_RANDOM, a quarter spared for what may stand above it */
        }
        if (top == 0 || getrlimit(RLIMIT_STACK, &limit) != 0 || limit.rlim_cur >= top) { /* or RLIM_INFINITY */
            return (char *)1;
        }
        found = found ? limit.rlim_cur : limit.rlim_cur / 4 * 3;
    }
    size = found;
#endif
    return (char *)(top - size + (size / 4 < FASTCOMMON_STACK_MARGIN ? size / 4 : FASTCOMMON_STACK_MARGIN));
}

static inline int
fastcommon_stack_is_low(void)
{
    static _Thread_local char *floor; /* NULL until known */
    char here;
    if (floor == NULL) {
        floor = fastcommon_stack_floor();
    }
    return &here < floor;
}
#else
#define fastcommon_stack_is_low() 0
#endif

#endif /* FASTCOMMON_STACK_H */
