/* The gradients of the fault and soak workers (tests/support/fault_worker.c, tests/support/soak_client.c) and
 * of the tests that check them: values in {-1, 0, 1}, so every sum is an exact integer in fp32
 * and the codecs none, fp16, bf16 and 2bit (threshold 1) carry them without loss.
 *
 * Each worker numbers its calls of ga_client_step k = 0, 1, ... (a restarted worker goes on
 * from a number the test gives it). Call k of rank r pushes
 *   dense[i] = ((i + 3r + 5k) mod 3) - 1     (the bulk, any size)
 *   ind[j]   = 1 where j = k * world + r, else 0 (one slot per (rank, call))
 * With SGD, lr 1, no momentum and a sum over ranks, the final ind[j] is minus the number of
 * times call k of rank r was counted: a lost step reads 0, a double-counted one -2. */
#ifndef GA_FAULT_GRAD_H
#define GA_FAULT_GRAD_H

#include <stddef.h>
#include <stdint.h>

static inline float ga_fault_dense_grad(uint32_t rank, uint64_t call, size_t i)
{
    return (float)((int)((i + 3u * (uint64_t)rank + 5u * call) % 3u) - 1);
}

static inline float ga_fault_dense_init(size_t i) { return (float)((int)(i % 1024u) - 512); }

static inline size_t ga_fault_slot(uint32_t rank, uint32_t world, uint64_t call)
{
    return (size_t)(call * world + rank);
}

#endif
