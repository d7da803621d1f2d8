/* Whether this thread's C stack is nearly used up, where CPython counts recursion but does not measure the stack
 * (before 3.14, which checks it in Py_EnterRecursiveCall). A Metadata nested in another recurses through C as well
 * as grpc's frames, and a raised recursion limit or a small thread stack (threading.stack_size) could let it
 * overflow where stock grpc's frames end in RecursionError. The bounds come from pthreads, once per thread (glibc,
 * musl, macOS); elsewhere (Windows) nothing is known here, and nothing is low. */
#ifndef FASTCOMMON_STACK_H
#define FASTCOMMON_STACK_H

#include <Python.h>

#if PY_VERSION_HEX < 0x030E0000 && (defined(__linux__) || defined(__APPLE__))
#include <pthread.h>

#define FASTCOMMON_STACK_MARGIN (64 * 1024) /* room left for what a RecursionError runs; a quarter of a small stack */

static inline int
fastcommon_stack_is_low(void)
{
    static _Thread_local char *floor; /* the lowest address this thread may reach here; NULL until known */
    char here;
    if (floor == NULL) {
        char *low;
        size_t size;
#if defined(__APPLE__)
        pthread_t self = pthread_self();
        size = pthread_get_stacksize_np(self);
        low = (char *)pthread_get_stackaddr_np(self) - size; /* macOS gives the stack's top */
#else
        pthread_attr_t attributes;
        if (pthread_getattr_np(pthread_self(), &attributes) != 0) {
            return 0;
        }
        int found = pthread_attr_getstack(&attributes, (void **)&low, &size) == 0;
        pthread_attr_destroy(&attributes);
        if (!found) {
            return 0;
        }
#endif
        floor = low + (size / 4 < FASTCOMMON_STACK_MARGIN ? size / 4 : FASTCOMMON_STACK_MARGIN);
    }
    return &here < floor;
}
#else
#define fastcommon_stack_is_low() 0
#endif

#endif /* FASTCOMMON_STACK_H */
