/* Persistence of the core: every job's directory under data_dir, the journal appends made
 * before acks, checkpoints queued on the job's task queue when due, and the start-up restore
 * (newest valid checkpoint + journal replay). Loop thread, except the checkpoint task's work.
 *
 * What it guarantees: an acknowledged join, init or push is in the journal before its ack, and
 * the journal is only trimmed below the oldest kept checkpoint; a restart rebuilds the state
 * from them, so nothing acknowledged is lost to a killed process (journal_sync decides what a
 * lost machine may lose). With durability CHECKPOINT no push or step close is journaled: a
 * restart comes back at the newest checkpoint (journal_sync.h). Replay runs the same core code
 * as live calls, so it reaches the same bytes. */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <errno.h>
#include <time.h>

#include "base/base.h"
#include "core_internal.h"
#include "ga_alloc.h"
#include "ga_wire.h"
#include "persist/persist.h"

#define JOB_DIR_PREFIX "job-"
/* Characters of the job name kept readable in its directory name; the hash tells names apart. */
#define JOB_DIR_NAME_CHARS 48

/* ---- directories ---- */

/* <data_dir>/job-<up to 48 of [A-Za-z0-9_.-], others as '_'>-<16 hex of FNV-1a(name)>. */
static char *job_dir(const char *data_dir, const char *name)
{
    char safe[JOB_DIR_NAME_CHARS + 1];
    size_t k = 0;
    for (const char *p = name; *p && k < JOB_DIR_NAME_CHARS; p++) {
        char ch = *p;
        bool ok = (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') || ch == '_' ||
                  ch == '-' || ch == '.';
        safe[k++] = ok ? ch : '_';
    }
    safe[k] = '\0';
    size_t n = strlen(data_dir) + k + 40;
    char *dir = ga_malloc(n);
    if (dir) snprintf(dir, n, "%s/" JOB_DIR_PREFIX "%s-%016" PRIx64, data_dir, safe, ga_job_name_hash(name));
    return dir;
}

static uint64_t unix_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

ga_status ga_persist_put_aside(const char *dir, const char *kind, char *aside, size_t cap, char *why)
{
    snprintf(aside, cap, "%s.%s-%" PRIu64, dir, kind, unix_ms());
    if (rename(dir, aside) != 0)
        return ga_status_fail(GA_E_IO, why, GA_WHY_CAP, "moving %s aside to %s: %s", dir, aside, strerror(errno));
    return GA_OK;
}

/* ---- appends ---- */

static bool persisting(const ga_job *job) { return job->dir && !job->core->replaying; }

ga_status ga_persist_job(ga_job *job, char *why)
{
    ga_core *c = job->core;
    if (!c->opt.data_dir || c->replaying) return GA_OK;
    char *dir = job_dir(c->opt.data_dir, job->name);
    if (!dir) return ga_status_fail(GA_E_NOMEM, why, GA_WHY_CAP, "out of memory creating job '%s'", job->name);
    struct stat sb;
    if (stat(dir, &sb) == 0) {
        /* Left by a job of this name that could not be restored: kept aside, never mixed in. */
        char aside[4200], ignored[GA_WHY_CAP];
        if (ga_persist_put_aside(dir, "unrestored", aside, sizeof aside, ignored) == GA_OK)
            ga_log(GA_LOG_WARN, "job '%s': moved the unrestorable %s aside to %s", job->name, dir, aside);
    }
    ga_status st = ga_journal_open(&job->journal, dir, job->target + 1, c->opt.journal_sync, c->opt.journal_copies, why, GA_WHY_CAP);
    if (st == GA_OK) st = ga_journal_job(&job->journal, job->target + 1, job->name, job->config, why, GA_WHY_CAP);
    if (st != GA_OK) {
        ga_free(dir);
        ga_journal_close(&job->journal);
        return st;
    }
    job->dir = dir;
    job->ckpt_queued_ms = uv_now(c->loop);
    return GA_OK;
}

/* A step closed short is replayed as closed only through its CLOSE record, and that record must
 * come before any record of a later step (replay closes a step only when it is the open one).
 * So when it could not be written, it is written first here, and until it is, nothing later is
 * journaled (so nothing is acknowledged) either. */
static ga_status write_pending_close(ga_job *job, char *why)
{
    uint64_t seq = job->close_unjournaled;
    if (seq == 0) return GA_OK;
    char io[GA_WHY_CAP];
    if (ga_journal_close_step(&job->journal, seq, io, sizeof io) != GA_OK)
        return ga_status_fail(GA_E_IO, why, GA_WHY_CAP,
                              "job '%s': the close of step %" PRIu64 " is not journaled yet, so nothing later "
                              "can be: %s",
                              job->name, seq - 1, io);
    job->close_unjournaled = 0;
    ga_log(GA_LOG_INFO, "job '%s': the close of step %" PRIu64 " is journaled now", job->name, seq - 1);
    return GA_OK;
}

/* Records how long a journal write that began at t0 (uv_hrtime) took, and passes st on. */
static ga_status journal_timed(ga_job *job, uint64_t t0, ga_status st)
{
    ga_histogram_observe(&job->core->journal_seconds, (double)(uv_hrtime() - t0) / 1e9);
    return st;
}

ga_status ga_persist_init(ga_job *job, const ga_init *init, char *why)
{
    if (!persisting(job)) return GA_OK;
    uint64_t t0 = uv_hrtime();
    ga_status st = write_pending_close(job, why);
    st = st == GA_OK ? ga_journal_init(&job->journal, job->target + 1, init, why, GA_WHY_CAP) : st;
    return journal_timed(job, t0, st);
}

/* --durability checkpoint: no push or step close is journaled (job, tensor and membership
 * records still are); the newest checkpoint holds the steps. */
static bool journals_steps(const ga_job *job) { return job->core->opt.durability == GA_DURABILITY_ACKED; }

ga_status ga_persist_commit(ga_job *job, uint64_t seq, const ga_push *push, char *why)
{
    if (!persisting(job) || !journals_steps(job)) return GA_OK;
    uint64_t t0 = uv_hrtime();
    ga_status st = write_pending_close(job, why);
    st = st == GA_OK ? ga_journal_commit(&job->journal, seq, push, why, GA_WHY_CAP) : st;
    return journal_timed(job, t0, st);
}

ga_status ga_persist_member(ga_job *job, const ga_journal_member *change, char *why)
{
    if (!persisting(job)) return GA_OK;
    uint64_t t0 = uv_hrtime();
    ga_status st = write_pending_close(job, why);
    st = st == GA_OK ? ga_journal_member_change(&job->journal, job->target + 1, change, why, GA_WHY_CAP) : st;
    return journal_timed(job, t0, st);
}

void ga_persist_step_closed(ga_job *job, uint64_t step, bool complete)
{
    if (!persisting(job) || !journals_steps(job)) return;
    char why[GA_WHY_CAP];
    if (!complete) {
        /* A complete step closes by itself at replay; one closed short must be told to. No
         * second close can find one pending: until it is written nothing commits, and the
         * step after it opens empty. */
        job->close_unjournaled = step + 1;
        if (write_pending_close(job, why) != GA_OK) ga_log(GA_LOG_ERROR, "%s; pushes are refused until it is", why);
        return; /* STEP mode synced the CLOSE record with it */
    }
    if (job->journal.sync != GA_JOURNAL_SYNC_STEP) return;
    uint64_t t0 = uv_hrtime();
    if (journal_timed(job, t0, ga_journal_flush(&job->journal, why, sizeof why)) != GA_OK)
        ga_log(GA_LOG_ERROR, "job '%s': syncing the journal at the close of step %" PRIu64 ": %s", job->name, step,
               why);
}

/* ---- checkpoints ---- */

typedef struct ckpt_task {
    ga_task t;
    ga_job *job;
    ga_ckpt_meta *meta;
    uint32_t keep;
    ga_status rc;
    char why[GA_WHY_CAP];
    double seconds;
    size_t pruned;
} ckpt_task;

static void ckpt_work(ga_task *t)
{
    ckpt_task *k = (ckpt_task *)t;
    uint64_t t0 = uv_hrtime(), oldest = 0;
    /* The apply queued before this task refused its version (a tensor overflowed, core_push.c):
     * the store holds values no worker was given, and the job fails when that apply's done
     * runs. A checkpoint of them would be served after a restart: none is written. */
    if (ga_store_overflowed(k->job->store) != UINT32_MAX) {
        k->rc = GA_E_NONFINITE;
        snprintf(k->why, sizeof k->why, "the step to version %" PRIu64 " overflowed and was refused",
                 k->meta->version);
        return;
    }
    k->rc = ga_ckpt_write(k->job->dir, k->meta, k->job->store, k->keep, &oldest, k->why, sizeof k->why);
    if (k->rc == GA_OK) {
        char why[GA_WHY_CAP];
        /* The journal must reach back to the oldest checkpoint kept: a corrupt newer one falls
         * back to it. A failed prune only leaves files behind. */
        if (ga_journal_prune(k->job->dir, oldest, k->job->staleness, &k->pruned, why, sizeof why) != GA_OK)
            ga_log(GA_LOG_WARN, "job '%s': trimming the journal: %s", k->job->name, why);
    }
    k->seconds = (double)(uv_hrtime() - t0) * 1e-9;
}

static void ckpt_done(ga_task *t)
{
    ckpt_task *k = (ckpt_task *)t;
    ga_job *job = k->job;
    if (k->rc == GA_OK) {
        job->ckpt_count++;
        job->ckpt_version = k->meta->version;
        job->ckpt_unix_ms = k->meta->unix_ms;
        job->ckpt_seconds = k->seconds;
        ga_log(GA_LOG_INFO,
               "job '%s': checkpoint of version %" PRIu64 " written in %.3f s (%zu journal segments trimmed)",
               job->name, k->meta->version, k->seconds, k->pruned);
    } else if (k->rc == GA_E_NONFINITE) {
        ga_log(GA_LOG_WARN, "job '%s': no checkpoint of version %" PRIu64 ": %s; the previous one is kept",
               job->name, k->meta->version, k->why);
    } else {
        job->ckpt_failures++;
        ga_log(GA_LOG_ERROR, "job '%s': checkpoint of version %" PRIu64 " failed, the previous one is kept: %s",
               job->name, k->meta->version, k->why);
    }
    ga_ckpt_meta_free(k->meta);
    ga_free(k);
}

/* A member's commits as the checkpoint of `version` holds them: those of steps before it. A
 * sync rank's pushes ahead (bounded staleness) for steps >= version are not in it: they are
 * journaled, and a restore replays them, which it would take for retries if the checkpoint
 * counted them. */
static ga_ckpt_member member_at(const ga_job *job, const ga_member *x, uint64_t version)
{
    ga_ckpt_member m = {x->incarnation, x->last_step, x->commit_mask, x->has_pushed, x->left};
    if (job->async || !x->has_pushed || x->last_step < version) return m;
    uint64_t drop = x->last_step - version + 1; /* bits of steps version .. last_step */
    m.commit_mask = drop >= 64 ? 0 : x->commit_mask >> drop;
    m.last_step = version ? version - 1 : 0;
    if (version == 0) m.has_pushed = false, m.commit_mask = 0;
    return m;
}

/* What the checkpoint of `version` holds besides the store: taken now, on the loop. */
static ga_ckpt_meta *meta_take(const ga_job *job, uint64_t version)
{
    ga_ckpt_meta *m = ga_calloc(1, sizeof *m);
    if (!m) return NULL;
    m->version = version;
    m->unix_ms = unix_ms();
    m->steps = version;
    m->late_pushes = job->late_pushes;
    m->deadline_closes = job->deadline_closes;
    m->duplicate_pushes = job->duplicate_pushes;
    m->world = job->world;
    m->ntensors = (uint32_t)job->ntensors;
    m->config_len = job->config ? protobuf_c_message_get_packed_size(&job->config->base) : 0;
    if (!(m->job = ga_strdup(job->name)) || !(m->config = ga_malloc(m->config_len + 1)) ||
        !(m->members = ga_calloc(job->world, sizeof *m->members)) ||
        !(m->tensors = ga_calloc(job->ntensors + 1, sizeof *m->tensors)))
        goto fail;
    if (job->config) protobuf_c_message_pack(&job->config->base, m->config);
    for (uint32_t r = 0; r < job->world; r++) {
        const ga_member *x = &job->members[r];
        m->members[r] = member_at(job, x, version);
    }
    for (size_t i = 0; i < job->ntensors; i++) {
        const ga_tensor *x = &job->tensors[i];
        ga_ckpt_tensor *y = &m->tensors[i];
        y->ndim = (uint32_t)x->ndim;
        y->elements = x->elements;
        if (!(y->name = ga_strdup(x->name)) || !(y->shape = ga_malloc(x->ndim * sizeof *y->shape))) goto fail;
        memcpy(y->shape, x->shape, x->ndim * sizeof *y->shape);
    }
    return m;
fail:
    ga_ckpt_meta_free(m);
    return NULL;
}

/* Queues the checkpoint of `version` (the version queued work will have published) and starts
 * a journal segment for what comes after it. */
static void queue_checkpoint(ga_job *job, uint64_t version)
{
    ckpt_task *k = ga_calloc(1, sizeof *k);
    ga_ckpt_meta *m = meta_take(job, version);
    if (!k || !m) {
        ga_free(k), ga_ckpt_meta_free(m);
        job->ckpt_failures++;
        ga_log(GA_LOG_ERROR, "job '%s': out of memory queueing the checkpoint of version %" PRIu64, job->name, version);
        return;
    }
    char why[GA_WHY_CAP];
    if (ga_journal_rotate(&job->journal, version + 1, why, sizeof why) != GA_OK)
        ga_log(GA_LOG_WARN, "job '%s': new journal segment: %s (appending to the current one)", job->name, why);
    k->t.work = ckpt_work;
    k->t.done = ckpt_done;
    k->job = job;
    k->meta = m;
    k->keep = job->core->opt.checkpoint_keep ? job->core->opt.checkpoint_keep : 1;
    job->ckpt_queued_ms = uv_now(job->core->loop);
    ga_taskq_push(&job->tasks, &k->t);
}

void ga_persist_applied(ga_job *job, uint64_t version)
{
    if (!persisting(job)) return;
    const ga_core_options *o = &job->core->opt;
    uint64_t age = uv_now(job->core->loop) - job->ckpt_queued_ms;
    bool by_steps = o->checkpoint_steps && version % o->checkpoint_steps == 0;
    bool by_time = o->checkpoint_seconds && age >= (uint64_t)o->checkpoint_seconds * 1000u;
    if (by_steps || by_time || job->ckpt_soon) queue_checkpoint(job, version);
    job->ckpt_soon = false;
}

void ga_persist_final(ga_job *job)
{
    if (persisting(job) && job->fault == GA_OK) queue_checkpoint(job, job->target);
}

/* ---- restore ---- */

typedef struct restore {
    ga_core *c;
    const char *dir;
    ga_job *job;        /* restored so far; NULL before the checkpoint's meta or JOB record */
    ga_ckpt_meta *meta; /* of the checkpoint being loaded */
} restore;

static ga_status restore_begin(void *arg, ga_ckpt_meta *m, char *why, size_t cap)
{
    restore *r = arg;
    r->meta = m;
    if (ga_core_job(r->c, m->job))
        return ga_status_fail(GA_E_PROTO, why, cap, "job '%.100s' was already restored from another directory", m->job);
    Gradagg__V1__JobConfig *cfg = (Gradagg__V1__JobConfig *)protobuf_c_message_unpack(
        &gradagg__v1__job_config__descriptor, &ga_wire_allocator, m->config_len, m->config);
    if (!cfg) return ga_status_fail(GA_E_PROTO, why, cap, "the job config does not parse");
    char msg[GA_WHY_CAP];
    ga_status st = ga_core_job_create(r->c, m->job, cfg, &r->job, msg);
    protobuf_c_message_free_unpacked(&cfg->base, &ga_wire_allocator);
    if (st != GA_OK) return ga_status_fail(st, why, cap, "%s", msg);
    ga_job *job = r->job;
    if (job->world != m->world) return ga_status_fail(GA_E_PROTO, why, cap, "world size differs from the config");
    for (uint32_t i = 0; i < m->world; i++) {
        const ga_ckpt_member *x = &m->members[i];
        ga_member *y = &job->members[i];
        y->incarnation = x->incarnation, y->last_step = x->last_step, y->commit_mask = x->commit_mask;
        y->has_pushed = x->has_pushed, y->left = x->left;
        if (x->has_pushed) job->any_commit = true;
    }
    job->version = job->target = job->steps = m->version;
    job->late_pushes = m->late_pushes;
    job->deadline_closes = m->deadline_closes;
    job->duplicate_pushes = m->duplicate_pushes;
    if (m->version > 0) job->any_commit = true;
    if (!job->async) {
        ga_step_open(&job->step, m->version);
        if (job->min_world) ga_core_step_exclude_absent(job); /* elastic: as when a step opens live */
        job->last_leave_clean = true; /* a checkpoint keeps no Leave: the journal's, replayed next, say more */
    }
    return GA_OK;
}

static ga_status restore_buffer(void *arg, uint32_t t, ga_store_buf b, const float *v, char *why, size_t cap)
{
    restore *r = arg;
    ga_job *job = r->job;
    const ga_ckpt_tensor *x = &r->meta->tensors[t];
    ga_status st;
    if (b != GA_STORE_BUF_PARAMS) {
        st = ga_store_write(job->store, t, b, 0, x->elements, v);
        return st == GA_OK ? GA_OK : ga_status_fail(st, why, cap, "tensor '%.100s': %s", x->name, ga_strerror(st));
    }
    if (t != job->ntensors || ga_job_tensor_find(job, x->name) >= 0)
        return ga_status_fail(GA_E_PROTO, why, cap, "tensor '%.100s' out of order or twice", x->name);
    long i = ga_job_tensor_add(job, x->name, x->shape, x->ndim, x->elements);
    if (i < 0) return ga_status_fail(GA_E_NOMEM, why, cap, "out of memory restoring tensor '%.100s'", x->name);
    uint32_t index;
    st = ga_store_add_tensor(job->store, (size_t)x->elements, v, &index, &job->tensors[i].pub);
    if (st != GA_OK || index != (uint32_t)i) {
        ga_job_tensor_truncate(job, (size_t)i);
        return ga_status_fail(st ? st : GA_E_PROTO, why, cap, "tensor '%.100s': %s", x->name, ga_strerror(st));
    }
    job->tensors[i].ready = true;
    ga_store_restore_counters(job->store, r->meta->version, index, x->adam_steps);
    return GA_OK;
}

/* After the buffers: what workers hold of the restored version is its fp32 publication. */
static ga_status restore_publications(ga_job *job, char *why, size_t cap)
{
    for (size_t i = 0; i < job->ntensors; i++) {
        ga_published pub;
        ga_status st = ga_store_publication(job->store, (uint32_t)i, &pub);
        if (st != GA_OK) return ga_status_fail(st, why, cap, "publishing tensor '%.100s': %s", job->tensors[i].name,
                                               ga_strerror(st));
        ga_published_clear(&job->tensors[i].pub);
        job->tensors[i].pub = pub;
    }
    job->store_bytes = ga_store_bytes(job->store);
    return GA_OK;
}

/* The newest checkpoint of dir that loads whole; r->job NULL when none does. */
static void load_newest(restore *r)
{
    char **names, why[GA_WHY_CAP];
    size_t n;
    if (ga_ckpt_list(r->dir, &names, &n, why, sizeof why) != GA_OK) {
        ga_log(GA_LOG_ERROR, "restore: %s", why);
        return;
    }
    ga_ckpt_loader l = {restore_begin, restore_buffer, r};
    for (size_t i = 0; i < n; i++) {
        char path[4200];
        snprintf(path, sizeof path, "%s/%s", r->dir, names[i]);
        ga_status st = ga_ckpt_load(path, &l, why, sizeof why);
        if (st == GA_OK) st = restore_publications(r->job, why, sizeof why);
        ga_ckpt_meta_free(r->meta);
        r->meta = NULL;
        if (st == GA_OK) {
            ga_log(GA_LOG_INFO, "restore: job '%s' at version %" PRIu64 " from %s", r->job->name, r->job->version,
                   path);
            r->job->ckpt_version = r->job->version;
            break;
        }
        r->c->corrupt_checkpoints++;
        ga_log(GA_LOG_WARN, "restore: skipping %s: %s", path, why);
        if (r->job) ga_core_job_drop(r->c, r->job);
        r->job = NULL;
    }
    ga_file_names_free(names, n);
}

static ga_status replay_record(void *arg, const ga_journal_record *rec, char *why, size_t cap)
{
    restore *r = arg;
    ga_core *c = r->c;
    if (rec->type == GA_JOURNAL_JOB) {
        if (r->job) return GA_OK; /* the checkpoint has it */
        Gradagg__V1__JoinRequest *req;
        GA_CHECK(ga_journal_decode_job(rec, &req, why, cap));
        char msg[GA_WHY_CAP];
        ga_status st = ga_core_job_create(c, req->job, req->config, &r->job, msg);
        protobuf_c_message_free_unpacked(&req->base, &ga_wire_allocator);
        return st == GA_OK ? GA_OK : ga_status_fail(st, why, cap, "%s", msg);
    }
    if (!r->job) return ga_status_fail(GA_E_PROTO, why, cap, "journal record before its job's");
    if (rec->type == GA_JOURNAL_INIT) {
        ga_init *init;
        GA_CHECK(ga_journal_decode_init(rec, &init, why, cap));
        ga_core_init(c, NULL, init);
    } else if (rec->type == GA_JOURNAL_COMMIT) {
        ga_push *push;
        GA_CHECK(ga_journal_decode_push(rec, &push, why, cap));
        ga_core_push(c, NULL, push);
    } else if (rec->type == GA_JOURNAL_MEMBER) {
        ga_journal_member change;
        GA_CHECK(ga_journal_decode_member(rec, &change, why, cap));
        GA_CHECK(ga_core_member_replay(r->job, &change, why, cap));
    } else if (rec->type == GA_JOURNAL_CLOSE) {
        ga_job *job = r->job;
        if (!job->async && job->step.step + 1 == rec->seq && job->step.committed > 0) ga_core_step_close(job, false);
    }
    /* A step that overflowed is where the job stopped, as it did before the restart (core_push.c
     * overflowed): it is restored so, failed. Any other failure is the restore's own. */
    if (r->job->fault != GA_OK && r->job->fault != GA_E_NONFINITE)
        return ga_status_fail(r->job->fault, why, cap, "%s", r->job->fault_why);
    return GA_OK;
}

/* A journal damaged where the restore needed it (journal.h): what it had acknowledged past the
 * damage cannot be read, so the job is not served at the version before it (that would roll
 * back acknowledged steps without a word). It stays, failed: every call gets GA_E_IO with
 * where the damage is, it is never checkpointed (which would make the rollback stick), and the
 * operator restores its directory from a backup or deletes the job (docs/reliability.md, "A
 * damaged journal"). */
static void refuse_damaged(ga_core *c, ga_job *job, const ga_journal_end *end)
{
    c->damaged_journals++;
    ga_log(GA_LOG_ERROR,
           "restore: job '%s': its journal is damaged (%s, after seq %" PRIu64 "): what it acknowledged after version %"
           PRIu64 " cannot be read, so the job is refused; restore its directory from a backup, or delete the job",
           job->name, end->where, end->last_seq, job->version);
    ga_core_job_fault(job, GA_E_IO,
                      "its journal is damaged (%s): steps acknowledged after version %" PRIu64
                      " cannot be restored, so the job is refused until an operator restores its directory or deletes "
                      "it (docs/reliability.md, \"A damaged journal\")",
                      end->where, job->version);
}

/* The journal segment that follows the restored checkpoint is gone (removed, or a data
 * directory put together from an older snapshot): the steps after the checkpoint cannot be
 * replayed. With --durability acked they were acknowledged, so the job is refused as a damaged
 * journal is; with --durability checkpoint losing them is the documented behaviour, said once. */
static void refuse_missing(ga_core *c, ga_job *job)
{
    if (c->opt.durability != GA_DURABILITY_ACKED) {
        ga_log(GA_LOG_WARN,
               "restore: job '%s': no journal segment follows its checkpoint of version %" PRIu64
               " (removed?); with --durability checkpoint it is served from that version, and workers ahead of it "
               "move back to it",
               job->name, job->version);
        return;
    }
    c->damaged_journals++;
    ga_log(GA_LOG_ERROR,
           "restore: job '%s': its journal segments after the checkpoint of version %" PRIu64
           " are missing (no segment starts at or before seq %" PRIu64
           "): steps acknowledged after that version cannot be replayed, so the job is refused; restore its directory "
           "from a backup, or delete the job",
           job->name, job->version, job->version + 1);
    ga_core_job_fault(job, GA_E_IO,
                      "its journal segments after the checkpoint of version %" PRIu64
                      " are missing: steps acknowledged after it cannot be restored (--durability acked), so the job "
                      "is refused until an operator restores its directory or deletes it (docs/reliability.md, \"A "
                      "damaged journal\")",
                      job->version);
}

/* One job directory: checkpoint, journal, then a fresh journal segment for what comes next. */
static void restore_dir(ga_core *c, const char *dir)
{
    restore r = {c, dir, NULL, NULL};
    char why[GA_WHY_CAP];
    ga_journal_end end;
    c->replaying = true; /* jobs created here run their tasks inline and journal nothing */
    load_newest(&r);
    uint64_t after = r.job ? r.job->version : 0;
    bool journal_gone = false; /* the segment after the checkpoint is missing (ga_journal_reaches) */
    if (r.job && ga_journal_reaches(dir, after + 1, &journal_gone, why, sizeof why) == GA_OK) journal_gone = !journal_gone;
    ga_status st = ga_journal_replay(dir, after, r.job ? r.job->staleness : 0, replay_record, &r, &end, why, sizeof why);
    c->replaying = false;
    if (!r.job) {
        ga_log(GA_LOG_WARN, "restore: nothing to restore in %s%s%s", dir, st != GA_OK ? ": " : "",
               st != GA_OK ? why : "");
        return;
    }
    ga_job *job = r.job;
    job->tasks.run_inline = false;
    if (st == GA_OK && !(job->dir = ga_strdup(dir))) st = ga_status_fail(GA_E_NOMEM, why, sizeof why, "out of memory");
    if (st == GA_OK) st = ga_journal_open(&job->journal, dir, job->target + 1, c->opt.journal_sync, c->opt.journal_copies, why, sizeof why);
    if (st != GA_OK) {
        ga_log(GA_LOG_ERROR, "restore: job '%s' from %s is not restored: %s", job->name, dir, why);
        ga_core_job_drop(c, job);
        return;
    }
    job->ckpt_queued_ms = uv_now(c->loop);
    if (end.from_copy) {
        c->journal_copy_reads += end.from_copy;
        job->ckpt_soon = true; /* then the restore no longer needs the damaged segment */
        ga_log(GA_LOG_WARN,
               "restore: job '%s': %" PRIu64 " journal record(s) could not be read in their segment and were read "
               "from its copy: nothing is lost, but the disk damaged them; the next version is checkpointed, so "
               "no restore needs that segment again",
               job->name, end.from_copy);
    }
    if (end.damaged_covered)
        ga_log(GA_LOG_WARN, "restore: job '%s': %" PRIu64 " journal segment(s) damaged where a checkpoint covers them",
               job->name, end.damaged_covered);
    if (end.damaged) {
        refuse_damaged(c, job, &end);
        return;
    }
    if (journal_gone) {
        refuse_missing(c, job);
        if (job->fault != GA_OK) return;
    }
    ga_log(GA_LOG_INFO,
           "restore: job '%s' at version %" PRIu64 " (open step %" PRIu64 ", %u commits) after %" PRIu64
           " journal records%s",
           job->name, job->version, job->async ? job->version : job->step.step, job->async ? 0 : job->step.committed,
           end.records, end.torn ? " (a torn tail, a write a crash cut short, was cut)" : "");
}

ga_status ga_core_restore(ga_core *c, char *why, size_t cap)
{
    if (!c->opt.data_dir) return GA_OK;
    char **names;
    size_t n;
    GA_CHECK(ga_file_list(c->opt.data_dir, JOB_DIR_PREFIX, "", &names, &n, why, cap));
    for (size_t i = 0; i < n; i++) {
        if (strstr(names[i], ".unrestored-") || strstr(names[i], ".finished-")) continue; /* put aside */
        char dir[4200];
        snprintf(dir, sizeof dir, "%s/%s", c->opt.data_dir, names[i]);
        struct stat sb;
        if (stat(dir, &sb) == 0 && S_ISDIR(sb.st_mode)) restore_dir(c, dir);
    }
    ga_file_names_free(names, n);
    /* Every restored member's lease starts now, and lasts until its worker reconnected. */
    uint64_t now = uv_now(c->loop);
    for (size_t j = 0; j < c->njobs; j++)
        for (uint32_t r = 0; r < c->jobs[j]->world; r++) {
            c->jobs[j]->members[r].active_ms = now;
            c->jobs[j]->members[r].unseen = true;
        }
    for (size_t j = 0; j < c->njobs; j++) ga_core_job_check_finished(c->jobs[j]); /* its retention starts now */
    return GA_OK;
}
