/* CUDA side of ga_exec: whether CUDA is built, how many devices there are (asked once), and
 * waiting for a stream. Never prints, never aborts: no driver or no GPU simply means 0 devices. */
#include "cuda_check.h"
#include "ga_exec.h"

static int query_device_count(void)
{
    int count = 0;
    if (ga_cuda_status(cudaGetDeviceCount(&count)) != GA_OK) return 0;
    return count > 0 ? count : 0;
}

bool ga_cuda_built(void) { return true; }

int ga_cuda_device_count(void)
{
    /* A function-local static is initialised once, thread-safely (C++11). */
    static const int count = query_device_count();
    return count;
}

ga_status ga_exec_sync(const ga_exec *ex)
{
    if (!ex) return GA_E_INVAL;
    if (ex->backend == GA_BACKEND_CPU) return GA_OK;
    if (ex->backend != GA_BACKEND_CUDA) return GA_E_BACKEND;
    if (ga_cuda_device_count() == 0) return GA_E_NO_DEVICE;
    return ga_cuda_status(cudaStreamSynchronize(ga_cuda_stream(ex)));
}

ga_status ga_cuda_stream_create(void **out)
{
    if (!out) return GA_E_INVAL;
    if (ga_cuda_device_count() == 0) return GA_E_NO_DEVICE;
    cudaStream_t stream;
    GA_CUDA_TRY(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
    *out = stream;
    return GA_OK;
}

void ga_cuda_stream_destroy(void *stream)
{
    if (stream) cudaStreamDestroy((cudaStream_t)stream);
}
