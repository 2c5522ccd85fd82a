/* Device tensors: the client's CUDA stream, device residuals and staging buffers, the host
 * mirror's copies to and from the caller's device buffer, and the device fold-back. Only the
 * kernels' C API: no CUDA header here. */
#include <string.h>

#include "client_internal.h"
#include "ga_alloc.h"
#include "ga_codec.h"

ga_status ga_client_device_reserve(void **buf, size_t *cap, size_t want)
{
    if (*cap >= want && *buf) return GA_OK;
    void *p = NULL;
    ga_status st = ga_device_malloc(want ? want : 4, &p);
    if (st != GA_OK) return st;
    ga_device_free(*buf);
    *buf = p;
    *cap = want;
    return GA_OK;
}

ga_status ga_client_device_zero(ga_client *c, void *p, size_t bytes)
{
    static const uint8_t zeros[4096];
    uint8_t *d = p;
    size_t done = bytes < sizeof zeros ? bytes : sizeof zeros;
    ga_status st = ga_device_copy(&c->dex, d, zeros, done);
    /* Then doubling device-to-device copies of what is already zero (stream-ordered). */
    while (st == GA_OK && done < bytes) {
        size_t k = bytes - done < done ? bytes - done : done;
        st = ga_device_copy(&c->dex, d + done, d, k);
        done += k;
    }
    return st;
}

ga_status ga_client_device_tensor(ga_client *c, ga_tensor *t)
{
    ga_status st;
    if (!c->stream) {
        if ((st = ga_cuda_stream_create(&c->stream)) != GA_OK) return st;
        c->dex = (ga_exec)GA_EXEC_CUDA_INIT;
        c->dex.cuda_stream = c->stream;
    }
    if (!(t->params = ga_malloc(t->n * sizeof(float)))) return GA_E_NOMEM;
    if (ga_codec_has_residual(t->codec)) {
        if ((st = ga_device_malloc(t->n * sizeof(float), (void **)&t->residual)) != GA_OK) return st;
        if ((st = ga_client_device_zero(c, t->residual, t->n * sizeof(float))) != GA_OK) return st;
        return ga_exec_sync(&c->dex);
    }
    return GA_OK;
}

void ga_client_device_tensor_free(ga_tensor *t)
{
    ga_free(t->params);
    ga_device_free(t->residual);
    ga_device_free(t->work);
    ga_device_free(t->late);
    ga_device_free(t->dbuf);
}

ga_status ga_client_device_load(ga_client *c)
{
    ga_status st = GA_OK;
    for (size_t i = 0; i < c->ntensors && st == GA_OK; i++) {
        ga_tensor *t = &c->tensors[i];
        if (t->device) st = ga_device_copy(&c->dex, t->params, t->dparams, t->n * sizeof(float));
    }
    ga_status sync = c->stream ? ga_exec_sync(&c->dex) : GA_OK;
    return st != GA_OK ? st : sync;
}

ga_status ga_client_device_store(ga_client *c)
{
    if (!c->stream) return GA_OK;
    c->device_stale = true;
    ga_status st = GA_OK;
    for (size_t i = 0; i < c->ntensors && st == GA_OK; i++) {
        ga_tensor *t = &c->tensors[i];
        if (t->device) st = ga_device_copy(&c->dex, t->dparams, t->params, t->n * sizeof(float));
    }
    ga_status sync = ga_exec_sync(&c->dex);
    if (st == GA_OK) st = sync;
    if (st == GA_OK) c->device_stale = false;
    return st;
}

ga_status ga_client_device_fold_back(ga_client *c, ga_tensor *t, float *into, const bool *mask)
{
    /* Earlier encodes' copies out of dbuf must be done before it is overwritten. */
    ga_status st = ga_exec_sync(&c->dex);
    for (size_t k = 0; k < t->nparts && st == GA_OK; k++) {
        ga_push_part *p = &t->parts[k];
        if (mask && !mask[t->pieces[p->piece].shard]) continue;
        st = ga_device_copy(&c->dex, t->dbuf + p->pos, t->buf + p->pos, p->len);
        if (st == GA_OK)
            st = ga_codec_decode_add(&c->dex, t->codec, &p->params, t->dbuf + p->pos, p->len, p->count, into + p->off);
    }
    ga_status sync = ga_exec_sync(&c->dex);
    return st != GA_OK ? st : sync;
}
