/*
 * ada hot path: compiled inside the target by Frida's CModule (TinyCC).
 *
 * Every hooked function runs ada_on_enter / ada_on_leave. Each writes one
 * 32-byte ATF index event (the on-disk layout) into the calling thread's ring
 * in the shared region, and nothing else. JavaScript never runs per call.
 *
 * Facts this file is built on (measured with frida 17 on Linux x86_64):
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
 *    see platformConfig() in ada_agent.js.
 *  - The same source is compiled by TinyCC (Frida's internal toolchain) or by
 *    the target system's gcc -O2 -Wall -Werror (the external toolchain, about
 *    10% faster per call here): it must stay warning-free under both.
 *
 * Shared region layout (all little-endian). ada_layout() reports, by name,
 * every field the host or the agent's JavaScript touches: the JavaScript takes
 * its offsets from it, and the host checks it against its mirror
 * (tracer/record/rings.py) at start-up.
 *
 *   0                     RegionHeader (168 bytes; the rest of the page is free)
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
  guint64 sp;                 /* the call's return address slot: the sp the function entered with */
  guint64 ret;                /* the real return address, put back when the call returns */
  guint64 function_id;
  guint64 unwinding;          /* 1: ret is back in its slot while an unwinder walks the stack */
} InlineEntry;

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
} ThreadState;

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
  volatile guint32 * here;    /* 1 in the process ada was loaded into, 0 in a forked child:
                               * see ADA_FORKED */
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

#ifdef ADA_CLOCK_MACH
extern guint64 mach_continuous_time (void);
static guint64
ada_now (void)
{
  return mach_continuous_time () * ADA_MACH_NUMER / ADA_MACH_DENOM;
}
# define ADA_NOW(v) ((v) = mach_continuous_time () * ADA_MACH_NUMER / ADA_MACH_DENOM)
#else
typedef struct { gint64 tv_sec; glong tv_nsec; } AdaTimespec;
extern int ada_clock_gettime (int clock_id, AdaTimespec * ts);
static guint64
ada_now (void)
{
  AdaTimespec ts;
  ada_clock_gettime (ADA_CLOCK_ID, &ts);
  return (guint64) ts.tv_sec * 1000000000ULL + (guint64) ts.tv_nsec;
}
/* The hot path calls the clock itself: one call fewer than ada_now (). */
# define ADA_NOW(v) \
  do { \
    AdaTimespec ts_; \
    ada_clock_gettime (ADA_CLOCK_ID, &ts_); \
    (v) = (guint64) ts_.tv_sec * 1000000000ULL + (guint64) ts_.tv_nsec; \
  } while (0)
#endif

/*
 * x86_64 where the OS clock itself runs on the time-stamp counter: the hot
 * path stores raw TSC ticks (one instruction instead of a vDSO call) and the
 * host converts them to the recording clock's ns as it drains, from the
 * (ticks, ns) pairs ada_clock_pair publishes. ada_now () stays the OS clock.
 */
#if defined (ADA_CLOCK_TSC) && defined (HAVE_I386)
# undef ADA_NOW
# define ADA_NOW(v) \
  do { \
    guint32 lo_, hi_; \
    __asm__ volatile ("rdtsc" : "=a" (lo_), "=d" (hi_)); \
    (v) = ((guint64) hi_ << 32) | lo_; \
  } while (0)
# define ADA_TICKS 1
#endif

#ifdef ADA_TID_SYSCALL
extern glong syscall (glong number, ...);
static guint32
ada_os_thread_id (void)
{
  return (guint32) syscall (ADA_TID_SYSCALL);
}
#else
extern int pthread_threadid_np (gpointer thread, guint64 * thread_id);
static guint32
ada_os_thread_id (void)
{
  guint64 id = 0;
  pthread_threadid_np (NULL, &id);
  return (guint32) id;
}
#endif

#if defined (HAVE_I386)
# define ADA_COMPILER_BARRIER() __asm__ volatile ("" ::: "memory")
# define ADA_SP(ic) ((ic)->cpu_context->rsp)
# define ADA_ENTRY_RETURN_ADDRESS(ic) (*(guint64 *) (gsize) (ic)->cpu_context->rsp)
# define ADA_STORE_RELEASE(p, v) do { ADA_COMPILER_BARRIER (); *(p) = (v); } while (0)
static guint64
ada_load_acquire (volatile guint64 * p)
{
  guint64 v = *p;
  ADA_COMPILER_BARRIER ();
  return v;
}
#else
# define ADA_SP(ic) ((ic)->cpu_context->sp)
# define ADA_ENTRY_RETURN_ADDRESS(ic) ((ic)->cpu_context->lr)
# define ADA_STORE_RELEASE(p, v) ada_store_release ((p), (v))
static void
ada_store_release (volatile guint64 * p, guint64 v)
{
  g_atomic_pointer_add ((volatile gssize *) p, (gssize) (v - *p));
}
static guint64
ada_load_acquire (volatile guint64 * p)
{
  return (guint64) g_atomic_pointer_add ((volatile gssize *) p, 0);
}
#endif

#if defined (HAVE_I386)
/*
 * The frames the inline engine's stubs push (agent/ada_inline_x64.js), as guint64
 * indexes; ada_layout reports the return slots and the JavaScript checks them. Entry:
 * rbp r11 r10 rax r9 r8 rcx rdx rsi rdi, then the return address (its slot is the sp
 * the function entered with). Exit: rbp r11 r10 r9 r8 rdi rsi rcx rdx rax, then the
 * slot the real return address goes in. Every caller-saved register is kept, vector
 * ones too (saved apart, below an aligned stack pointer): gcc lets a caller keep values
 * in registers a callee it knows does not touch, and calls such a callee with the stack
 * misaligned.
 */
# define ADA_ENTRY_RBP 0
# define ADA_ENTRY_R10 2
# define ADA_ENTRY_RAX 3
# define ADA_ENTRY_R9 4
# define ADA_ENTRY_R8 5
# define ADA_ENTRY_RCX 6
# define ADA_ENTRY_RDX 7
# define ADA_ENTRY_RSI 8
# define ADA_ENTRY_RDI 9
# define ADA_ENTRY_RET 10
# define ADA_EXIT_RBP 0
# define ADA_EXIT_RDX 8
# define ADA_EXIT_RAX 9
# define ADA_EXIT_RET 10
# define ADA_INLINE_AVAILABLE 1
#endif

#ifdef ADA_STACK_PTHREAD_ATTR
/* glibc and bionic: the calling thread's stack from its attributes (once per thread). */
extern gpointer pthread_self (void);
extern int pthread_getattr_np (gpointer thread, gpointer attr);
extern int pthread_attr_getstack (gconstpointer attr, gpointer * addr, gsize * size);
extern int pthread_attr_destroy (gpointer attr);
static void
ada_stack_bounds (ThreadState * t)
{
  guint64 attr[16];           /* pthread_attr_t is at most 64 bytes on these ABIs */
  gpointer addr = NULL;
  gsize size = 0;
  if (pthread_getattr_np (pthread_self (), attr) != 0)
    return;
  if (pthread_attr_getstack (attr, &addr, &size) == 0 && addr != NULL)
  {
    t->stack_lo = (guint64) (gsize) addr;
    t->stack_hi = t->stack_lo + size;
  }
  pthread_attr_destroy (attr);
}
#elif defined (ADA_STACK_DARWIN)
extern gpointer pthread_self (void);
extern gpointer pthread_get_stackaddr_np (gpointer thread);
extern gsize pthread_get_stacksize_np (gpointer thread);
static void
ada_stack_bounds (ThreadState * t)
{
  gpointer self = pthread_self ();
  t->stack_hi = (guint64) (gsize) pthread_get_stackaddr_np (self);
  t->stack_lo = t->stack_hi - pthread_get_stacksize_np (self);
}
#else
static void
ada_stack_bounds (ThreadState * t)
{
}
#endif

/*
 * Copy up to n bytes from src without ever faulting; returns how many were
 * readable. Used when sp is outside the thread's known stack (signal stacks,
 * coroutines): one system call per page touched.
 */
#ifdef ADA_SAFE_READ_SYSCALL
typedef struct { gpointer base; gsize len; } AdaIovec;
static guint32
ada_safe_read (guint8 * dst, guint64 src, guint32 n)
{
  AdaIovec local, remote[2];
  guint64 page_end = (src | 4095) + 1;
  guint32 first = (guint32) MIN ((guint64) n, page_end - src);
  glong got;
  local.base = dst;
  local.len = n;
  remote[0].base = (gpointer) (gsize) src;
  remote[0].len = first;
  remote[1].base = (gpointer) (gsize) page_end;
  remote[1].len = n - first;
  got = syscall (ADA_SAFE_READ_SYSCALL, (glong) ada_state.pid, &local, (glong) 1, remote,
      (glong) (n > first ? 2 : 1), (glong) 0);
  return got > 0 ? (guint32) got : 0;
}
#elif defined (ADA_SAFE_READ_MACH)
extern guint32 mach_task_self_;
extern int mach_vm_read_overwrite (guint32 task, guint64 address, guint64 size, guint64 data,
    guint64 * out_size);
static guint32
ada_safe_read (guint8 * dst, guint64 src, guint32 n)
{
  guint32 done = 0;
  while (done < n)
  {
    guint64 at = src + done;
    guint64 chunk = MIN ((guint64) (n - done), ((at | 4095) + 1) - at);
    guint64 got = 0;
    if (mach_vm_read_overwrite (mach_task_self_, at, chunk, (guint64) (gsize) (dst + done),
        &got) != 0)
      break;
    done += (guint32) got;
  }
  return done;
}
#else
static guint32
ada_safe_read (guint8 * dst, guint64 src, guint32 n)
{
  return 0;
}
#endif

static void ada_thread_exit (gpointer value);

/* Called once by the agent after it has mapped the region and written the
 * header fields the host chose (geometry, policy, detail mode, limits). */
void
ada_init (guint32 pid)
{
  AdaState * s = &ada_state;
  RegionHeader * h = s->region;
  s->tls_key = gum_tls_key_new ();
  pthread_key_create (&s->exit_key, ada_thread_exit);
  pthread_key_create (&s->inline_key, NULL);
  s->slots = (SlotControl *) ((guint8 *) h + ADA_SLOTS_OFFSET);
  s->triggers = (TriggerEntry *) ((guint8 *) h + ADA_TRIGGER_OFFSET);
  s->index_rings = (guint8 *) h + h->index_rings_offset;
  s->index_mask = h->index_capacity - 1;
  s->index_capacity = h->index_capacity;
  s->detail_rings = (guint8 *) h + h->detail_rings_offset;
  s->detail_capacity = h->detail_capacity;
  s->detail_mask = h->detail_capacity - 1;
  s->detail_mode = h->detail_capacity != 0 ? h->detail_mode : ADA_DETAIL_OFF;
  s->stack_bytes = MIN (h->stack_bytes, ADA_DETAIL_MAX_STACK);
  s->pid = pid;
  s->overflow.overflowed = 1;
  s->registering.overflowed = 1;
  s->frida.overflowed = 1;
#ifdef ADA_TICKS
  h->clock_ticks = 1;
#endif
  h->version = ADA_REGION_VERSION;
  h->magic = ADA_REGION_MAGIC;  /* last: the header is complete */
}

/* The agent's table of hooked functions (see ADA_FUNCTION_ID), complete before it is
 * published; the old one stays allocated (a thread may still be reading it). */
void
ada_set_functions (FunctionTable * table)
{
  ADA_STORE_RELEASE ((volatile guint64 *) &ada_state.functions, (guint64) (gsize) table);
}

/* The recording clock, for the agent to stamp when modules load (ns, as events once drained). */
guint64
ada_clock_ns (void)
{
  return ada_now ();
}

/*
 * The recording clock and CLOCK_REALTIME read together: out[0] and out[2] the recording
 * clock just before and after, out[1] the wall clock (ns since 1970; 0 where the platform's
 * wall clock is read by the agent instead). The manifest keeps these anchors, so an export
 * can show wall-clock time and line up with logs and screen recordings.
 */
void
ada_clock_anchor (guint64 * out)
{
  out[0] = ada_now ();
#ifdef ADA_CLOCK_MACH
  out[1] = 0;
#else
  {
    AdaTimespec ts;
    ada_clock_gettime (0 /* CLOCK_REALTIME, on Linux and Android */, &ts);
    out[1] = (guint64) ts.tv_sec * 1000000000ULL + (guint64) ts.tv_nsec;
  }
#endif
  out[2] = ada_now ();
}

/* RPC transport: the host is alive (written on each pull, as the local drain does). */
void
ada_heartbeat (void)
{
  ada_state.region->heartbeat_ns = ada_now ();
}

/*
 * Wait until *flag is non-zero or timeout_ms have passed; returns the flag. The
 * agent calls it from a thread that is handing its rings over as the process
 * dies (a fatal signal, _exit): a NativeFunction call lets JavaScript run
 * meanwhile, so the host's acknowledgement can set the flag.
 */
guint32
ada_wait_flag (volatile guint32 * flag, guint32 timeout_ms)
{
  guint32 waited;

  for (waited = 0; *flag == 0 && waited < timeout_ms; waited++)
    g_usleep (1000);
  return *flag;
}

/*
 * Raw-tick builds only (x86_64, where ADA_COMPILER_BARRIER and TSO make the
 * sequence count below a valid seqlock); elsewhere the agent never calls it.
 * Publish a (ticks, ns) pair of the hot path's clock and the OS clock: the
 * tightest of a few tries, ns taken midway. as_base: the start-up pair, written
 * before the host looks; otherwise the latest pair, under clock_seq (odd while
 * it changes) since the host may read it at any moment.
 */
void
ada_clock_pair (guint32 as_base)
{
#ifdef ADA_TICKS
  RegionHeader * h = ada_state.region;
  guint64 best = ~0ULL, ticks = 0, ns = 0, before, tick, after;
  guint i;
  for (i = 0; i < 5; i++)
  {
    before = ada_now ();
    ADA_NOW (tick);
    after = ada_now ();
    if (after - before < best)
    {
      best = after - before;
      ticks = tick;
      ns = before + (after - before) / 2;
    }
  }
  if (as_base)
  {
    h->clock_base_ticks = ticks;
    h->clock_base_ns = ns;
    return;
  }
  h->clock_seq++;
  ADA_COMPILER_BARRIER ();
  h->clock_pair_ticks = ticks;
  h->clock_pair_ns = ns;
  ADA_COMPILER_BARRIER ();
  h->clock_seq++;
#endif
}

typedef struct
{
  const gchar * name;
  guint64 value;
} AdaLayoutEntry;

#define ADA_LAYOUT(name_, value_) \
  do { \
    if (n < capacity) \
    { \
      out[n].name = (name_); \
      out[n].value = (guint64) (value_); \
    } \
    n++; \
  } while (0)
#define ADA_OFFSET(struct_, field_) ((guint64) (gsize) &((struct_ *) NULL)->field_)
#define ADA_HEADER(field_) ADA_LAYOUT ("header." #field_, ADA_OFFSET (RegionHeader, field_))
#define ADA_SLOT(field_) ADA_LAYOUT ("slot." #field_, ADA_OFFSET (SlotControl, field_))
#define ADA_TRIGGER(field_) ADA_LAYOUT ("trigger." #field_, ADA_OFFSET (TriggerEntry, field_))
#define ADA_EVENT(field_) ADA_LAYOUT ("event." #field_, ADA_OFFSET (IndexEvent, field_))

/*
 * The shared layout by name: every field and constant the host or the agent's
 * JavaScript touches (the host checks all but agent.*, which only the
 * JavaScript uses). Fills up to `capacity` entries; returns how many there are.
 */
guint
ada_layout (AdaLayoutEntry * out, guint capacity)
{
  guint n = 0;
  ADA_LAYOUT ("region.slots_offset", ADA_SLOTS_OFFSET);
  ADA_LAYOUT ("region.triggers_offset", ADA_TRIGGER_OFFSET);
  ADA_LAYOUT ("region.trigger_slots", ADA_TRIGGER_SLOTS);
  ADA_LAYOUT ("const.slot_active", ADA_SLOT_ACTIVE);
  ADA_LAYOUT ("const.slot_ended", ADA_SLOT_ENDED);
  ADA_LAYOUT ("const.slot_free", ADA_SLOT_FREE);
  ADA_LAYOUT ("const.policy_wait", ADA_POLICY_WAIT);
  ADA_LAYOUT ("const.policy_drop", ADA_POLICY_DROP);
  ADA_LAYOUT ("const.detail_off", ADA_DETAIL_OFF);
  ADA_LAYOUT ("const.detail_always", ADA_DETAIL_ALWAYS);
  ADA_LAYOUT ("const.detail_window", ADA_DETAIL_WINDOW);
  ADA_LAYOUT ("sizeof.header", sizeof (RegionHeader));
  ADA_HEADER (max_threads);
  ADA_HEADER (index_capacity);
  ADA_HEADER (detail_capacity);
  ADA_HEADER (registered);
  ADA_HEADER (overflow_threads);
  ADA_HEADER (overflow_events);
  ADA_HEADER (policy);
  ADA_HEADER (stop);
  ADA_HEADER (heartbeat_ns);
  ADA_HEADER (stall_ns);
  ADA_HEADER (index_rings_offset);
  ADA_HEADER (detail_rings_offset);
  ADA_HEADER (region_size);
  ADA_HEADER (detail_mode);
  ADA_HEADER (stack_bytes);
  ADA_HEADER (trigger_tail);
  ADA_HEADER (triggers_coalesced);
  ADA_HEADER (trigger_gap_ns);
  ADA_HEADER (clock_seq);
  ADA_HEADER (clock_ticks);
  ADA_HEADER (clock_base_ticks);
  ADA_HEADER (clock_base_ns);
  ADA_HEADER (clock_pair_ticks);
  ADA_HEADER (clock_pair_ns);
  ADA_HEADER (unbacked_threads);
  ADA_HEADER (unwound_calls);
  ADA_HEADER (terminate_tid);
  ADA_HEADER (terminate_depth);
  ADA_HEADER (terminate_fid);
  ADA_HEADER (skipped_events);
  ADA_LAYOUT ("sizeof.slot", sizeof (SlotControl));
  ADA_SLOT (state);
  ADA_SLOT (tid);
  ADA_SLOT (detail_head);
  ADA_SLOT (detail_drops);
  ADA_SLOT (head);
  ADA_SLOT (drops);
  ADA_SLOT (waits);
  ADA_SLOT (wait_ns);
  ADA_SLOT (tail);
  ADA_SLOT (detail_tail);
  ADA_SLOT (claims);
  ADA_SLOT (releases);
  ADA_SLOT (generation);
  ADA_LAYOUT ("sizeof.trigger", sizeof (TriggerEntry));
  ADA_TRIGGER (timestamp_ns);
  ADA_TRIGGER (function_id);
  ADA_TRIGGER (tid);
  ADA_TRIGGER (commit);
  ADA_LAYOUT ("sizeof.event", sizeof (IndexEvent));
  ADA_EVENT (timestamp_ns);
  ADA_EVENT (function_id);
  ADA_EVENT (thread_id);
  ADA_EVENT (event_kind);
  ADA_EVENT (call_depth);
  ADA_EVENT (detail_seq);
  ADA_LAYOUT ("agent.sizeof_thread_state", sizeof (ThreadState));
  ADA_LAYOUT ("agent.sizeof_function_slot", sizeof (FunctionSlot));
  ADA_LAYOUT ("agent.sizeof_state", sizeof (AdaState));
  ADA_LAYOUT ("agent.state_region", ADA_OFFSET (AdaState, region));
  ADA_LAYOUT ("agent.state_threads", ADA_OFFSET (AdaState, threads));
  ADA_LAYOUT ("agent.state_region_fd", ADA_OFFSET (AdaState, region_fd));
  ADA_LAYOUT ("agent.state_inline_exit", ADA_OFFSET (AdaState, inline_exit));
  ADA_LAYOUT ("agent.state_inline_key", ADA_OFFSET (AdaState, inline_key));
  ADA_LAYOUT ("agent.state_own_code", ADA_OFFSET (AdaState, own_code));
  ADA_LAYOUT ("agent.state_here", ADA_OFFSET (AdaState, here));
  ADA_LAYOUT ("agent.thread_busy", ADA_OFFSET (ThreadState, busy));
  ADA_LAYOUT ("agent.inline_stack_entries", ADA_OFFSET (InlineStack, entries));
  ADA_LAYOUT ("agent.sizeof_inline_entry", sizeof (InlineEntry));
#ifdef ADA_INLINE_AVAILABLE
  ADA_LAYOUT ("agent.inline_entry_ret", ADA_ENTRY_RET);
  ADA_LAYOUT ("agent.inline_exit_ret", ADA_EXIT_RET);
#endif
  return n;
}

/*
 * Shared memory is reserved a slot at a time, as threads first claim them: a
 * page of a /dev/shm file that cannot be backed when first touched kills the
 * process with SIGBUS, while a reservation that fails only means this thread
 * is not recorded (counted, as a thread past --max-threads is).
 */
#ifdef ADA_RESERVE_RINGS
extern int posix_fallocate (int fd, gint64 offset, gint64 len);

static gboolean
ada_reserve_rings (guint32 slot)
{
  AdaState * s = &ada_state;
  RegionHeader * h = s->region;
  gint64 index_bytes = (gint64) s->index_capacity * sizeof (IndexEvent);

  if (s->region_fd < 0)
    return TRUE;
  if (posix_fallocate (s->region_fd, (gint64) h->index_rings_offset + slot * index_bytes,
        index_bytes) != 0)
    return FALSE;
  return s->detail_capacity == 0 || posix_fallocate (s->region_fd,
      (gint64) h->detail_rings_offset + (gint64) slot * s->detail_capacity,
      (gint64) s->detail_capacity) == 0;
}
#else
#define ada_reserve_rings(slot) TRUE
#endif

/*
 * A slot for a new thread: a fresh one while there are any, else one the host
 * has freed after an earlier thread ended. Claiming a freed slot needs no
 * compare-and-swap (TinyCC has none): the claimer draws a ticket with an
 * atomic add on `claims` and wins if it drew exactly `releases`, the count of
 * times the host freed the slot; a loser puts its ticket back. Each value is
 * drawn once per release, so one claimer wins each time. With the wait policy
 * a thread that finds every slot held waits while some are only waiting for
 * the host to free them. -1: no slot (the thread's events are counted, not
 * recorded).
 */
static gint
ada_claim_slot (void)
{
  AdaState * s = &ada_state;
  RegionHeader * h = s->region;
  guint spins = 0;
  guint32 i, fresh, releases;

  while (h->registered < h->max_threads)
  {
    fresh = (guint32) g_atomic_int_add ((volatile gint *) &h->registered, 1);
    if (fresh >= h->max_threads)
      break;
    if (!ada_reserve_rings (fresh))
    {
      /* Never used (state 0): the host skips it and no thread claims it again. */
      g_atomic_int_add ((volatile gint *) &h->unbacked_threads, 1);
      return -1;
    }
    s->slots[fresh].claims = 1;
    s->slots[fresh].generation = 1;
    return (gint) fresh;
  }
  for (;;)
  {
    gboolean pending = FALSE;
    for (i = 0; i < h->max_threads; i++)
    {
      SlotControl * c = &s->slots[i];
      if (c->state == ADA_SLOT_ENDED)
        pending = TRUE;
      if (c->state != ADA_SLOT_FREE)
        continue;
      releases = c->releases;
      if (c->claims != releases)
        continue;
      if ((guint32) g_atomic_int_add ((volatile gint *) &c->claims, 1) == releases)
      {
        c->generation++;
        return (gint) i;
      }
      g_atomic_int_add ((volatile gint *) &c->claims, -1);
    }
    if (!pending || h->policy != ADA_POLICY_WAIT || h->stop ||
        ada_now () - h->heartbeat_ns > h->stall_ns)
      return -1;
    if (++spins < 64)
      g_thread_yield ();
    else
      g_usleep (50);
  }
}

/* A thread that gets no slot: its events are only counted (overflow_events). */
static ThreadState *
ada_overflow_thread (void)
{
  AdaState * s = &ada_state;
  g_atomic_int_add ((volatile gint *) &s->region->overflow_threads, 1);
  return &s->overflow;
}

extern int sigfillset (gpointer set);
extern int pthread_sigmask (int how, gconstpointer set, gpointer old);

static ThreadState * ada_claim_thread (void);

/*
 * A thread's first hooked call: it gets a slot. Meanwhile its TLS says `registering`:
 * the hooked functions this calls itself (pthread_sigmask, the libc behind
 * pthread_getattr_np, say) are ada's own calls, not recorded, not counted; and its
 * signals wait, so no handler's hooked call runs half way through this. They are let
 * through with the thread registered and busy: a handler that runs then has its hooked
 * calls counted as skipped by the inline engine (ada_inline_enter), which tells them from
 * ada's own call to pthread_sigmask by their return address. (A signal in the instant
 * before they wait runs its handler `registering`, its hooked calls unrecorded.)
 */
static ThreadState *
ada_register_thread (void)
{
  guint64 all[16], old[16];  /* sigset_t: 128 bytes on Linux, 4 on Darwin */
  ThreadState * t;

  gum_tls_key_set_value (ada_state.tls_key, &ada_state.registering);
  sigfillset (all);
  pthread_sigmask (ADA_SIG_SETMASK, all, old);
  t = ada_claim_thread ();
  if (!t->overflowed)
    t->busy = 1;
  gum_tls_key_set_value (ada_state.tls_key, t);
  pthread_sigmask (ADA_SIG_SETMASK, old, NULL);
  if (!t->overflowed)
    t->busy = 0;
  return t;
}

static ThreadState *
ada_claim_thread (void)
{
  AdaState * s = &ada_state;
  RegionHeader * h = s->region;
  gint slot;
  ThreadState * t;
  SlotControl * c;

  slot = ada_claim_slot ();
  if (slot < 0)
    return ada_overflow_thread ();
  t = &s->threads[slot];
  c = &s->slots[slot];
  t->slot = (guint32) slot;
  t->tid = ada_os_thread_id ();
  t->ctl = c;
  t->ring = (IndexEvent *) (s->index_rings + (gsize) slot * h->index_capacity * sizeof (IndexEvent));
  t->detail_ring = s->detail_rings + (gsize) slot * s->detail_capacity;
  t->head = 0;
  t->cached_tail = 0;
  t->overflowed = 0;
  t->depth_extra = 0;
  t->stale_frames = 0;
  t->shadow_len = 0;
  t->detail_count = 0;
  t->detail_head = 0;
  t->detail_cached_tail = 0;
  t->stack_lo = 0;
  t->stack_hi = 0;
  t->busy = 0;
  if (t->inline_stack != NULL)  /* mapped by the slot's earlier thread: empty it */
  {
    t->inline_stack->len = 0;
    pthread_setspecific (s->inline_key, t->inline_stack);
  }
  ada_stack_bounds (t);  /* which calls a lower sp can leave (ada_same_stack) */
  /* A freed slot starts over: its rings are empty (the host drained them). */
  c->tid = t->tid;
  c->head = 0;
  c->tail = 0;
  c->detail_head = 0;
  c->detail_tail = 0;
  c->drops = 0;
  c->detail_drops = 0;
  c->waits = 0;
  c->wait_ns = 0;
  g_atomic_int_add ((volatile gint *) &c->state, (gint) (ADA_SLOT_ACTIVE - c->state));
  pthread_setspecific (s->exit_key, t);
  return t;
}

/*
 * The exit_key destructor: the thread is exiting, after its last event. The
 * host may now drain the slot and free it. A hooked function the thread calls
 * later still (another key's destructor) registers it anew, in a slot of its own.
 */
static void
ada_thread_exit (gpointer value)
{
  ThreadState * t = value;
  gum_tls_key_set_value (ada_state.tls_key, NULL);
  if (ADA_FORKED ())
    return;
  g_atomic_int_add ((volatile gint *) &t->ctl->state, ADA_SLOT_ENDED - ADA_SLOT_ACTIVE);
}

/* The agent stops: no destructor may run code of this module once it is unloaded. */
void
ada_fini (void)
{
  pthread_key_delete (ada_state.exit_key);
}


/* TinyCC does not inline: the per-call steps below are macros, not functions. */
#define ADA_THREAD(t) \
  do { \
    t = gum_tls_key_get_value (ada_state.tls_key); \
    if (t == NULL) \
      t = ada_register_thread (); \
  } while (0)

/*
 * Calls were left without a return (a longjmp). Frida drops its record of a call
 * unwound past, but not of one left by a longjmp whose caller calls again from the
 * same frame: that record (~2.4 KB) stays for good. Frida's invocation stack deeper
 * than the calls open here is such records; count each once, as the excess first
 * grows (should a call ada took for left return after all, its count is taken back:
 * see ada_on_leave).
 * Off the per-call path: only when open calls were found left.
 */
static void
ada_count_stale_frames (ThreadState * t, GumInvocationContext * ic)
{
  guint frida = gum_invocation_context_get_depth (ic);  /* Frida's records below this call */
  guint ours = t->shadow_len + t->depth_extra;

  if (frida > ours + t->stale_frames)
  {
    g_atomic_pointer_add ((volatile gssize *) &ada_state.region->unwound_calls,
        (gssize) (frida - ours - t->stale_frames));
    t->stale_frames = frida - ours;
  }
}

/* function_id of the hooked function: the table, else Frida's data (a function hooked
 * before its table was published). */
#define ADA_FUNCTION_ID(ic, fid) \
  do { \
    const FunctionTable * ft_ = ada_state.functions; \
    guint64 a_ = (guint64) (gsize) (ic)->function; \
    guint64 i_ = ((a_ >> 4) ^ (a_ >> 17)) & ft_->mask; \
    while (ft_->slots[i_].address != a_ && ft_->slots[i_].address != 0) \
      i_ = (i_ + 1) & ft_->mask; \
    fid = ft_->slots[i_].address == a_ ? ft_->slots[i_].function_id \
        : (guint64) GUM_IC_GET_FUNC_DATA (ic, gsize); \
  } while (0)

/* Timestamp and thread state; a thread past --max-threads is only counted (and returns). */
#define ADA_BEGIN(now, t) \
  if (ADA_FORKED ()) \
    return; \
  ADA_NOW (now); \
  ADA_THREAD (t); \
  if (t->overflowed) \
  { \
    if (t != &ada_state.registering && t != &ada_state.frida)  /* else not the program's */ \
      g_atomic_pointer_add ((volatile gssize *) &ada_state.region->overflow_events, 1); \
    return; \
  }

/*
 * Wait until the drain has consumed enough for `need` more units (events or
 * bytes) in a ring of `capacity`. FALSE when the record must be dropped: the
 * drop policy, the host's stop flag, or a drain silent for stall_ns (the host
 * is gone, and waiting longer would hang the target).
 */
static gboolean
ada_wait_for_room (SlotControl * ctl, volatile guint64 * tail, guint64 * cached_tail, guint64 head,
    guint64 need, guint64 capacity)
{
  RegionHeader * h = ada_state.region;
  guint spins = 0;
  guint64 since = 0;
  gboolean room;

  for (;;)
  {
    *cached_tail = ada_load_acquire (tail);
    if (head + need - *cached_tail <= capacity)
    {
      room = TRUE;
      break;
    }
    if (h->policy != ADA_POLICY_WAIT || h->stop)
    {
      room = FALSE;
      break;
    }
    if (since == 0)
      since = ada_now ();
    if ((++spins & 63) == 0 && ada_now () - h->heartbeat_ns > h->stall_ns)
    {
      room = FALSE;
      break;
    }
    if (spins < 1024)
      g_thread_yield ();
    else
      g_usleep (50);
  }
  if (since != 0)
  {
    ctl->waits++;
    ctl->wait_ns += ada_now () - since;
  }
  return room;
}

static void ada_emit_slow (ThreadState * t, guint64 timestamp, guint64 function_id,
                           guint32 kind, guint32 depth, guint32 detail_seq);

#define ADA_EMIT(t_, ts_, fid_, kind_, depth_, dseq_) \
  do { \
    guint64 h_ = (t_)->head; \
    if (h_ - (t_)->cached_tail >= ada_state.index_capacity) { \
      ada_emit_slow ((t_), (ts_), (fid_), (kind_), (depth_), (dseq_)); \
    } else { \
      IndexEvent * e_ = &(t_)->ring[h_ & ada_state.index_mask]; \
      e_->timestamp_ns = (ts_); \
      e_->function_id = (fid_); \
      e_->thread_id = (t_)->tid; \
      e_->event_kind = (kind_); \
      e_->call_depth = (depth_); \
      e_->detail_seq = (dseq_); \
      (t_)->head = h_ + 1; \
      ADA_STORE_RELEASE (&(t_)->ctl->head, h_ + 1); \
    } \
  } while (0)

/* The index ring looked full: refresh the tail, wait or drop, then write. */
static void
ada_emit_slow (ThreadState * t, guint64 timestamp, guint64 function_id, guint32 kind,
               guint32 depth, guint32 detail_seq)
{
  if (!ada_wait_for_room (t->ctl, &t->ctl->tail, &t->cached_tail, t->head, 1, ada_state.index_capacity))
  {
    t->ctl->drops++;
    return;
  }
  ADA_EMIT (t, timestamp, function_id, kind, depth, detail_seq);
}

/*
 * The C strings the host asked for (FunctionSlot.strings: the host read the function's
 * debug information) copied after the stack window as (slot, length, bytes): at most
 * ADA_MAX_STRING bytes each, read through the kernel (ada_safe_read), so a bad pointer is
 * only left out. Returns the bytes written at `out`.
 */
static guint32
ada_capture_strings (guint64 a, const guint64 * regs, guint8 * out)
{
  const FunctionTable * ft = ada_state.functions;
  guint64 mask, i;
  guint32 written = 0, got, len;
  guint8 buf[ADA_MAX_STRING + 1];

  if (ft == NULL)
    return 0;
  i = ((a >> 4) ^ (a >> 17)) & ft->mask;
  while (ft->slots[i].address != a && ft->slots[i].address != 0)
    i = (i + 1) & ft->mask;
  mask = ft->slots[i].address == a ? ft->slots[i].strings : 0;
  for (i = 0; i < 8 && mask != 0; i++, mask >>= 1)
  {
    if ((mask & 1) == 0 || regs[i] == 0)
      continue;
    got = ada_safe_read (buf, regs[i], ADA_MAX_STRING + 1);
    if (got == 0)
      continue;
    for (len = 0; len < got && len < ADA_MAX_STRING && buf[len] != 0; len++)
      ;
    out[written] = (guint8) i | (len == ADA_MAX_STRING && (got <= len || buf[len] != 0)
        ? ADA_STRING_TRUNCATED : 0);
    out[written + 1] = (guint8) len;
    ada_memcpy (out + written + 2, buf, len);
    written += 2 + len;
  }
  return written;
}

/* What a detail record keeps of the CPU, from either engine: the eight argument/result
 * registers in the ATF order (x86_64: rdi rsi rdx rcx r8 r9 rax r10; arm64: x0-x7), fp, sp. */
typedef struct
{
  guint64 regs[8];
  guint64 fp;
  guint64 sp;
} AdaRegs;

static void
ada_ic_regs (GumInvocationContext * ic, AdaRegs * r)
{
  GumCpuContext * c = ic->cpu_context;
#if defined (HAVE_I386)
  r->regs[0] = c->rdi; r->regs[1] = c->rsi; r->regs[2] = c->rdx; r->regs[3] = c->rcx;
  r->regs[4] = c->r8; r->regs[5] = c->r9; r->regs[6] = c->rax; r->regs[7] = c->r10;
  r->fp = c->rbp;
  r->sp = c->rsp;
#else
  r->regs[0] = c->x[0]; r->regs[1] = c->x[1]; r->regs[2] = c->x[2]; r->regs[3] = c->x[3];
  r->regs[4] = c->x[4]; r->regs[5] = c->x[5]; r->regs[6] = c->x[6]; r->regs[7] = c->x[7];
  r->fp = c->fp;
  r->sp = c->sp;
#endif
}

/*
 * One detail record (header, registers, lr, fp, sp, stack window) into the
 * thread's detail ring, linked to index_seq. Returns its detail_seq in
 * --detail mode, ADA_NO_DETAIL in window mode (the host links it, if it is
 * persisted) or when the record was dropped.
 */
/* Not inlined: its record buffer (about 1 KB with the strings) must not grow the stack
 * frame of every hooked call. */
static __attribute__ ((noinline)) guint32
ada_write_detail (ThreadState * t, const AdaRegs * r, guint64 function_address,
    guint64 timestamp, guint64 function_id, guint32 kind, guint32 index_seq,
    guint64 return_address)
{
  AdaState * s = &ada_state;
  guint8 rec[ADA_DETAIL_FIXED + ADA_DETAIL_MAX_STACK + ADA_DETAIL_MAX_STRINGS];
  guint64 * regs = (guint64 *) (rec + 32);
  guint64 sp = r->sp;
  guint32 want = s->stack_bytes, got, total, first, pos, strings = 0, i;
  guint16 flags = 0;

  for (i = 0; i < 8; i++)
    regs[i] = r->regs[i];
  *(guint64 *) (rec + 104) = r->fp;
  *(guint64 *) (rec + 96) = return_address;
  *(guint64 *) (rec + 112) = sp;

  /* The stack window must never fault: inside the thread's stack, read up to
   * its top; anywhere else, ask the kernel. */
  if (sp >= t->stack_lo && sp < t->stack_hi)
  {
    got = (guint32) MIN ((guint64) want, t->stack_hi - sp);
    ada_memcpy (rec + ADA_DETAIL_FIXED, (gconstpointer) (gsize) sp, got);
  }
  else
  {
    got = want != 0 ? ada_safe_read (rec + ADA_DETAIL_FIXED, sp, want) : 0;
  }
  if (got < want)
    flags |= ADA_FLAG_STACK_TRUNCATED;
  total = ADA_DETAIL_FIXED + got;
  if (kind == ADA_EVENT_CALL)
  {
    strings = ada_capture_strings (function_address, regs, rec + total);
    if (strings != 0)
      flags |= ADA_FLAG_STRINGS;
    total += strings;
  }

  *(guint32 *) (rec + 0) = total;
  *(guint16 *) (rec + 4) = kind == ADA_EVENT_CALL ? ADA_DETAIL_FUNCTION_CALL : ADA_DETAIL_FUNCTION_RETURN;
  *(guint16 *) (rec + 6) = flags;
  *(guint32 *) (rec + 8) = index_seq;
  *(guint32 *) (rec + 12) = t->tid;
  *(guint64 *) (rec + 16) = timestamp;
  *(guint64 *) (rec + 24) = function_id;
  *(guint16 *) (rec + 120) = (guint16) got;
  *(guint16 *) (rec + 122) = (guint16) strings;

  if (t->detail_head + total - t->detail_cached_tail > s->detail_capacity &&
      !ada_wait_for_room (t->ctl, &t->ctl->detail_tail, &t->detail_cached_tail, t->detail_head, total,
          s->detail_capacity))
  {
    t->ctl->detail_drops++;
    return ADA_NO_DETAIL;
  }
  pos = (guint32) (t->detail_head & s->detail_mask);
  first = (guint32) MIN ((guint64) total, s->detail_capacity - pos);
  ada_memcpy (t->detail_ring + pos, rec, first);
  if (first < total)
    ada_memcpy (t->detail_ring, rec + first, total - first);
  t->detail_head += total;
  ADA_STORE_RELEASE (&t->ctl->detail_head, t->detail_head);
  return s->detail_mode == ADA_DETAIL_ALWAYS ? t->detail_count++ : ADA_NO_DETAIL;
}

/* With the detail lane on: index room first (so a detail record never links
 * to an index event that was dropped), then the detail record, then the
 * index event carrying its link. */
static void
ada_emit_with_detail (ThreadState * t, const AdaRegs * r, guint64 function_address,
    guint64 timestamp, guint64 function_id, guint32 kind, guint32 depth, guint64 return_address)
{
  guint32 detail_seq;
  if (t->head - t->cached_tail >= ada_state.index_capacity &&
      !ada_wait_for_room (t->ctl, &t->ctl->tail, &t->cached_tail, t->head, 1, ada_state.index_capacity))
  {
    t->ctl->drops++;
    return;
  }
  detail_seq = ada_write_detail (t, r, function_address, timestamp, function_id, kind,
      (guint32) t->head, return_address);
  ADA_EMIT (t, timestamp, function_id, kind, depth, detail_seq);
}

/*
 * Whether `v`, the return address a hooked function was entered with, is one of the
 * Interceptor's on_leave trampolines. The Interceptor points a hooked call's return
 * address at its function's trampoline once the enter listeners have run; a function
 * entered with it still in place was jumped to, not called: a tail call (perhaps through
 * functions not hooked), and the call that jumped is still open. After a longjmp and a
 * new call, the slot holds a real return address into the caller. Frida writes each
 * function's trampolines into one slice (frida-gum, _gum_interceptor_backend_create_
 * trampoline); the test reads the shape of that code, a few bytes around `v`, and nothing
 * else (no GumFunctionContext field).
 */
#if defined (HAVE_I386)
/*
 * x86_64: [ctx pointer: 8 bytes] on_enter: [endbr64] push qword [rip -> ctx]; jmp enter
 * thunk; [CET shadow-stack extras] on_leave: push qword [rip -> ctx]; jmp leave thunk.
 * `v` must start with `push qword [rip + disp32]` (ff 35) naming a slot a few tens of
 * bytes before it (47 with frida 17.26.2 here, shadow-stack extras included), and the
 * code right after that slot must be a push of the same slot. Every byte read lies between
 * the slot and v + 6, and the instruction at v reads the slot itself when it runs: all
 * mapped whenever v is a return address the program can return to.
 */
static gboolean
ada_frida_return_trampoline (guint64 v)
{
  const guint8 * p = (const guint8 *) (gsize) v;
  const guint8 * enter;
  guint64 slot;
  gint32 disp;

  if (p[0] != 0xff || p[1] != 0x35)
    return FALSE;
  disp = *(const gint32 *) (p + 2);
  if (disp > -(8 + 6 + 2 + 6) || disp < -160)  /* at least ctx, push, short jmp */
    return FALSE;
  slot = v + 6 + (guint64) (gint64) disp;
  enter = (const guint8 *) (gsize) (slot + 8);
  if (enter[0] == 0xf3 && enter[1] == 0x0f && enter[2] == 0x1e && enter[3] == 0xfa)
    enter += 4;  /* endbr64, where indirect branch tracking is on */
  if (enter[0] != 0xff || enter[1] != 0x35)
    return FALSE;
  return (guint64) (gsize) enter + 6 + (guint64) (gint64) *(const gint32 *) (enter + 2) == slot;
}
#else
/*
 * arm64: on_leave is `ldr xS, #ctx; str xS, [sp, #-16]!; ldr xS, #leave_thunk; br xS`
 * (braaz xS where pointer authentication is on), xS the function's scratch register,
 * both literals after the code. lr may carry a pointer-authentication signature or a
 * tag: stripped first. NOT TESTED on arm64 hardware (written from frida-gum's
 * guminterceptor-arm64.c and gumarm64writer.c).
 */
# define ADA_USER_ADDRESS_MASK 0x0000ffffffffffffULL
static gboolean
ada_frida_return_trampoline (guint64 v)
{
  const guint32 * w;
  guint32 s, lit0, lit2;

  v = (guint64) (gsize) gum_strip_code_pointer ((gpointer) (gsize) v) & ADA_USER_ADDRESS_MASK;
  if (v == 0 || (v & 3) != 0)
    return FALSE;
  w = (const guint32 *) (gsize) v;
  if ((w[0] & 0xff000000U) != 0x58000000U)  /* ldr xS, literal */
    return FALSE;
  s = w[0] & 0x1fU;
  lit0 = (w[0] >> 5) & 0x7ffffU;
  lit2 = (w[2] >> 5) & 0x7ffffU;
  return w[1] == (0xf81f0fe0U | s)  /* str xS, [sp, #-16]! */
      && (w[2] & 0xff00001fU) == (0x58000000U | s)  /* ldr xS, literal */
      && (w[3] & ~0x81fU) == (0xd61f0000U | (s << 5))  /* br xS, or braaz xS */
      && ((w[3] & 0x81fU) == 0 || (w[3] & 0x81fU) == 0x81fU)
      && lit0 >= 4 && lit0 < 64 && lit2 >= 2 && lit2 < 64;  /* literals just after the code */
}
#endif

/* Both on the thread's own stack, or both off it (a signal handler on an alternate
 * stack): only then does a lower sp mean a deeper frame. */
static gboolean
ada_same_stack (const ThreadState * t, guint64 a, guint64 b)
{
  gboolean in_a = a >= t->stack_lo && a < t->stack_hi;
  gboolean in_b = b >= t->stack_lo && b < t->stack_hi;
  return t->stack_hi == 0 || in_a == in_b;
}

/*
 * Frida engine: calls on the shadow stack that were left without a return (a longjmp),
 * found as a call enters at or above their sp (`entering`), or as one returns above it.
 * Each ends with an EXCEPTION event (its function_id and depth, this moment), innermost
 * first, written before the event that revealed it. Not a call at the top entered at
 * this very sp by a tail call (see ada_frida_return_trampoline): it stays open, and the
 * function it jumped to nests in it. Returns how many calls were left. Off the per-call
 * path (only when the top of the shadow stack is at or below sp), and only with every
 * open call on the shadow stack (depth_extra 0).
 */
static __attribute__ ((noinline)) guint32
ada_left_frames (ThreadState * t, GumInvocationContext * ic, guint64 sp, guint64 now,
    gboolean entering)
{
  guint32 n = t->shadow_len, left;

  /* (a call on another stack, a signal handler's on an alternate one, leaves nothing) */
  while (n > 0 && t->shadow_sp[n - 1] < sp && ada_same_stack (t, sp, t->shadow_sp[n - 1]))
    n--;
  if (entering && n > 0 && t->shadow_sp[n - 1] == sp &&
      !ada_frida_return_trampoline (ADA_ENTRY_RETURN_ADDRESS (ic)))
  {
    while (n > 0 && t->shadow_sp[n - 1] == sp)
      n--;
  }
  left = t->shadow_len - n;
  while (t->shadow_len > n)
  {
    t->shadow_len--;
    ADA_EMIT (t, now, t->shadow_fid[t->shadow_len], ADA_EVENT_EXCEPTION, t->shadow_len,
        ADA_NO_DETAIL);
  }
  return left;
}

void
ada_on_enter (GumInvocationContext * ic)
{
  guint64 now;
  ThreadState * t;
  guint64 sp = ADA_SP (ic);
  guint64 fid;
  guint32 depth;

  ADA_BEGIN (now, t);
  ADA_FUNCTION_ID (ic, fid);
  /* Calls at or below this sp have been left without a return (a longjmp), but for a
   * tail call (see ada_left_frames): they are not open any more. */
  if (t->depth_extra == 0 && t->shadow_len > 0 && t->shadow_sp[t->shadow_len - 1] <= sp &&
      ada_left_frames (t, ic, sp, now, TRUE) != 0)
    ada_count_stale_frames (t, ic);
  depth = t->shadow_len + t->depth_extra;
  if (ada_state.detail_mode == ADA_DETAIL_OFF)
  {
    if (t->shadow_len < ADA_SHADOW_MAX)
    {
      t->shadow_fid[t->shadow_len] = fid;
      t->shadow_sp[t->shadow_len++] = sp;
    }
    else
    {
      t->depth_extra++;
    }
    ADA_EMIT (t, now, fid, ADA_EVENT_CALL, depth,
        ADA_NO_DETAIL);
  }
  else
  {
    guint64 ret = ADA_ENTRY_RETURN_ADDRESS (ic);
    AdaRegs r;
    if (t->shadow_len < ADA_SHADOW_MAX)
    {
      t->shadow_ret[t->shadow_len] = ret;
      t->shadow_fid[t->shadow_len] = fid;
      t->shadow_sp[t->shadow_len++] = sp;
    }
    else
    {
      t->depth_extra++;
    }
    ada_ic_regs (ic, &r);
    ada_emit_with_detail (t, &r, (guint64) (gsize) ic->function, now, fid, ADA_EVENT_CALL,
        depth, ret);
  }
}

void
ada_on_leave (GumInvocationContext * ic)
{
  guint64 now;
  ThreadState * t;
  guint64 sp = ADA_SP (ic);
  guint64 ret = 0;
  guint64 fid = 0;
  gboolean matched = FALSE;   /* fid 0 is a valid id (module 0, symbol 0): not a marker */
  guint32 depth;

  ADA_BEGIN (now, t);
  /* sp on leave is the sp its CALL saw. Deeper entries were left without a
   * return (each ends with an EXCEPTION event); the matching entry gives the CALL's
   * depth, which a RETURN carries. A tail call and the call that jumped to it share an
   * sp: the innermost returns first, and its entry is the top one. */
  if (t->depth_extra > 0)
  {
    t->depth_extra--;
    depth = t->shadow_len + t->depth_extra;
    ADA_FUNCTION_ID (ic, fid);
  }
  else
  {
    if (t->shadow_len > 0 && t->shadow_sp[t->shadow_len - 1] < sp)
      ada_left_frames (t, ic, sp, now, FALSE);
    if (t->shadow_len > 0 && t->shadow_sp[t->shadow_len - 1] == sp)
    {
      t->shadow_len--;
      ret = t->shadow_ret[t->shadow_len];
      fid = t->shadow_fid[t->shadow_len];
      matched = TRUE;
    }
    depth = t->shadow_len;
    if (!matched)  /* no CALL entry: ada took it for left (a tail call it did not know) */
    {
      ADA_FUNCTION_ID (ic, fid);
      if (t->stale_frames > 0)  /* Frida's record was not stale after all */
      {
        t->stale_frames--;
        g_atomic_pointer_add ((volatile gssize *) &ada_state.region->unwound_calls, -1);
      }
    }
  }
  if (ada_state.detail_mode == ADA_DETAIL_OFF)
  {
    ADA_EMIT (t, now, fid, ADA_EVENT_RETURN, depth,
        ADA_NO_DETAIL);
  }
  else
  {
    AdaRegs r;
    if (!matched)  /* no matching entry (deep recursion): ask Frida */
      ret = (guint64) (gsize) gum_invocation_context_get_return_address (ic);
    ada_ic_regs (ic, &r);
    ada_emit_with_detail (t, &r, (guint64) (gsize) ic->function, now, fid,
        ADA_EVENT_RETURN, depth, ret);
  }
}

#ifdef ADA_INLINE_AVAILABLE
/*
 * The inline hook engine (--hook-engine inline; the stubs are written by
 * agent/ada_inline_x64.js). A hooked function's first instructions jump to its
 * entry stub, which saves the argument registers, calls ada_inline_enter, restores
 * them and runs the relocated first instructions. ada_inline_enter records the CALL,
 * pushes (sp, return address, function_id) on the thread's inline shadow stack and
 * points the return address at the one exit stub, which calls ada_inline_leave: it
 * records the RETURN and hands back the real return address to return to.
 * The frames the stubs save: see ADA_ENTRY_RET.
 */

extern gpointer mmap (gpointer addr, gsize len, int prot, int flags, int fd, gint64 offset);
extern void abort (void);

/* Reserved, not committed: pages are touched only as deep as calls nest (32 MB of
 * address space per thread slot for a million nested calls). */
#define ADA_INLINE_STACK_ENTRIES (1 << 20)

static gboolean
ada_inline_stack (ThreadState * t)
{
  gpointer p;

  if (t->inline_stack != NULL)
    return TRUE;
  p = mmap (NULL, sizeof (InlineStack) + (gsize) ADA_INLINE_STACK_ENTRIES * sizeof (InlineEntry),
      3 /* rw */, ADA_ANON_MAP_FLAGS, -1, 0);
  if (p == (gpointer) (gssize) -1)
    return FALSE;
  t->inline_stack = p;
  t->inline_stack->capacity = ADA_INLINE_STACK_ENTRIES;
  pthread_setspecific (ada_state.inline_key, p);
  return TRUE;
}


static void
ada_count (volatile guint64 * counter, gssize n)
{
  g_atomic_pointer_add ((volatile gssize *) counter, n);
}

/* A call made by ada itself (this module, or Frida's code it calls: the TLS lookup, a
 * wait, mapping a shadow stack) into a function the inline engine hooks: it returns to
 * one of these ranges. It runs unrecorded and is no loss: the program did not make it. */
static gboolean
ada_own_call (guint64 ret)
{
  const guint64 * r = ada_state.own_code;
  return (ret >= r[0] && ret < r[1]) || (ret >= r[2] && ret < r[3]);
}

/* An address in Frida's agent (for the agent to find its code: see ada_own_call). */
guint64
ada_frida_code (void)
{
  return (guint64) (gsize) gum_tls_key_get_value;
}

/*
 * The calls above the first `keep` entries are over without a return: an exception
 * unwound them (see ada_inline_unwinding) or a longjmp left them (those are counted).
 * Each ends with an EXCEPTION event (its function_id and depth, this moment), innermost
 * first, written before the event that revealed it.
 */
static void
ada_inline_drop (ThreadState * t, InlineStack * st, guint64 keep, guint64 now)
{
  guint64 n = st->len, left = 0;

  if (ADA_FORKED ())
  {
    st->len = keep;
    return;
  }
  while (n > keep)
  {
    n--;
    ADA_EMIT (t, now, st->entries[n].function_id, ADA_EVENT_EXCEPTION, (guint32) n,
        ADA_NO_DETAIL);
    if (!st->entries[n].unwinding)
      left++;
  }
  st->len = keep;
  if (left != 0)
    ada_count (&ada_state.region->unwound_calls, (gssize) left);
}

/* How many entries stay when the stack pointer is at `sp`: frames at or below it (on
 * the same stack) are gone, but for a tail call: a function entered at `sp` whose return
 * address `ret` is already the exit stub was jumped to by the call of that entry, which
 * is still open (0: not entering a function). */
static guint64
ada_inline_live (const ThreadState * t, const InlineStack * st, guint64 sp, guint64 ret)
{
  guint64 n = st->len;

  while (n > 0 && st->entries[n - 1].sp <= sp && ada_same_stack (t, sp, st->entries[n - 1].sp) &&
      !(st->entries[n - 1].sp == sp && ret == ada_state.inline_exit))
    n--;
  return n;
}

void
ada_inline_enter (guint64 function_id, guint64 * frame, guint64 function_address)
{
  AdaState * s = &ada_state;
  guint64 now, sp = (guint64) (gsize) &frame[ADA_ENTRY_RET], ret = frame[ADA_ENTRY_RET];
  ThreadState * t;
  InlineStack * st;
  InlineEntry * e;
  guint64 n;

  if (ADA_FORKED ())
    return;
  /* A thread whose first hooked call comes from Frida's code (or ada's, run by Frida's
   * JavaScript thread) is one of Frida's: its Interceptor leaves them alone, and so does
   * this engine, for good. (One whose first hooked call comes from elsewhere, libc called
   * by Frida, is recorded as a thread of the program.) */
  t = gum_tls_key_get_value (s->tls_key);
  if (t == NULL)
  {
    if (ada_own_call (ret))
    {
      gum_tls_key_set_value (s->tls_key, &s->frida);
      return;
    }
    t = ada_register_thread ();
  }
  if (t->overflowed)
  {
    if (t != &s->registering && t != &s->frida)  /* else not the program's call */
      ada_count (&s->region->overflow_events, 2);
    return;
  }
  /* Busy: ada's own call, or a signal handler that interrupted this thread inside
   * ada_inline_enter/leave, whose ring and stack writes are half done. Its call runs
   * unrecorded (counted if the program made it). */
  if (t->busy)
  {
    if (!ada_own_call (ret))
      ada_count (&s->region->skipped_events, 2);
    return;
  }
  t->busy = 1;
  ADA_COMPILER_BARRIER ();
  if (!ada_inline_stack (t))
  {
    ada_count (&s->region->skipped_events, 2);
    t->busy = 0;
    return;
  }
  ADA_NOW (now);  /* once busy: a signal handler's events never come before this one's */
  st = t->inline_stack;
  /* Calls at or below this sp (on the same stack) were left without a return (a
   * longjmp: each ends with an EXCEPTION event), but for a tail call: a hooked function
   * jumped here, its return address (already the exit stub) is this call's. That call
   * stays open: this one returns through the exit stub to it, and it to its caller (each
   * gets its RETURN). */
  n = ada_inline_live (t, st, sp, ret);
  if (n < st->len)
    ada_inline_drop (t, st, n, now);
  if (n >= st->capacity)
  {
    st->len = n;
    ada_count (&s->region->skipped_events, 2);
    ADA_COMPILER_BARRIER ();
    t->busy = 0;
    return;
  }
  e = &st->entries[n];
  e->sp = sp;
  e->ret = ret;
  e->function_id = function_id;
  e->unwinding = 0;
  ADA_COMPILER_BARRIER ();
  st->len = n + 1;
  if (s->detail_mode == ADA_DETAIL_OFF)
  {
    ADA_EMIT (t, now, function_id, ADA_EVENT_CALL, (guint32) n, ADA_NO_DETAIL);
  }
  else
  {
    AdaRegs r;
    r.regs[0] = frame[ADA_ENTRY_RDI]; r.regs[1] = frame[ADA_ENTRY_RSI];
    r.regs[2] = frame[ADA_ENTRY_RDX]; r.regs[3] = frame[ADA_ENTRY_RCX];
    r.regs[4] = frame[ADA_ENTRY_R8]; r.regs[5] = frame[ADA_ENTRY_R9];
    r.regs[6] = frame[ADA_ENTRY_RAX]; r.regs[7] = frame[ADA_ENTRY_R10];
    r.fp = frame[ADA_ENTRY_RBP];
    r.sp = sp;
    ada_emit_with_detail (t, &r, function_address, now, function_id, ADA_EVENT_CALL,
        (guint32) n, ret);  /* its stack window still shows the real return address */
  }
  frame[ADA_ENTRY_RET] = s->inline_exit;
  ADA_COMPILER_BARRIER ();
  t->busy = 0;
}

/* Returns the address the hooked call really returns to (the exit stub jumps there). */
guint64
ada_inline_leave (guint64 * frame)
{
  AdaState * s = &ada_state;
  guint64 now, sp = (guint64) (gsize) &frame[ADA_EXIT_RET], ret, fid, n, i;
  ThreadState * t;
  InlineStack * st;

  t = gum_tls_key_get_value (s->tls_key);
  if (t == NULL || t->inline_stack == NULL)
    abort ();  /* a redirected return with no record of it: nowhere to go back to */
  st = t->inline_stack;
  /* The entry of this call; any above it were left without a return (a longjmp: each
   * ends with an EXCEPTION event before this RETURN). */
  n = st->len;
  for (i = n; i > 0 && st->entries[i - 1].sp != sp; i--)
    ;
  if (i == 0)
    abort ();
  ret = st->entries[i - 1].ret;
  fid = st->entries[i - 1].function_id;
  if (ADA_FORKED ())
  {
    st->len = i - 1;  /* a call the parent entered, returning in a forked child */
    return ret;
  }
  if (t->busy)
  {
    st->len = i - 1;
    ada_count (&s->region->skipped_events, 1 + (gssize) (n - i));
    return ret;
  }
  t->busy = 1;
  ADA_COMPILER_BARRIER ();
  ADA_NOW (now);
  if (n > i)
    ada_inline_drop (t, st, i, now);
  st->len = i - 1;
  frame[ADA_EXIT_RET] = ret;  /* as before the call returned (a detail record's stack window) */
  if (s->detail_mode == ADA_DETAIL_OFF)
  {
    ADA_EMIT (t, now, fid, ADA_EVENT_RETURN, (guint32) (i - 1), ADA_NO_DETAIL);
  }
  else
  {
    AdaRegs r;
    guint32 k;
    for (k = 0; k < 8; k++)
      r.regs[k] = 0;
    r.regs[2] = frame[ADA_EXIT_RDX];
    r.regs[6] = frame[ADA_EXIT_RAX];
    r.fp = frame[ADA_EXIT_RBP];
    r.sp = sp;
    ada_emit_with_detail (t, &r, 0, now, fid, ADA_EVENT_RETURN, (guint32) (i - 1), ret);
  }
  ADA_COMPILER_BARRIER ();
  t->busy = 0;
  return ret;
}

/*
 * C++ exceptions (and thread cancellation). An unwinder finds a
 * frame's unwind information by its return address: the exit stub has none, so before
 * one walks the stack (the agent hooks _Unwind_RaiseException, _Unwind_Resume,
 * _Unwind_Resume_or_Rethrow and _Unwind_ForcedUnwind) every open
 * call gets its real return address back, marked `unwinding`. When a handler catches
 * (__cxa_begin_catch), the calls below the stack pointer are gone:
 * each ends with an EXCEPTION event; those still open go through the exit stub again.
 */
static ThreadState *
ada_inline_thread (void)
{
  ThreadState * t = gum_tls_key_get_value (ada_state.tls_key);
  return t != NULL && !t->overflowed && t->inline_stack != NULL && !t->busy ? t : NULL;
}

/* Calls below the stack pointer are gone; the open ones get their real return address
 * back (`unwinding`) or the exit stub again. */
static void
ada_inline_swap_returns (GumInvocationContext * ic, gboolean unwinding)
{
  ThreadState * t = ada_inline_thread ();
  InlineStack * st;
  guint64 now, i, keep;

  if (t == NULL)
    return;
  t->busy = 1;
  ADA_COMPILER_BARRIER ();
  ADA_NOW (now);
  st = t->inline_stack;
  keep = ada_inline_live (t, st, ADA_SP (ic), 0);
  if (keep < st->len)
    ada_inline_drop (t, st, keep, now);
  for (i = 0; i < keep; i++)
  {
    InlineEntry * e = &st->entries[i];
    volatile guint64 * slot = (volatile guint64 *) (gsize) e->sp;
    if (unwinding && !e->unwinding && *slot == ada_state.inline_exit)
      *slot = e->ret;
    else if (!unwinding && e->unwinding && *slot == e->ret)
      *slot = ada_state.inline_exit;
    else
      continue;
    e->unwinding = unwinding;
  }
  ADA_COMPILER_BARRIER ();
  t->busy = 0;
}

void
ada_inline_unwinding (GumInvocationContext * ic)
{
  ada_inline_swap_returns (ic, TRUE);
}

void
ada_inline_caught (GumInvocationContext * ic)
{
  ada_inline_swap_returns (ic, FALSE);
}
#endif

/*
 * std::terminate was called. With hooked calls open on this thread, that is
 * most likely a C++ exception that could not unwind through one of them
 * (Frida's return trampolines have no unwind information): say which.
 */
void
ada_on_terminate (GumInvocationContext * ic)
{
  RegionHeader * h = ada_state.region;
  ThreadState * t = gum_tls_key_get_value (ada_state.tls_key);
  guint32 inline_len;

  (void) ic;
  if (t == NULL || t->overflowed || ADA_FORKED ())
    return;
  inline_len = t->inline_stack != NULL ? (guint32) t->inline_stack->len : 0;
  if (t->shadow_len + t->depth_extra + inline_len == 0)
    return;
  h->terminate_depth = t->shadow_len + t->depth_extra + inline_len;
  h->terminate_fid = inline_len > 0 ? t->inline_stack->entries[inline_len - 1].function_id
      : t->shadow_len > 0 ? t->shadow_fid[t->shadow_len - 1] : 0;
  h->terminate_tid = t->tid;
}

/*
 * A --trigger function was called. Calls within trigger_gap_ns of the last
 * recorded one are only counted: their windows would all but coincide.
 */
void
ada_on_trigger (GumInvocationContext * ic)
{
  AdaState * s = &ada_state;
  RegionHeader * h = s->region;
  guint64 now = ada_now ();
  guint32 pos;
  TriggerEntry * e;

  if (ADA_FORKED ())
    return;
  if (now - h->last_trigger_ns < h->trigger_gap_ns)
  {
    g_atomic_int_add ((volatile gint *) &h->triggers_coalesced, 1);
    return;
  }
  h->last_trigger_ns = now;
  pos = (guint32) g_atomic_int_add ((volatile gint *) &h->trigger_head, 1);
  e = &s->triggers[pos % ADA_TRIGGER_SLOTS];
  e->timestamp_ns = now;
  e->function_id = (guint64) GUM_IC_GET_FUNC_DATA (ic, gsize);
  e->tid = ada_os_thread_id ();
  g_atomic_int_add ((volatile gint *) &e->commit, (gint) (pos + 1 - e->commit));
}
