/* The files behind checkpoints and the journal: CRC-32C against its published check value, journal
 * records back in order, a torn or flipped record ending its segment (earlier ones kept), pruning,
 * checkpoints of a store round-tripping bit for bit, and a flipped byte, a cut file or a foreign
 * file refused; a synced segment leaves the page cache. */
#define _GNU_SOURCE /* mkdtemp */
#include <fcntl.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/vfs.h>
#include <unistd.h>

#include <cmocka.h>
#if __has_include(<valgrind/valgrind.h>)
#include <valgrind/valgrind.h>
#else
#define RUNNING_ON_VALGRIND 0
#endif

#include "ga_alloc.h"
#include "ga_wire.h"
#include "journal_fixture.h"
#include "persist/checkpoint.h"
#include "persist/crc32c.h"
#include "persist/dfile.h"
#include "persist/fileio.h"
#include "persist/journal.h"
#include "test_dirs.h"

static char base[64];

static void test_crc32c_check_value(void **state)
{
    (void)state;
    assert_int_equal(ga_crc32c(0, "123456789", 9), 0xE3069283u);
    /* Extending equals one pass, at any split (the hardware path takes 8 bytes at a time). */
    char buf[1000];
    for (size_t i = 0; i < sizeof buf; i++) buf[i] = (char)(i * 7 + 3);
    uint32_t whole = ga_crc32c(0, buf, sizeof buf);
    for (size_t cut = 0; cut <= sizeof buf; cut += 37)
        assert_int_equal(ga_crc32c(ga_crc32c(0, buf, cut), buf + cut, sizeof buf - cut), whole);
}

static void test_journal_replay_stops_at_damage(void **state)
{
    (void)state;
    char dir[128], why[256];
    ga_test_fresh_dir(dir, sizeof dir, base);
    ga_journal j;
    journal_of_commits(&j, dir, 4, 1);
    char path[256];
    snprintf(path, sizeof path, "%s", j.file.path);
    seen s = {0};
    ga_journal_end end;
    /* As a killed server leaves it: the last block's zero padding is still there, and is no
     * damage. */
    assert_true(file_size(path) % GA_DFILE_ALIGN == 0 && (uint64_t)file_size(path) > j.file.size);
    assert_int_equal(ga_journal_replay(dir, 0, 0, collect, &s, &end, why, sizeof why), GA_OK);
    assert_int_equal(s.n, 4);
    assert_true(end.torn == 0 && !end.damaged);
    uint64_t committed = j.file.size;
    ga_journal_close(&j);
    assert_int_equal(file_size(path), committed); /* the close cut the padding */

    memset(&s, 0, sizeof s);
    assert_int_equal(ga_journal_replay(dir, 0, 0, collect, &s, &end, why, sizeof why), GA_OK);
    assert_int_equal(s.n, 4);
    assert_true(end.torn == 0 && !end.damaged);
    assert_true(s.first[3] == 30.0f && s.seq[3] == 4);
    /* Only the records after a checkpoint's version come back. */
    memset(&s, 0, sizeof s);
    assert_int_equal(ga_journal_replay(dir, 2, 0, collect, &s, &end, why, sizeof why), GA_OK);
    assert_int_equal(s.n, 2);
    assert_int_equal(s.seq[0], 3);

    /* A cut-off tail (a killed write): the records before it stay. */
    off_t size = file_size(path);
    assert_int_equal(truncate(path, size - 100), 0);
    memset(&s, 0, sizeof s);
    assert_int_equal(ga_journal_replay(dir, 0, 0, collect, &s, &end, why, sizeof why), GA_OK);
    assert_int_equal(s.n, 3);
    assert_true(end.torn == 1 && !end.damaged);
    /* A flipped bit in the second record's payload, intact records after it: damage, not a torn
     * tail. The replay stops there, and says where. */
    flip_byte(path, size / 4 + 600);
    memset(&s, 0, sizeof s);
    assert_int_equal(ga_journal_replay(dir, 0, 0, collect, &s, &end, why, sizeof why), GA_OK);
    assert_int_equal(s.n, 1);
    assert_true(end.damaged && end.torn == 0);
    assert_int_equal(end.last_seq, 1);
    assert_non_null(strstr(end.where, "journal-"));

    /* A segment after the damage is not read: its records would land on a state that lacks the
     * damaged ones. */
    assert_int_equal(ga_journal_open(&j, dir, 5, GA_JOURNAL_SYNC_NONE, 1, why, sizeof why), GA_OK);
    ga_push *p = make_push(4, 1, 99.0f, 10);
    assert_int_equal(ga_journal_commit(&j, 5, p, why, sizeof why), GA_OK);
    ga_push_free(p);
    ga_journal_close(&j);
    memset(&s, 0, sizeof s);
    assert_int_equal(ga_journal_replay(dir, 0, 0, collect, &s, &end, why, sizeof why), GA_OK);
    assert_int_equal(s.n, 1);
    assert_true(end.damaged);
    /* ... unless a checkpoint covers the damaged segment: only the later one is needed. */
    memset(&s, 0, sizeof s);
    assert_int_equal(ga_journal_replay(dir, 4, 0, collect, &s, &end, why, sizeof why), GA_OK);
    assert_int_equal(s.n, 1);
    assert_true(s.first[0] == 99.0f && !end.damaged && end.damaged_covered == 1);
    /* With pushes ahead (staleness 2) the damaged segment may hold records past its successor's
     * start, up to seq 5 + 2: it is needed, and the damage stops the replay. */
    memset(&s, 0, sizeof s);
    assert_int_equal(ga_journal_replay(dir, 4, 2, collect, &s, &end, why, sizeof why), GA_OK);
    assert_true(end.damaged && s.n == 0);

    /* Pruning: the first segment goes once a kept checkpoint covers the second's start (plus the
     * staleness, with pushes ahead). */
    size_t removed;
    assert_int_equal(ga_journal_prune(dir, 4, 0, &removed, why, sizeof why), GA_OK);
    assert_int_equal(removed, 0);
    assert_int_equal(ga_journal_prune(dir, 6, 2, &removed, why, sizeof why), GA_OK);
    assert_int_equal(removed, 0);
    assert_int_equal(ga_journal_prune(dir, 5, 0, &removed, why, sizeof why), GA_OK);
    assert_int_equal(removed, 1);
    memset(&s, 0, sizeof s);
    assert_int_equal(ga_journal_replay(dir, 0, 0, collect, &s, &end, why, sizeof why), GA_OK);
    assert_int_equal(s.n, 1);
    assert_int_equal(ga_journal_prune(dir, 1000, 0, &removed, why, sizeof why), GA_OK);
    assert_int_equal(removed, 0); /* never the newest segment */
}

/* Segments 1..3 of one record each, then the last record cut short (a crash), then a segment
 * opened for `next_first` with one record: the journal as a restart after that crash leaves it
 * when next_first = 3 (it knew seq 2), or as damage would when the next segment starts later. */
static void torn_then(const char *dir, uint64_t next_first)
{
    char why[256];
    ga_journal j;
    journal_of_commits(&j, dir, 3, 1);
    char path[256];
    snprintf(path, sizeof path, "%s", j.file.path);
    ga_journal_close(&j);
    assert_int_equal(truncate(path, file_size(path) - 100), 0);
    assert_int_equal(ga_journal_open(&j, dir, next_first, GA_JOURNAL_SYNC_PUSH, 1, why, sizeof why), GA_OK);
    ga_push *p = make_push(next_first - 1, 0, 77.0f, 10);
    assert_int_equal(ga_journal_commit(&j, next_first, p, why, sizeof why), GA_OK);
    ga_push_free(p);
    ga_journal_close(&j);
}

static void test_journal_tells_a_torn_tail_from_damage(void **state)
{
    (void)state;
    char dir[128], why[256];
    seen s = {0};
    ga_journal_end end;
    /* The restart after the crash went on from seq 2: a torn tail, and the next segment is read. */
    ga_test_fresh_dir(dir, sizeof dir, base);
    torn_then(dir, 3);
    assert_int_equal(ga_journal_replay(dir, 0, 0, collect, &s, &end, why, sizeof why), GA_OK);
    assert_true(end.torn == 1 && !end.damaged);
    assert_int_equal(s.n, 3);
    assert_true(s.first[2] == 77.0f);
    /* The next segment starts at seq 5: the server once had seqs 3 and 4, now unreadable. */
    ga_test_fresh_dir(dir, sizeof dir, base);
    torn_then(dir, 5);
    memset(&s, 0, sizeof s);
    assert_int_equal(ga_journal_replay(dir, 0, 0, collect, &s, &end, why, sizeof why), GA_OK);
    assert_true(end.damaged && end.torn == 0);
    assert_int_equal(end.last_seq, 2);
    assert_int_equal(s.n, 2);
}

/* Whether a dropped page shows as gone: not on tmpfs, which keeps a file's pages as the file
 * itself, nor under valgrind, where the dropped pages still show as cached. */
static bool drops_show(const char *dir)
{
    struct statfs fs;
    assert_int_equal(statfs(dir, &fs), 0);
    return fs.f_type != 0x01021994 /* TMPFS_MAGIC */ && !RUNNING_ON_VALGRIND;
}

/* Pages of the file at path in the page cache, out of *pages. */
static size_t cached_pages(const char *path, size_t *pages)
{
    int fd = open(path, O_RDONLY);
    assert_true(fd >= 0);
    size_t len = (size_t)file_size(path), page = (size_t)sysconf(_SC_PAGESIZE);
    void *map = mmap(NULL, len, PROT_READ, MAP_SHARED, fd, 0); /* maps; reads nothing */
    assert_true(map != MAP_FAILED);
    *pages = (len + page - 1) / page;
    unsigned char *vec = malloc(*pages);
    assert_int_equal(mincore(map, len, vec), 0);
    size_t cached = 0;
    for (size_t i = 0; i < *pages; i++) cached += vec[i] & 1;
    free(vec);
    munmap(map, len);
    close(fd);
    return cached;
}

/* The journal's records never sit in the page cache: they are read back only by a replay at
 * start-up, and cached pages would make every step's appends take fresh ones (dfile.h): written
 * with direct I/O, they are never cached (the flush's drop is for file systems without it). */
static void test_journal_skips_the_page_cache(void **state)
{
    (void)state;
    char dir[128], why[256];
    ga_test_fresh_dir(dir, sizeof dir, base);
    if (!drops_show(dir)) {
        skip();
        return;
    }
    ga_journal j;
    assert_int_equal(ga_journal_open(&j, dir, 1, GA_JOURNAL_SYNC_STEP, 1, why, sizeof why), GA_OK);
    ga_push *p = make_push(0, 0, 1.0f, (size_t)1 << 20); /* a 4 MiB record */
    assert_int_equal(ga_journal_commit(&j, 1, p, why, sizeof why), GA_OK);
    ga_push_free(p);
    size_t pages;
    size_t cached = cached_pages(j.file.path, &pages);
    assert_true(pages > 1000);
    assert_true(j.file.direct); /* every disk file system gradagg runs on takes O_DIRECT */
    assert_true(cached <= 1);
    assert_int_equal(ga_journal_flush(&j, why, sizeof why), GA_OK);
    assert_true(cached_pages(j.file.path, &pages) <= 1);
    /* The records are all still there. */
    ga_journal_close(&j);
    seen s = {0};
    ga_journal_end end;
    assert_int_equal(ga_journal_replay(dir, 0, 0, collect, &s, &end, why, sizeof why), GA_OK);
    assert_int_equal(s.n, 1);
    assert_true(s.first[0] == 1.0f);
}

/* ---- direct-I/O files ---- */

/* One write of n bytes from src, mirrored into want at *have. */
static void put(ga_dfile *f, const uint8_t *src, size_t n, uint8_t *want, size_t *have)
{
    char why[256];
    assert_int_equal(ga_dfile_write(f, src, n, why, sizeof why), GA_OK);
    memcpy(want + *have, src, n);
    *have += n;
}

static void commit(ga_dfile *f, size_t have)
{
    char why[256];
    assert_int_equal(ga_dfile_commit(f, why, sizeof why), GA_OK);
    assert_int_equal(f->size, have);
    assert_int_equal(file_size(f->path) % GA_DFILE_ALIGN, 0); /* whole blocks until the close */
}

/* Appends of every awkward size (a byte, a block +- 1, more than a stage), commits, cuts of
 * uncommitted bytes (some already in the file) and of a committed tail: the closed file holds
 * exactly the committed bytes, in order. */
static void dfile_round_trip(bool direct)
{
    char dir[128], path[256], why[256];
    ga_test_fresh_dir(dir, sizeof dir, base);
    snprintf(path, sizeof path, "%s/f", dir);
    size_t big = 3u << 20, have = 0;
    uint8_t *src = malloc(big), *want = malloc(4 * big);
    for (size_t i = 0; i < big; i++) src[i] = (uint8_t)(i * 131u + i / 4099u + 1u);
    ga_dfile f;
    assert_int_equal(ga_dfile_create(&f, path, O_EXCL, 0640, direct, why, sizeof why), GA_OK);
    if (!direct) assert_false(f.direct);
    put(&f, src, 24, want, &have), put(&f, src + 5, 1, want, &have);
    commit(&f, have);
    put(&f, src + 7, GA_DFILE_ALIGN - 1, want, &have), put(&f, src + 11, GA_DFILE_ALIGN + 1, want, &have);
    commit(&f, have);
    /* Uncommitted bytes, a whole stage of them already written to the file: dropped. */
    assert_int_equal(ga_dfile_write(&f, src + 13, big - 13, why, sizeof why), GA_OK);
    assert_true(ga_dfile_cut(&f, f.size));
    assert_int_equal(file_size(path), have);
    put(&f, src + 17, 100, want, &have);
    commit(&f, have);
    put(&f, src + 19, GA_DFILE_STAGE - 3, want, &have);
    commit(&f, have);
    /* A committed tail cut back (a record whose sync failed): its block is read back. */
    size_t before = have;
    put(&f, src + 23, 5000, want, &have);
    commit(&f, have);
    assert_true(ga_dfile_cut(&f, before));
    have = before;
    put(&f, src + 29, 17, want, &have);
    commit(&f, have);
    ga_dfile_close(&f);
    assert_int_equal(file_size(path), have);
    uint8_t *got = malloc(have);
    FILE *in = fopen(path, "rb");
    assert_non_null(in);
    assert_int_equal(fread(got, 1, have, in), have);
    fclose(in);
    assert_memory_equal(got, want, have);
    free(got), free(src), free(want);
}

static void test_dfile_direct_round_trip(void **state)
{
    (void)state;
    dfile_round_trip(true);
}

static void test_dfile_buffered_round_trip(void **state)
{
    (void)state;
    dfile_round_trip(false);
}

/* ---- checkpoints ---- */

#define N 5000

typedef struct loaded {
    ga_ckpt_meta *meta;
    float values[GA_STORE_BUFS][N];
    uint32_t got;
} loaded;

static ga_status on_begin(void *arg, ga_ckpt_meta *m, char *why, size_t cap)
{
    (void)why, (void)cap;
    ((loaded *)arg)->meta = m;
    return GA_OK;
}

static ga_status on_buffer(void *arg, uint32_t t, ga_store_buf b, const float *v, char *why, size_t cap)
{
    (void)why, (void)cap;
    loaded *l = arg;
    assert_int_equal(t, 0);
    memcpy(l->values[b], v, N * sizeof *v);
    l->got |= 1u << b;
    return GA_OK;
}

static ga_ckpt_meta *meta_for(uint64_t version)
{
    ga_ckpt_meta *m = ga_calloc(1, sizeof *m);
    m->job = ga_strdup("job");
    m->config = ga_malloc(3), m->config_len = 3;
    memcpy(m->config, "\x08\x02\x10", 3);
    m->version = version, m->unix_ms = 1234;
    m->world = 2;
    m->members = ga_calloc(2, sizeof *m->members);
    m->members[1] = (ga_ckpt_member){77, 5, 0x1f, true, false};
    m->ntensors = 1;
    m->tensors = ga_calloc(1, sizeof *m->tensors);
    m->tensors[0].name = ga_strdup("w");
    m->tensors[0].ndim = 2;
    m->tensors[0].shape = ga_malloc(2 * sizeof(uint64_t));
    m->tensors[0].shape[0] = 50, m->tensors[0].shape[1] = 100;
    m->tensors[0].elements = N;
    return m;
}

static void test_checkpoint_round_trip_and_damage(void **state)
{
    (void)state;
    char dir[128], why[256];
    ga_test_fresh_dir(dir, sizeof dir, base);
    ga_store_config cfg = {.backend = GA_BACKEND_CPU, .optim = GA_OPTIM_ADAM, .piece_elems = 1024,
                           .adam = {0.01f, 0.9f, 0.999f, 1e-8f, 0.0f, false}, .pull_codec = GA_CODEC_NONE};
    ga_store *s;
    assert_int_equal(ga_store_create(&cfg, &s), GA_OK);
    float init[N];
    for (int i = 0; i < N; i++) init[i] = (float)i * 0.25f - 3.0f;
    uint32_t index;
    ga_published pub;
    assert_int_equal(ga_store_add_tensor(s, N, init, &index, &pub), GA_OK);
    ga_published_clear(&pub);
    float g[N];
    for (int i = 0; i < N; i++) g[i] = (float)((i * 37) % 11) - 5.0f;
    ga_codec_params none = {0};
    for (int step = 0; step < 3; step++) {
        assert_int_equal(ga_store_accumulate(s, 0, 0, N, GA_CODEC_NONE, &none, g, sizeof g), GA_OK);
        assert_int_equal(ga_store_apply(s, 1, &pub), GA_OK);
        ga_published_clear(&pub);
    }
    uint64_t oldest = 0;
    for (uint64_t v = 1; v <= 4; v++) {
        ga_ckpt_meta *m = meta_for(v);
        assert_int_equal(ga_ckpt_write(dir, m, s, 3, &oldest, why, sizeof why), GA_OK);
        ga_ckpt_meta_free(m);
    }
    assert_int_equal(oldest, 2); /* keep 3: versions 2, 3, 4 */
    char **names;
    size_t n;
    assert_int_equal(ga_ckpt_list(dir, &names, &n, why, sizeof why), GA_OK);
    assert_int_equal(n, 3);
    assert_string_equal(names[0], "checkpoint-00000000000000000004.gack");
    char path[256];
    snprintf(path, sizeof path, "%s/%s", dir, names[0]);
    ga_file_names_free(names, n);
    size_t pages;
    if (drops_show(dir)) assert_true(cached_pages(path, &pages) <= 1); /* synced, then dropped */

    loaded *l = ga_calloc(1, sizeof *l);
    ga_ckpt_loader ld = {on_begin, on_buffer, l};
    assert_int_equal(ga_ckpt_load(path, &ld, why, sizeof why), GA_OK);
    assert_int_equal(l->meta->version, 4);
    assert_string_equal(l->meta->job, "job");
    assert_int_equal(l->meta->members[1].incarnation, 77);
    assert_int_equal(l->meta->members[1].commit_mask, 0x1f);
    assert_int_equal(l->meta->tensors[0].adam_steps, 3);
    assert_int_equal(l->meta->tensors[0].shape[1], 100);
    assert_int_equal(l->got, 1u << GA_STORE_BUF_PARAMS | 1u << GA_STORE_BUF_STATE0 | 1u << GA_STORE_BUF_STATE1);
    for (int b = 0; b < 3; b++) {
        float now[N];
        assert_int_equal(ga_store_read(s, 0, (ga_store_buf)b, 0, N, now), GA_OK);
        assert_memory_equal(now, l->values[b], sizeof now);
    }
    ga_ckpt_meta_free(l->meta);

    /* A flipped byte anywhere, a cut tail, and a file that is no checkpoint are refused. */
    off_t size = file_size(path);
    off_t spots[] = {3, 40, size / 2, size - 30};
    for (size_t i = 0; i < sizeof spots / sizeof *spots; i++) {
        flip_byte(path, spots[i]);
        memset(l, 0, sizeof *l);
        assert_int_equal(ga_ckpt_load(path, &ld, why, sizeof why), GA_E_PROTO);
        assert_null(l->meta); /* nothing handed out before the checksum passed */
        flip_byte(path, spots[i]);
    }
    assert_int_equal(truncate(path, size - 1), 0);
    assert_int_equal(ga_ckpt_load(path, &ld, why, sizeof why), GA_E_PROTO);
    assert_non_null(strstr(why, "trailer"));
    FILE *f = fopen(path, "w");
    fputs("not a checkpoint at all, but long enough to have a trailer spot", f);
    fclose(f);
    assert_int_equal(ga_ckpt_load(path, &ld, why, sizeof why), GA_E_PROTO);
    ga_free(l);
    ga_store_destroy(s);
}

int main(void)
{
    snprintf(base, sizeof base, "/tmp/ga_persist_XXXXXX");
    if (!mkdtemp(base)) return 1;
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_crc32c_check_value),
        cmocka_unit_test(test_journal_replay_stops_at_damage),
        cmocka_unit_test(test_journal_tells_a_torn_tail_from_damage),
        cmocka_unit_test(test_journal_skips_the_page_cache),
        cmocka_unit_test(test_dfile_direct_round_trip),
        cmocka_unit_test(test_dfile_buffered_round_trip),
        cmocka_unit_test(test_checkpoint_round_trip_and_damage),
    };
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    ga_test_remove_dir(base);
    return rc;
}
