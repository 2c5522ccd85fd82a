/* The method table: every RPC the server serves and the SDK calls, one row each (ga_methods.h).
 * The streaming kinds are not in the protobuf-c descriptors; tests/unit/test_methods.c checks them
 * against the .proto sources. */
#include "ga_methods.h"

#include <stdio.h>
#include <string.h>

#define AGG "gradagg.v1.Aggregator"
#define HEALTH "grpc.health.v1.Health"
#define ROW(svc, name, kind, req, resp) {"/" svc "/" name, svc, name, kind, &req, &resp}

const ga_method ga_methods[GA_METHODS] = {
    [GA_METHOD_JOIN] = ROW(AGG, "Join", GA_RPC_UNARY, gradagg__v1__join_request__descriptor,
                           gradagg__v1__join_response__descriptor),
    [GA_METHOD_LEAVE] = ROW(AGG, "Leave", GA_RPC_UNARY, gradagg__v1__leave_request__descriptor,
                            gradagg__v1__leave_response__descriptor),
    [GA_METHOD_INIT] = ROW(AGG, "InitTensors", GA_RPC_CLIENT_STREAM, gradagg__v1__init_chunk__descriptor,
                           gradagg__v1__init_response__descriptor),
    [GA_METHOD_PUSH] = ROW(AGG, "Push", GA_RPC_CLIENT_STREAM, gradagg__v1__push_chunk__descriptor,
                           gradagg__v1__push_response__descriptor),
    [GA_METHOD_PULL] = ROW(AGG, "Pull", GA_RPC_SERVER_STREAM, gradagg__v1__pull_request__descriptor,
                           gradagg__v1__pull_chunk__descriptor),
    [GA_METHOD_STATUS] = ROW(AGG, "Status", GA_RPC_UNARY, gradagg__v1__status_request__descriptor,
                             gradagg__v1__status_response__descriptor),
    [GA_METHOD_HEARTBEAT] = ROW(AGG, "Heartbeat", GA_RPC_UNARY, gradagg__v1__heartbeat_request__descriptor,
                                gradagg__v1__heartbeat_response__descriptor),
    [GA_METHOD_DELETE_JOB] = ROW(AGG, "DeleteJob", GA_RPC_UNARY, gradagg__v1__delete_job_request__descriptor,
                                 gradagg__v1__delete_job_response__descriptor),
    [GA_METHOD_LIST_JOBS] = ROW(AGG, "ListJobs", GA_RPC_UNARY, gradagg__v1__list_jobs_request__descriptor,
                                gradagg__v1__list_jobs_response__descriptor),
    [GA_METHOD_SHARD_INFO] = ROW(AGG, "ShardInfo", GA_RPC_UNARY, gradagg__v1__shard_info_request__descriptor,
                                 gradagg__v1__shard_info_response__descriptor),
    [GA_METHOD_HEALTH_CHECK] = ROW(HEALTH, "Check", GA_RPC_UNARY, grpc__health__v1__health_check_request__descriptor,
                                   grpc__health__v1__health_check_response__descriptor),
    [GA_METHOD_HEALTH_WATCH] = ROW(HEALTH, "Watch", GA_RPC_SERVER_STREAM,
                                   grpc__health__v1__health_check_request__descriptor,
                                   grpc__health__v1__health_check_response__descriptor),
};

const ga_method *ga_method_by_path(const char *path, size_t len)
{
    if (!path) return NULL;
    for (size_t i = 0; i < GA_METHODS; i++) {
        const char *p = ga_methods[i].path;
        if (strlen(p) == len && memcmp(p, path, len) == 0) return &ga_methods[i];
    }
    return NULL;
}

const char *ga_peer_host(const char *peer, char *host, size_t cap)
{
    const char *colon = strrchr(peer, ':');
    size_t n = colon && colon != strchr(peer, ':') ? (size_t)(colon - peer) : strlen(peer);
    snprintf(host, cap, "%.*s", (int)n, peer);
    return host;
}
