/* Happens-before edges ThreadSanitizer cannot see by itself. gRPC (Debian's, not instrumented)
 * hands a completion-queue tag or a released slice from the thread that gave it to gRPC to one
 * of its own threads through its own atomics and futexes; these macros state that ordering,
 * which gRPC's API guarantees, at our side of the hand-off. Empty unless built with TSan. */
#ifndef GA_TSAN_H
#define GA_TSAN_H

#if defined(__SANITIZE_THREAD__)
#define GA_TSAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define GA_TSAN 1
#endif
#endif

#ifdef GA_TSAN
/* From the TSan runtime (sanitizer/tsan_interface.h, declared here to need no include path). */
void __tsan_acquire(void *addr);
void __tsan_release(void *addr);
/* Before handing `p` (a tag, a slice's user data) to gRPC: what this thread did so far... */
#define GA_TSAN_RELEASE(p) __tsan_release((void *)(p))
/* ...happens before what the thread gRPC gives `p` back to does after this. */
#define GA_TSAN_ACQUIRE(p) __tsan_acquire((void *)(p))
#else
#define GA_TSAN_RELEASE(p) ((void)(p))
#define GA_TSAN_ACQUIRE(p) ((void)(p))
#endif

#endif
