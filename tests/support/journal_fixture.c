/* The journal tests' fixture (journal_fixture.h). */
#define _GNU_SOURCE
#include "journal_fixture.h"

#include <fcntl.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

#include "ga_alloc.h"
#include "ga_wire.h"

ga_push *make_push(uint64_t step, uint32_t rank, float value, size_t count)
{
    float *v = ga_malloc(count * sizeof *v);
    for (size_t i = 0; i < count; i++) v[i] = value + (float)i;
    Gradagg__V1__Codec codec = GRADAGG__V1__CODEC__INIT;
    Gradagg__V1__PushChunk c = GRADAGG__V1__PUSH_CHUNK__INIT;
    c.job = "j", c.rank = rank, c.incarnation = 9, c.step = step, c.tensor = "w", c.offset = 0, c.count = count;
    c.codec = &codec;
    c.payload.data = (uint8_t *)v, c.payload.len = count * sizeof *v;
    size_t len = protobuf_c_message_get_packed_size(&c.base);
    uint8_t *bytes = ga_malloc(len);
    protobuf_c_message_pack(&c.base, bytes);
    ga_free(v);
    ProtobufCMessage *m =
        protobuf_c_message_unpack(&gradagg__v1__push_chunk__descriptor, &ga_wire_allocator, len, bytes);
    ga_free(bytes);
    ga_push *push = NULL;
    char why[256];
    assert_int_equal(ga_push_add(&push, (Gradagg__V1__PushChunk *)m, SIZE_MAX, NULL, why, sizeof why), GA_OK);
    return push;
}

ga_status collect(void *arg, const ga_journal_record *r, char *why, size_t cap)
{
    seen *s = arg;
    assert_int_equal(r->type, GA_JOURNAL_COMMIT);
    ga_push *p;
    GA_CHECK(ga_journal_decode_push(r, &p, why, cap));
    s->seq[s->n] = r->seq;
    memcpy(&s->first[s->n], p->parts[0].chunk->payload.data, sizeof(float));
    assert_int_equal(p->step + 1, r->seq);
    s->n++;
    ga_push_free(p);
    return GA_OK;
}

off_t file_size(const char *path)
{
    struct stat sb;
    assert_int_equal(stat(path, &sb), 0);
    return sb.st_size;
}

void flip_byte(const char *path, off_t at)
{
    int fd = open(path, O_RDWR);
    uint8_t b;
    assert_int_equal(pread(fd, &b, 1, at), 1);
    b ^= 0x40;
    assert_int_equal(pwrite(fd, &b, 1, at), 1);
    close(fd);
}

void journal_of_commits(ga_journal *j, const char *dir, uint64_t count, uint32_t copies)
{
    char why[256];
    assert_int_equal(ga_journal_open(j, dir, 1, GA_JOURNAL_SYNC_PUSH, copies, why, sizeof why), GA_OK);
    for (uint64_t s = 0; s < count; s++) {
        ga_push *p = make_push(s, 0, (float)(10 * s), 300);
        assert_int_equal(ga_journal_commit(j, s + 1, p, why, sizeof why), GA_OK);
        ga_push_free(p);
    }
}
