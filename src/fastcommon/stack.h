/* Whether this thread's C stack is nearly used up, where CPython counts recursion but does not measure the stack
 * (before 3.14, which checks it in Py_EnterRecursiveCall). A Metadata nested in another recurses through C as well
 * as grpc's frames, and a raised recursion limit or a small thread stack (threading.stack_size) could let it
 * overflow where stock grpc's frames end in RecursionError. The bounds come from pthreads, once per thread (glibc,
 * musl, macOS); the main thread's from its rlimit below its top. Elsewhere (Windows) nothing is low. */
#ifndef FASTCOMMON_STACK_H
#define FASTCOMMON_STACK_H

#include <Python.h>

#if PY_VERSION_HEX < 0x030E0000 && (defined(__linux__) || defined(__APPLE__))
#include <pthread.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#define FASTCOMMON_STACK_MARGIN (64 * 1024) /* room left for what a RecursionError runs; a quarter of a small stack */

static char * /* the lowest address this thread's stack may reach, less the margin; or 1, below every stack */
fastcommon_stack_floor(void)
{
    char *top, here;
    size_t size;
#if defined(__APPLE__)
    top = (char *)pthread_get_stackaddr_np(pthread_self()); /* its top */
    size = pthread_get_stacksize_np(pthread_self());
    (void)here;
#else
    pthread_attr_t attributes;
    struct rlimit limit;
    void *low;
    int found = pthread_getattr_np(pthread_self(), &attributes) == 0; /* the main thread's: /proc, with glibc */
    if (found) {
        found = pthread_attr_getstack(&attributes, &low, &size) == 0;
        pthread_attr_destroy(&attributes);
    }
    /* Not found: from here, where patch()'s gate first asks, near the top. */
    top = found ? (char *)low + size : (char *)((uintptr_t)&here + 4096);
    if (syscall(SYS_gettid) == getpid()) { /* the main thread grows to its rlimit (musl gives what is mapped) */
        if (getrlimit(RLIMIT_STACK, &limit) != 0 || limit.rlim_cur == RLIM_INFINITY) {
            return (char *)1;
        }
        size = found ? limit.rlim_cur : limit.rlim_cur / 4 * 3; /* from here: a quarter spared for what is above */
    }
    else if (!found) {
        return (char *)1;
    }
#endif
    return top - size + (size / 4 < FASTCOMMON_STACK_MARGIN ? size / 4 : FASTCOMMON_STACK_MARGIN);
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
