/* Internal: run a CPU kernel over [0, n) in tiles, on as many OpenMP threads as the size
 * warrants (ga_exec_threads), one thread with no OpenMP team for small inputs. Tiles are
 * contiguous and aligned to GA_TILE elements, a multiple of every codec's block, so each tile
 * writes whole output words and the result does not depend on the thread count. */
#ifndef GA_PARALLEL_H
#define GA_PARALLEL_H

#include <stddef.h>
#include <stdint.h>

#include "ga_exec.h"

#define GA_TILE ((size_t)32768) /* elements; multiple of 1024 */

/* fn processes [lo, hi) and returns flags; ga_parallel_tiles returns the OR of all flags. */
typedef uint32_t (*ga_tile_fn)(void *ctx, size_t lo, size_t hi);

static inline uint32_t ga_parallel_tiles(const ga_exec *ex, size_t n, double bytes_per_elem, ga_tile_fn fn,
                                         void *ctx)
{
    if (n == 0) return 0;
    int threads = ga_exec_threads(ex, (double)n * bytes_per_elem);
    size_t tiles = (n + GA_TILE - 1) / GA_TILE;
    if (threads <= 1 || tiles <= 1) return fn(ctx, 0, n);
    if ((size_t)threads > tiles) threads = (int)tiles;
    uint32_t flags = 0;
#pragma omp parallel for schedule(static) num_threads(threads) reduction(| : flags)
    for (size_t t = 0; t < tiles; t++) {
        size_t lo = t * GA_TILE, hi = lo + GA_TILE < n ? lo + GA_TILE : n;
        flags |= fn(ctx, lo, hi);
    }
    return flags;
}

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define GA_X86 1
#define GA_TARGET_AVX2 __attribute__((target("avx2,f16c,bmi2,popcnt")))
#define GA_TARGET_AVX512 __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx2,f16c,bmi2,popcnt")))
#else
#define GA_X86 0
#endif

/* A kernel compiled for AVX-512, AVX2 and plain x86-64, the loader picking one for the CPU. A
 * ThreadSanitizer build (GA_NO_TARGET_CLONES) keeps the default clone only: TSan instruments the
 * clones' ifunc resolvers, which the loader runs before the TSan runtime starts. */
#if GA_X86 && !defined(GA_NO_TARGET_CLONES)
#define GA_CLONES __attribute__((target_clones("avx512f", "avx2", "default")))
#else
#define GA_CLONES
#endif

#endif
