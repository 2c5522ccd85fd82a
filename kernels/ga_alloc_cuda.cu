/* PLACEHOLDER: replaced by the real implementation in this session. */
#include "ga_alloc.h"
extern "C" ga_status ga_device_malloc(size_t bytes, void **out) { (void)bytes, (void)out; return GA_E_NO_DEVICE; }
extern "C" ga_status ga_pinned_malloc(size_t bytes, void **out) { (void)bytes, (void)out; return GA_E_NO_DEVICE; }
extern "C" void ga_device_free(void *p) { (void)p; }
extern "C" void ga_pinned_free(void *p) { (void)p; }
