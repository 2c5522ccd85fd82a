/* The CUDA entry points of a build without CUDA: every one reports GA_E_NO_CUDA. */
#include "ga_alloc.h"
#include "ga_exec.h"

#include <string.h>

bool ga_cuda_built(void) { return false; }
int ga_cuda_device_count(void) { return 0; }

ga_status ga_exec_sync(const ga_exec *ex)
{
    if (!ex) return GA_E_INVAL;
    return ex->backend == GA_BACKEND_CPU ? GA_OK : GA_E_NO_CUDA;
}

ga_status ga_device_malloc(size_t bytes, void **out)
{
    (void)bytes, (void)out;
    return GA_E_NO_CUDA;
}

ga_status ga_pinned_malloc(size_t bytes, void **out)
{
    (void)bytes, (void)out;
    return GA_E_NO_CUDA;
}

void ga_device_free(void *p) { (void)p; }
void ga_pinned_free(void *p) { (void)p; }

ga_status ga_cuda_stream_create(void **out)
{
    (void)out;
    return GA_E_NO_CUDA;
}

void ga_cuda_stream_destroy(void *stream) { (void)stream; }

ga_status ga_device_gather(const ga_exec *ex, float *dst, const float *src, size_t start, size_t stride,
                           size_t count)
{
    if (!ex || stride == 0 || (count && (!dst || !src))) return GA_E_INVAL;
    if (ex->backend != GA_BACKEND_CPU) return ex->backend == GA_BACKEND_CUDA ? GA_E_NO_CUDA : GA_E_BACKEND;
    for (size_t k = 0; k < count; k++) dst[k] = src[start + k * stride];
    return GA_OK;
}

ga_status ga_device_copy(const ga_exec *ex, void *dst, const void *src, size_t bytes)
{
    if (!ex || (bytes && (!dst || !src))) return GA_E_INVAL;
    if (ex->backend != GA_BACKEND_CPU) return ex->backend == GA_BACKEND_CUDA ? GA_E_NO_CUDA : GA_E_BACKEND;
    if (bytes) memcpy(dst, src, bytes);
    return GA_OK;
}
