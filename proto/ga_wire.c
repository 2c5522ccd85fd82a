/* The wire helpers shared by the server and the SDK (ga_wire.h): the ga_status <-> gRPC status
 * table, the accounted protobuf-c allocator, and message packing to and from byte buffers. */
#include "ga_wire.h"

#include <grpc/byte_buffer_reader.h>
#include <grpc/slice.h>
#include <stdbool.h>
#include <string.h>
#include <strings.h>

#include "ga_alloc.h"
#include "ga_tsan.h"

bool ga_wire_bearer(const char *v, size_t len, const char **tok, size_t *tlen)
{
    size_t s = sizeof GA_WIRE_AUTH_SCHEME - 1;
    if (!v || len <= s || strncasecmp(v, GA_WIRE_AUTH_SCHEME, s) != 0 || v[s] != ' ') return false;
    size_t i = s;
    while (i < len && v[i] == ' ') i++;
    if (i == len || len - i > GA_WIRE_TOKEN_MAX) return false;
    for (size_t k = i; k < len; k++)
        if (!ga_wire_token_byte((unsigned char)v[k])) return false;
    *tok = v + i;
    *tlen = len - i;
    return true;
}

/* A switch over the enum without a default: -Wswitch names any status added to GA_STATUS_MAP
 * without a row here, and tests/unit/test_methods.c checks that none falls through to UNKNOWN. */
grpc_status_code ga_wire_grpc_code(ga_status st)
{
    switch (st) {
    case GA_OK: return GRPC_STATUS_OK;
    /* a payload or a request the server will never accept as it is */
    case GA_E_INVAL: return GRPC_STATUS_INVALID_ARGUMENT;
    case GA_E_CODEC: return GRPC_STATUS_INVALID_ARGUMENT;
    case GA_E_LENGTH: return GRPC_STATUS_INVALID_ARGUMENT;
    case GA_E_INDEX_RANGE: return GRPC_STATUS_INVALID_ARGUMENT;
    case GA_E_INDEX_ORDER: return GRPC_STATUS_INVALID_ARGUMENT;
    case GA_E_NONFINITE: return GRPC_STATUS_INVALID_ARGUMENT;
    case GA_E_THRESHOLD: return GRPC_STATUS_INVALID_ARGUMENT;
    case GA_E_RATIO: return GRPC_STATUS_INVALID_ARGUMENT;
    case GA_E_RANGE: return GRPC_STATUS_INVALID_ARGUMENT;
    case GA_E_TOO_LARGE: return GRPC_STATUS_INVALID_ARGUMENT;
    case GA_E_VARINT: return GRPC_STATUS_INVALID_ARGUMENT;
    case GA_E_OPTIM: return GRPC_STATUS_INVALID_ARGUMENT;
    case GA_E_PROTO: return GRPC_STATUS_INVALID_ARGUMENT;
    case GA_E_RANK: return GRPC_STATUS_INVALID_ARGUMENT;
    case GA_E_COVERAGE: return GRPC_STATUS_INVALID_ARGUMENT;
    case GA_E_STREAM_MIXED: return GRPC_STATUS_INVALID_ARGUMENT;
    case GA_E_CONFIG: return GRPC_STATUS_INVALID_ARGUMENT;
    /* the server's limits */
    case GA_E_NOMEM: return GRPC_STATUS_RESOURCE_EXHAUSTED;
    case GA_E_LIMIT: return GRPC_STATUS_RESOURCE_EXHAUSTED;
    case GA_E_BUSY: return GRPC_STATUS_RESOURCE_EXHAUSTED;
    /* the server's own failures, never the client's fault */
    case GA_E_CAPACITY: return GRPC_STATUS_INTERNAL;
    case GA_E_NO_CUDA: return GRPC_STATUS_INTERNAL;
    case GA_E_NO_DEVICE: return GRPC_STATUS_INTERNAL;
    case GA_E_CUDA: return GRPC_STATUS_INTERNAL;
    case GA_E_BACKEND: return GRPC_STATUS_INTERNAL;
    case GA_E_IO: return GRPC_STATUS_INTERNAL;
    case GA_E_UNKNOWN_SERVICE: return GRPC_STATUS_NOT_FOUND;
    /* who the caller is, and what it may touch */
    case GA_E_UNAUTHENTICATED: return GRPC_STATUS_UNAUTHENTICATED;
    case GA_E_PERMISSION_DENIED: return GRPC_STATUS_PERMISSION_DENIED;
    /* job state */
    case GA_E_UNIMPLEMENTED: return GRPC_STATUS_UNIMPLEMENTED;
    case GA_E_UNKNOWN_JOB: return GRPC_STATUS_NOT_FOUND;
    case GA_E_UNKNOWN_TENSOR: return GRPC_STATUS_NOT_FOUND;
    case GA_E_RANK_HELD: return GRPC_STATUS_ALREADY_EXISTS;
    case GA_E_STALE: return GRPC_STATUS_FAILED_PRECONDITION;
    case GA_E_NOT_MEMBER: return GRPC_STATUS_FAILED_PRECONDITION;
    case GA_E_JOB_CONFIG: return GRPC_STATUS_FAILED_PRECONDITION;
    case GA_E_SHAPE: return GRPC_STATUS_FAILED_PRECONDITION;
    case GA_E_STEP_CLOSED: return GRPC_STATUS_ABORTED;
    case GA_E_RANK_FAILED: return GRPC_STATUS_ABORTED;
    case GA_E_ROLLED_BACK: return GRPC_STATUS_DATA_LOSS; /* the SDK's own (never on the wire) */
    case GA_E_STEP_FUTURE: return GRPC_STATUS_OUT_OF_RANGE;
    case GA_E_VERSION: return GRPC_STATUS_OUT_OF_RANGE;
    /* the call or the connection */
    case GA_E_DRAINING: return GRPC_STATUS_UNAVAILABLE;
    case GA_E_UNAVAILABLE: return GRPC_STATUS_UNAVAILABLE;
    case GA_E_TRANSPORT: return GRPC_STATUS_UNAVAILABLE;
    case GA_E_DEADLINE: return GRPC_STATUS_DEADLINE_EXCEEDED;
    case GA_E_CANCELLED: return GRPC_STATUS_CANCELLED;
    }
    return GRPC_STATUS_UNKNOWN;
}

/* A status without our trailing metadata comes from gRPC itself (or another server): the
 * nearest ga_status for its code. */
static ga_status status_for_code(grpc_status_code code)
{
    switch (code) {
    case GRPC_STATUS_OK: return GA_OK;
    case GRPC_STATUS_CANCELLED: return GA_E_CANCELLED;
    case GRPC_STATUS_INVALID_ARGUMENT: return GA_E_INVAL;
    case GRPC_STATUS_DEADLINE_EXCEEDED: return GA_E_DEADLINE;
    case GRPC_STATUS_RESOURCE_EXHAUSTED: return GA_E_LIMIT; /* e.g. a message over the limit */
    case GRPC_STATUS_UNIMPLEMENTED: return GA_E_UNIMPLEMENTED;
    case GRPC_STATUS_UNAVAILABLE: return GA_E_UNAVAILABLE;
    case GRPC_STATUS_UNAUTHENTICATED: return GA_E_UNAUTHENTICATED;
    case GRPC_STATUS_PERMISSION_DENIED: return GA_E_PERMISSION_DENIED;
    default: return GA_E_TRANSPORT;
    }
}

typedef struct status_row {
    ga_status st;
    const char *name; /* without the "GA_" prefix */
} status_row;

#define GA_WIRE_ROW(name, value, msg) {GA_##name, #name},
static const status_row status_rows[] = {GA_STATUS_MAP(GA_WIRE_ROW)};
#undef GA_WIRE_ROW

/* Accepts "GA_E_STEP_CLOSED" (what ga_status_name gives and the server sends) and
 * "E_STEP_CLOSED". */
static bool status_by_name(const char *name, size_t len, ga_status *out)
{
    if (len > 3 && memcmp(name, "GA_", 3) == 0) {
        name += 3;
        len -= 3;
    }
    for (size_t i = 0; i < sizeof status_rows / sizeof status_rows[0]; i++) {
        if (strlen(status_rows[i].name) == len && memcmp(status_rows[i].name, name, len) == 0) {
            *out = status_rows[i].st;
            return true;
        }
    }
    return false;
}

ga_status ga_wire_status_from(grpc_status_code code, const char *name, size_t len)
{
    if (code == GRPC_STATUS_OK) return GA_OK;
    ga_status st;
    /* An error named GA_OK would turn a failure into a success: never. */
    if (name && status_by_name(name, len, &st) && st != GA_OK) return st;
    return status_for_code(code);
}

/* ---- allocator ---- */

/* Set when an allocation inside protobuf_c_message_unpack failed, so the caller can tell out of
 * memory from malformed bytes (unpack returns NULL for both). */
static _Thread_local bool unpack_oom;

static void *wire_alloc(void *data, size_t size)
{
    (void)data;
    void *p = ga_malloc(size);
    if (!p) unpack_oom = true;
    return p;
}

static void wire_free(void *data, void *p)
{
    (void)data;
    ga_free(p);
}

ProtobufCAllocator ga_wire_allocator = {wire_alloc, wire_free, NULL};

/* ---- unpack ---- */

/* Fields a message's type does not have are ignored, as proto3 says, and dropped here (protobuf-c
 * keeps them), so a request never holds, journals or checkpoints bytes nobody reads. Returns
 * false when one has field number 0: that is malformed, but protobuf-c refuses it only when its
 * tag is a single byte, and keeps a longer encoding of it as an unknown field that it then
 * packs into bytes it cannot read back (a journal record that would not replay). */
static bool drop_unknown(ProtobufCMessage *m)
{
    bool ok = true;
    for (unsigned i = 0; i < m->n_unknown_fields; i++) {
        if (m->unknown_fields[i].tag == 0) ok = false;
        ga_free(m->unknown_fields[i].data);
    }
    ga_free(m->unknown_fields);
    m->unknown_fields = NULL;
    m->n_unknown_fields = 0;
    const ProtobufCMessageDescriptor *d = m->descriptor;
    for (unsigned f = 0; f < d->n_fields; f++) {
        const ProtobufCFieldDescriptor *fd = &d->fields[f];
        if (fd->type != PROTOBUF_C_TYPE_MESSAGE) continue;
        void *at = (char *)m + fd->offset;
        if (fd->label == PROTOBUF_C_LABEL_REPEATED) {
            size_t n = *(const size_t *)((const char *)m + fd->quantifier_offset);
            ProtobufCMessage **subs = *(ProtobufCMessage ***)at;
            for (size_t k = 0; k < n; k++)
                if (subs[k] && !drop_unknown(subs[k])) ok = false;
        } else {
            ProtobufCMessage *sub = *(ProtobufCMessage **)at;
            if (sub && !drop_unknown(sub)) ok = false;
        }
    }
    return ok;
}

static ga_status unpack_bytes(const ProtobufCMessageDescriptor *desc, const uint8_t *p, size_t len,
                              ProtobufCMessage **out)
{
    unpack_oom = false;
    ProtobufCMessage *m = protobuf_c_message_unpack(desc, &ga_wire_allocator, len, p);
    if (!m) return unpack_oom ? GA_E_NOMEM : GA_E_PROTO;
    if (!drop_unknown(m)) {
        protobuf_c_message_free_unpacked(m, &ga_wire_allocator);
        return GA_E_PROTO;
    }
    *out = m;
    return GA_OK;
}

/* ---- unpack from slices, the payload copied once ----
 *
 * A large message arrives in many slices. Flattening it and letting protobuf-c unpack it would
 * copy the payload twice (into the flat buffer, then into the message's own bytes); instead the
 * top-level fields are walked across the slices, everything but the payload field goes into a
 * small head that protobuf-c unpacks, and the payload is copied straight from the slices into
 * the allocation the message then owns (freed by protobuf_c_message_free_unpacked with the same
 * allocator). Anything this walk does not expect (the payload field twice, groups, a length past
 * the end) goes the flat way, so protobuf-c decides what is valid exactly as before. */

/* A read position in the slices of a byte buffer. */
typedef struct slice_cursor {
    const grpc_slice *s;
    size_t n;     /* slices */
    size_t i, at; /* slice, offset in it */
    size_t pos;   /* offset in the message */
} slice_cursor;

static bool cursor_byte(slice_cursor *c, uint8_t *b)
{
    while (c->i < c->n && c->at == GRPC_SLICE_LENGTH(c->s[c->i])) c->i++, c->at = 0;
    if (c->i == c->n) return false;
    *b = GRPC_SLICE_START_PTR(c->s[c->i])[c->at++];
    c->pos++;
    return true;
}

static bool cursor_varint(slice_cursor *c, uint64_t *v)
{
    *v = 0;
    for (unsigned shift = 0; shift < 64; shift += 7) {
        uint8_t b;
        if (!cursor_byte(c, &b)) return false;
        *v |= (uint64_t)(b & 0x7f) << shift;
        if (!(b & 0x80)) return true;
    }
    return false;
}

/* Copies (dst != NULL) or skips len bytes; false past the end. */
static bool cursor_take(slice_cursor *c, uint8_t *dst, size_t len)
{
    while (len > 0) {
        while (c->i < c->n && c->at == GRPC_SLICE_LENGTH(c->s[c->i])) c->i++, c->at = 0;
        if (c->i == c->n) return false;
        size_t have = GRPC_SLICE_LENGTH(c->s[c->i]) - c->at, n = have < len ? have : len;
        if (dst) {
            memcpy(dst, GRPC_SLICE_START_PTR(c->s[c->i]) + c->at, n);
            dst += n;
        }
        c->at += n, c->pos += n, len -= n;
    }
    return true;
}

/* Where the one payload field lies: its tag at *tag_at, its bytes [*data_at, *data_at + *len).
 * False when the walk meets anything it does not expect (see above). */
static bool find_payload(const grpc_slice *s, size_t n, size_t total, size_t *tag_at, size_t *data_at, size_t *len)
{
    slice_cursor c = {s, n, 0, 0, 0};
    bool found = false;
    while (c.pos < total) {
        size_t start = c.pos;
        uint64_t tag, v;
        if (!cursor_varint(&c, &tag)) return false;
        switch (tag & 7) {
        case 0: if (!cursor_varint(&c, &v)) return false; break;
        case 1: if (!cursor_take(&c, NULL, 8)) return false; break;
        case 5: if (!cursor_take(&c, NULL, 4)) return false; break;
        case 2:
            if (!cursor_varint(&c, &v) || v > total - c.pos) return false;
            if (tag >> 3 == GA_WIRE_PAYLOAD_FIELD) {
                if (found) return false;
                found = true, *tag_at = start, *data_at = c.pos, *len = (size_t)v;
            }
            if (!cursor_take(&c, NULL, (size_t)v)) return false;
            break;
        default: return false; /* groups: protobuf-c's call */
        }
    }
    return found;
}

/* The descriptor of desc's singular bytes field GA_WIRE_PAYLOAD_FIELD, or NULL when it has none. */
static const ProtobufCFieldDescriptor *payload_descriptor(const ProtobufCMessageDescriptor *desc)
{
    const ProtobufCFieldDescriptor *fd = protobuf_c_message_descriptor_get_field(desc, GA_WIRE_PAYLOAD_FIELD);
    return fd && fd->type == PROTOBUF_C_TYPE_BYTES && fd->label != PROTOBUF_C_LABEL_REPEATED ? fd : NULL;
}

/* GA_OK / GA_E_PROTO / GA_E_NOMEM as ga_wire_unpack; *walked false (nothing done) when the
 * slices must go the flat way. */
static ga_status unpack_split(const ProtobufCMessageDescriptor *desc, const grpc_slice *s, size_t n, size_t total,
                              ProtobufCMessage **out, bool *walked)
{
    const ProtobufCFieldDescriptor *fd = payload_descriptor(desc);
    size_t tag_at, data_at, len;
    *walked = fd && find_payload(s, n, total, &tag_at, &data_at, &len);
    if (!*walked) return GA_OK;
    size_t head_len = total - (data_at + len - tag_at);
    uint8_t *head = ga_malloc(head_len ? head_len : 1), *payload = len ? ga_malloc(len) : NULL;
    if (!head || (len && !payload)) {
        ga_free(head), ga_free(payload);
        return GA_E_NOMEM;
    }
    slice_cursor c = {s, n, 0, 0, 0};
    /* find_payload walked these bytes, so every take succeeds */
    (void)cursor_take(&c, head, tag_at);
    (void)cursor_take(&c, NULL, data_at - tag_at);
    (void)cursor_take(&c, payload, len);
    (void)cursor_take(&c, head + tag_at, total - (data_at + len));
    ga_status rc = unpack_bytes(desc, head, head_len, out);
    ga_free(head);
    if (rc != GA_OK) {
        ga_free(payload);
        return rc;
    }
    if (fd->label == PROTOBUF_C_LABEL_OPTIONAL && fd->quantifier_offset)
        *(protobuf_c_boolean *)((char *)*out + fd->quantifier_offset) = 1;
    *(ProtobufCBinaryData *)((char *)*out + fd->offset) = (ProtobufCBinaryData){len, payload};
    return GA_OK;
}

static ga_status unpack_flat(const ProtobufCMessageDescriptor *desc, const grpc_slice *s, size_t n, size_t total,
                             ProtobufCMessage **out)
{
    uint8_t *flat = ga_malloc(total ? total : 1);
    if (!flat) return GA_E_NOMEM;
    size_t at = 0;
    for (size_t i = 0; i < n; i++) {
        size_t len = GRPC_SLICE_LENGTH(s[i]);
        if (len > total - at) len = total - at; /* never past the buffer, whatever the reader says */
        memcpy(flat + at, GRPC_SLICE_START_PTR(s[i]), len);
        at += len;
    }
    ga_status rc = unpack_bytes(desc, flat, at, out);
    ga_free(flat);
    return rc;
}

/* `first` and the reader's other slices, each referenced (slices_put releases them); NULL when
 * out of memory (every slice released). */
static grpc_slice *slices_get(grpc_byte_buffer_reader *r, grpc_slice first, size_t *count)
{
    size_t n = 1, cap = 16;
    grpc_slice *s = ga_malloc(cap * sizeof *s), one;
    if (!s) {
        grpc_slice_unref(first);
        return NULL;
    }
    s[0] = first;
    while (grpc_byte_buffer_reader_next(r, &one)) {
        if (n == cap) {
            grpc_slice *more = ga_malloc(2 * cap * sizeof *s);
            if (!more) {
                grpc_slice_unref(one);
                while (n > 0) grpc_slice_unref(s[--n]);
                ga_free(s);
                return NULL;
            }
            memcpy(more, s, n * sizeof *s);
            ga_free(s);
            s = more, cap *= 2;
        }
        s[n++] = one;
    }
    *count = n;
    return s;
}

static void slices_put(grpc_slice *s, size_t n)
{
    for (size_t i = 0; i < n; i++) grpc_slice_unref(s[i]);
    ga_free(s);
}

static bool repeated_scalar(const ProtobufCFieldDescriptor *fd)
{
    return fd && fd->label == PROTOBUF_C_LABEL_REPEATED && fd->type != PROTOBUF_C_TYPE_MESSAGE &&
           fd->type != PROTOBUF_C_TYPE_STRING && fd->type != PROTOBUF_C_TYPE_BYTES;
}

/* Elements of a packed field of `len` bytes: varints end at a byte below 0x80; fixed ones are 4
 * or 8 bytes. False past the end. */
static bool count_packed(slice_cursor *c, const ProtobufCFieldDescriptor *fd, size_t len, size_t *count)
{
    switch (fd->type) {
    case PROTOBUF_C_TYPE_FIXED32: case PROTOBUF_C_TYPE_SFIXED32: case PROTOBUF_C_TYPE_FLOAT:
        *count += len / 4;
        return cursor_take(c, NULL, len);
    case PROTOBUF_C_TYPE_FIXED64: case PROTOBUF_C_TYPE_SFIXED64: case PROTOBUF_C_TYPE_DOUBLE:
        *count += len / 8;
        return cursor_take(c, NULL, len);
    default:
        for (size_t k = 0; k < len; k++) {
            uint8_t b;
            if (!cursor_byte(c, &b)) return false;
            if (!(b & 0x80)) ++*count;
        }
        return true;
    }
}

void ga_wire_most_repeated(const ProtobufCMessageDescriptor *desc, grpc_byte_buffer *bb, size_t *most,
                           const char **field)
{
    *most = 0;
    *field = NULL;
    enum { MAX_FIELDS = 64 };
    size_t counts[MAX_FIELDS] = {0};
    if (!desc || !bb || desc->n_fields > MAX_FIELDS) return;
    grpc_byte_buffer_reader r;
    if (!grpc_byte_buffer_reader_init(&r, bb)) return;
    size_t total = grpc_byte_buffer_length(r.buffer_out), n = 0, cap = 0;
    grpc_slice *s = NULL, one;
    while (grpc_byte_buffer_reader_next(&r, &one)) {
        if (n == cap) {
            grpc_slice *more = ga_malloc((cap ? 2 * cap : 16) * sizeof *s);
            if (!more) {
                grpc_slice_unref(one);
                break;
            }
            if (n) memcpy(more, s, n * sizeof *s);
            ga_free(s);
            s = more, cap = cap ? 2 * cap : 16;
        }
        s[n++] = one;
    }
    slice_cursor c = {s, n, 0, 0, 0};
    while (c.pos < total) {
        uint64_t tag, v;
        if (!cursor_varint(&c, &tag)) break;
        const ProtobufCFieldDescriptor *fd = protobuf_c_message_descriptor_get_field(desc, (unsigned)(tag >> 3));
        size_t *count = repeated_scalar(fd) ? &counts[fd - desc->fields] : NULL;
        bool ok;
        switch (tag & 7) {
        case 0: ok = cursor_varint(&c, &v); break;
        case 1: ok = cursor_take(&c, NULL, 8); break;
        case 5: ok = cursor_take(&c, NULL, 4); break;
        case 2:
            ok = cursor_varint(&c, &v) && v <= total - c.pos;
            if (ok && count) ok = count_packed(&c, fd, (size_t)v, count);
            else if (ok) ok = cursor_take(&c, NULL, (size_t)v);
            count = NULL; /* counted element by element */
            break;
        default: ok = false; break;
        }
        if (!ok) break;
        if (count) ++*count;
    }
    for (unsigned f = 0; f < desc->n_fields; f++)
        if (counts[f] > *most) *most = counts[f], *field = desc->fields[f].name;
    slices_put(s, n);
    grpc_byte_buffer_reader_destroy(&r);
}

ga_status ga_wire_unpack(const ProtobufCMessageDescriptor *desc, grpc_byte_buffer *bb, ProtobufCMessage **out)
{
    if (!desc || !bb || !out) return GA_E_INVAL;
    grpc_byte_buffer_reader r;
    if (!grpc_byte_buffer_reader_init(&r, bb)) return GA_E_PROTO; /* undecompressable */
    size_t total = grpc_byte_buffer_length(r.buffer_out);
    ga_status rc;
    grpc_slice first;
    if (!grpc_byte_buffer_reader_next(&r, &first)) {
        rc = unpack_bytes(desc, (const uint8_t *)"", 0, out);
    } else if (GRPC_SLICE_LENGTH(first) == total) {
        /* The common small message: one slice, no copy. */
        rc = unpack_bytes(desc, GRPC_SLICE_START_PTR(first), total, out);
        grpc_slice_unref(first);
    } else {
        size_t n;
        grpc_slice *s = slices_get(&r, first, &n);
        if (!s) {
            rc = GA_E_NOMEM;
        } else {
            bool walked;
            rc = unpack_split(desc, s, n, total, out, &walked);
            if (!walked) rc = unpack_flat(desc, s, n, total, out);
            slices_put(s, n);
        }
    }
    grpc_byte_buffer_reader_destroy(&r);
    return rc;
}

/* ---- pack ---- */

static size_t put_varint(uint8_t *p, uint64_t v)
{
    size_t n = 0;
    while (v >= 0x80) {
        p[n++] = (uint8_t)(v | 0x80);
        v >>= 7;
    }
    p[n++] = (uint8_t)v;
    return n;
}

static void release_nothing(void *ud) { (void)ud; }

grpc_byte_buffer *ga_wire_pack(const ProtobufCMessage *msg, const void *payload, size_t len,
                               void (*release)(void *), void *ud)
{
    /* Field 15, wire type 2 (length-delimited): one tag byte. */
    enum { PAYLOAD_TAG = (GA_WIRE_PAYLOAD_FIELD << 3) | 2u, MAX_VARINT = 10 };
    size_t head = protobuf_c_message_get_packed_size(msg);
    bool with_payload = payload && len > 0;
    /* gpr_malloc behind grpc_slice_malloc aborts rather than returning NULL. */
    grpc_slice slices[2];
    slices[0] = grpc_slice_malloc(head + (with_payload ? 1 + MAX_VARINT : 0));
    uint8_t *p = GRPC_SLICE_START_PTR(slices[0]);
    size_t used = protobuf_c_message_pack(msg, p);
    size_t nslices = 1;
    if (with_payload) {
        p[used++] = PAYLOAD_TAG;
        used += put_varint(p + used, len);
        /* gRPC never writes through the slice; the cast only fits its signature. The release
         * callback runs on a gRPC thread; it acquires ud (ga_tsan.h). */
        GA_TSAN_RELEASE(ud);
        slices[1] = grpc_slice_new_with_user_data((void *)payload, len, release ? release : release_nothing, ud);
        nslices = 2;
    }
    slices[0] = grpc_slice_sub_no_ref(slices[0], 0, used);
    grpc_byte_buffer *bb = grpc_raw_byte_buffer_create(slices, nslices);
    for (size_t i = 0; i < nslices; i++) grpc_slice_unref(slices[i]);
    /* Nothing borrowed (no payload, or an empty one): release now, as if gRPC had. */
    if (payload && !with_payload && release) release(ud);
    return bb;
}

void ga_codec_to_wire(ga_codec_id id, const ga_codec_params *p, Gradagg__V1__Codec *w)
{
    gradagg__v1__codec__init(w);
    w->id = (Gradagg__V1__CodecId)id;
    w->threshold = p->threshold;
    w->ratio = p->ratio;
    w->sample_fraction = p->sample_fraction;
    w->adapt_rounds = p->adapt_rounds;
    w->seed = p->seed;
    w->topk_values = p->topk_values;
    w->topk_indices = p->topk_indices;
}

ga_codec_params ga_codec_params_from_wire(const Gradagg__V1__Codec *w)
{
    return (ga_codec_params){
        .threshold = w->threshold,
        .ratio = w->ratio,
        .sample_fraction = w->sample_fraction,
        .adapt_rounds = w->adapt_rounds,
        .seed = w->seed,
        .topk_values = (uint8_t)w->topk_values,
        .topk_indices = (uint8_t)w->topk_indices,
    };
}
