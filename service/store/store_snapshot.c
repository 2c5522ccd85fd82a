/* The store's state to and from the host, for checkpoints (store.h, "checkpoints"). */
#include <string.h>

#include "ga_alloc.h"
#include "store_internal.h"

static float *buffer(const ga_store *s, uint32_t t, ga_store_buf b)
{
    if (!s || t >= s->count) return NULL;
    const ga_store_tensor *x = &s->tensors[t];
    switch (b) {
    case GA_STORE_BUF_PARAMS: return x->params;
    case GA_STORE_BUF_STATE0: return x->state0;
    case GA_STORE_BUF_STATE1: return x->state1;
    case GA_STORE_BUF_PUBLISHED: return x->published;
    case GA_STORE_BUFS: break;
    }
    return NULL;
}

uint32_t ga_store_tensors(const ga_store *s) { return s ? s->count : 0; }

size_t ga_store_tensor_elems(const ga_store *s, uint32_t t) { return s && t < s->count ? s->tensors[t].n : 0; }

bool ga_store_has(const ga_store *s, uint32_t t, ga_store_buf b) { return buffer(s, t, b) != NULL; }

static ga_status copy(ga_store *s, uint32_t t, ga_store_buf b, size_t off, size_t n, void *dst, const void *src,
                      bool to_host)
{
    float *buf = buffer(s, t, b);
    if (!buf || off > s->tensors[t].n || n > s->tensors[t].n - off || !(to_host ? dst : src)) return GA_E_INVAL;
    float *at = buf + off;
    ga_status rc = ga_device_copy(&s->ex, to_host ? dst : at, to_host ? at : src, n * sizeof(float));
    ga_status synced = ga_exec_sync(&s->ex);
    return rc != GA_OK ? rc : synced;
}

ga_status ga_store_read(ga_store *s, uint32_t t, ga_store_buf b, size_t off, size_t n, float *dst)
{
    return copy(s, t, b, off, n, dst, NULL, true);
}

ga_status ga_store_write(ga_store *s, uint32_t t, ga_store_buf b, size_t off, size_t n, const float *src)
{
    return copy(s, t, b, off, n, NULL, src, false);
}

uint64_t ga_store_version(const ga_store *s) { return s ? s->version : 0; }

uint64_t ga_store_adam_steps(const ga_store *s, uint32_t t) { return s && t < s->count ? s->tensors[t].adam_t : 0; }

void ga_store_restore_counters(ga_store *s, uint64_t version, uint32_t t, uint64_t adam_steps)
{
    s->version = version;
    if (t < s->count) s->tensors[t].adam_t = adam_steps;
}

ga_status ga_store_publication(ga_store *s, uint32_t t, ga_published *out)
{
    if (!s || t >= s->count || !out) return GA_E_INVAL;
    const ga_store_tensor *x = &s->tensors[t];
    if (x->pub) { /* CPU: the store's blob is the publication */
        memset(out, 0, sizeof *out);
        out->full = ga_blob_ref(x->pub);
        out->npieces = ga_store_npieces(s, x->n);
        return GA_OK;
    }
    ga_blob *full = ga_blob_create(x->n * sizeof(float));
    if (!full) return GA_E_NOMEM;
    /* Workers hold the published copy when deltas are on, the parameters otherwise. */
    const float *src = x->published ? x->published : x->params;
    ga_status rc = ga_device_copy(&s->ex, full->data, src, x->n * sizeof(float));
    ga_status synced = ga_exec_sync(&s->ex);
    if (rc == GA_OK) rc = synced;
    if (rc != GA_OK) {
        ga_blob_unref(full);
        return rc;
    }
    memset(out, 0, sizeof *out);
    out->full = full;
    out->npieces = ga_store_npieces(s, x->n);
    return GA_OK;
}
