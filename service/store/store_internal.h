/* Internal to store.c and store_publish.c: the store's layout and the memory helpers both use.
 * Every buffer below lives where the backend computes: host memory on the CPU backend, device
 * memory on the CUDA backend (except where marked), so one sequence of kernel calls serves both. */
#ifndef GA_STORE_INTERNAL_H
#define GA_STORE_INTERNAL_H

#include "store.h"

/* A chunk of the open step, kept as it came (host memory, 4-byte aligned) until the step is
 * applied: a compressed chunk (W compressed pushes are far smaller than a dense fp32 sum), or
 * any chunk the caller lent (ga_store_accumulate_lent), which costs the store nothing. */
typedef struct ga_store_held {
    size_t offset, count;
    ga_codec_id codec;
    ga_codec_params params;
    void *data;
    size_t len;
    bool lent; /* data is the caller's, read in place and never freed here; else the store's copy */
    ga_topk_cursor cursor; /* top-k: where the apply's walk over the payload stands */
    const void *dev;       /* CUDA, during the apply: the payload's copy in device memory, or NULL */
} ga_store_held;

typedef struct ga_store_tensor {
    size_t n;
    float *params;
    /* The open step's chunks go one of two ways, fixed by its first chunk: a dense one (fp32,
     * fp16, bf16) that is copied starts `summing` and every chunk is added into `sum` as it comes
     * (the sum is made at the first such chunk and kept, zero between steps); a compressed one,
     * or on the CPU backend a lent one, starts holding, and every chunk is held until the apply
     * adds them, range by range in arrival order into a small block (store_publish.c). Either
     * way each element is ((0 + c0) + c1) + ... in arrival order: the same bits. */
    float *sum;
    bool summing;
    ga_store_held *held;
    size_t nheld, held_cap;
    float *state0;    /* SGD momentum buffer (momentum != 0), or Adam m; else NULL */
    float *state1;    /* Adam v; else NULL */
    float *published; /* what workers hold (pull codec only; fp32 pulls publish params) */
    uint64_t adam_t;  /* Adam steps taken on this tensor */
    /* CPU: the blob that `published` (pull codec) or `params` (fp32 pulls) lives in, the store's
     * reference; it is also the version's full publication, so the store keeps no copy of what
     * it publishes. An apply changes the values in this blob when no one else holds it (the
     * caller's latest publication aside: ga_store_apply_in_place), and otherwise first moves
     * them into the next version's blob (store_publish.c rebase): a blob another holder may
     * still read is never written. CUDA: NULL (the buffers are device memory; see mirror). */
    ga_blob *pub;
    /* CUDA: the host blob holding the latest publication's full values, the store's reference
     * (CPU: NULL). The next apply copies the new values into it when no one else holds it, by
     * the same rule as `pub` on the CPU, and otherwise into a new blob that becomes the mirror:
     * a step then writes into host pages already in memory instead of a fresh buffer of the
     * tensor's size. */
    ga_blob *mirror;
} ga_store_tensor;

/* Where a buffer lives: host (ga_malloc), pinned host, or device. */
typedef enum ga_store_mem { GA_STORE_MEM_HOST = 0, GA_STORE_MEM_PINNED = 1, GA_STORE_MEM_DEVICE = 2 } ga_store_mem;

struct ga_store {
    ga_store_config cfg;
    ga_exec ex;           /* the backend, thread cap and (CUDA) the store's own stream */
    ga_store_mem compute; /* GA_STORE_MEM_HOST (CPU) or GA_STORE_MEM_DEVICE (CUDA) */
    ga_store_mem staging; /* of `stage`: GA_STORE_MEM_HOST (CPU) or GA_STORE_MEM_PINNED (CUDA) */
    ga_store_tensor *tensors;
    uint32_t count, cap;
    uint64_t version; /* publications since version 0, i.e. applies */
    uint32_t overflowed; /* the first tensor an apply left with NaN or Inf (UINT32_MAX: none) */
    uint64_t bytes;   /* everything held, host and device (ga_store_bytes) */

    /* CUDA: a block of device zeros that clears sums and residuals by copies (no memset kernel),
     * sized min(largest tensor, ZERO_MAX_ELEMS). */
    float *zeros;
    size_t zero_elems;

    /* Incoming payloads: CPU, an aligned copy of an unaligned payload; CUDA, the pinned staging
     * buffer and its device copy. Grown as needed, never shrunk. */
    void *stage;
    size_t stage_cap;
    void *dev_in;
    size_t dev_in_cap;
};

/* Allocates bytes in `where` and counts them in s->bytes. GA_E_NOMEM (or the device's error). */
ga_status ga_store_mem_get(ga_store *s, ga_store_mem where, size_t bytes, void **out);
/* Frees what ga_store_mem_get returned (NULL is a no-op) and uncounts its bytes. */
void ga_store_mem_put(ga_store *s, ga_store_mem where, void *p, size_t bytes);
/* dst[0..n) = +0 in compute memory (queued on the store's stream on CUDA). */
ga_status ga_store_zero(ga_store *s, float *dst, size_t n);
/* Pieces of a tensor of n elements. */
size_t ga_store_npieces(const ga_store *s, size_t n);
/* A block of memory in `where`, `cap` bytes: what the scratch pool holds and hands out. */
typedef struct ga_store_block {
    void *p;
    size_t cap;
    ga_store_mem where;
} ga_store_block;
/* Frees what ga_store_mem_get returned without uncounting it (the scratch pool's blocks). */
void ga_store_mem_free(ga_store_mem where, void *p);
/* An apply's scratch block of at least `need` bytes (need > 0) in `where`, from the scratch pool
 * or fresh: *cap is its size, counted in s->bytes until ga_store_scratch_give(s, where, p, cap). */
ga_status ga_store_scratch_take(ga_store *s, ga_store_mem where, size_t need, void **out, size_t *cap);
void ga_store_scratch_give(ga_store *s, ga_store_mem where, void *p, size_t cap); /* NULL: no-op */
/* A store is created / destroyed: the last one gone empties the pool. */
void ga_store_scratch_enter(void);
void ga_store_scratch_leave(void);
/* Replaces *buf (capacity *cap bytes) by one of at least `need` bytes; contents not kept. */
ga_status ga_store_regrow(ga_store *s, ga_store_mem where, void **buf, size_t *cap, size_t need);
/* Decodes a payload (host memory) of `count` elements and adds it into dst (compute memory):
 * aligned or staged as the backend needs; validated as ga_codec_decode_add does. */
ga_status ga_store_decode_add(ga_store *s, ga_codec_id codec, const ga_codec_params *p, const void *payload,
                              size_t len, size_t count, float *dst);
/* The same for a held chunk (or a slice of one), whose values were checked when it was held or
 * lent: ga_codec_decode_add_checked, so a dense payload is read once. */
ga_status ga_store_add_held(ga_store *s, ga_codec_id codec, const ga_codec_params *p, const void *payload,
                            size_t len, size_t count, float *dst);
/* CUDA: copies a payload (host memory) to dst (device memory) through the pinned staging buffer,
 * in pieces of at most 8 MiB in its two halves in turn: the host copies piece k (on the store's
 * CPU threads) into one half while the device copies piece k - 1 out of the other. It first
 * waits for everything queued on the store's stream (a previous upload's last copy reads the
 * staging buffer; queued work may read dst); on return only the last piece's copy may still be
 * queued. */
ga_status ga_store_upload(ga_store *s, void *dst, const void *payload, size_t len);
/* Frees tensor t's held chunks (after the apply or a discard). */
void ga_store_held_clear(ga_store *s, ga_store_tensor *t);

#endif
