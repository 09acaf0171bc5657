/*
 * ada_layout.h: the hot path's shared definitions, first of its files: the ring region's
 * layout as C structs (RegionHeader, TriggerEntry, SlotControl, IndexEvent), the agent's
 * own state (ThreadState, InlineStack, FunctionTable, AdaState) and the constants of both.
 * First because every later file uses them. The host mirrors the region's part in
 * tracer/record/rings.py and checks it, at start-up, against ada_layout() (ada_control.c).
 *
 * The hot path is these files, compiled as ONE translation unit: the host joins them in
 * the order of HOT_PATH_SOURCES (tracer/record/agent_code.py: ada_layout.h, ada_platform.c,
 * ada_control.c, ada_rings.c, ada_interceptor.c, ada_inline.c, ada_watch.c) into the one
 * source the agent hands to CModule. Nothing is #included and no file compiles alone, so
 * nothing is lost to inlining across files; each may use what the files before it define.
 */

/*
 * ada hot path: compiled inside the target by Frida's CModule (TinyCC).
 *
 * Every hooked function runs ada_on_enter / ada_on_leave. Each writes one
 * 32-byte ATF index event (the on-disk layout) into the calling thread's ring
 * in the shared region, and nothing else. JavaScript never runs per call.
 *
 * Facts the hot path is built on (measured with frida 17 on Linux x86_64):
 *  - CModule globals are mapped read-only after linking: all mutable state is
 *    in AdaState (JS-allocated memory, passed in as the symbol `ada_state`) or
 *    in the shared region.
 *  - Each Interceptor.attach() is its own listener, so GUM_IC_GET_THREAD_DATA is
 *    per function. Per-thread state is therefore found through one gum TLS key.
 *  - TinyCC has no __atomic builtins; inline asm works on x86_64 only. Ordering
 *    uses a compiler barrier on x86_64 (TSO) and g_atomic_pointer_add (a full
 *    barrier read-modify-write) elsewhere. Only one side ever writes each
 *    cursor, so an add of the difference is an exact store.
 *  - The agent prepends platform #defines (ADA_CLOCK_*, ADA_TID_SYSCALL, ...);
 *    see platformConfig() in ada_platform.js.
 *  - The same source is compiled by TinyCC (Frida's internal toolchain) or by
 *    the target system's gcc -O2 -Wall -Werror (the external toolchain, about
 *    10% faster per call here): it must stay warning-free under both.
 *
 * Shared region layout (all little-endian). ada_layout() reports, by name,
 * every field the host or the agent's JavaScript touches: the JavaScript takes
 * its offsets from it, and the host checks it against its mirror
 * (tracer/record/rings.py) at start-up.
 *
 *   0                     RegionHeader (200 bytes; free after it up to 1024)
 *   1024                  TriggerEntry[ADA_TRIGGER_SLOTS] (32 bytes each)
 *   4096                  SlotControl[max_threads] (256 bytes each)
 *   index_rings_offset    max_threads x index_capacity x 32-byte events
 *   detail_rings_offset   max_threads x detail_capacity bytes (0 when off)
 *
 * A thread claims a slot on its first event and gives it back when it exits
 * (ada_thread_exit marks it ended; the host drains it, then frees it for the
 * next thread): max_threads bounds the threads recording at once, not over
 * the run. Each claim bumps the slot's generation, so the host tells threads
 * apart; each gets its own thread_N.
 *
 * A ring is single-producer (its thread) single-consumer (the host drain).
 * Index head and tail count events since the claim and never wrap; position
 * in the ring is head & (capacity - 1). The n-th event a thread enqueues is
 * index event n of its file: its index_seq. Detail rings are byte rings of
 * back-to-back ATF detail records (revision 1 layout); their head and tail
 * count bytes. A record may wrap around the end of its ring.
 *
 * Triggers (--trigger functions) go to one small multi-producer ring: a
 * producer reserves an entry with an atomic add and commits it by writing
 * commit = position + 1 last; the host reads entries in order.
 */

/*
 * Vector registers. x86_64's inline stubs must leave them as the caller had them (xmm0-7 and
 * ymm0-7 may hold arguments, xmm0/ymm0 the return value; gcc's -fipa-ra keeps values in those
 * its callee leaves alone). Built by gcc, the hot path uses none (general-regs-only, from here
 * on, headers included), so the stubs save none (ada_layout's agent.stubs_save_vectors: 0);
 * TinyCC cannot be told so: under it the stubs save xmm0-15 (with SSE moves, which leave the
 * upper halves of ymm0-15 alone; TinyCC's code uses no AVX).
 * The code of others the hot path calls where that may use them (libc's memcpy for a detail
 * record, pthread_getattr_np's malloc as a thread registers, the waits of a full ring: never
 * on the common path) is called inside ADA_FOREIGN, which saves the whole vector state the OS
 * keeps (xsave: x87, SSE, AVX, AVX-512; fxsave where there is no xsave) in a buffer on the
 * stack sized for this CPU (ada_vectors_init in ada_platform.c). Only xmm0-15 is not enough:
 * libc's AVX code ends with vzeroupper, which clears the upper half of every ymm register.
 */
#if defined (__x86_64__) && defined (__GNUC__) && !defined (__TINYC__) && !defined (__clang__)
# pragma GCC target ("general-regs-only")
# define ADA_STUBS_SAVE_VECTORS 0
#else
# define ADA_STUBS_SAVE_VECTORS 1
#endif
#if defined (HAVE_I386) && defined (__x86_64__)  /* as ada_vectors_save (ada_platform.c) */
# define ADA_FOREIGN(call) \
  do { \
    unsigned char v_[ada_state.vector_bytes]; \
    unsigned char * at_ = ada_vectors_save (v_); \
    call; \
    ada_vectors_restore (at_); \
  } while (0)
#else
# define ADA_FOREIGN(call) do { call; } while (0)
#endif

/* A small step of every hooked call that gcc would otherwise call (TinyCC inlines nothing),
 * and a step kept out of its caller, so that the caller's common case needs no frame. */
#if defined (__GNUC__) && !defined (__TINYC__)
# define ADA_ALWAYS_INLINE inline __attribute__ ((always_inline))
# define ADA_NOINLINE __attribute__ ((noinline))
#else
# define ADA_ALWAYS_INLINE
# define ADA_NOINLINE
#endif

#include <gum/guminterceptor.h>
#include <gum/gumtls.h>
#include <gum/gummemory.h>  /* gum_strip_code_pointer (arm64) */

/* Built by TinyCC or, with the external toolchain, by gcc -O2: records are
 * assembled through typed stores into byte buffers, so no strict aliasing. */
#if defined (__GNUC__) && !defined (__TINYC__) && !defined (__clang__)
# pragma GCC optimize ("no-strict-aliasing")
#endif

/* The platform's own memcpy, passed in by the agent: faster than the CModule runtime's. */
extern gpointer ada_memcpy (gpointer dst, gconstpointer src, gsize n);
/* pthread keys, for the destructor that tells a thread's exit (pthread_key_t is an
 * unsigned int or long on every platform here: a gsize holds either). */
extern int pthread_key_create (gsize * key, void (* destructor) (gpointer));
extern int pthread_setspecific (gsize key, gconstpointer value);
extern gpointer pthread_getspecific (gsize key);
extern int pthread_key_delete (gsize key);

#define ADA_REGION_MAGIC 0x31474e4952414441ULL /* "ADARING1" */
#define ADA_REGION_VERSION 1
#define ADA_EVENT_CALL 1
#define ADA_EVENT_RETURN 2
#define ADA_EVENT_EXCEPTION 3
#define ADA_NO_DETAIL 0xffffffffU
#define ADA_SLOT_UNUSED 0
#define ADA_SLOT_ACTIVE 1           /* a live thread writes its rings */
#define ADA_SLOT_ENDED 2            /* its thread has exited: the host drains, then frees it */
#define ADA_SLOT_FREE 3             /* drained and released by the host: a new thread may claim it */
#define ADA_SLOTS_OFFSET 4096
#define ADA_POLICY_WAIT 0
#define ADA_POLICY_DROP 1
#define ADA_END_EXIT 0              /* which of the process's ends was called: ada_on_exit */
#define ADA_END__EXIT 1
#define ADA_END_ABORT 2
#define ADA_SHADOW_MAX 256
#define ADA_DETAIL_OFF 0
#define ADA_DETAIL_ALWAYS 1
#define ADA_DETAIL_WINDOW 2
#define ADA_DETAIL_FUNCTION_CALL 3
#define ADA_DETAIL_FUNCTION_RETURN 4
#define ADA_DETAIL_FIXED 124
#define ADA_DETAIL_MAX_STACK 256
#define ADA_FLAG_STACK_TRUNCATED 1
#define ADA_FLAG_STRINGS 2
#define ADA_MAX_STRING 64           /* bytes kept of one captured C string */
#define ADA_STRING_TRUNCATED 0x80   /* in a string's slot byte: it went on */
#define ADA_DETAIL_MAX_STRINGS (8 * (2 + ADA_MAX_STRING))
#define ADA_TRIGGER_OFFSET 1024
#define ADA_TRIGGER_SLOTS 64
#define ADA_FORKS_OFFSET 3072       /* the pids of children forked, in the header page */
#define ADA_FORK_SLOTS 256

typedef struct
{
  guint64 magic;
  guint32 version;
  guint32 max_threads;
  guint32 index_capacity;     /* events per ring, a power of two */
  guint32 detail_capacity;    /* bytes per detail ring, a power of two, or 0 */
  guint32 registered;         /* slots claimed (may exceed max_threads) */
  guint32 overflow_threads;   /* threads that found no free slot */
  guint64 overflow_events;    /* events of those threads, not recorded */
  guint32 policy;             /* ADA_POLICY_WAIT (lossless) or ADA_POLICY_DROP */
  guint32 stop;               /* set by the host: stop waiting, stop recording */
  guint64 heartbeat_ns;       /* written by the drain on every pass */
  guint64 stall_ns;           /* producer gives up waiting after this much drain silence */
  guint64 index_rings_offset;
  guint64 detail_rings_offset;
  guint64 region_size;
  guint32 detail_mode;        /* ADA_DETAIL_OFF, _ALWAYS or _WINDOW */
  guint32 stack_bytes;        /* stack window asked for, 0..256 */
  guint32 trigger_head;       /* entries reserved by producers */
  guint32 trigger_tail;       /* entries consumed by the host */
  guint32 triggers_coalesced; /* trigger calls within trigger_gap_ns of the last one */
  guint32 unbacked_threads;   /* threads whose rings the shared memory had no room for */
  guint64 trigger_gap_ns;
  guint64 last_trigger_ns;
  guint32 clock_seq;          /* odd while ada_clock_pair rewrites the pair below */
  guint32 clock_ticks;        /* 1: timestamps in the rings are raw ticks (ADA_CLOCK_TSC) */
  guint64 clock_base_ticks;   /* first (ticks, ns) pair, taken at start-up */
  guint64 clock_base_ns;
  guint64 clock_pair_ticks;   /* latest pair, refreshed by the agent several times a second */
  guint64 clock_pair_ns;
  guint64 unwound_calls;      /* hooked calls left without a return (longjmp, unwinding) */
  guint32 terminate_tid;      /* a thread that called std::terminate inside hooked calls */
  guint32 terminate_depth;    /* ... with this many hooked calls open */
  guint64 terminate_fid;      /* ... the innermost of them */
  guint64 skipped_events;     /* inline engine: events of hooked calls it could not record */
  guint64 trap_calls;         /* inline engine: calls that came through a breakpoint hook */
  guint32 forks;              /* children forked (their pids at ADA_FORKS_OFFSET, the first
                               * ADA_FORK_SLOTS): see ada_on_fork */
  guint32 exec_pending;       /* 1 from execve's entry until it fails: see ada_on_exec_enter */
  guint32 paused_spawns;      /* posix_spawn calls run with their thread's hooks paused: see
                               * watchSpawn in ada_hooking.js */
  volatile guint32 drain_asleep;  /* 1 while the host's drain naps on it (a futex): see
                                   * ada_wake_drain */
  guint32 drain_wakes;        /* the times a producer woke it so */
  guint32 reserved;
} RegionHeader;

typedef struct
{
  guint64 timestamp_ns;
  guint64 function_id;
  guint32 tid;
  guint32 commit;             /* position + 1, written last */
  guint64 reserved;
} TriggerEntry;

typedef struct
{
  volatile guint32 state;     /* ADA_SLOT_UNUSED, _ACTIVE, _ENDED or _FREE */
  guint32 tid;
  volatile guint64 detail_head; /* bytes written to the detail ring */
  guint64 detail_drops;       /* detail records dropped (full ring, drop policy) */
  guint64 pad0[5];
  volatile guint64 head;      /* producer cache line */
  guint64 drops;              /* events dropped because the ring was full */
  guint64 waits;              /* times the producer found its ring full and waited (wait policy) */
  guint64 wait_ns;            /* time it spent waiting */
  guint64 pad1[4];
  volatile guint64 tail;      /* consumer cache line */
  volatile guint64 detail_tail;
  guint64 pad2[6];
  volatile guint32 claims;    /* claim tickets drawn (atomic add): see ada_claim_slot */
  volatile guint32 releases;  /* times the host freed the slot; written by the host only */
  guint32 generation;         /* which thread holds it: bumped by each claim */
  guint32 reserved32;
  guint64 reserved[6];
} SlotControl;

typedef struct
{
  guint64 timestamp_ns;
  guint64 function_id;
  guint32 thread_id;
  guint32 event_kind;
  guint32 call_depth;
  guint32 detail_seq;
} IndexEvent;

typedef struct
{
  guint64 sp;                 /* the sp the function entered with (x86_64: its return address slot) */
  guint64 ret;                /* the real return address, put back when the call returns */
  guint64 function_id;
  guint64 unwinding;          /* 1: ret is back where the exit stub was while an unwinder walks */
} InlineEntry;

/* An InlineEntry's function_id for a call Frida's code made on a program thread: redirected
 * only so that its return ends the pause (no event: the program did not make it). */
#define ADA_FRIDA_CALL 0xffffffffffffffffULL

/* The inline engine's shadow stack of one thread slot: every hooked call whose return it
 * redirected, so the real return address can always be given back. Mapped by the slot's
 * first thread, kept for its later ones, never unmapped: after ada leaves, the exit stub
 * still finds a thread's entries here (through inline_key) for calls open until then. */
typedef struct
{
  guint64 len;
  guint64 capacity;
  InlineEntry entries[];
} InlineStack;

typedef struct
{
  guint32 slot;
  guint32 tid;
  SlotControl * ctl;
  IndexEvent * ring;
  guint64 head;               /* local copy of ctl->head */
  guint64 cached_tail;        /* last tail read; refreshed only when the ring looks full */
  guint32 overflowed;         /* 1: no slot, events are counted in overflow_events */
  guint32 depth_extra;        /* calls deeper than the shadow stack holds */
  guint32 stale_frames;       /* Frida records of calls left without a return (counted) */
  guint32 shadow_len;
  guint32 detail_count;       /* detail records written (the next detail_seq, --detail) */
  guint8 * detail_ring;
  guint64 detail_head;
  guint64 detail_cached_tail;
  guint64 stack_lo;           /* this thread's stack, when the OS told us; else 0, 0 */
  guint64 stack_hi;
  guint64 shadow_sp[ADA_SHADOW_MAX]; /* sp at entry of each open call, outermost first */
  guint64 shadow_ret[ADA_SHADOW_MAX]; /* its return address (detail lane only) */
  guint64 shadow_fid[ADA_SHADOW_MAX]; /* its function_id (a matched RETURN needs no lookup) */
  InlineStack * inline_stack; /* the inline engine's (see ada_inline_enter) */
  guint32 busy;               /* inside ada_inline_enter/leave (a signal handler's calls skip) */
  guint32 skipped;            /* hooked calls not recorded: busy, or the shadow stack full */
  guint32 in_frida_call;      /* 1 while a call made by Frida's code on this program thread
                               * is open (ada_inline_enter, ada_on_enter) */
  guint64 waiting_sp;         /* while ada waits for room in a full ring: an address in its
                               * frame (ada_wait_for_room, ada_inline_ours); else 0 */
} ThreadState;

/*
 * A call's depth counts every call open on its thread, whichever engine took them: the
 * inline engine leaves to the Interceptor the functions it cannot patch and those Frida
 * hooked already (exit, whose atexit handlers call the program's functions), so a call of
 * one engine can be open around calls of the other. Each engine adds the other's open calls.
 */
#define ADA_INTERCEPTOR_OPEN(t) ((t)->shadow_len + (t)->depth_extra)
#define ADA_INLINE_OPEN(t) ((t)->inline_stack != NULL ? (guint32) (t)->inline_stack->len : 0)

/* Frida's listener function data is several calls away; ic->function is a field. */
typedef struct
{
  guint64 address;
  guint64 function_id;
  guint64 strings;            /* bit i: regs[i] is a C string to capture (detail lane) */
} FunctionSlot;

/* Hooked address -> function_id, open addressing. Modules that load later get a new table,
 * published whole through one pointer: a reader sees the old table or the new one. */
typedef struct
{
  guint64 mask;               /* slots - 1 */
  guint64 reserved;
  FunctionSlot slots[];
} FunctionTable;

/* The inline engine's breakpoint hooks (x86_64 Linux: see ada_inline_trap): the int3's
 * address -> the function's entry stub, sorted by address. Published whole through one
 * pointer, like FunctionTable. */
typedef struct
{
  guint64 at;
  guint64 stub;
} TrapEntry;

typedef struct
{
  guint64 count;
  guint64 reserved;
  TrapEntry entries[];
} TrapTable;

#define ADA_FRIDA_TIDS 64
#define ADA_EXIT_WINDOW_TIDS 16

/* The program's threads held while ada writes code (ada_hold.c): the threads asked, where
 * each was, and the gate they wait at. */
#define ADA_HOLD_THREADS 1024

/* The data of the hold's entry (the agent's lastingCode: a page never unmapped). */
typedef struct
{
  volatile guint32 inside;    /* threads in the entry now (so in ada_hold_stop, or about to be) */
  guint32 reserved;
  gpointer volatile handler;  /* what the entry calls: ada_hold_stop; NULL once ada has left */
} AdaHoldEntry;

typedef struct
{
  volatile guint32 gate;      /* 1: held threads wait; 0: they go on */
  volatile guint32 count;     /* tids[] entries */
  volatile guint32 escaped;   /* held threads that went on by themselves (ADA_HOLD_MAX_NS) */
  guint32 signal;             /* the signal the entry handles; 0: not installed */
  volatile guint32 cut_short; /* system calls the signal ended early (EINTR), all holds */
  guint32 reserved;
  AdaHoldEntry * entry;       /* its data */
  gpointer entry_code;        /* its code: the signal's handler as the kernel sees it */
  guint64 deadline_ns;        /* held threads go on by themselves after this */
  guint32 tids[ADA_HOLD_THREADS];
  volatile guint32 seen[ADA_HOLD_THREADS];  /* ADA_HOLD_HELD, _GONE, _ASLEEP; 0: not yet */
  guint64 pcs[ADA_HOLD_THREADS];            /* where each held thread resumes */
} AdaHold;

typedef struct
{
  gsize tls_key;
  gsize exit_key;             /* pthread key whose destructor tells the host a thread ended */
  RegionHeader * region;
  SlotControl * slots;
  guint8 * index_rings;
  ThreadState * threads;      /* max_threads entries, zeroed */
  ThreadState overflow;       /* shared by every thread past max_threads */
  ThreadState registering;    /* a thread's own while it registers (see ada_register_thread) */
  ThreadState unmasked;       /* the same, until its signals wait (see ada_register_thread) */
  ThreadState frida;          /* Frida's own threads' (see ada_inline_enter) */
  guint64 index_mask;
  guint64 index_capacity;
  guint8 * detail_rings;
  guint64 detail_mask;
  guint64 detail_capacity;
  guint32 detail_mode;
  guint32 stack_bytes;
  guint32 pid;
  gint region_fd;             /* the shared memory file, to reserve rings in; -1: none */
  TriggerEntry * triggers;
  FunctionTable * functions;  /* see ada_set_functions */
  guint64 inline_exit;        /* the inline engine's exit stub; 0: that engine is not in use */
  gsize inline_key;           /* pthread key: the thread's InlineStack (never deleted) */
  guint64 own_code[4];        /* [lo, hi) of this module's code and of Frida's agent: see
                               * ada_own_call */
  guint32 frida_tids[ADA_FRIDA_TIDS];  /* Frida's threads as the agent loaded: see
                                        * ada_frida_thread */
  guint32 frida_tid_count;
  volatile guint32 exit_window;  /* 1 while Frida prepares the process's exit: see
                                  * ada_exit_window_thread */
  guint32 exit_window_tids[ADA_EXIT_WINDOW_TIDS];
  volatile guint32 exit_window_count;  /* threads that started in that window */
  TrapTable * volatile traps;  /* the breakpoint hooks (see ada_inline_trap); NULL: none */
  guint64 trap_before[4];     /* the SIGTRAP action before ada's (the kernel's sigaction) */
  guint32 trap_installed;     /* 1 while ada's SIGTRAP handler is in front */
  volatile guint32 * here;    /* 1 in the process ada was loaded into, 0 in a forked child:
                               * see ADA_FORKED */
  guint64 tls_offset;         /* tls_key's value from the thread pointer; 0: ask pthread (see
                               * ada_tls_get) */
  guint64 tls_seq;            /* the key's seq beside it, while the key is ours */
  void (* on_end) (gint status, gint kind);  /* the agent's handler of exit(), _exit() and abort()
                                              * (JavaScript; kind ADA_END_*): see ada_on_exit */
  guint64 vector_mask;        /* x86_64: the xsave components ADA_FOREIGN keeps; 0: fxsave */
  guint32 vector_bytes;       /* x86_64: ADA_FOREIGN's buffer, alignment included */
  AdaHold hold;               /* see ada_hold.c */
} AdaState;

extern AdaState ada_state;

/*
 * A forked child runs the parent's hooks (its copy of this module) until Frida disposes
 * the parent's script in it, and with --no-follow-children that is after the child has
 * started. The rings and counters are the parent's shared memory: the child must not
 * write them (its calls would land in the parent's rings, and its thread's end would free
 * a parent's slot). *here lives in a private page the kernel empties in a child
 * (MADV_WIPEONFORK, Linux 4.14+; elsewhere it stays 1, see docs/recording.md).
 */
#define ADA_FORKED() (*ada_state.here == 0)
