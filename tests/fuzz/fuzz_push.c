/* libFuzzer target for the whole Push path after the network: each record of the input is one
 * PushChunk as received (ga_wire_unpack from a byte buffer cut into slices), checked and added
 * to the stream's bundle (ga_push_add, what dispatch does on the completion-queue thread), and
 * the finished bundle is handed to a fresh in-process core (ga_core_push on the loop) that holds
 * one job (fuzz_core.h). Checks, after each input:
 *  - a record that does not unpack is GA_E_PROTO; a chunk ga_push_add refuses leaves the bundle
 *    exactly as it was;
 *  - the call is finished exactly once; a refusal is the client's fault (never INTERNAL);
 *  - refused (or never handed to the core): the job is byte-identical to before (version,
 *    step, membership, counters, held bytes, parameters and publication);
 *  - accepted: not a duplicate, the ack names the push's step, and the job published exactly
 *    one more version whose parameters are the old ones plus every chunk decoded by the kernels
 *    (the reference: ga_codec_decode_add into zeros, in chunk order);
 *  - either way a valid push afterwards is accepted and adds exactly its gradient (no fault, no
 *    half-added sum left behind).
 *
 * Input layout:
 *   [0]  mode: bit 0 async job (else sync); bits 1-2 the slicing of each record's byte buffer
 *        (fuzz_util.h), bits 3-7 its split point
 *   then records: u16 little-endian length, then that many bytes (the last may be short), at
 *   most MAX_CHUNKS of them.
 * Seeds: tests/fuzz/corpus/push/, written by the fuzz_gen_corpus program (make_corpus.sh). */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/log.h"
#include "fuzz_core.h"
#include "ga_codec.h"

#define MAX_CHUNKS 16u

static uint64_t mem_baseline;
static bool verbose; /* FUZZ_VERBOSE=1: each input's outcome on stderr (checking the seeds) */

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc, (void)argv;
    ga_log_set_level(GA_LOG_ERROR); /* refusals are the point here, not news */
    mem_baseline = ga_mem_in_use(GA_MEM_HOST);
    verbose = getenv("FUZZ_VERBOSE") != NULL;
    return 0;
}

/* The kernels' own decode of every part into zeros, where the part names a tensor of the job
 * and lies inside it; false when any part could not be decoded (then the core must refuse). */
static bool reference_sum(const ga_push *p, float *sum)
{
    static const ga_exec cpu = {GA_BACKEND_CPU, 1, GA_SIMD_AUTO, NULL};
    memset(sum, 0, FUZZ_ELEMS * sizeof *sum);
    for (size_t i = 0; i < p->count; i++) {
        const Gradagg__V1__PushChunk *c = p->parts[i].chunk;
        int t = -1;
        for (int k = 0; k < FUZZ_TENSORS; k++)
            if (strcmp(c->tensor, fuzz_tensor_names[k]) == 0) t = k;
        if (t < 0 || c->offset > fuzz_tensor_elems[t] || c->count > fuzz_tensor_elems[t] - c->offset) return false;
        float *at = sum + fuzz_tensor_base[t] + c->offset;
        if (ga_codec_decode_add(&cpu, p->parts[i].codec, &p->parts[i].params, c->payload.data, c->payload.len,
                                (size_t)c->count, at) != GA_OK)
            return false;
    }
    return true;
}

/* Reads the records into a bundle. Returns it (NULL when no record arrived or the stream was
 * refused: then nothing reaches the core, as when the transport aborts a stream). */
static ga_push *read_stream(const uint8_t *data, size_t size, uint8_t mode)
{
    ga_push *push = NULL;
    size_t pos = 1;
    char why[256];
    for (unsigned k = 0; k < MAX_CHUNKS && size - pos >= 2; k++) {
        size_t len = fuzz_rd16(data + pos);
        pos += 2;
        if (len > size - pos) len = size - pos;
        grpc_byte_buffer *bb = fuzz_byte_buffer(data + pos, len, (mode >> 1) & 3u, mode >> 3);
        pos += len;
        ProtobufCMessage *msg = NULL;
        ga_status st = ga_wire_unpack(&gradagg__v1__push_chunk__descriptor, bb, &msg);
        grpc_byte_buffer_destroy(bb);
        if (st != GA_OK) {
            FUZZ_CHECK(st == GA_E_PROTO && !msg, "unpack: %s", ga_status_name(st));
            ga_push_free(push);
            return NULL;
        }
        ga_push *was = push;
        size_t count = push ? push->count : 0, bytes = push ? push->bytes.payload_bytes : 0;
        why[0] = 0;
        st = ga_push_add(&push, (Gradagg__V1__PushChunk *)msg, FUZZ_STREAM_BYTES, NULL, why, sizeof why);
        if (st != GA_OK) {
            FUZZ_CHECK(push == was && (!push || (push->count == count && push->bytes.payload_bytes == bytes)),
                       "a refused chunk changed the bundle");
            FUZZ_CHECK(why[0] != 0 && fuzz_client_fault(st), "refusal %s with message '%s'", ga_status_name(st), why);
            ga_push_free(push);
            return NULL;
        }
        FUZZ_CHECK(push && push->count == count + 1, "bundle count");
        FUZZ_CHECK((uintptr_t)push->parts[count].chunk->payload.data % 4 == 0, "payload alignment");
    }
    return push;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1) return 0;
    uint8_t mode = data[0];
    bool async = mode & 1;
    static fuzz_core h;
    static fuzz_snap before, after;
    static float ref[FUZZ_ELEMS];
    fuzz_core_open(&h, async);
    fuzz_snap_take(&h, &before);

    bool accepted = false;
    ga_push *push = read_stream(data, size, mode);
    if (push) {
        uint64_t step = push->step;
        bool decodable = reference_sum(push, ref);
        ga_call *c = fake_call_new();
        ga_core_push(h.core, c, push); /* takes push */
        fuzz_settle(&h);
        FUZZ_CHECK(c->finished && c->misuse == 0, "push call: finished %d misuse %d", c->finished, c->misuse);
        if (c->status == GA_OK) {
            accepted = true;
            Gradagg__V1__PushResponse *r =
                (Gradagg__V1__PushResponse *)fake_call_response(c, &gradagg__v1__push_response__descriptor);
            FUZZ_CHECK(r, "ack without a response");
            FUZZ_CHECK(!r->duplicate && r->step == step && r->version == (async ? 1u : 0u),
                       "ack: duplicate %d step %llu version %llu", r->duplicate, (unsigned long long)r->step,
                       (unsigned long long)r->version);
            protobuf_c_message_free_unpacked(&r->base, NULL);
            FUZZ_CHECK(decodable, "the core accepted a push the kernels cannot decode");
        } else {
            FUZZ_CHECK(fuzz_client_fault(c->status), "push refused with %s: %s", ga_status_name(c->status), c->message);
        }
        if (verbose) fprintf(stderr, "push: %s %s\n", ga_status_name(c->status), c->message);
        fake_call_free(c);
    } else if (verbose) {
        fprintf(stderr, "push: stream refused before the core\n");
    }

    fuzz_snap_take(&h, &after);
    if (!accepted) {
        const char *d = fuzz_snap_diff(&before, &after);
        FUZZ_CHECK(!d, "a refused push changed the job: %s", d);
    } else {
        FUZZ_CHECK(after.version == 1 && after.steps == 1 && after.fault == GA_OK && after.has_pushed,
                   "accepted push: version %llu steps %llu fault %s", (unsigned long long)after.version,
                   (unsigned long long)after.steps, ga_status_name(after.fault));
        for (size_t i = 0; i < FUZZ_ELEMS; i++) {
            float want = before.params[i] + ref[i];
            FUZZ_CHECK(memcmp(&after.params[i], &want, 4) == 0 && memcmp(&after.published[i], &want, 4) == 0,
                       "element %zu is %a (published %a), want %a", i, (double)after.params[i],
                       (double)after.published[i], (double)want);
        }
    }
    /* The next step a worker would push: sync opens step 1 after the accepted step 0; async takes
     * any step after the member's last. */
    uint64_t next = async ? (after.has_pushed ? after.last_step + 1 : 0) : after.open_step;
    if (!(async && after.has_pushed && after.last_step == UINT64_MAX)) fuzz_probe(&h, next);
    fuzz_core_close(&h);
    FUZZ_CHECK(ga_mem_in_use(GA_MEM_HOST) == mem_baseline, "host memory %llu after the input, %llu before",
               (unsigned long long)ga_mem_in_use(GA_MEM_HOST), (unsigned long long)mem_baseline);
    return 0;
}
