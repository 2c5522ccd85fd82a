/* The journal's sync and durability modes, alone so the config table can name them without the
 * journal. */
#ifndef GA_JOURNAL_SYNC_H
#define GA_JOURNAL_SYNC_H

/* When appends are made durable (fdatasync). Every record is written (direct I/O: to the device)
 * before its ack, so a killed process loses nothing in any mode; the mode decides what a lost
 * machine (power, kernel) may lose: NONE what the device's write cache and the file system's
 * uncommitted metadata held, STEP the open step's pushes (synced at each close), PUSH nothing
 * acknowledged (synced before each ack). */
typedef enum ga_journal_sync {
    GA_JOURNAL_SYNC_NONE = 0,
    GA_JOURNAL_SYNC_STEP = 1,
    GA_JOURNAL_SYNC_PUSH = 2
} ga_journal_sync;

/* What the journal holds (--durability). ACKED: every acknowledged change, so a restarted server
 * comes back with everything it acknowledged. CHECKPOINT: job, tensor and membership records
 * only (no push is written per step): a server killed without its drain comes back at its
 * newest checkpoint, the versions after it are lost, and the SDK's workers move back to it by
 * themselves (docs/reliability.md, "Durability"). A drain (SIGTERM) checkpoints every job, so a
 * rolling restart loses nothing in either mode. */
typedef enum ga_durability {
    GA_DURABILITY_ACKED = 0,
    GA_DURABILITY_CHECKPOINT = 1
} ga_durability;

#endif
