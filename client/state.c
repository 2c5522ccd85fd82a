/* A worker's own training state (gradagg.h ga_client_state_save / _load): the error-feedback
 * residuals, DGC momentum, late gradients and threshold adaptation of every tensor, and the
 * epoch, as one byte string. The layout, all little endian as the host stores it:
 *   u32 magic "GAWS", u32 format 1, u32 epoch, u32 tensors; then per tensor, in registration
 *   order: u64 elements, u32 codec, u32 flags, f32 threshold, f32 density, u32 name length,
 *   the name, then n floats each of the residual (flag 1), the DGC momentum (2), the late
 *   gradients (4, with flag 8: they wait for the next step); flag 16: the automatic threshold
 *   has an estimate. */
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "client_internal.h"
#include "ga_alloc.h"

#define STATE_MAGIC 0x53574147u /* "GAWS" */
#define STATE_FORMAT 1u

enum {
    HAS_RESIDUAL = 1,
    HAS_MOMENTUM = 2,
    HAS_LATE = 4,
    LATE_PENDING = 8,
    AUTO_HAVE = 16,
};

static uint32_t flags_of(const ga_tensor *t)
{
    return (t->residual ? HAS_RESIDUAL : 0) | (t->u ? HAS_MOMENTUM : 0) |
           (t->late_pending ? HAS_LATE | LATE_PENDING : 0) | (t->auto_have ? AUTO_HAVE : 0);
}

static size_t arrays_of(uint32_t flags)
{
    return (size_t)!!(flags & HAS_RESIDUAL) + !!(flags & HAS_MOMENTUM) + !!(flags & HAS_LATE);
}

static size_t tensor_bytes(const ga_tensor *t)
{
    return 8 + 4 * 5 + strlen(t->name) + arrays_of(flags_of(t)) * t->n * sizeof(float);
}

size_t ga_client_state_size(const ga_client *c)
{
    if (!c) return 0;
    size_t bytes = 16;
    for (size_t i = 0; i < c->ntensors; i++) bytes += tensor_bytes(&c->tensors[i]);
    return bytes;
}

/* A tensor's saved arrays, in their saved order: where each lives and whether on the device
 * (device tensors keep the residual and late gradients there; DGC momentum is on the host). */
typedef struct state_array {
    uint32_t flag;
    float *v;
    bool device;
} state_array;

static void arrays_of_tensor(const ga_tensor *t, state_array out[3])
{
    out[0] = (state_array){HAS_RESIDUAL, t->residual, t->device};
    out[1] = (state_array){HAS_MOMENTUM, t->u, false};
    out[2] = (state_array){HAS_LATE, t->late, t->device};
}

/* n floats between host bytes and a tensor array (device memory for device tensors' residual
 * and late). */
static ga_status copy_floats(ga_client *c, void *dst, const void *src, size_t n, bool device)
{
    if (!device) {
        memcpy(dst, src, n * sizeof(float));
        return GA_OK;
    }
    ga_status st = ga_device_copy(&c->dex, dst, src, n * sizeof(float));
    ga_status synced = ga_exec_sync(&c->dex);
    return st != GA_OK ? st : synced;
}

static uint8_t *put(uint8_t *p, const void *v, size_t len)
{
    memcpy(p, v, len);
    return p + len;
}

ga_status ga_client_state_save(ga_client *c, void *buf, size_t cap, size_t *len)
{
    if (!c || ga_client_in_flight(c) || !len || (cap && !buf)) return GA_E_INVAL;
    size_t need = ga_client_state_size(c);
    *len = need;
    if (cap < need)
        return ga_client_fail(c, GA_E_CAPACITY, "state_save: %zu bytes of room, the state takes %zu", cap, need);
    uint32_t head[4] = {STATE_MAGIC, STATE_FORMAT, c->epoch, (uint32_t)c->ntensors};
    uint8_t *p = put(buf, head, sizeof head);
    for (size_t i = 0; i < c->ntensors; i++) {
        ga_tensor *t = &c->tensors[i];
        uint64_t n = t->n;
        uint32_t codec = (uint32_t)t->codec, flags = flags_of(t), name_len = (uint32_t)strlen(t->name);
        p = put(p, &n, 8);
        p = put(p, &codec, 4);
        p = put(p, &flags, 4);
        p = put(p, &t->threshold, 4);
        p = put(p, &t->density, 4);
        p = put(p, &name_len, 4);
        p = put(p, t->name, name_len);
        state_array arrays[3];
        arrays_of_tensor(t, arrays);
        for (size_t k = 0; k < 3; k++) {
            if (!(flags & arrays[k].flag)) continue;
            ga_status st = copy_floats(c, p, arrays[k].v, t->n, arrays[k].device);
            if (st != GA_OK) return ga_client_fail(c, st, "state_save: tensor '%s': %s", t->name, ga_strerror(st));
            p += t->n * sizeof(float);
        }
    }
    return GA_OK;
}

/* A reader over the saved bytes: take() fails past the end. */
typedef struct reader {
    const uint8_t *p, *end;
} reader;

static bool take(reader *r, void *out, size_t len)
{
    if ((size_t)(r->end - r->p) < len) return false;
    if (out) memcpy(out, r->p, len);
    r->p += len;
    return true;
}

typedef struct saved_tensor {
    uint32_t flags;
    float threshold, density;
    const uint8_t *arrays; /* the saved floats, residual / momentum / late as flagged */
} saved_tensor;

/* Checks every saved tensor against c's, filling saved[]; nothing changes. */
static ga_status check_state(ga_client *c, reader *r, uint32_t *epoch, saved_tensor *saved)
{
    uint32_t head[4];
    if (!take(r, head, sizeof head) || head[0] != STATE_MAGIC)
        return ga_client_fail(c, GA_E_INVAL, "state_load: not a gradagg worker state");
    if (head[1] != STATE_FORMAT)
        return ga_client_fail(c, GA_E_INVAL, "state_load: format %u, this library reads format %u", head[1], STATE_FORMAT);
    if (head[3] != c->ntensors)
        return ga_client_fail(c, GA_E_INVAL, "state_load: %u tensors saved, the client has %zu", head[3], c->ntensors);
    *epoch = head[2];
    for (size_t i = 0; i < c->ntensors; i++) {
        const ga_tensor *t = &c->tensors[i];
        uint64_t n;
        uint32_t codec, name_len;
        saved_tensor *s = &saved[i];
        if (!take(r, &n, 8) || !take(r, &codec, 4) || !take(r, &s->flags, 4) || !take(r, &s->threshold, 4) ||
            !take(r, &s->density, 4) || !take(r, &name_len, 4))
            return ga_client_fail(c, GA_E_INVAL, "state_load: cut short in tensor %zu", i);
        const uint8_t *name = r->p;
        if (!take(r, NULL, name_len))
            return ga_client_fail(c, GA_E_INVAL, "state_load: cut short in tensor %zu's name", i);
        if (name_len != strlen(t->name) || memcmp(name, t->name, name_len) != 0)
            return ga_client_fail(c, GA_E_INVAL, "state_load: tensor %zu is '%.*s' in the state, '%s' here", i,
                                  (int)(name_len > 100 ? 100 : name_len), (const char *)name, t->name);
        if (n != t->n || codec != (uint32_t)t->codec)
            return ga_client_fail(c, GA_E_INVAL,
                                  "state_load: tensor '%s' has %llu elements with codec %s in the state, %zu with %s here",
                                  t->name, (unsigned long long)n, ga_codec_name((ga_codec_id)codec), t->n,
                                  ga_codec_name(t->codec));
        uint32_t mine = (t->residual ? HAS_RESIDUAL : 0) | (t->u ? HAS_MOMENTUM : 0);
        if ((s->flags & (HAS_RESIDUAL | HAS_MOMENTUM)) != mine || (s->flags & ~31u) ||
            !(s->flags & HAS_LATE) != !(s->flags & LATE_PENDING))
            return ga_client_fail(c, GA_E_INVAL, "state_load: tensor '%s': flags %#x do not fit its codec and DGC setting",
                                  t->name, s->flags);
        s->arrays = r->p;
        if (!take(r, NULL, arrays_of(s->flags) * t->n * sizeof(float)))
            return ga_client_fail(c, GA_E_INVAL, "state_load: cut short in tensor '%s''s values", t->name);
    }
    if (r->p != r->end)
        return ga_client_fail(c, GA_E_INVAL, "state_load: %zu bytes after the last tensor", (size_t)(r->end - r->p));
    return GA_OK;
}

/* Room for t's late gradients (allocated on first use, as the fold-back does). */
static ga_status late_buffer(ga_client *c, ga_tensor *t)
{
    if (t->late) return GA_OK;
    if (!t->device) return (t->late = ga_calloc(t->n, sizeof(float))) ? GA_OK : GA_E_NOMEM;
    ga_status st = ga_device_malloc(t->n * sizeof(float), (void **)&t->late);
    if (st == GA_OK && (st = ga_client_device_zero(c, t->late, t->n * sizeof(float))) != GA_OK) {
        ga_device_free(t->late);
        t->late = NULL;
    }
    return st;
}

ga_status ga_client_state_load(ga_client *c, const void *buf, size_t len)
{
    if (!c || ga_client_in_flight(c) || (len && !buf)) return GA_E_INVAL;
    if (!c->inited) return ga_client_fail(c, GA_E_INVAL, "state_load: before init");
    saved_tensor *saved = ga_calloc(c->ntensors + 1, sizeof *saved);
    if (!saved) return ga_client_fail(c, GA_E_NOMEM, "state_load: out of memory");
    reader r = {buf, (const uint8_t *)buf + len};
    uint32_t epoch = 0;
    ga_status st = check_state(c, &r, &epoch, saved);
    /* Late buffers first: the only step that can fail for want of memory changes nothing. */
    if (st == GA_OK) {
        for (size_t i = 0; i < c->ntensors && st == GA_OK; i++)
            if (saved[i].flags & HAS_LATE) st = late_buffer(c, &c->tensors[i]);
        if (st != GA_OK) ga_client_fail(c, st, "state_load: room for the late gradients: %s", ga_strerror(st));
    }
    for (size_t i = 0; i < c->ntensors && st == GA_OK; i++) {
        ga_tensor *t = &c->tensors[i];
        const saved_tensor *s = &saved[i];
        const uint8_t *v = s->arrays;
        state_array arrays[3];
        arrays_of_tensor(t, arrays);
        for (size_t k = 0; k < 3 && st == GA_OK; k++) {
            if (!(s->flags & arrays[k].flag)) continue;
            st = copy_floats(c, arrays[k].v, v, t->n, arrays[k].device);
            v += t->n * sizeof(float);
        }
        t->late_pending = (s->flags & LATE_PENDING) != 0;
        t->auto_have = (s->flags & AUTO_HAVE) != 0;
        t->threshold = s->threshold;
        t->density = s->density;
        if (st != GA_OK) ga_client_fail(c, st, "state_load: tensor '%s': %s", t->name, ga_strerror(st));
    }
    if (st == GA_OK) c->epoch = epoch;
    ga_free(saved);
    return st;
}
