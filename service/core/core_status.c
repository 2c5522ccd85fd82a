/* Status and ListJobs: what a job, or every job, is doing now (docs/protocol.md, "Status and
 * health"). On the loop thread, as the rest of the core. */
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "core_internal.h"
#include "ga_alloc.h"
#include "ga_wire.h"

void ga_core_tensor_infos(const ga_job *job, Gradagg__V1__TensorInfo *infos, Gradagg__V1__TensorInfo **ptrs,
                          size_t *count)
{
    size_t k = 0;
    for (size_t i = 0; i < job->ntensors; i++) {
        const ga_tensor *t = &job->tensors[i];
        if (!t->ready) continue;
        gradagg__v1__tensor_info__init(&infos[k]);
        infos[k].name = t->name;
        infos[k].n_shape = t->ndim;
        infos[k].shape = t->shape;
        infos[k].elements = t->elements;
        ptrs[k] = &infos[k];
        k++;
    }
    *count = k;
}

/* Why the job failed: a store fault, else a rank's failure; "" when it has not. */
static const char *job_failure(const ga_job *job)
{
    if (job->fault != GA_OK) return job->fault_why;
    if (job->failed_incarnations) return job->rank_failure;
    return "";
}

/* An elastic job's open step below its minimum: "waiting for ranks: ..." into buf; "" otherwise. */
static const char *job_waiting(const ga_job *job, char *buf, size_t cap)
{
    buf[0] = '\0';
    if (job->async || job->min_world == 0 || job->step.committed >= job->min_world) return buf;
    uint32_t members = 0;
    for (uint32_t r = 0; r < job->world; r++) members += job->members[r].incarnation != 0 && !job->members[r].left;
    if (members >= job->min_world) return buf; /* the members are there: the step waits for pushes, as any */
    snprintf(buf, cap,
             "waiting for ranks: %u joined, step %llu needs %u contributors (config.min_world_size); it closes once "
             "more ranks join and push",
             members, (unsigned long long)job->step.step, job->min_world);
    return buf;
}

void ga_core_status(ga_core *c, ga_call *call, Gradagg__V1__StatusRequest *req)
{
    ga_job *job = ga_core_job(c, req->job);
    if (!job) {
        ga_call_finish(call, NULL, GA_E_UNKNOWN_JOB, "job '%s' does not exist", req->job ? req->job : "");
        protobuf_c_message_free_unpacked(&req->base, &ga_wire_allocator);
        return;
    }
    Gradagg__V1__StatusResponse resp = GRADAGG__V1__STATUS_RESPONSE__INIT;
    Gradagg__V1__MemberStatus *ms = ga_malloc(job->world * sizeof *ms);
    Gradagg__V1__MemberStatus **mp = ga_malloc(job->world * sizeof *mp);
    Gradagg__V1__TensorInfo *infos = ga_malloc((job->ntensors + 1) * sizeof *infos);
    Gradagg__V1__TensorInfo **tp = ga_malloc((job->ntensors + 1) * sizeof *tp);
    Gradagg__V1__CodecBytes cb[GA_CODEC_COUNT], *cbp[GA_CODEC_COUNT];
    Gradagg__V1__StepRecord rec[GA_JOB_STEP_RECORDS], *recp[GA_JOB_STEP_RECORDS];
    char waiting[200];
    if (!ms || !mp || !infos || !tp) {
        ga_call_finish(call, NULL, GA_E_NOMEM, "out of memory answering the status of job '%s'", job->name);
        goto out;
    }
    resp.job = job->name;
    resp.config = job->config;
    resp.version = job->version;
    resp.open_step = job->async ? job->version : job->step.step;
    resp.committed = job->async ? 0 : job->step.committed;
    for (uint32_t r = 0; r < job->world; r++) {
        const ga_member *m = &job->members[r];
        gradagg__v1__member_status__init(&ms[r]);
        ms[r].rank = r;
        ms[r].incarnation = m->incarnation;
        ms[r].joined = m->incarnation != 0 && !m->left;
        ms[r].has_pushed = m->has_pushed;
        ms[r].last_step = m->last_step;
        mp[r] = &ms[r];
    }
    resp.n_members = job->world;
    resp.members = mp;
    ga_core_tensor_infos(job, infos, tp, &resp.n_tensors);
    resp.tensors = tp;
    resp.late_pushes = job->late_pushes;
    resp.deadline_closes = job->deadline_closes;
    resp.duplicate_pushes = job->duplicate_pushes;
    resp.steps = job->steps;
    resp.accumulate_seconds = job->accumulate_seconds;
    resp.apply_seconds = job->apply_seconds;
    for (int k = 0; k < GA_CODEC_COUNT; k++) {
        if (!job->received_bytes[k] && !job->received_fp32[k]) continue;
        gradagg__v1__codec_bytes__init(&cb[resp.n_received]);
        cb[resp.n_received].codec = (Gradagg__V1__CodecId)k;
        cb[resp.n_received].bytes = job->received_bytes[k];
        cb[resp.n_received].fp32_bytes = job->received_fp32[k];
        cbp[resp.n_received] = &cb[resp.n_received];
        resp.n_received++;
    }
    resp.received = cbp;
    resp.finished = job->finished_ms != 0;
    resp.failure = (char *)job_failure(job);
    for (uint32_t k = 0; k < job->records_count; k++) { /* oldest first */
        uint32_t i = (job->records_next + GA_JOB_STEP_RECORDS - job->records_count + k) % GA_JOB_STEP_RECORDS;
        gradagg__v1__step_record__init(&rec[k]);
        rec[k].step = job->records[i].step;
        rec[k].n_ranks = job->records[i].nranks;
        rec[k].ranks = job->records[i].ranks;
        recp[k] = &rec[k];
    }
    resp.n_recent_steps = job->records_count;
    resp.recent_steps = recp;
    resp.waiting = (char *)job_waiting(job, waiting, sizeof waiting);
    ga_call_finish(call, &resp.base, GA_OK, NULL);
out:
    ga_free(ms), ga_free(mp), ga_free(infos), ga_free(tp);
    protobuf_c_message_free_unpacked(&req->base, &ga_wire_allocator);
}

void ga_core_list_jobs(ga_core *c, ga_call *call, Gradagg__V1__ListJobsRequest *req)
{
    Gradagg__V1__ListJobsResponse resp = GRADAGG__V1__LIST_JOBS_RESPONSE__INIT;
    Gradagg__V1__JobSummary *js = ga_malloc((c->njobs + 1) * sizeof *js);
    Gradagg__V1__JobSummary **jp = ga_malloc((c->njobs + 1) * sizeof *jp);
    if (!js || !jp) {
        ga_call_finish(call, NULL, GA_E_NOMEM, "out of memory listing %zu jobs", c->njobs);
        goto out;
    }
    for (size_t i = 0; i < c->njobs; i++) {
        const ga_job *job = c->jobs[i];
        Gradagg__V1__JobSummary *x = &js[i];
        gradagg__v1__job_summary__init(x);
        x->job = job->name;
        x->world_size = job->world;
        x->async = job->async;
        for (uint32_t r = 0; r < job->world; r++) x->joined += job->members[r].incarnation != 0 && !job->members[r].left;
        x->version = job->version;
        x->open_step = job->async ? job->version : job->step.step;
        x->committed = job->async ? 0 : job->step.committed;
        x->finished = job->finished_ms != 0;
        x->failure = (char *)job_failure(job);
        jp[i] = x;
    }
    resp.n_jobs = c->njobs;
    resp.jobs = jp;
    ga_call_finish(call, &resp.base, GA_OK, NULL);
out:
    ga_free(js), ga_free(jp);
    protobuf_c_message_free_unpacked(&req->base, &ga_wire_allocator);
}
