/* ga_client_abi_layout: sizeof and offsetof of every public struct field, so a binding that
 * mirrors the structs (client/python's ctypes) can check its layout against the library it
 * loaded instead of trusting that both were built from the same header. */
#include <stddef.h>
#include <string.h>

#include "gradagg.h"

typedef struct abi_row {
    const char *type;
    const char *field; /* NULL: the row of sizeof(type) */
    size_t value;
} abi_row;

#define SIZE(T) {#T, NULL, sizeof(T)}
#define FIELD(T, F) {#T, #F, offsetof(T, F)}

static const abi_row rows[] = {
    SIZE(ga_codec_params),
    FIELD(ga_codec_params, threshold),
    FIELD(ga_codec_params, ratio),
    FIELD(ga_codec_params, sample_fraction),
    FIELD(ga_codec_params, adapt_rounds),
    FIELD(ga_codec_params, seed),
    FIELD(ga_codec_params, topk_values),
    FIELD(ga_codec_params, topk_indices),
    FIELD(ga_codec_params, select),

    SIZE(ga_sgd_params),
    FIELD(ga_sgd_params, lr),
    FIELD(ga_sgd_params, momentum),
    FIELD(ga_sgd_params, weight_decay),
    FIELD(ga_sgd_params, nesterov),

    SIZE(ga_adam_params),
    FIELD(ga_adam_params, lr),
    FIELD(ga_adam_params, beta1),
    FIELD(ga_adam_params, beta2),
    FIELD(ga_adam_params, eps),
    FIELD(ga_adam_params, weight_decay),
    FIELD(ga_adam_params, decoupled),

    SIZE(ga_client_options),
    FIELD(ga_client_options, version),
    FIELD(ga_client_options, server),
    FIELD(ga_client_options, job),
    FIELD(ga_client_options, rank),
    FIELD(ga_client_options, world_size),
    FIELD(ga_client_options, incarnation),
    FIELD(ga_client_options, mode),
    FIELD(ga_client_options, mean),
    FIELD(ga_client_options, optimizer),
    FIELD(ga_client_options, sgd),
    FIELD(ga_client_options, adam),
    FIELD(ga_client_options, deadline_ms),
    FIELD(ga_client_options, quorum),
    FIELD(ga_client_options, pull_codec),
    FIELD(ga_client_options, pull_params),
    FIELD(ga_client_options, chunk_bytes),
    FIELD(ga_client_options, call_timeout_ms),
    FIELD(ga_client_options, step_timeout_ms),
    FIELD(ga_client_options, max_retries),
    FIELD(ga_client_options, backoff_ms),
    FIELD(ga_client_options, backoff_max_ms),
    FIELD(ga_client_options, threads),
    FIELD(ga_client_options, tls_ca_file),
    FIELD(ga_client_options, tls_cert_file),
    FIELD(ga_client_options, tls_key_file),
    FIELD(ga_client_options, tls_target_name),
    FIELD(ga_client_options, auth_token),
    FIELD(ga_client_options, shard_split_elements),
    FIELD(ga_client_options, lanes),
    FIELD(ga_client_options, pull_auto_bits),
    FIELD(ga_client_options, retry_budget_ms),
    FIELD(ga_client_options, resume),
    FIELD(ga_client_options, min_world_size),
    FIELD(ga_client_options, staleness),

    SIZE(ga_dgc_options),
    FIELD(ga_dgc_options, enabled),
    FIELD(ga_dgc_options, momentum),
    FIELD(ga_dgc_options, nesterov),
    FIELD(ga_dgc_options, factor_masking),
    FIELD(ga_dgc_options, clip_norm),
    FIELD(ga_dgc_options, warmup_epochs),

    SIZE(ga_auto_threshold),
    FIELD(ga_auto_threshold, enabled),
    FIELD(ga_auto_threshold, bits),
    FIELD(ga_auto_threshold, smoothing),
    FIELD(ga_auto_threshold, sample_fraction),
    FIELD(ga_auto_threshold, level),

    SIZE(ga_tensor_options),
    FIELD(ga_tensor_options, version),
    FIELD(ga_tensor_options, codec),
    FIELD(ga_tensor_options, params),
    FIELD(ga_tensor_options, dgc),
    FIELD(ga_tensor_options, auto_threshold),
    FIELD(ga_tensor_options, device),

    SIZE(ga_client_stats),
    FIELD(ga_client_stats, encode_s),
    FIELD(ga_client_stats, push_s),
    FIELD(ga_client_stats, pull_s),
    FIELD(ga_client_stats, decode_s),
    FIELD(ga_client_stats, bytes_pushed),
    FIELD(ga_client_stats, bytes_pulled),
    FIELD(ga_client_stats, steps),
    FIELD(ga_client_stats, retries),
    FIELD(ga_client_stats, late_pushes),
    FIELD(ga_client_stats, rejoins),
    FIELD(ga_client_stats, versions_lost),
};

size_t ga_client_abi_layout(const char *type, const char *field)
{
    if (!type) return (size_t)-1;
    for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) {
        const abi_row *r = &rows[i];
        if (strcmp(r->type, type) != 0) continue;
        if (!field ? !r->field : r->field && strcmp(r->field, field) == 0) return r->value;
    }
    return (size_t)-1;
}
