/* Checkpoint files: one job's state at one version, written atomically and checksummed.
 *
 * <job dir>/checkpoint-<version:20>.gack, little endian:
 *   "GACKPT01"
 *   u64 meta length, meta: u64 version, unix ms, steps, late pushes, deadline closes, duplicate
 *     pushes; u32 world, tensors, job name length, config length; the name; the packed JobConfig;
 *     per member u64 incarnation, last step, commit mask, u8 has pushed, u8 left; per tensor u32
 *     name length, u32 dims, u64 elements, u64 Adam steps, u32 buffer mask (1 << ga_store_buf),
 *     the name, u64 per dimension
 *   per tensor, per buffer in the mask in ga_store_buf order: elements fp32
 *   "GACKEND\0", u64 bytes before this trailer, u32 crc32c of those bytes, u32 0
 * Written to a temp file, fsynced, renamed over its name, and the directory fsynced: a reader
 * sees a whole checkpoint or none. Any thread (blocking I/O: a thread-pool task). */
#ifndef GA_CHECKPOINT_H
#define GA_CHECKPOINT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "ga_status.h"
#include "store/store.h"

typedef struct ga_ckpt_member {
    uint64_t incarnation, last_step, commit_mask;
    bool has_pushed, left;
} ga_ckpt_member;

typedef struct ga_ckpt_tensor {
    char *name;
    uint64_t *shape;
    uint32_t ndim;
    uint64_t elements;
    uint64_t adam_steps; /* read from the store when written; restored into it when loaded */
    uint32_t buffers;    /* bit (1 << ga_store_buf) per buffer held */
} ga_ckpt_tensor;

/* Everything but the store's buffers. All owned (ga_ckpt_meta_free). */
typedef struct ga_ckpt_meta {
    char *job;
    uint8_t *config; /* packed Gradagg__V1__JobConfig */
    size_t config_len;
    uint64_t version, unix_ms;
    uint64_t steps, late_pushes, deadline_closes, duplicate_pushes;
    uint32_t world;
    ga_ckpt_member *members;
    uint32_t ntensors;
    ga_ckpt_tensor *tensors;
} ga_ckpt_meta;

void ga_ckpt_meta_free(ga_ckpt_meta *m); /* NULL is a no-op */

/* Writes the checkpoint of m->version with store tensors [0, m->ntensors) (the store must be at
 * that version and not used by anyone else meanwhile), then deletes all but the newest `keep`
 * checkpoints and reports the version of the oldest one kept. On error the temp file is gone,
 * every earlier checkpoint is untouched, and why says what failed (GA_E_IO, GA_E_NOMEM, a
 * device error). */
ga_status ga_ckpt_write(const char *dir, ga_ckpt_meta *m, ga_store *s, uint32_t keep, uint64_t *oldest_kept,
                        char *why, size_t cap);

/* The checkpoint files of dir, newest first (owned: ga_file_names_free). */
ga_status ga_ckpt_list(const char *dir, char ***names, size_t *n, char *why, size_t cap);

/* Loads a checkpoint: checks the trailer and checksum over the whole file first (GA_E_CORRUPT
 * style failures come back as GA_E_PROTO with what is wrong), then parses the meta and hands it
 * to begin(arg, meta) (which takes it: it must free it, but not before ga_ckpt_load returns, since
 * the buffers are read against it), then each buffer of each tensor, whole,
 * to buffer(arg, t, b, values) (values borrowed). A callback's error stops the load. */
typedef struct ga_ckpt_loader {
    ga_status (*begin)(void *arg, ga_ckpt_meta *meta, char *why, size_t cap);
    ga_status (*buffer)(void *arg, uint32_t t, ga_store_buf b, const float *values, char *why, size_t cap);
    void *arg;
} ga_ckpt_loader;
ga_status ga_ckpt_load(const char *path, const ga_ckpt_loader *l, char *why, size_t cap);

#endif
