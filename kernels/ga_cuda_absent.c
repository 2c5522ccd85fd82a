/* The CUDA entry points of a build without CUDA: every one reports GA_E_NO_CUDA. */
#include "ga_alloc.h"
#include "ga_exec.h"

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
