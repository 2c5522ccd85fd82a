/* The cost of the journal's second copy (--journal-copies 2, service/persist/journal.h): one step of W
 * pushes of N fp32 elements each, journaled as the server journals them (ga_journal_commit per
 * push, then the step's close with its fdatasync, --journal-sync step), into a fresh directory
 * per step, with one copy and with two, alternated round by round. Prints per setting the median
 * wall and CPU seconds of a step and the journal's write rate, and the ratios of two copies to
 * one. The disk and the page cache are shared with whatever else runs: medians of alternated
 * rounds, and ratios, not absolute times.
 *
 * Usage: bench_journal [--dir DIR] [--world 4] [--elements 25000000] [--rounds 5] [--json FILE] */
#define _GNU_SOURCE /* RUSAGE_THREAD */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>

#include "bench_util.h"
#include "bundle/bundle.h"
#include "ga_alloc.h"
#include "ga_wire.h"
#include "persist/fileio.h"
#include "persist/journal.h"

#define MAX_ROUNDS 64

static double cpu_s(void)
{
    struct rusage ru;
    getrusage(RUSAGE_THREAD, &ru);
    return (double)ru.ru_utime.tv_sec + (double)ru.ru_stime.tv_sec +
           1e-6 * (double)(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec);
}

/* A push of one chunk of n fp32 values by rank, as the network delivers it. */
static ga_push *make_push(uint32_t rank, const float *v, size_t n)
{
    Gradagg__V1__Codec codec = GRADAGG__V1__CODEC__INIT;
    Gradagg__V1__PushChunk c = GRADAGG__V1__PUSH_CHUNK__INIT;
    c.job = "bench", c.rank = rank, c.incarnation = 1, c.step = 0, c.tensor = "w", c.offset = 0, c.count = n;
    c.codec = &codec;
    c.payload.data = (uint8_t *)v, c.payload.len = n * sizeof *v;
    size_t len = protobuf_c_message_get_packed_size(&c.base);
    uint8_t *bytes = ga_malloc(len);
    if (!bytes) return NULL;
    protobuf_c_message_pack(&c.base, bytes);
    ProtobufCMessage *m =
        protobuf_c_message_unpack(&gradagg__v1__push_chunk__descriptor, &ga_wire_allocator, len, bytes);
    ga_free(bytes);
    ga_push *push = NULL;
    char why[256];
    if (!m || ga_push_add(&push, (Gradagg__V1__PushChunk *)m, SIZE_MAX, NULL, why, sizeof why) != GA_OK) return NULL;
    return push;
}

/* One step into a fresh dir: world commits and the close (synced). Wall and CPU seconds. */
static int one_step(const char *dir, uint32_t copies, ga_push **pushes, int world, double *wall, double *cpu)
{
    char why[512];
    ga_journal j;
    if (ga_journal_open(&j, dir, 1, GA_JOURNAL_SYNC_STEP, copies, why, sizeof why) != GA_OK) goto fail;
    double t0 = bench_now_s(), c0 = cpu_s();
    for (int r = 0; r < world; r++)
        if (ga_journal_commit(&j, 1, pushes[r], why, sizeof why) != GA_OK) goto fail_open;
    if (ga_journal_close_step(&j, 2, why, sizeof why) != GA_OK) goto fail_open;
    *wall = bench_now_s() - t0, *cpu = cpu_s() - c0;
    ga_journal_close(&j);
    return ga_file_remove_dir(dir, why, sizeof why) == GA_OK ? 0 : (fprintf(stderr, "%s\n", why), 1);
fail_open:
    ga_journal_close(&j);
fail:
    fprintf(stderr, "bench_journal: %s\n", why);
    return 1;
}

int main(int argc, char **argv)
{
    const char *base = "build/results/bench_journal.d", *json = NULL;
    int world = 4, rounds = 5;
    size_t elements = 25000000;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--dir") && i + 1 < argc) base = argv[++i];
        else if (!strcmp(argv[i], "--world") && i + 1 < argc) world = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--elements") && i + 1 < argc) elements = (size_t)strtoull(argv[++i], NULL, 10);
        else if (!strcmp(argv[i], "--rounds") && i + 1 < argc) rounds = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--json") && i + 1 < argc) json = argv[++i];
        else {
            fprintf(stderr, "usage: %s [--dir DIR] [--world W] [--elements N] [--rounds R] [--json FILE]\n", argv[0]);
            return 2;
        }
    }
    if (world < 1 || world > 64 || rounds < 1 || rounds > MAX_ROUNDS || elements == 0) {
        fprintf(stderr, "bench_journal: --world 1..64, --rounds 1..%d, --elements > 0\n", MAX_ROUNDS);
        return 2;
    }
    float *v = ga_malloc(elements * sizeof *v);
    ga_push **pushes = ga_calloc((size_t)world, sizeof *pushes);
    if (!v || !pushes) return 1;
    for (int r = 0; r < world; r++) {
        bench_fill(v, elements, (unsigned)r + 1, 1.0f);
        if (!(pushes[r] = make_push((uint32_t)r, v, elements))) return 1;
    }
    ga_free(v);
    char dir[4096], why[512];
    if (ga_file_mkdirs(base, why, sizeof why) != GA_OK) {
        fprintf(stderr, "bench_journal: %s\n", why);
        return 1;
    }
    snprintf(dir, sizeof dir, "%s/step", base);
    double wall[2][MAX_ROUNDS], cpu[2][MAX_ROUNDS], scratch_w, scratch_c;
    if (one_step(dir, 1, pushes, world, &scratch_w, &scratch_c)) return 1; /* warm-up, not counted */
    for (int k = 0; k < rounds; k++)
        for (int c = 0; c < 2; c++) {
            uint32_t copies = (uint32_t)((k + c) % 2) + 1; /* 1,2 then 2,1: neither always goes first */
            if (one_step(dir, copies, pushes, world, &wall[copies - 1][k], &cpu[copies - 1][k])) return 1;
        }
    double mb = (double)world * (double)elements * 4.0 / 1e6, w[2], u[2];
    printf("bench_journal: a step of %d pushes x %zu fp32 (%.0f MB) journaled and synced, %d alternated rounds\n",
           world, elements, mb, rounds);
    printf("%-8s %12s %12s %14s\n", "copies", "step s", "cpu s", "journal MB/s");
    for (int c = 0; c < 2; c++) {
        w[c] = bench_median(wall[c], rounds), u[c] = bench_median(cpu[c], rounds);
        printf("%-8d %12.3f %12.3f %14.0f\n", c + 1, w[c], u[c], mb * (c + 1) / w[c]);
    }
    printf("two copies / one: step time %.2fx, CPU %.2fx\n", w[1] / w[0], u[1] / u[0]);
    if (json) {
        FILE *f = fopen(json, "w");
        if (!f) return 1;
        fprintf(f,
                "{\"world\": %d, \"elements\": %zu, \"rounds\": %d, \"step_s\": [%.6f, %.6f], \"cpu_s\": [%.6f, %.6f], "
                "\"step_ratio\": %.4f, \"cpu_ratio\": %.4f}\n",
                world, elements, rounds, w[0], w[1], u[0], u[1], w[1] / w[0], u[1] / u[0]);
        fclose(f);
    }
    for (int r = 0; r < world; r++) ga_push_free(pushes[r]);
    ga_free(pushes);
    return 0;
}
