/* Device tensors where they cannot run (unit): add_tensor with device = true answers
 * GA_E_NO_CUDA in a build without CUDA and GA_E_NO_DEVICE on a machine without a GPU, with a
 * message, and registers nothing; a host tensor next to it still works. Against the in-process
 * fake server (fake_server.h). Device tensors at work: test_sdk_cuda (gpu). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <string.h>

#include "client_internal.h"
#include "fake_server.h"
#include "gradagg.h"
#include "test_memory.h"

static void device_refused_without_cuda(void **state)
{
    (void)state;
    if (ga_cuda_built() && ga_cuda_device_count() > 0) skip(); /* covered by test_sdk_cuda */
    fake_server_reset(1000, GA_CODEC_COUNT);
    ga_client_options o = GA_CLIENT_OPTIONS_INIT;
    o.server = "fake";
    o.job = "job";
    o.threads = 1;
    ga_client *c = NULL;
    char msg[256];
    assert_int_equal(ga_client_create(&o, &c, msg, sizeof msg), GA_OK);
    float p[64] = {0};
    uint64_t shape[1] = {64};
    ga_tensor_options t = GA_TENSOR_OPTIONS_INIT;
    t.device = true;
    t.codec = GA_CODEC_2BIT;
    int index = 77;
    if (!ga_cuda_built()) {
        assert_int_equal(ga_client_add_tensor(c, "d", shape, 1, p, &t, &index), GA_E_NO_CUDA);
        assert_string_equal(ga_client_error(c), "add_tensor 'd': device tensor, but libgradagg was built without CUDA");
    } else {
        assert_int_equal(ga_client_add_tensor(c, "d", shape, 1, p, &t, &index), GA_E_NO_DEVICE);
        assert_string_equal(ga_client_error(c), "add_tensor 'd': device tensor, but no CUDA device is available");
    }
    assert_int_equal(index, 77);
    assert_int_equal(c->ntensors, 0);
    assert_null(c->stream);
    t.device = false;
    assert_int_equal(ga_client_add_tensor(c, "d", shape, 1, p, &t, &index), GA_OK);
    assert_int_equal(ga_client_init(c), GA_OK);
    for (int i = 0; i < 64; i++) p[i] = 1.0f; /* the gradient: the pulled params hold it summed */
    float g[64];
    for (int i = 0; i < 64; i++) g[i] = 0.5f;
    const float *gs[1] = {g};
    assert_int_equal(ga_client_step(c, gs), GA_OK);
    assert_true(p[0] == 0.5f); /* 2bit t = 0.5 sent 0.5 onto the initial zeros */
    ga_client_destroy(c);
    fake_server_clear();
}

int main(void)
{
    test_memory_baseline();
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(device_refused_without_cuda),
        cmocka_unit_test(test_host_memory_returned),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
