/* The journal's sync modes, alone so the config table can name them without the journal. */
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

#endif
