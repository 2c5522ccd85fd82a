/* The journal's second copy (--journal-copies 2, journal.h): the two files hold the same bytes;
 * a record flipped, cut off or unreadable in one is read from the other; only a record that both
 * lose is damage or a torn tail; the copy is read only where the segment fails; pruning takes
 * both. Unreadable sectors come from an interposed pread that fails with EIO on a byte range of
 * one file (as a disk's bad sector reads). */
#define _GNU_SOURCE /* RTLD_NEXT, pread64 */
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

#include "ga_alloc.h"
#include "journal_fixture.h"
#include "persist/journal.h"
#include "test_dirs.h"

static char base[64];

/* ---- a bad sector: pread of [bad_from, bad_from + 512) of the file bad_path fails with EIO ---- */

static char bad_path[256];
static off_t bad_from;

static bool hits_bad_sector(int fd, size_t n, off_t off)
{
    if (!bad_path[0]) return false;
    char link[64], target[256];
    snprintf(link, sizeof link, "/proc/self/fd/%d", fd);
    ssize_t len = readlink(link, target, sizeof target - 1);
    if (len < 0) return false;
    target[len] = 0;
    return strcmp(target, bad_path) == 0 && off < bad_from + 512 && off + (off_t)n > bad_from;
}

typedef ssize_t (*pread_fn)(int, void *, size_t, off_t);

ssize_t pread(int fd, void *buf, size_t n, off_t off)
{
    static pread_fn next;
    if (!next) next = (pread_fn)dlsym(RTLD_NEXT, "pread");
    if (hits_bad_sector(fd, n, off)) return errno = EIO, -1;
    return next(fd, buf, n, off);
}

ssize_t pread64(int fd, void *buf, size_t n, off_t off)
{
    static pread_fn next;
    if (!next) next = (pread_fn)dlsym(RTLD_NEXT, "pread64");
    if (hits_bad_sector(fd, n, off)) return errno = EIO, -1;
    return next(fd, buf, n, off);
}

/* ---- helpers ---- */

/* The .copy of a segment path ending in .log. */
static void copy_of(char *out, size_t cap, const char *path)
{
    snprintf(out, cap, "%.*s.copy", (int)(strlen(path) - strlen(".log")), path);
}

static uint8_t *read_all(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    assert_non_null(f);
    *len = (size_t)file_size(path);
    uint8_t *b = malloc(*len + 1);
    assert_int_equal(fread(b, 1, *len, f), *len);
    fclose(f);
    return b;
}

/* A fresh dir holding one closed segment and its copy of 4 commits (seq 1..4, first values
 * 0, 10, 20, 30). */
static void four_commits(char *dir, size_t dir_cap, char *path, char *copy, size_t cap)
{
    ga_test_fresh_dir(dir, dir_cap, base);
    ga_journal j;
    journal_of_commits(&j, dir, 4, 2);
    snprintf(path, cap, "%s", j.file.path);
    copy_of(copy, cap, path);
    assert_string_equal(j.copy.path, copy);
    ga_journal_close(&j);
}

static void replay(const char *dir, seen *s, ga_journal_end *end)
{
    char why[256];
    memset(s, 0, sizeof *s);
    assert_int_equal(ga_journal_replay(dir, 0, 0, collect, s, end, why, sizeof why), GA_OK);
}

static void assert_all_four(const seen *s)
{
    assert_int_equal(s->n, 4);
    for (int i = 0; i < 4; i++) {
        assert_int_equal(s->seq[i], (uint64_t)i + 1);
        assert_true(s->first[i] == (float)(10 * i));
    }
}

/* ---- tests ---- */

static void test_copy_holds_the_same_bytes(void **state)
{
    (void)state;
    char dir[128], path[256], copy[256];
    four_commits(dir, sizeof dir, path, copy, sizeof path);
    size_t a, b;
    uint8_t *x = read_all(path, &a), *y = read_all(copy, &b);
    assert_true(a > 4 * 1200);
    assert_int_equal(a, b);
    assert_memory_equal(x, y, a);
    free(x), free(y);
    seen s;
    ga_journal_end end;
    replay(dir, &s, &end);
    assert_all_four(&s);
    assert_true(end.from_copy == 0 && !end.damaged && end.torn == 0);
}

static void test_copy_heals_flipped_bytes(void **state)
{
    (void)state;
    char dir[128], path[256], copy[256];
    four_commits(dir, sizeof dir, path, copy, sizeof path);
    off_t size = file_size(path);
    seen s;
    ga_journal_end end;
    /* The second record flipped in the segment: read from the copy, nothing lost. */
    flip_byte(path, size / 4 + 600);
    replay(dir, &s, &end);
    assert_all_four(&s);
    assert_true(end.from_copy == 1 && !end.damaged && end.torn == 0);
    /* The third flipped in the copy as well: each file gives what the other lost. */
    flip_byte(copy, 2 * size / 4 + 600);
    replay(dir, &s, &end);
    assert_all_four(&s);
    assert_true(end.from_copy == 1 && !end.damaged);
    /* A header's length flipped in the segment: the copy's record sets where the next starts. */
    flip_byte(path, 3 * size / 4 + 20);
    replay(dir, &s, &end);
    assert_all_four(&s);
    assert_true(end.from_copy == 2 && !end.damaged);
    /* The second record lost in both: damage, the replay stops there and says where. */
    flip_byte(copy, size / 4 + 700);
    replay(dir, &s, &end);
    assert_int_equal(s.n, 1);
    assert_true(end.damaged && end.torn == 0);
    assert_int_equal(end.last_seq, 1);
    assert_non_null(strstr(end.where, ".log at byte"));
}

static void test_copy_is_read_only_where_the_segment_fails(void **state)
{
    (void)state;
    char dir[128], path[256], copy[256];
    seen s;
    ga_journal_end end;
    /* The segment cut short mid-record (its file damaged), the copy whole: all four. */
    four_commits(dir, sizeof dir, path, copy, sizeof path);
    off_t size = file_size(path);
    assert_int_equal(truncate(path, size - 100), 0);
    replay(dir, &s, &end);
    assert_all_four(&s);
    assert_true(end.from_copy == 1 && end.torn == 0 && !end.damaged);
    /* Both cut short in the last record (a crash amid the write of both): a torn tail. */
    assert_int_equal(truncate(copy, size - 50), 0);
    replay(dir, &s, &end);
    assert_int_equal(s.n, 3);
    assert_true(end.torn == 1 && !end.damaged);
    /* The segment ends cleanly after record 3 and only the copy has a fourth: a record its
     * segment never had (its write failed and the cut of the segment did), so never
     * acknowledged: not replayed. */
    four_commits(dir, sizeof dir, path, copy, sizeof path);
    assert_int_equal(truncate(path, 3 * size / 4), 0);
    replay(dir, &s, &end);
    assert_int_equal(s.n, 3);
    assert_true(end.from_copy == 0 && end.torn == 0 && !end.damaged);
    /* The segment's file gone, its copy kept: the copy is read alone. */
    four_commits(dir, sizeof dir, path, copy, sizeof path);
    assert_int_equal(unlink(path), 0);
    replay(dir, &s, &end);
    assert_all_four(&s);
    assert_true(end.from_copy == 4 && !end.damaged);
}

static void test_unreadable_sector_is_damage_or_read_from_the_copy(void **state)
{
    (void)state;
    char dir[128], path[256], copy[256];
    seen s;
    ga_journal_end end;
    /* One copy, the last record unreadable (EIO): damage, never a torn tail (a read error is no
     * trace of a cut write), so the job is refused, not served three steps back silently. */
    ga_test_fresh_dir(dir, sizeof dir, base);
    ga_journal j;
    journal_of_commits(&j, dir, 4, 1);
    snprintf(path, sizeof path, "%s", j.file.path);
    ga_journal_close(&j);
    off_t size = file_size(path);
    assert_non_null(realpath(path, bad_path));
    bad_from = 3 * size / 4 + 512;
    replay(dir, &s, &end);
    assert_int_equal(s.n, 3);
    assert_true(end.damaged && end.torn == 0);
    assert_int_equal(end.last_seq, 3);
    /* Two copies, the same sector of the segment unreadable: read from the copy. */
    four_commits(dir, sizeof dir, path, copy, sizeof path);
    assert_non_null(realpath(path, bad_path));
    replay(dir, &s, &end);
    assert_all_four(&s);
    assert_true(end.from_copy == 1 && !end.damaged);
    /* ... unless the copy's fourth record is bad too: then the record is lost, damage. */
    bad_path[0] = 0;
    flip_byte(copy, 3 * size / 4 + 600);
    assert_non_null(realpath(path, bad_path));
    replay(dir, &s, &end);
    assert_int_equal(s.n, 3);
    assert_true(end.damaged);
    bad_path[0] = 0;
}

static void test_prune_takes_both_copies(void **state)
{
    (void)state;
    char dir[128], why[256], path[256], copy[256];
    four_commits(dir, sizeof dir, path, copy, sizeof path);
    ga_journal j;
    assert_int_equal(ga_journal_open(&j, dir, 5, GA_JOURNAL_SYNC_NONE, 2, why, sizeof why), GA_OK);
    ga_push *p = make_push(4, 1, 40.0f, 300);
    assert_int_equal(ga_journal_commit(&j, 5, p, why, sizeof why), GA_OK);
    ga_push_free(p);
    char newest[256], newest_copy[256];
    snprintf(newest, sizeof newest, "%s", j.file.path);
    copy_of(newest_copy, sizeof newest_copy, newest);
    ga_journal_close(&j);
    size_t removed;
    assert_int_equal(ga_journal_prune(dir, 5, 0, &removed, why, sizeof why), GA_OK);
    assert_int_equal(removed, 1);
    struct stat sb;
    assert_int_equal(stat(path, &sb), -1);
    assert_int_equal(stat(copy, &sb), -1);
    assert_int_equal(stat(newest, &sb), 0);
    assert_int_equal(stat(newest_copy, &sb), 0);
    /* A journal reopened with one copy goes on after both (the counter counts copies too). */
    assert_int_equal(ga_journal_open(&j, dir, 6, GA_JOURNAL_SYNC_NONE, 1, why, sizeof why), GA_OK);
    assert_int_equal(j.copy.fd, -1);
    assert_true(strcmp(j.file.path, newest) > 0);
    ga_journal_close(&j);
}

int main(void)
{
    snprintf(base, sizeof base, "/tmp/ga_jcopies_XXXXXX");
    if (!mkdtemp(base)) return 1;
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_copy_holds_the_same_bytes),
        cmocka_unit_test(test_copy_heals_flipped_bytes),
        cmocka_unit_test(test_copy_is_read_only_where_the_segment_fails),
        cmocka_unit_test(test_unreadable_sector_is_damage_or_read_from_the_copy),
        cmocka_unit_test(test_prune_takes_both_copies),
    };
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    ga_test_remove_dir(base);
    return rc;
}
