/* The method table against the protobuf-c service descriptors and the .proto sources (names,
 * paths, message types, streaming kinds); the ga_status <-> gRPC status table; packing with a
 * zero-copy payload and unpacking, malformed bytes included. No network. */
#include <grpc/byte_buffer.h>
#include <grpc/byte_buffer_reader.h>
#include <grpc/grpc.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "test_memory.h"

#include "ga_alloc.h"
#include "ga_methods.h"
#include "ga_wire.h"

#ifndef GA_PROTO_DIR
#error "GA_PROTO_DIR (the proto/ source directory) must be defined by the build"
#endif

#define COUNT(a) (sizeof(a) / sizeof((a)[0]))

static const ProtobufCServiceDescriptor *const services[] = {&gradagg__v1__aggregator__descriptor,
                                                             &grpc__health__v1__health__descriptor};

/* ---- the table against the descriptors ---- */

static void test_rows_match_descriptors(void **state)
{
    (void)state;
    for (int i = 0; i < GA_METHODS; i++) {
        const ga_method *m = &ga_methods[i];
        const ProtobufCServiceDescriptor *svc = NULL;
        for (size_t k = 0; k < COUNT(services); k++)
            if (strcmp(services[k]->name, m->service) == 0) svc = services[k];
        assert_non_null(svc);
        const ProtobufCMethodDescriptor *md = protobuf_c_service_descriptor_get_method_by_name(svc, m->name);
        assert_non_null(md);
        assert_ptr_equal(md->input, m->request);
        assert_ptr_equal(md->output, m->response);
        char path[256];
        snprintf(path, sizeof path, "/%s/%s", svc->name, md->name);
        assert_string_equal(m->path, path);
        assert_ptr_equal(ga_method_by_path(path, strlen(path)), m);
        for (int j = 0; j < i; j++) assert_string_not_equal(ga_methods[j].path, m->path);
    }
    /* ... and every method of both services has a row. */
    unsigned total = 0;
    for (size_t k = 0; k < COUNT(services); k++) {
        total += services[k]->n_methods;
        for (unsigned j = 0; j < services[k]->n_methods; j++) {
            char path[256];
            snprintf(path, sizeof path, "/%s/%s", services[k]->name, services[k]->methods[j].name);
            assert_non_null(ga_method_by_path(path, strlen(path)));
        }
    }
    assert_int_equal(total, GA_METHODS);
}

static void test_by_path_exact(void **state)
{
    (void)state;
    const char *push = "/gradagg.v1.Aggregator/Push";
    assert_ptr_equal(ga_method_by_path(push, strlen(push)), &ga_methods[GA_METHOD_PUSH]);
    assert_null(ga_method_by_path(push, strlen(push) - 1));       /* a prefix */
    assert_null(ga_method_by_path("/gradagg.v1.Aggregator/PushX", 28)); /* longer */
    assert_null(ga_method_by_path("/gradagg.v1.Aggregator/push", 27)); /* case */
    assert_null(ga_method_by_path("", 0));
    assert_null(ga_method_by_path(NULL, 0));
    /* len counts: bytes after it are not part of the path */
    assert_ptr_equal(ga_method_by_path("/grpc.health.v1.Health/CheckXYZ", 28), &ga_methods[GA_METHOD_HEALTH_CHECK]);
}

/* ---- the streaming kinds against the .proto sources ---- */

static char *read_text(const char *path)
{
    FILE *f = fopen(path, "rb");
    assert_non_null(f);
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *s = malloc((size_t)n + 1);
    assert_non_null(s);
    assert_int_equal(fread(s, 1, (size_t)n, f), (size_t)n);
    s[n] = '\0';
    fclose(f);
    return s;
}

static const char *skip_space(const char *p)
{
    while (*p == ' ' || *p == '\t' || *p == '\n' || *p == '\r') p++;
    return p;
}

static size_t ident(const char *p)
{
    size_t n = 0;
    while ((p[n] >= 'a' && p[n] <= 'z') || (p[n] >= 'A' && p[n] <= 'Z') || (p[n] >= '0' && p[n] <= '9') ||
           p[n] == '_' || p[n] == '.')
        n++;
    return n;
}

/* Parses "( [stream] Type )" at p; returns the position after ')' and whether it streams. */
static const char *parse_arg(const char *p, bool *streams)
{
    p = skip_space(p);
    assert_int_equal(*p, '(');
    p = skip_space(p + 1);
    *streams = strncmp(p, "stream", 6) == 0 && (p[6] == ' ' || p[6] == '\t');
    if (*streams) p = skip_space(p + 6);
    p += ident(p);
    p = skip_space(p);
    assert_int_equal(*p, ')');
    return p + 1;
}

/* Checks every `rpc` line of one .proto file against the table; returns how many there were. */
static int check_proto(const char *file)
{
    char *text = read_text(file);
    /* Comments out, so "rpc" or "stream" in prose is not read as syntax. */
    for (char *c = strstr(text, "//"); c; c = strstr(c, "//"))
        while (*c && *c != '\n') *c++ = ' ';
    char pkg[128] = "", svc[128] = "";
    const char *p = strstr(text, "\npackage ");
    assert_non_null(p);
    p = skip_space(p + 9);
    snprintf(pkg, sizeof pkg, "%.*s", (int)ident(p), p);
    /* A declaration starts a line ("string service = 1;" is a field). */
    p = strstr(text, "\nservice ");
    assert_non_null(p);
    p = skip_space(p + 9);
    snprintf(svc, sizeof svc, "%.*s", (int)ident(p), p);
    assert_null(strstr(p, "\nservice ")); /* one service per file */
    int rpcs = 0;
    for (const char *r = strstr(text, "rpc "); r; r = strstr(r + 1, "rpc ")) {
        if (r > text && r[-1] != ' ' && r[-1] != '\n' && r[-1] != '\t') continue;
        const char *q = skip_space(r + 4);
        char name[128];
        snprintf(name, sizeof name, "%.*s", (int)ident(q), q);
        bool in_stream, out_stream;
        q = parse_arg(q + ident(q), &in_stream);
        q = skip_space(q);
        assert_int_equal(strncmp(q, "returns", 7), 0);
        parse_arg(q + 7, &out_stream);
        char path[400];
        snprintf(path, sizeof path, "/%s.%s/%s", pkg, svc, name);
        const ga_method *m = ga_method_by_path(path, strlen(path));
        assert_non_null(m);
        assert_false(in_stream && out_stream); /* no bidi method in the table's kinds */
        ga_rpc_kind kind = in_stream ? GA_RPC_CLIENT_STREAM : out_stream ? GA_RPC_SERVER_STREAM : GA_RPC_UNARY;
        assert_int_equal(m->kind, kind);
        rpcs++;
    }
    free(text);
    return rpcs;
}

static void test_kinds_match_proto_sources(void **state)
{
    (void)state;
    int n = check_proto(GA_PROTO_DIR "/gradagg/v1/gradagg.proto");
    assert_int_equal(n, 10);
    n += check_proto(GA_PROTO_DIR "/grpc/health/v1/health.proto");
    assert_int_equal(n, GA_METHODS);
    /* The parser can fail: the kinds it read are not all the same. */
    assert_int_equal(ga_methods[GA_METHOD_PUSH].kind, GA_RPC_CLIENT_STREAM);
    assert_int_equal(ga_methods[GA_METHOD_PULL].kind, GA_RPC_SERVER_STREAM);
    assert_int_equal(ga_methods[GA_METHOD_HEALTH_WATCH].kind, GA_RPC_SERVER_STREAM);
}

/* ---- status table ---- */

typedef struct status_row {
    ga_status st;
    const char *name;
} status_row;
#define ROW(name, value, msg) {GA_##name, #name},
static const status_row all_statuses[] = {GA_STATUS_MAP(ROW)};
#undef ROW

static void test_every_status_has_a_code(void **state)
{
    (void)state;
    for (size_t i = 0; i < COUNT(all_statuses); i++) {
        ga_status st = all_statuses[i].st;
        grpc_status_code code = ga_wire_grpc_code(st);
        if (st == GA_OK) {
            assert_int_equal(code, GRPC_STATUS_OK);
            continue;
        }
        /* UNKNOWN is what the table gives a status it has no row for. */
        assert_int_not_equal(code, GRPC_STATUS_OK);
        assert_int_not_equal(code, GRPC_STATUS_UNKNOWN);
        /* The exact status comes back from its code and its trailing-metadata name... */
        const char *full = ga_status_name(st);
        assert_int_equal(ga_wire_status_from(code, full, strlen(full)), st);
        /* ... also without the GA_ prefix. */
        const char *bare = all_statuses[i].name;
        assert_int_equal(ga_wire_status_from(code, bare, strlen(bare)), st);
        /* Without a name, a generic status: never OK. */
        assert_int_not_equal(ga_wire_status_from(code, NULL, 0), GA_OK);
    }
    assert_int_equal(ga_wire_grpc_code((ga_status)-1000), GRPC_STATUS_UNKNOWN);
}

static void test_documented_codes(void **state)
{
    (void)state;
    static const struct {
        ga_status st;
        grpc_status_code code;
    } rows[] = {
        {GA_E_LENGTH, GRPC_STATUS_INVALID_ARGUMENT},   {GA_E_NONFINITE, GRPC_STATUS_INVALID_ARGUMENT},
        {GA_E_VARINT, GRPC_STATUS_INVALID_ARGUMENT},   {GA_E_PROTO, GRPC_STATUS_INVALID_ARGUMENT},
        {GA_E_NOMEM, GRPC_STATUS_RESOURCE_EXHAUSTED},  {GA_E_LIMIT, GRPC_STATUS_RESOURCE_EXHAUSTED},
        {GA_E_UNKNOWN_JOB, GRPC_STATUS_NOT_FOUND},     {GA_E_UNKNOWN_TENSOR, GRPC_STATUS_NOT_FOUND},
        {GA_E_RANK_HELD, GRPC_STATUS_ALREADY_EXISTS},  {GA_E_STALE, GRPC_STATUS_FAILED_PRECONDITION},
        {GA_E_NOT_MEMBER, GRPC_STATUS_FAILED_PRECONDITION}, {GA_E_JOB_CONFIG, GRPC_STATUS_FAILED_PRECONDITION},
        {GA_E_SHAPE, GRPC_STATUS_FAILED_PRECONDITION}, {GA_E_STEP_CLOSED, GRPC_STATUS_ABORTED},
        {GA_E_STEP_FUTURE, GRPC_STATUS_OUT_OF_RANGE},  {GA_E_VERSION, GRPC_STATUS_OUT_OF_RANGE},
        {GA_E_DRAINING, GRPC_STATUS_UNAVAILABLE},      {GA_E_UNAVAILABLE, GRPC_STATUS_UNAVAILABLE},
        {GA_E_UNIMPLEMENTED, GRPC_STATUS_UNIMPLEMENTED}, {GA_E_DEADLINE, GRPC_STATUS_DEADLINE_EXCEEDED},
        {GA_E_CANCELLED, GRPC_STATUS_CANCELLED},       {GA_E_CUDA, GRPC_STATUS_INTERNAL},
    };
    for (size_t i = 0; i < COUNT(rows); i++) assert_int_equal(ga_wire_grpc_code(rows[i].st), rows[i].code);
    /* Statuses from gRPC itself, without our metadata. */
    assert_int_equal(ga_wire_status_from(GRPC_STATUS_OK, NULL, 0), GA_OK);
    assert_int_equal(ga_wire_status_from(GRPC_STATUS_UNAVAILABLE, NULL, 0), GA_E_UNAVAILABLE);
    assert_int_equal(ga_wire_status_from(GRPC_STATUS_DEADLINE_EXCEEDED, NULL, 0), GA_E_DEADLINE);
    assert_int_equal(ga_wire_status_from(GRPC_STATUS_CANCELLED, NULL, 0), GA_E_CANCELLED);
    assert_int_equal(ga_wire_status_from(GRPC_STATUS_RESOURCE_EXHAUSTED, NULL, 0), GA_E_LIMIT);
    assert_int_equal(ga_wire_status_from(GRPC_STATUS_UNIMPLEMENTED, NULL, 0), GA_E_UNIMPLEMENTED);
    assert_int_equal(ga_wire_status_from(GRPC_STATUS_INTERNAL, NULL, 0), GA_E_TRANSPORT);
    /* Names that do not name a status, or name OK on an error, fall back to the code. */
    assert_int_equal(ga_wire_status_from(GRPC_STATUS_ABORTED, "GA_E_NOPE", 9), GA_E_TRANSPORT);
    assert_int_equal(ga_wire_status_from(GRPC_STATUS_UNAVAILABLE, "GA_OK", 5), GA_E_UNAVAILABLE);
    assert_int_equal(ga_wire_status_from(GRPC_STATUS_UNAVAILABLE, "GA_E_STALEX", 10), GA_E_STALE); /* len */
    assert_int_equal(ga_wire_status_from(GRPC_STATUS_UNAVAILABLE, "GA_", 3), GA_E_UNAVAILABLE);
    /* An OK code is OK whatever the metadata says. */
    assert_int_equal(ga_wire_status_from(GRPC_STATUS_OK, "GA_E_PROTO", 10), GA_OK);
}

/* ---- pack / unpack ---- */

static int released;
static void count_release(void *ud)
{
    assert_ptr_equal(ud, &released);
    released++;
}

/* The byte buffer's bytes, contiguous (malloc'd). */
static uint8_t *flatten(grpc_byte_buffer *bb, size_t *len)
{
    grpc_byte_buffer_reader r;
    assert_true(grpc_byte_buffer_reader_init(&r, bb));
    size_t total = grpc_byte_buffer_length(bb), at = 0;
    uint8_t *out = malloc(total + 1);
    grpc_slice s;
    while (grpc_byte_buffer_reader_next(&r, &s)) {
        memcpy(out + at, GRPC_SLICE_START_PTR(s), GRPC_SLICE_LENGTH(s));
        at += GRPC_SLICE_LENGTH(s);
        grpc_slice_unref(s);
    }
    grpc_byte_buffer_reader_destroy(&r);
    assert_int_equal(at, total);
    *len = total;
    return out;
}

static void test_pack_payload_round_trip(void **state)
{
    (void)state;
    const size_t sizes[] = {1, 127, 128, 16383, 16384, 300001};
    for (size_t k = 0; k < COUNT(sizes); k++) {
        size_t n = sizes[k];
        uint8_t *payload = malloc(n);
        for (size_t i = 0; i < n; i++) payload[i] = (uint8_t)(i * 131u + k);
        Gradagg__V1__Codec codec = GRADAGG__V1__CODEC__INIT;
        codec.id = GRADAGG__V1__CODEC_ID__CODEC_2BIT;
        codec.threshold = 0.5f;
        Gradagg__V1__PushChunk c = GRADAGG__V1__PUSH_CHUNK__INIT;
        c.job = "job-a";
        c.rank = 3;
        c.incarnation = 77;
        c.step = 12;
        c.tensor = "fc1.weight";
        c.offset = 4096;
        c.count = n * 4;
        c.codec = &codec;

        released = 0;
        grpc_byte_buffer *bb = ga_wire_pack(&c.base, payload, n, count_release, &released);
        assert_non_null(bb);
        assert_int_equal(released, 0); /* lent, not copied */

        /* The same bytes protobuf-c writes with the payload in the message. */
        size_t len;
        uint8_t *wire = flatten(bb, &len);
        c.payload.data = payload;
        c.payload.len = n;
        size_t want = protobuf_c_message_get_packed_size(&c.base);
        uint8_t *ref = malloc(want);
        assert_int_equal(protobuf_c_message_pack(&c.base, ref), want);
        assert_int_equal(len, want);
        assert_memory_equal(wire, ref, want);
        free(ref);
        free(wire);

        ProtobufCMessage *m = NULL;
        assert_int_equal(ga_wire_unpack(&gradagg__v1__push_chunk__descriptor, bb, &m), GA_OK);
        Gradagg__V1__PushChunk *u = (Gradagg__V1__PushChunk *)m;
        assert_string_equal(u->job, "job-a");
        assert_string_equal(u->tensor, "fc1.weight");
        assert_int_equal(u->rank, 3);
        assert_int_equal(u->incarnation, 77);
        assert_int_equal(u->step, 12);
        assert_int_equal(u->offset, 4096);
        assert_int_equal(u->count, n * 4);
        assert_non_null(u->codec);
        assert_int_equal(u->codec->id, GRADAGG__V1__CODEC_ID__CODEC_2BIT);
        assert_true(u->codec->threshold == 0.5f);
        assert_int_equal(u->payload.len, n);
        assert_memory_equal(u->payload.data, payload, n);
        assert_true(ga_mem_in_use(GA_MEM_HOST) > test_memory_at_start); /* accounted */
        protobuf_c_message_free_unpacked(m, &ga_wire_allocator);

        grpc_byte_buffer_destroy(bb);
        assert_int_equal(released, 1);
        free(payload);
    }
    assert_int_equal(ga_mem_in_use(GA_MEM_HOST), test_memory_at_start);
}

static void test_pack_without_payload(void **state)
{
    (void)state;
    /* Small (an inlined slice) and empty messages. */
    Gradagg__V1__StatusRequest req = GRADAGG__V1__STATUS_REQUEST__INIT;
    req.job = "j";
    grpc_byte_buffer *bb = ga_wire_pack(&req.base, NULL, 0, NULL, NULL);
    ProtobufCMessage *m = NULL;
    assert_int_equal(ga_wire_unpack(&gradagg__v1__status_request__descriptor, bb, &m), GA_OK);
    assert_string_equal(((Gradagg__V1__StatusRequest *)m)->job, "j");
    protobuf_c_message_free_unpacked(m, &ga_wire_allocator);
    grpc_byte_buffer_destroy(bb);

    Gradagg__V1__LeaveResponse empty = GRADAGG__V1__LEAVE_RESPONSE__INIT;
    bb = ga_wire_pack(&empty.base, NULL, 0, NULL, NULL);
    assert_int_equal(grpc_byte_buffer_length(bb), 0);
    assert_int_equal(ga_wire_unpack(&gradagg__v1__leave_response__descriptor, bb, &m), GA_OK);
    protobuf_c_message_free_unpacked(m, &ga_wire_allocator);
    grpc_byte_buffer_destroy(bb);

    /* A lent payload of 0 bytes: nothing appended, released at once. */
    Gradagg__V1__PullChunk pc = GRADAGG__V1__PULL_CHUNK__INIT;
    pc.version = 9;
    released = 0;
    bb = ga_wire_pack(&pc.base, "x", 0, count_release, &released);
    assert_int_equal(released, 1);
    assert_int_equal(ga_wire_unpack(&gradagg__v1__pull_chunk__descriptor, bb, &m), GA_OK);
    assert_int_equal(((Gradagg__V1__PullChunk *)m)->version, 9);
    assert_int_equal(((Gradagg__V1__PullChunk *)m)->payload.len, 0);
    protobuf_c_message_free_unpacked(m, &ga_wire_allocator);
    grpc_byte_buffer_destroy(bb);
    assert_int_equal(ga_mem_in_use(GA_MEM_HOST), test_memory_at_start);
}

static grpc_byte_buffer *raw_buffer(const uint8_t *p, size_t len, size_t pieces)
{
    grpc_slice s[8];
    size_t at = 0;
    for (size_t i = 0; i < pieces; i++) {
        size_t n = i + 1 == pieces ? len - at : len / pieces;
        s[i] = grpc_slice_from_copied_buffer((const char *)p + at, n);
        at += n;
    }
    grpc_byte_buffer *bb = grpc_raw_byte_buffer_create(s, pieces);
    for (size_t i = 0; i < pieces; i++) grpc_slice_unref(s[i]);
    return bb;
}

static void test_unpack_garbage(void **state)
{
    (void)state;
    uint8_t junk[64];
    memset(junk, 0xff, sizeof junk); /* a varint that never ends */
    ProtobufCMessage *m = (ProtobufCMessage *)&m; /* must stay untouched */
    ProtobufCMessage *const before = m;
    for (size_t pieces = 1; pieces <= 3; pieces++) {
        grpc_byte_buffer *bb = raw_buffer(junk, sizeof junk, pieces);
        assert_int_equal(ga_wire_unpack(&gradagg__v1__push_chunk__descriptor, bb, &m), GA_E_PROTO);
        assert_ptr_equal(m, before);
        grpc_byte_buffer_destroy(bb);
    }
    /* A valid chunk cut inside its payload, in several slices. */
    Gradagg__V1__PushChunk c = GRADAGG__V1__PUSH_CHUNK__INIT;
    uint8_t payload[1000] = {1, 2, 3};
    c.job = "j";
    c.payload.data = payload;
    c.payload.len = sizeof payload;
    uint8_t buf[1100];
    size_t n = protobuf_c_message_pack(&c.base, buf);
    grpc_byte_buffer *bb = raw_buffer(buf, n - 10, 3);
    assert_int_equal(ga_wire_unpack(&gradagg__v1__push_chunk__descriptor, bb, &m), GA_E_PROTO);
    grpc_byte_buffer_destroy(bb);
    /* ... and whole, in several slices, it is fine. */
    bb = raw_buffer(buf, n, 3);
    assert_int_equal(ga_wire_unpack(&gradagg__v1__push_chunk__descriptor, bb, &m), GA_OK);
    assert_int_equal(((Gradagg__V1__PushChunk *)m)->payload.len, sizeof payload);
    assert_memory_equal(((Gradagg__V1__PushChunk *)m)->payload.data, payload, sizeof payload);
    protobuf_c_message_free_unpacked(m, &ga_wire_allocator);
    grpc_byte_buffer_destroy(bb);
    /* A wrong wire type for a known field (job as a varint). */
    const uint8_t wrong[] = {0x08, 0x01};
    bb = raw_buffer(wrong, sizeof wrong, 1);
    m = before;
    assert_int_equal(ga_wire_unpack(&gradagg__v1__status_request__descriptor, bb, &m), GA_E_PROTO);
    assert_ptr_equal(m, before);
    grpc_byte_buffer_destroy(bb);
    assert_int_equal(ga_mem_in_use(GA_MEM_HOST), test_memory_at_start);
}

/* The bytes at p in slices cut at the given offsets (ascending, inside (0, len)). */
static grpc_byte_buffer *cut_buffer(const uint8_t *p, size_t len, const size_t *cuts, size_t ncuts)
{
    grpc_slice s[8];
    size_t at = 0;
    for (size_t i = 0; i <= ncuts; i++) {
        size_t end = i < ncuts ? cuts[i] : len;
        s[i] = grpc_slice_from_copied_buffer((const char *)p + at, end - at);
        at = end;
    }
    grpc_byte_buffer *bb = grpc_raw_byte_buffer_create(s, ncuts + 1);
    for (size_t i = 0; i <= ncuts; i++) grpc_slice_unref(s[i]);
    return bb;
}

/* Unpacks wire (len bytes) cut as given and checks it against protobuf-c's own unpack of it. */
static void expect_same_unpack(const uint8_t *wire, size_t len, const size_t *cuts, size_t ncuts)
{
    Gradagg__V1__PushChunk *want = gradagg__v1__push_chunk__unpack(NULL, len, wire);
    assert_non_null(want);
    grpc_byte_buffer *bb = cut_buffer(wire, len, cuts, ncuts);
    ProtobufCMessage *m = NULL;
    assert_int_equal(ga_wire_unpack(&gradagg__v1__push_chunk__descriptor, bb, &m), GA_OK);
    Gradagg__V1__PushChunk *got = (Gradagg__V1__PushChunk *)m;
    assert_string_equal(got->job, want->job);
    assert_string_equal(got->tensor, want->tensor);
    assert_int_equal(got->step, want->step);
    assert_int_equal(got->count, want->count);
    assert_int_equal(got->codec != NULL, want->codec != NULL);
    assert_int_equal(got->payload.len, want->payload.len);
    if (want->payload.len) assert_memory_equal(got->payload.data, want->payload.data, want->payload.len);
    /* protobuf-c would repack the same bytes */
    size_t a = protobuf_c_message_get_packed_size(m), b = protobuf_c_message_get_packed_size(&want->base);
    assert_int_equal(a, b);
    protobuf_c_message_free_unpacked(m, &ga_wire_allocator);
    gradagg__v1__push_chunk__free_unpacked(want, NULL);
    grpc_byte_buffer_destroy(bb);
}

/* A message in several slices unpacks as protobuf-c unpacks it whole, wherever the slices are
 * cut (inside a tag, a length, the payload; the payload field first, last, twice, or absent),
 * and a large payload is copied once: the unpack's peak is one payload and a small head, not a
 * flat copy of the message beside the payload's. */
static void test_unpack_from_slices(void **state)
{
    (void)state;
    uint8_t payload[300];
    for (size_t i = 0; i < sizeof payload; i++) payload[i] = (uint8_t)(i * 7 + 1);
    Gradagg__V1__Codec codec = GRADAGG__V1__CODEC__INIT;
    codec.id = GRADAGG__V1__CODEC_ID__CODEC_2BIT;
    codec.threshold = 0.5f;
    Gradagg__V1__PushChunk c = GRADAGG__V1__PUSH_CHUNK__INIT;
    c.job = "job-b", c.tensor = "w", c.step = 300, c.count = 1200, c.codec = &codec;
    c.payload.data = payload, c.payload.len = sizeof payload;
    uint8_t wire[1024];
    size_t len = protobuf_c_message_pack(&c.base, wire);
    for (size_t cut = 1; cut < len; cut++) expect_same_unpack(wire, len, &cut, 1);
    for (size_t x = 1; x < 40; x++) {
        size_t cuts[3] = {x, x + 1, len - x};
        expect_same_unpack(wire, len, cuts, 3);
    }
    /* The payload field before the others, twice (the last one wins), and absent. */
    uint8_t odd[2048];
    size_t head = protobuf_c_message_get_packed_size(&c.base) - (sizeof payload + 3); /* tag 0x7a, 2-byte length */
    memcpy(odd, wire + head, len - head);
    memcpy(odd + (len - head), wire, head);
    size_t mid[2] = {5, len - 5};
    expect_same_unpack(odd, len, mid, 2);
    memcpy(odd + len, wire + head, len - head);
    odd[len + 3] ^= 0xff; /* the second copy's first payload byte differs */
    expect_same_unpack(odd, len + (len - head), mid, 2);
    c.payload.len = 0;
    size_t bare = protobuf_c_message_pack(&c.base, wire);
    expect_same_unpack(wire, bare, mid, 1);

    /* One copy of a 1 MiB payload. */
    enum { BIG = 1 << 20 };
    uint8_t *big = malloc(BIG);
    assert_non_null(big);
    memset(big, 0x5a, BIG);
    c.payload.data = big, c.payload.len = BIG;
    size_t big_len = protobuf_c_message_get_packed_size(&c.base);
    uint8_t *big_wire = malloc(big_len);
    assert_int_equal(protobuf_c_message_pack(&c.base, big_wire), big_len);
    size_t thirds[2] = {big_len / 3, 2 * big_len / 3};
    grpc_byte_buffer *bb = cut_buffer(big_wire, big_len, thirds, 2);
    uint64_t before = ga_mem_in_use(GA_MEM_HOST);
    ga_mem_peak_reset(GA_MEM_HOST);
    ProtobufCMessage *m = NULL;
    assert_int_equal(ga_wire_unpack(&gradagg__v1__push_chunk__descriptor, bb, &m), GA_OK);
    uint64_t peak = ga_mem_peak(GA_MEM_HOST) - before;
    if (peak > BIG + 4096) fail_msg("unpacking a %d-byte payload took %llu bytes at its peak", BIG, (unsigned long long)peak);
    assert_int_equal(((Gradagg__V1__PushChunk *)m)->payload.len, BIG);
    assert_memory_equal(((Gradagg__V1__PushChunk *)m)->payload.data, big, BIG);
    protobuf_c_message_free_unpacked(m, &ga_wire_allocator);
    grpc_byte_buffer_destroy(bb);
    free(big_wire), free(big);
    assert_int_equal(ga_mem_in_use(GA_MEM_HOST), test_memory_at_start);
}

int main(void)
{
    grpc_init();
    test_memory_baseline();
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_rows_match_descriptors),
        cmocka_unit_test(test_by_path_exact),
        cmocka_unit_test(test_kinds_match_proto_sources),
        cmocka_unit_test(test_every_status_has_a_code),
        cmocka_unit_test(test_documented_codes),
        cmocka_unit_test(test_pack_payload_round_trip),
        cmocka_unit_test(test_pack_without_payload),
        cmocka_unit_test(test_unpack_garbage),
        cmocka_unit_test(test_unpack_from_slices),
        cmocka_unit_test(test_host_memory_returned),
    };
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    grpc_shutdown();
    return rc;
}
