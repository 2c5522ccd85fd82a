/* `gradagg plan` (plan.h): its options, its output (a table or JSON) and the overlay it writes. */
#define _POSIX_C_SOURCE 200809L
#include "plan.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "commands.h"
#include "json.h"
#include "placement.h"

typedef struct plan_args {
    plan_setup setup;
    plan_space space;
    uint64_t *tensors;
    const char *codecs;      /* "push/pull,..." the search may use; NULL: every measured pair */
    const char *overlay_dir; /* write the overlay there */
    const char *overlay_base;
    bool json;
} plan_args;

static void usage(FILE *out)
{
    fprintf(out,
            "usage: gradagg plan (--params N | --tensors FILE) --world W --link-gbit R [options]\n"
            "the job:\n"
            "  --params N            the model's parameters (suffix K, M, B: 1e3, 1e6, 1e9)\n"
            "  --tensors FILE        one tensor per line: its elements, or a name and its elements\n"
            "  --world W             ranks; --ranks-per-node G (default 1): ranks sharing a node's link\n"
            "  --compute-ms X        forward + backward of one rank (default 0)\n"
            "  --optimizer O         the server's: none, sgd (default), adam\n"
            "the machines:\n"
            "  --link-gbit R         each worker node's link, Gbit/s (0: unlimited)\n"
            "  --server-link-gbit R  each shard's link (default: --link-gbit)\n"
            "  --node-gbyte-s R      rank to relay inside a node, GB/s (default 25: PCIe)\n"
            "  --rtt-ms X            a call's round trip (default 0.1)\n"
            "  --disk-gbyte-s R      each shard's journal disk, direct writes, GB/s (default 2; 0: unlimited)\n"
            "  --server-cores C      cores (--threads) per shard (default 16)\n"
            "  --relay-cores C       cores of a worker node its relay may use (default 16)\n"
            "  --server-gpu          shards with --backend cuda;  --worker-gpu: ranks encode on a GPU\n"
            "  --shared-cores K      every rank, relay and shard on one machine of K cores (a test rig)\n"
            "the choices (each searched unless given):\n"
            "  --shards S (--max-shards M, default 64), --relays on|off, --colocate, --lanes L,\n"
            "  --codec C --pull-codec P (or --codecs push/pull,...), --topk-ratio r, --durability acked|checkpoint\n"
            "  --target-step-ms T    the fewest shards whose step meets T (default: within 10%% of the fastest)\n"
            "output:\n"
            "  --json                JSON instead of the table\n"
            "  --overlay DIR         also write a kustomize overlay for the recommendation into DIR\n"
            "  --overlay-base PATH   what it builds on, relative to DIR (default ../../overlays/cpu or gpu)\n");
}

static int bad(const char *opt, const char *v, const char *want)
{
    fprintf(stderr, "gradagg plan: %s %s: expected %s\n", opt, v, want);
    return CLI_USAGE;
}

/* A non-negative number, with an optional K/M/B suffix when `suffix`. */
static int number(const char *opt, const char *v, bool suffix, double max, double *out)
{
    char *end;
    errno = 0;
    double x = strtod(v, &end);
    double scale = 1;
    if (suffix && *end && !end[1]) {
        scale = *end == 'K' ? 1e3 : *end == 'M' ? 1e6 : *end == 'B' ? 1e9 : 0;
        end += scale > 0;
    }
    if (end == v || *end || errno || !isfinite(x) || x < 0 || x * scale > max)
        return bad(opt, v, suffix ? "a number, optionally with K, M or B" : "a non-negative number");
    *out = x * scale;
    return CLI_OK;
}

static int whole(const char *opt, const char *v, double lo, double hi, uint32_t *out)
{
    double x;
    if (number(opt, v, false, hi, &x) != CLI_OK || x < lo || x != floor(x)) {
        char want[64];
        snprintf(want, sizeof want, "an integer in [%.0f, %.0f]", lo, hi);
        return bad(opt, v, want);
    }
    *out = (uint32_t)x;
    return CLI_OK;
}

/* FILE: a tensor per line ("ELEMENTS" or "NAME ELEMENTS"); blank lines and # comments skipped. */
static int read_tensors(const char *path, plan_args *a)
{
    FILE *f = fopen(path, "r");
    if (!f) {
        fprintf(stderr, "gradagg plan: --tensors %s: %s\n", path, strerror(errno));
        return CLI_USAGE;
    }
    size_t cap = 0, n = 0, line_no = 0;
    char line[512];
    int rc = CLI_OK;
    while (rc == CLI_OK && fgets(line, sizeof line, f)) {
        line_no++;
        char *hash = strchr(line, '#');
        if (hash) *hash = '\0';
        char *last = NULL, *tok, *save = NULL;
        int words = 0;
        for (tok = strtok_r(line, " \t\r\n", &save); tok; tok = strtok_r(NULL, " \t\r\n", &save)) last = tok, words++;
        if (words == 0) continue;
        char *end;
        errno = 0;
        unsigned long long elems = strtoull(last, &end, 10);
        if (words > 2 || *end || errno || elems == 0 || elems > (1ull << 40) || last[0] == '-') {
            fprintf(stderr, "gradagg plan: %s:%zu: expected ELEMENTS or NAME ELEMENTS (a positive integer)\n", path, line_no);
            rc = CLI_USAGE;
        } else if (n == PLAN_MAX_TENSORS) {
            fprintf(stderr, "gradagg plan: %s: more than %u tensors\n", path, PLAN_MAX_TENSORS);
            rc = CLI_USAGE;
        } else {
            if (n == cap) {
                cap = cap ? 2 * cap : 64;
                uint64_t *t = realloc(a->tensors, cap * sizeof *t);
                if (!t) {
                    rc = CLI_USAGE;
                    break;
                }
                a->tensors = t;
            }
            a->tensors[n++] = elems;
        }
    }
    fclose(f);
    if (rc == CLI_OK && n == 0) {
        fprintf(stderr, "gradagg plan: %s: no tensor\n", path);
        rc = CLI_USAGE;
    }
    a->setup.ntensors = n;
    return rc;
}

static int codec_option(const char *opt, const char *v, ga_codec_id *out)
{
    return ga_codec_from_name(v, out) == GA_OK ? CLI_OK : bad(opt, v, "a codec name (none, fp16, 2bit, topk, int8, ...)");
}

static int parse(int argc, char **argv, plan_args *a, const plan_pair_costs **chosen)
{
    plan_setup *s = &a->setup;
    int have_codec = 0, have_pull = 0, have_world = 0, have_link = 0;
    double server_link = -1, params = 0;
    for (int i = 0; i < argc; i++) {
        const char *k = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        int rc = CLI_OK;
        if (strcmp(k, "--help") == 0) {
            usage(stdout);
            return -1;
        }
        if (strcmp(k, "--json") == 0) { a->json = true; continue; }
        if (strcmp(k, "--server-gpu") == 0) { s->server_gpu = true; continue; }
        if (strcmp(k, "--worker-gpu") == 0) { s->worker_gpu = true; continue; }
        if (strcmp(k, "--colocate") == 0) { s->colocate = true; continue; }
        if (!v || strncmp(k, "--", 2) != 0) {
            fprintf(stderr, "gradagg plan: %s\n", strncmp(k, "--", 2) ? "unexpected argument" : "an option needs a value");
            fprintf(stderr, "  at %s\n", k);
            return CLI_USAGE;
        }
        i++;
        uint32_t u = 0;
        double d = 0;
        if (strcmp(k, "--params") == 0) rc = number(k, v, true, 1e13, &params);
        else if (strcmp(k, "--tensors") == 0) rc = read_tensors(v, a);
        else if (strcmp(k, "--world") == 0) rc = whole(k, v, 1, 1 << 20, &s->world), have_world = 1;
        else if (strcmp(k, "--ranks-per-node") == 0) rc = whole(k, v, 1, 1024, &s->ranks_per_node);
        else if (strcmp(k, "--compute-ms") == 0) rc = number(k, v, false, 1e7, &s->compute_ms);
        else if (strcmp(k, "--link-gbit") == 0) rc = number(k, v, false, 1e5, &s->link_gbit), have_link = 1;
        else if (strcmp(k, "--server-link-gbit") == 0) rc = number(k, v, false, 1e5, &server_link);
        else if (strcmp(k, "--node-gbyte-s") == 0) rc = number(k, v, false, 1e5, &s->node_gbyte_s);
        else if (strcmp(k, "--rtt-ms") == 0) rc = number(k, v, false, 1e5, &s->rtt_ms);
        else if (strcmp(k, "--disk-gbyte-s") == 0) rc = number(k, v, false, 1e5, &s->disk_gbyte_s);
        else if (strcmp(k, "--server-cores") == 0) rc = whole(k, v, 1, 4096, &s->server_cores);
        else if (strcmp(k, "--relay-cores") == 0) rc = whole(k, v, 1, 4096, &s->relay_cores);
        else if (strcmp(k, "--shared-cores") == 0) rc = whole(k, v, 1, 4096, &s->shared_cores);
        else if (strcmp(k, "--shards") == 0) rc = whole(k, v, 1, GA_PLACEMENT_MAX_SHARDS, &u), a->space.shards = (int)u;
        else if (strcmp(k, "--max-shards") == 0) rc = whole(k, v, 1, GA_PLACEMENT_MAX_SHARDS, &a->space.max_shards);
        else if (strcmp(k, "--lanes") == 0) rc = whole(k, v, 1, 64, &u), a->space.lanes = (int)u;
        else if (strcmp(k, "--codec") == 0) rc = codec_option(k, v, &s->push), have_codec = 1;
        else if (strcmp(k, "--pull-codec") == 0) rc = codec_option(k, v, &s->pull), have_pull = 1;
        else if (strcmp(k, "--codecs") == 0) a->codecs = v;
        else if (strcmp(k, "--topk-ratio") == 0) {
            rc = number(k, v, false, 1, &d);
            if (rc == CLI_OK && d <= 0) rc = bad(k, v, "a ratio in (0, 1]");
            s->topk_ratio = (float)d;
        } else if (strcmp(k, "--target-step-ms") == 0) rc = number(k, v, false, 1e7, &d), a->space.target_step_s = d / 1e3;
        else if (strcmp(k, "--relays") == 0) {
            if (strcmp(v, "on") && strcmp(v, "off")) rc = bad(k, v, "on or off");
            a->space.relays = strcmp(v, "on") == 0;
        } else if (strcmp(k, "--optimizer") == 0) {
            if (strcmp(v, "none") == 0) s->optimizer = PLAN_OPT_NONE;
            else if (strcmp(v, "sgd") == 0) s->optimizer = PLAN_OPT_SGD;
            else if (strcmp(v, "adam") == 0) s->optimizer = PLAN_OPT_ADAM;
            else rc = bad(k, v, "none, sgd or adam");
        } else if (strcmp(k, "--durability") == 0) {
            if (strcmp(v, "acked") && strcmp(v, "checkpoint")) rc = bad(k, v, "acked or checkpoint");
            s->journal = strcmp(v, "acked") == 0;
        } else if (strcmp(k, "--overlay") == 0) a->overlay_dir = v;
        else if (strcmp(k, "--overlay-base") == 0) a->overlay_base = v;
        else {
            fprintf(stderr, "gradagg plan: unknown option %s\n", k);
            return CLI_USAGE;
        }
        if (rc != CLI_OK) return rc;
    }
    if ((params > 0) == (s->ntensors > 0) || !have_world || !have_link) {
        fprintf(stderr, "gradagg plan: needs %s\n", (params > 0) == (s->ntensors > 0) ? "one of --params N and --tensors FILE"
                                                    : !have_world ? "--world W" : "--link-gbit R");
        return CLI_USAGE;
    }
    if (params > 0) {
        a->tensors = malloc(sizeof *a->tensors);
        if (!a->tensors) return CLI_USAGE;
        a->tensors[0] = (uint64_t)llround(params);
        s->ntensors = 1;
    }
    s->tensors = a->tensors;
    s->server_link_gbit = server_link >= 0 ? server_link : s->link_gbit;
    if (s->world % s->ranks_per_node) {
        fprintf(stderr, "gradagg plan: --world %u is not a multiple of --ranks-per-node %u\n", s->world, s->ranks_per_node);
        return CLI_USAGE;
    }
    if (a->space.relays == 1 && s->ranks_per_node < 2) {
        fprintf(stderr, "gradagg plan: --relays on needs --ranks-per-node of 2 or more\n");
        return CLI_USAGE;
    }
    if (s->colocate && a->space.shards) {
        fprintf(stderr, "gradagg plan: --colocate sets the shards (one per worker node): drop --shards\n");
        return CLI_USAGE;
    }

    /* The codec pairs the search may use. */
    const plan_costs *c = &plan_costs_measured;
    size_t n = 0;
    if (have_codec || have_pull) {
        if (!have_codec) s->push = GA_CODEC_NONE;
        if (!have_pull) s->pull = GA_CODEC_NONE;
        const plan_pair_costs *p = plan_costs_pair(c, s->push, s->pull);
        if (!p) {
            fprintf(stderr, "gradagg plan: no measured cost for pushing %s and pulling %s (measured pairs: docs/scaling.md)\n",
                    ga_codec_name(s->push), ga_codec_name(s->pull));
            return CLI_USAGE;
        }
        chosen[n++] = p;
    } else if (a->codecs) {
        char *list = strdup(a->codecs), *save = NULL;
        for (char *t = list ? strtok_r(list, ",", &save) : NULL; t; t = strtok_r(NULL, ",", &save)) {
            char *slash = strchr(t, '/');
            ga_codec_id push, pull;
            const plan_pair_costs *p = NULL;
            if (slash) {
                *slash = '\0';
                if (ga_codec_from_name(t, &push) == GA_OK && ga_codec_from_name(slash + 1, &pull) == GA_OK)
                    p = plan_costs_pair(c, push, pull);
            }
            if (!p || n == 16) {
                if (slash) *slash = '/';
                fprintf(stderr, "gradagg plan: --codecs: %s is not a measured push/pull pair (docs/scaling.md)\n", t);
                free(list);
                return CLI_USAGE;
            }
            chosen[n++] = p;
        }
        free(list);
    } else {
        for (size_t i = 0; i < c->npairs && n < 16; i++) chosen[n++] = &c->pairs[i];
    }
    a->space.pairs = chosen;
    a->space.npairs = n;
    return CLI_OK;
}

static void describe(FILE *out, const plan_setup *s)
{
    fprintf(out, "%u shard%s%s, %s%s, push %s, pull %s, %u lane%s%s%s", s->shards, s->shards == 1 ? "" : "s",
            s->colocate ? " (one on each worker node)" : "", s->relays ? "node relays" : "no relays",
            "", ga_codec_name(s->push), ga_codec_name(s->pull), s->lanes, s->lanes == 1 ? "" : "s",
            s->journal ? "" : ", --durability checkpoint", s->server_gpu ? ", CUDA shards" : "");
}

/* --max-memory-mb for a shard: its accounted bytes with a quarter more and 64 MiB, in 256 MiB steps. */
static uint32_t max_memory_mb(const plan_estimate *e)
{
    double mb = e->shard_budget_mib * 1.25 + 64;
    return (uint32_t)(ceil(mb / 256) * 256);
}

/* The container's memory limit, GiB: the budget, what the heap's two arenas keep freed for the
 * next step (a quarter of the budget each), gRPC's quota twice (512 MiB each, deploy/base) and 1 GiB
 * for the process (docs/reliability.md, "The bound"). */
static uint32_t memory_limit_gib(uint32_t max_mb)
{
    return (uint32_t)ceil((max_mb + max_mb / 2 + 2 * 512 + 1024) / 1024.0);
}

/* --max-stream-mb: one stream holds at most a shard's share in fp32 (InitTensors; a push of it is
 * no larger), with a quarter more for chunk headers, in 64 MiB steps, within --max-memory-mb. */
static uint32_t max_stream_mb(const plan_estimate *e)
{
    double mb = ceil((double)e->share_elements * 4 * 1.25 / (1 << 20) / 64) * 64;
    return (uint32_t)fmin(mb, max_memory_mb(e));
}

static uint32_t streams_setting(const plan_estimate *e)
{
    return e->streams_per_job > 1024 ? e->streams_per_job + e->streams_per_job / 4 : 0;
}

static void print_table(const plan_args *a, const plan_setup *s, const plan_estimate *e, int found)
{
    const plan_setup *in = &a->setup;
    printf("model: %llu parameters in %zu tensor%s; %u ranks (%u per node), %g Gbit/s worker links, %g Gbit/s shard links\n",
           (unsigned long long)e->elements, in->ntensors, in->ntensors == 1 ? "" : "s", in->world,
           in->ranks_per_node, in->link_gbit, in->server_link_gbit);
    printf("costs: %s\n\n", plan_costs_measured.measured);
    printf("recommended: ");
    describe(stdout, s);
    printf("\n%s", found == 1 ? "  (no choice meets --target-step-ms: this is the fastest)\n" : "");
    printf("  step              %10.1f ms   bound: %s\n", e->step_s * 1e3, plan_bound_name(e->bound));
    printf("    encode+decode   %10.1f ms   (the ranks')\n", e->worker_s * 1e3);
    if (s->relays) printf("    relay           %10.1f ms   (into and out of each node's relay)\n", e->relay_s * 1e3);
    printf("    push            %10.1f ms\n", e->push_s * 1e3);
    printf("    close           %10.1f ms   (optimizer, publication, the pull's encode)\n", e->close_s * 1e3);
    printf("    pull            %10.1f ms\n", e->pull_s * 1e3);
    if (s->lanes > 1) printf("    (%u lanes overlap the phases)\n", s->lanes);
    if (in->compute_ms > 0 || in->shared_cores)
        printf("  iteration         %10.1f ms   (compute %.1f ms + step%s)\n", e->iteration_s * 1e3, in->compute_ms,
               in->shared_cores ? ", or every core's work on the shared machine" : "");
    uint32_t mb = max_memory_mb(e);
    printf("  per shard: %llu elements, %.1f ms CPU per step, %.1f MB per step on its link, %.0f MiB resident\n",
           (unsigned long long)e->share_elements, e->shard_cpu_s * 1e3, e->shard_link_mb, e->shard_rss_mib);
    printf("  settings: --shard-count %u --max-memory-mb %u --max-stream-mb %u --threads %u%s", s->shards, mb,
           max_stream_mb(e), in->server_cores, s->server_gpu ? " --backend cuda" : "");
    if (streams_setting(e)) printf(" --max-streams-per-job %u", streams_setting(e));
    printf("; container memory %u Gi\n", memory_limit_gib(mb));
    printf("  per rank: %.1f ms CPU per step%s", e->rank_cpu_s * 1e3, s->worker_gpu ? " on the host" : "");
    if (s->relays) printf("; per relay: %.1f ms CPU per step", e->relay_cpu_s * 1e3);
    printf("\n  per worker node: %.1f MB per step on its link\n", e->worker_link_mb);
    printf("  DDP ring all-reduce (fp32): %.1f ms (%.2fx this step); parameter-server bound of this codec: %.1f ms\n",
           e->ring_s * 1e3, e->step_s > 0 ? e->ring_s / e->step_s : 0.0, e->ps_bound_s * 1e3);
}

/* The recommendation among the choices of a->space with codec pair p only. */
static int best_of_pair(const plan_args *a, size_t p, plan_setup *s, plan_estimate *e, char *msg, size_t cap)
{
    plan_space one = a->space;
    one.pairs = &a->space.pairs[p];
    one.npairs = 1;
    return plan_recommend(&a->setup, &one, &plan_costs_measured, s, e, msg, cap);
}

static void print_alternatives(const plan_args *a)
{
    printf("\nthe best of each codec pair:\n");
    printf("| push | pull | shards | relays | lanes | step ms | bound | MiB per shard | DDP ring / step |\n");
    printf("|---|---|---:|---|---:|---:|---|---:|---:|\n");
    for (size_t p = 0; p < a->space.npairs; p++) {
        plan_setup s;
        plan_estimate e;
        char msg[256];
        if (best_of_pair(a, p, &s, &e, msg, sizeof msg) < 0) {
            printf("| %s | %s | | | | | %s | | |\n", ga_codec_name(a->space.pairs[p]->push),
                   ga_codec_name(a->space.pairs[p]->pull), msg);
            continue;
        }
        printf("| %s | %s | %u | %s | %u | %.1f | %s | %.0f | %.2f |\n", ga_codec_name(s.push), ga_codec_name(s.pull),
               s.shards, s.relays ? "yes" : "no", s.lanes, e.step_s * 1e3, plan_bound_name(e.bound), e.shard_rss_mib,
               e.step_s > 0 ? e.ring_s / e.step_s : 0.0);
    }
}

static void json_estimate(json *j, const plan_setup *s, const plan_estimate *e)
{
    json_uint(j, "shards", s->shards);
    json_bool(j, "relays", s->relays);
    json_bool(j, "colocate", s->colocate);
    json_uint(j, "lanes", s->lanes);
    json_string(j, "codec", ga_codec_name(s->push));
    json_string(j, "pull_codec", ga_codec_name(s->pull));
    json_string(j, "durability", s->journal ? "acked" : "checkpoint");
    json_double(j, "step_s", e->step_s);
    json_double(j, "iteration_s", e->iteration_s);
    json_double(j, "cpu_floor_s", e->cpu_floor_s);
    json_string(j, "bound", plan_bound_name(e->bound));
    json_begin_object(j, "phases_s");
    json_double(j, "worker", e->worker_s);
    json_double(j, "relay", e->relay_s);
    json_double(j, "push", e->push_s);
    json_double(j, "close", e->close_s);
    json_double(j, "pull", e->pull_s);
    json_end_object(j);
    json_uint(j, "upstream_ranks", e->upstream_ranks);
    json_uint(j, "share_elements", e->share_elements);
    json_double(j, "shard_cpu_s", e->shard_cpu_s);
    json_double(j, "rank_cpu_s", e->rank_cpu_s);
    if (s->relays) json_double(j, "relay_cpu_s", e->relay_cpu_s);
    json_double(j, "shard_link_mb", e->shard_link_mb);
    json_double(j, "worker_link_mb", e->worker_link_mb);
    json_double(j, "shard_rss_mib", e->shard_rss_mib);
    json_double(j, "shard_budget_mib", e->shard_budget_mib);
    json_uint(j, "max_memory_mb", max_memory_mb(e));
    json_uint(j, "max_stream_mb", max_stream_mb(e));
    json_uint(j, "memory_limit_gib", memory_limit_gib(max_memory_mb(e)));
    json_uint(j, "streams_per_job", e->streams_per_job);
    json_double(j, "ddp_ring_s", e->ring_s);
    json_double(j, "ps_bound_s", e->ps_bound_s);
}

static void print_json(const plan_args *a, const plan_setup *s, const plan_estimate *e, int found)
{
    json j = {stdout, 0, {true}};
    json_begin_object(&j, NULL);
    json_uint(&j, "elements", e->elements);
    json_uint(&j, "tensors", a->setup.ntensors);
    json_uint(&j, "world", a->setup.world);
    json_string(&j, "costs_measured", plan_costs_measured.measured);
    json_bool(&j, "target_met", found == 0);
    json_begin_object(&j, "recommended");
    json_estimate(&j, s, e);
    json_end_object(&j);
    json_begin_array(&j, "alternatives");
    for (size_t p = 0; p < a->space.npairs; p++) {
        plan_setup alt;
        plan_estimate ae;
        char msg[256];
        if (best_of_pair(a, p, &alt, &ae, msg, sizeof msg) < 0) continue;
        json_begin_object(&j, NULL);
        json_estimate(&j, &alt, &ae);
        json_end_object(&j);
    }
    json_end_array(&j);
    json_end_object(&j);
    json_finish(&j);
}

static FILE *create_in(const char *dir, const char *name)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "w");
    if (!f) fprintf(stderr, "gradagg plan: %s: %s\n", path, strerror(errno));
    return f;
}

/* The overlay: the shard count as replicas, the settings the plan gives in a ConfigMap patch, the
 * cores and memory in a StatefulSet patch; on top of the CPU or GPU overlay. */
static int write_overlay(const plan_args *a, int argc, char **argv, const plan_setup *s, const plan_estimate *e)
{
    if (mkdir(a->overlay_dir, 0755) != 0 && errno != EEXIST) {
        fprintf(stderr, "gradagg plan: --overlay %s: %s\n", a->overlay_dir, strerror(errno));
        return CLI_USAGE;
    }
    const char *base = a->overlay_base ? a->overlay_base : s->server_gpu ? "../../overlays/gpu" : "../../overlays/cpu";
    uint32_t mb = max_memory_mb(e), gib = memory_limit_gib(mb), cores = s->server_cores;
    FILE *k = create_in(a->overlay_dir, "kustomization.yaml");
    FILE *cm = k ? create_in(a->overlay_dir, "configmap-plan.yaml") : NULL;
    FILE *st = cm ? create_in(a->overlay_dir, "statefulset-plan.yaml") : NULL;
    if (!st) {
        if (k) fclose(k);
        if (cm) fclose(cm);
        return CLI_USAGE;
    }
    /* The command that wrote it, in comment lines that stay within yamllint's 140 columns. */
    int col = fprintf(k, "# Written by: gradagg plan");
    for (int i = 0; i < argc; i++) {
        if (strcmp(argv[i], "--overlay") == 0 || strcmp(argv[i], "--overlay-base") == 0) {
            i++;
            continue;
        }
        if (strcmp(argv[i], "--json") == 0) continue;
        if (col + 1 + (int)strlen(argv[i]) > 100) col = fprintf(k, "\n#  ");
        col += fprintf(k, " %s", argv[i]);
    }
    fprintf(k, "\n# ");
    describe(k, s);
    fprintf(k, ";\n# expected step %.1f ms (bound: %s). Regenerate rather than edit.\n", e->step_s * 1e3,
            plan_bound_name(e->bound));
    fprintf(k, "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\nresources:\n  - %s\n"
               "replicas:\n  - name: gradagg\n    count: %u\npatches:\n  - path: configmap-plan.yaml\n"
               "  - path: statefulset-plan.yaml\n", base, s->shards);
    fprintf(cm, "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: gradagg-config\ndata:\n"
                "  GRADAGG_SHARD_COUNT: \"%u\"\n  GRADAGG_MAX_MEMORY_MB: \"%u\"\n  GRADAGG_MAX_STREAM_MB: \"%u\"\n"
                "  GRADAGG_THREADS: \"%u\"\n",
            s->shards, mb, max_stream_mb(e), cores);
    if (!s->journal) fprintf(cm, "  GRADAGG_DURABILITY: \"checkpoint\"\n");
    if (streams_setting(e)) fprintf(cm, "  GRADAGG_MAX_STREAMS_PER_JOB: \"%u\"\n", streams_setting(e));
    fprintf(st, "apiVersion: apps/v1\nkind: StatefulSet\nmetadata:\n  name: gradagg\nspec:\n  template:\n    spec:\n"
                "      containers:\n        - name: gradagg-server\n          resources:\n"
                "            requests:\n              cpu: \"%u\"\n              memory: %uGi\n"
                "            limits:\n              cpu: \"%u\"\n              memory: %uGi\n",
            cores, gib, cores, gib);
    int bad_write = ferror(k) | ferror(cm) | ferror(st);
    bad_write |= fclose(k) | fclose(cm) | fclose(st);
    if (bad_write) {
        fprintf(stderr, "gradagg plan: --overlay %s: a write failed\n", a->overlay_dir);
        return CLI_USAGE;
    }
    return CLI_OK;
}

int cli_plan(int argc, char **argv, bool json)
{
    plan_args a = {0};
    a.json = json;
    a.setup.ranks_per_node = 1;
    a.setup.optimizer = PLAN_OPT_SGD;
    a.setup.node_gbyte_s = 25;
    a.setup.rtt_ms = 0.1;
    a.setup.disk_gbyte_s = 2;
    a.setup.server_cores = 16;
    a.setup.relay_cores = 16;
    a.setup.journal = true;
    a.setup.lanes = 1;
    a.space.max_shards = GA_PLACEMENT_MAX_SHARDS;
    a.space.relays = -1;
    const plan_pair_costs *chosen[16];
    int rc = parse(argc, argv, &a, chosen);
    if (rc != CLI_OK) {
        free(a.tensors);
        return rc < 0 ? CLI_OK : rc;
    }
    plan_setup best;
    plan_estimate e;
    char msg[256];
    int found = plan_recommend(&a.setup, &a.space, &plan_costs_measured, &best, &e, msg, sizeof msg);
    if (found < 0) {
        fprintf(stderr, "gradagg plan: %s\n", msg);
        free(a.tensors);
        return CLI_USAGE;
    }
    if (a.json) {
        print_json(&a, &best, &e, found);
    } else {
        print_table(&a, &best, &e, found);
        print_alternatives(&a);
    }
    if (a.overlay_dir) rc = write_overlay(&a, argc, argv, &best, &e);
    free(a.tensors);
    return rc;
}
