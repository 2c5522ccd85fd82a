/* Status codes for every gradagg module: one X-macro table, 0 is success, errors are negative.
 * ga_status_name() and ga_strerror() are generated from the same table. */
#ifndef GA_STATUS_H
#define GA_STATUS_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

/* X(name, value, message). Values are stable: they may be logged and compared across versions. */
#define GA_STATUS_MAP(X)                                                                  \
    X(OK, 0, "success")                                                                   \
    X(E_INVAL, -1, "invalid argument")                                                    \
    X(E_NOMEM, -2, "out of memory")                                                       \
    X(E_CODEC, -3, "unknown codec")                                                       \
    X(E_LENGTH, -4, "payload length does not match the element count and codec")          \
    X(E_INDEX_RANGE, -5, "index out of range")                                            \
    X(E_INDEX_ORDER, -6, "indices not strictly increasing")                               \
    X(E_NONFINITE, -7, "non-finite value")                                                \
    X(E_THRESHOLD, -8, "threshold must be finite and > 0")                                \
    X(E_RATIO, -9, "ratio or fraction outside (0, 1]")                                    \
    X(E_CAPACITY, -10, "output buffer too small")                                         \
    X(E_RANGE, -11, "value outside the range of the wire type")                           \
    X(E_TOO_LARGE, -12, "element count exceeds the codec's limit")                        \
    X(E_VARINT, -13, "malformed varint")                                                  \
    X(E_NO_CUDA, -14, "built without CUDA")                                               \
    X(E_NO_DEVICE, -15, "no CUDA device available")                                       \
    X(E_CUDA, -16, "CUDA runtime error")                                                  \
    X(E_BACKEND, -17, "unknown backend")                                                  \
    X(E_OPTIM, -18, "invalid optimizer hyper-parameter")                                 \
    /* service and SDK */                                                                 \
    X(E_PROTO, -19, "malformed protobuf message")                                         \
    X(E_UNIMPLEMENTED, -20, "unknown method")                                             \
    X(E_UNKNOWN_JOB, -21, "no such job")                                                  \
    X(E_UNKNOWN_TENSOR, -22, "no such tensor")                                            \
    X(E_RANK, -23, "rank outside [0, world size)")                                        \
    X(E_RANK_HELD, -24, "rank is held by another incarnation")                            \
    X(E_STALE, -25, "incarnation replaced by a newer one")                                \
    X(E_NOT_MEMBER, -26, "rank has not joined the job")                                   \
    X(E_JOB_CONFIG, -27, "job exists with a different configuration")                     \
    X(E_SHAPE, -28, "tensor exists with a different shape")                               \
    X(E_COVERAGE, -29, "chunks do not cover every tensor exactly once")                   \
    X(E_STREAM_MIXED, -30, "chunks of one stream disagree on job, rank, incarnation or step") \
    X(E_STEP_CLOSED, -31, "step already closed")                                          \
    X(E_STEP_FUTURE, -32, "step not open yet")                                            \
    X(E_VERSION, -33, "version will never be published")                                  \
    X(E_LIMIT, -34, "server limit reached")                                               \
    X(E_DRAINING, -35, "server is shutting down")                                         \
    X(E_UNAVAILABLE, -36, "server unavailable")                                           \
    X(E_DEADLINE, -37, "deadline exceeded")                                               \
    X(E_CANCELLED, -38, "call cancelled")                                                 \
    X(E_TRANSPORT, -39, "transport error")                                                \
    X(E_CONFIG, -40, "invalid configuration")                                             \
    X(E_IO, -41, "I/O error")                                                             \
    X(E_UNKNOWN_SERVICE, -42, "no such service")                                   \
    X(E_UNAUTHENTICATED, -43, "missing or malformed credentials")                      \
    X(E_PERMISSION_DENIED, -44, "credentials do not allow this job")                   \
    X(E_RANK_FAILED, -45, "a rank of the job failed or was lost")                   \
    X(E_BUSY, -46, "server busy: its memory or a client's streams are full for now; retry later") \
    X(E_ROLLED_BACK, -47, "the job came back below a version its server had acknowledged")

typedef enum ga_status {
#define GA_STATUS_ENUM(name, value, msg) GA_##name = value,
    GA_STATUS_MAP(GA_STATUS_ENUM)
#undef GA_STATUS_ENUM
} ga_status;

/* "GA_E_LENGTH" for GA_E_LENGTH; "GA_UNKNOWN" for a value not in the table. Static strings. */
const char *ga_status_name(int status);
/* Human-readable message for a status. Static string. */
const char *ga_strerror(int status);
/* Writes a printf-formatted message to why[0..cap) (nothing when why is NULL or cap is 0) and
 * returns st: `return ga_status_fail(GA_E_RANK, why, cap, "rank %u >= %u", r, w);` */
ga_status ga_status_fail(ga_status st, char *why, size_t cap, const char *fmt, ...) __attribute__((format(printf, 4, 5)));

/* Evaluate expr (a ga_status); on failure store it in rc and jump to label. */
#define GA_CHECK_GOTO(expr, rc, label) \
    do {                               \
        (rc) = (expr);                 \
        if ((rc) != GA_OK) goto label; \
    } while (0)

/* Evaluate expr (a ga_status) and return it on failure. */
#define GA_CHECK(expr)                   \
    do {                                 \
        ga_status ga_check_rc_ = (expr); \
        if (ga_check_rc_ != GA_OK) return ga_check_rc_; \
    } while (0)

#ifdef __cplusplus
}
#endif
#endif
