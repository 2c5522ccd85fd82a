/* The store: one job's tensors (parameters, optimizer state, the step's sum, the published copy
 * every worker holds) and all the math on them, on the CPU or the CUDA backend. Not thread-safe:
 * the core calls it from one thread at a time (a libuv thread-pool task, or the loop while no
 * task of this job runs). What it publishes leaves as immutable blobs the loop hands to pulls.
 *
 * store/ is one module in four files sharing store_internal.h: store.c (tensors, the step's sum,
 * the optimizers), store_publish.c (the published copy and the pull deltas), store_snapshot.c
 * (checkpoint reads and writes of the buffers), store_scratch.c (the applies' scratch pool).
 * Built alone where only the kernels' needs are met.
 * May use: base (blobs); kernels/ (codecs, reduction, optimizer math, CUDA). */
#ifndef GA_STORE_H
#define GA_STORE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/base.h"
#include "ga_codec.h"
#include "ga_exec.h"
#include "ga_optim.h"

/* What a step does with the reduced gradient g: NONE params += g, SGD and ADAM their update,
 * REDUCE params = g (a reduce-only job: each version is the step's aggregate, for DDP's comm
 * hook). */
typedef enum ga_optim_kind { GA_OPTIM_NONE = 0, GA_OPTIM_SGD = 1, GA_OPTIM_ADAM = 2, GA_OPTIM_REDUCE = 3 } ga_optim_kind;

typedef struct ga_store_config {
    ga_backend backend;
    int threads;                /* OpenMP threads; 0 = all */
    bool mean;                  /* divide the sum by the number of contributors */
    ga_optim_kind optim;
    ga_sgd_params sgd;
    ga_adam_params adam;
    ga_codec_id pull_codec;     /* GA_CODEC_NONE: fp32 pulls, no deltas */
    ga_codec_params pull_params;
    float pull_auto_bits;       /* 2bit pull codec: > 0 picks each piece's threshold and level per
                                 * version for this budget in bits per element, (0, log2 3]
                                 * (docs/auto-threshold.md, "Pulls"); 0 = pull_params.threshold */
    size_t piece_elems;         /* elements per pull piece; a multiple of GA_STORE_PIECE_ALIGN */
    size_t block_elems;         /* most elements an apply steps at once (its gradient block); a
                                 * multiple of GA_STORE_PIECE_ALIGN; 0 = GA_STORE_BLOCK_ELEMS */
} ga_store_config;

/* Pieces (and so compressed-delta payloads) start on multiples of this: every codec's block. */
#define GA_STORE_PIECE_ALIGN GA_CODEC_RANGE_ALIGN
/* The default gradient block: 4 MiB of fp32, whatever the size of the chunks held: each block
 * decodes its slice of every chunk (a byte range, or a top-k payload's pairs in its range). A
 * held 1bit_scaled chunk, whose scales cover all of it, is decoded whole, into a block of its
 * size. */
#define GA_STORE_BLOCK_ELEMS ((size_t)1 << 20)

/* One tensor's published version: what every pull of it streams. Pieces cover [0, n) in order;
 * piece i is elements [i * piece_elems, min(n, (i + 1) * piece_elems)). */
typedef struct ga_published {
    ga_blob *full;        /* n fp32 values, the parameters every worker holds after this version */
    ga_blob *delta;       /* NULL, or the encoded delta from the previous version, piece after piece */
    size_t *delta_off;    /* npieces + 1 byte offsets into delta (owned by the blob's holder) */
    float *delta_level;   /* npieces, with pull_auto_bits: the threshold (level) each piece's
                             payload carries; NULL otherwise (owned like delta_off) */
    size_t npieces;
    /* A node relay's publication (core_relay.c), never the store's: the upstream's delta pieces
     * passed on as they came. piece_at: npieces + 1 element offsets (piece i is elements
     * [piece_at[i], piece_at[i + 1])); delta_params: each piece's codec parameters, of
     * delta_codec. NULL: the uniform pieces above and the job's pull codec. Owned like delta_off. */
    size_t *piece_at;
    ga_codec_id delta_codec;
    ga_codec_params *delta_params;
} ga_published;
/* Releases the references and the offsets; leaves *p zeroed. */
void ga_published_clear(ga_published *p);

typedef struct ga_store ga_store;

/* GA_OK when cfg's optimizer takes its hyper-parameters at every step: the kernels' own check,
 * for Adam at t = 1, its tightest step (later steps only shrink lr / (1 - beta1^t)); else
 * GA_E_OPTIM. Part of ga_store_create's check; the core also puts each push's lr through it. */
ga_status ga_store_check_optim(const ga_store_config *cfg);
/* Validates the config (optimizer hyper-parameters, pull codec). Errors: GA_E_OPTIM, codec
 * parameter errors, GA_E_CONFIG, GA_E_NO_CUDA, GA_E_NO_DEVICE, GA_E_NOMEM. Returns owned. */
ga_status ga_store_create(const ga_store_config *cfg, ga_store **out);
void ga_store_destroy(ga_store *s); /* NULL is a no-op */

/* An apply's scratch (a block's gradient, the step's sum of a dense tensor, a pull piece's delta,
 * residual and payload, a top-k slice, a CUDA upload) is taken for the apply and given back
 * after it into one pool per process, shared by every store: a later apply of any store takes
 * a pooled block that fits (at least its need, at most twice it) instead of fresh memory. The
 * pool holds at most `bytes` (default GA_STORE_SCRATCH_POOL_BYTES; a block given back beyond it
 * frees the oldest, a block larger than it is freed) and is emptied when the last store is
 * destroyed. So the scratch held between steps grows with the applies that run at once, not
 * with the jobs. Thread-safe. */
#define GA_STORE_SCRATCH_APPLY_BYTES ((uint64_t)16 << 20) /* what one apply's scratch takes at most
                                                             * at the default block and piece sizes */
#define GA_STORE_SCRATCH_POOL_BYTES (2 * GA_STORE_SCRATCH_APPLY_BYTES)
void ga_store_scratch_pool_limit(uint64_t bytes);
/* Bytes the pool holds now (host and device): besides every store's ga_store_bytes. */
uint64_t ga_store_scratch_pooled(void);

/* Adds a tensor of n elements with initial values `init` (host fp32, borrowed; NULL = zeros)
 * and writes its index and its version-0 publication (full only). */
ga_status ga_store_add_tensor(ga_store *s, size_t n, const float *init, uint32_t *index, ga_published *out);
/* Bytes the store holds on the host and on the device. */
uint64_t ga_store_bytes(const ga_store *s);

/* Adds one chunk's payload (host memory, borrowed for the call) to tensor t's gradient over
 * [offset, offset + count): decoded into the step's dense sum, or (a compressed first chunk of
 * the step) checked and held as a copy until the apply decodes it (store_internal.h), so a
 * compressed step holds its payloads instead of an fp32 sum. Validates before anything
 * changes; on error nothing changed. */
ga_status ga_store_accumulate(ga_store *s, uint32_t t, size_t offset, size_t count, ga_codec_id codec,
                              const ga_codec_params *p, const void *payload, size_t len);
/* ga_store_accumulate for a caller that lends the payload: it keeps it alive and unchanged until
 * the next ga_store_apply, ga_store_apply_in_place or ga_store_discard returns GA_OK (or until
 * ga_store_destroy), and has already checked it with ga_codec_check_payload (the core's pushes
 * are checked as they arrive, bundle.h ga_push_add), so a held chunk is not scanned again
 * before its apply. A chunk the store holds is then held in place, not copied, and on the CPU
 * backend a dense chunk is held too rather than added into an fp32 sum, so a step of W fp32
 * pushes costs the store no memory beyond what the caller already holds (and no pass over it
 * per push). *kept says whether the store kept a reference to payload (false on an error, and
 * for an unaligned payload, which is copied as before). A lent payload that breaks the promise
 * is added as it is (a NaN in it reaches the parameters); its length and a top-k payload's
 * indices are still checked, so it cannot make the store read or write out of bounds. */
ga_status ga_store_accumulate_lent(ga_store *s, uint32_t t, size_t offset, size_t count, ga_codec_id codec,
                                   const ga_codec_params *p, const void *payload, size_t len, bool *kept);
/* Closes a step that had `contributors` >= 1 pushes: sums each tensor's chunks in arrival order,
 * scales the sums (mean), runs the optimizer on every tensor, clears the sums and held chunks,
 * and publishes every tensor into out[0..tensors): the new full values, and with a pull codec
 * the delta encoded piece by piece from the previous publication, which is then advanced by
 * exactly the decoded delta (server-side error feedback: what was not sent stays in
 * params - published). On error nothing is published. */
ga_status ga_store_apply(ga_store *s, uint32_t contributors, ga_published *out);
/* Both applies end with every tensor's parameters checked for NaN and Inf (an overflowing sum
 * of finite pushes, or an optimizer step that overflows): when one holds any, they return
 * GA_E_NONFINITE and publish nothing, although the step was applied (the store then holds the
 * overflowed values and is not to be stepped again; ga_store_overflowed names the tensor). A
 * caller fails the job, whose workers hold the last finite version. */
uint32_t ga_store_overflowed(const ga_store *s); /* the first such tensor's index; UINT32_MAX: none */
/* ga_store_apply that rewrites a tensor's latest full blob in place and publishes that same blob
 * when no one but the store and the caller holds it: on the CPU no second fp32 copy of the
 * tensor exists during the step; on CUDA the device-to-host copy of the new values lands in host
 * pages already in memory. The caller promises that it keeps at most one reference to each
 * tensor's latest full publication, and that no thread takes a new reference to any blob of
 * this store while the call runs; a blob with any other holder (a pull still streaming it) goes
 * the ga_store_apply way and is never written. On the CPU backend nothing can fail once the
 * first value changed, so an error still publishes nothing and leaves every blob as it was; on
 * CUDA only a device error can (the device is unusable then), and it may leave the caller's
 * latest publication partly rewritten. */
ga_status ga_store_apply_in_place(ga_store *s, uint32_t contributors, ga_published *out);
/* The learning rate of the applies that follow, for SGD and Adam (a schedule's value for one
 * step; the config's lr until then). GA_E_OPTIM unless finite and >= 0; nothing changes then. */
ga_status ga_store_set_lr(ga_store *s, float lr);
/* Drops the step's sums and held chunks without applying. */
ga_status ga_store_discard(ga_store *s);

/* ---- checkpoints (store_snapshot.c): the state a version is made of, to and from the host ---- */

/* A tensor's buffers that a checkpoint holds. Params always exist; the others per optimizer
 * (SGD momentum: STATE0; Adam: STATE0 = m, STATE1 = v) and pull codec (PUBLISHED). */
typedef enum ga_store_buf {
    GA_STORE_BUF_PARAMS = 0,
    GA_STORE_BUF_STATE0 = 1,
    GA_STORE_BUF_STATE1 = 2,
    GA_STORE_BUF_PUBLISHED = 3,
    GA_STORE_BUFS = 4
} ga_store_buf;

uint32_t ga_store_tensors(const ga_store *s);
size_t ga_store_tensor_elems(const ga_store *s, uint32_t t);
bool ga_store_has(const ga_store *s, uint32_t t, ga_store_buf b);
/* Elements [off, off + n) of buffer b of tensor t, copied to (read) or from (write) host memory;
 * done when the call returns. GA_E_INVAL for a buffer the tensor lacks or a range outside it. */
ga_status ga_store_read(ga_store *s, uint32_t t, ga_store_buf b, size_t off, size_t n, float *dst);
ga_status ga_store_write(ga_store *s, uint32_t t, ga_store_buf b, size_t off, size_t n, const float *src);
/* Applies since version 0 (the top-k pull seed reads it) and Adam's step count per tensor. */
uint64_t ga_store_version(const ga_store *s);
uint64_t ga_store_adam_steps(const ga_store *s, uint32_t t);
void ga_store_restore_counters(ga_store *s, uint64_t version, uint32_t t, uint64_t adam_steps);
/* The fp32 publication of tensor t as it stands (full only, no delta): what a restored server
 * serves until its next version. */
ga_status ga_store_publication(ga_store *s, uint32_t t, ga_published *out);

#endif
