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
 *    see platform() in ada_agent.js.
 *
 * Shared region layout (all little-endian; mirrored in tracer/rings.py, which
 * checks the offsets reported by ada_layout() at start-up):
 *
 *   0                     RegionHeader (4096 bytes)
 *   4096                  SlotControl[max_threads] (256 bytes each)
 *   index_rings_offset    max_threads x index_capacity x 32-byte events
 *   detail_rings_offset   max_threads x detail_capacity bytes (0 when off)
 *
 * A ring is single-producer (its thread) single-consumer (the host drain).
 * head and tail count events since the start and never wrap; position in the
 * ring is head & (capacity - 1). The n-th event a thread enqueues is index
 * event n of its file: its index_seq.
 */

#include <gum/guminterceptor.h>
#include <gum/gumtls.h>

#define ADA_REGION_MAGIC 0x31474e4952414441ULL /* "ADARING1" */
#define ADA_REGION_VERSION 1
#define ADA_EVENT_CALL 1
#define ADA_EVENT_RETURN 2
#define ADA_NO_DETAIL 0xffffffffU
#define ADA_SLOT_ACTIVE 1
#define ADA_SHADOW_MAX 256

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
  guint32 policy;             /* 0 = wait for the drain (lossless), 1 = drop */
  guint32 stop;               /* set by the host: stop waiting, stop recording */
  guint64 heartbeat_ns;       /* written by the drain on every pass */
  guint64 stall_ns;           /* producer gives up waiting after this much drain silence */
  guint64 index_rings_offset;
  guint64 detail_rings_offset;
  guint64 region_size;
} RegionHeader;

typedef struct
{
  guint32 state;              /* 0 free, 1 active (tid valid, ring in use) */
  guint32 tid;
  guint64 pad0[7];
  volatile guint64 head;      /* producer cache line */
  guint64 drops;              /* events dropped because the ring was full */
  guint64 pad1[6];
  volatile guint64 tail;      /* consumer cache line */
  guint64 pad2[7];
  guint64 reserved[8];
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
  guint32 slot;
  guint32 tid;
  SlotControl * ctl;
  IndexEvent * ring;
  guint64 head;               /* local copy of ctl->head */
  guint64 cached_tail;        /* last tail read; refreshed only when the ring looks full */
  guint32 overflowed;         /* 1: no slot, events are counted in overflow_events */
  guint32 depth_extra;        /* calls deeper than the shadow stack holds */
  guint32 shadow_len;
  guint32 pad;
  guint64 shadow_sp[ADA_SHADOW_MAX]; /* sp at entry of each open call, outermost first */
} ThreadState;

typedef struct
{
  gsize tls_key;
  RegionHeader * region;
  SlotControl * slots;
  guint8 * index_rings;
  ThreadState * threads;      /* max_threads entries, zeroed */
  ThreadState overflow;       /* shared by every thread past max_threads */
  guint64 index_mask;
  guint64 index_capacity;
} AdaState;

extern AdaState ada_state;

#ifdef ADA_CLOCK_MACH
extern guint64 mach_continuous_time (void);
static guint64
ada_now (void)
{
  return mach_continuous_time () * ADA_MACH_NUMER / ADA_MACH_DENOM;
}
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
#endif
#define ADA_NOW(v) ((v) = ada_now ())

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

/* Called once by the agent after it has mapped the region. */
void
ada_init (void)
{
  AdaState * s = &ada_state;
  s->tls_key = gum_tls_key_new ();
  s->slots = (SlotControl *) ((guint8 *) s->region + 4096);
  s->index_rings = (guint8 *) s->region + s->region->index_rings_offset;
  s->index_mask = s->region->index_capacity - 1;
  s->index_capacity = s->region->index_capacity;
  s->overflow.overflowed = 1;
}

/* Offsets of the shared layout, so the host can check it agrees. */
void
ada_layout (guint64 * out)
{
  RegionHeader * h = NULL;
  SlotControl * c = NULL;
  out[0] = sizeof (RegionHeader);
  out[1] = sizeof (SlotControl);
  out[2] = sizeof (IndexEvent);
  out[3] = (guint64) (gsize) &h->registered;
  out[4] = (guint64) (gsize) &h->heartbeat_ns;
  out[5] = (guint64) (gsize) &c->head;
  out[6] = (guint64) (gsize) &c->tail;
  out[7] = (guint64) (gsize) &c->drops;
  out[8] = (guint64) (gsize) &h->stop;
  out[9] = (guint64) (gsize) &h->overflow_events;
  out[10] = sizeof (ThreadState);
  out[11] = sizeof (AdaState);
  out[12] = (guint64) (gsize) &h->region_size;
}

static ThreadState *
ada_register_thread (void)
{
  AdaState * s = &ada_state;
  RegionHeader * h = s->region;
  guint32 slot;
  ThreadState * t;

  slot = (guint32) g_atomic_int_add ((volatile gint *) &h->registered, 1);
  if (slot >= h->max_threads)
  {
    g_atomic_int_add ((volatile gint *) &h->overflow_threads, 1);
    gum_tls_key_set_value (s->tls_key, &s->overflow);
    return &s->overflow;
  }
  t = &s->threads[slot];
  t->slot = slot;
  t->tid = ada_os_thread_id ();
  t->ctl = &s->slots[slot];
  t->ring = (IndexEvent *) (s->index_rings + (gsize) slot * h->index_capacity * sizeof (IndexEvent));
  t->ctl->tid = t->tid;
  g_atomic_int_add ((volatile gint *) &t->ctl->state, ADA_SLOT_ACTIVE);
  gum_tls_key_set_value (s->tls_key, t);
  return t;
}

/* TinyCC does not inline: the per-call steps below are macros, not functions. */
#define ADA_THREAD(t) \
  do { \
    t = gum_tls_key_get_value (ada_state.tls_key); \
    if (t == NULL) \
      t = ada_register_thread (); \
  } while (0)

/* Wait for the drain to make room. FALSE when the event must be dropped. */
static gboolean
ada_wait_for_room (ThreadState * t)
{
  RegionHeader * h = ada_state.region;
  guint64 cap = h->index_capacity;
  guint spins = 0;

  if (h->policy != 0)
    return FALSE;
  for (;;)
  {
    if (h->stop)
      return FALSE;
    t->cached_tail = ada_load_acquire (&t->ctl->tail);
    if (t->head - t->cached_tail < cap)
      return TRUE;
    /* The drain writes heartbeat_ns on every pass: if it has been silent for
     * stall_ns the host is gone, and waiting longer would hang the target. */
    if ((++spins & 63) == 0 && ada_now () - h->heartbeat_ns > h->stall_ns)
      return FALSE;
    if (spins < 1024)
      g_thread_yield ();
    else
      g_usleep (50);
  }
}

static void ada_emit_slow (ThreadState * t, guint64 timestamp, guint64 function_id,
                           guint32 kind, guint32 depth);

#define ADA_EMIT(t_, ts_, fid_, kind_, depth_) \
  do { \
    guint64 h_ = (t_)->head; \
    if (h_ - (t_)->cached_tail >= ada_state.index_capacity) { \
      ada_emit_slow ((t_), (ts_), (fid_), (kind_), (depth_)); \
    } else { \
      IndexEvent * e_ = &(t_)->ring[h_ & ada_state.index_mask]; \
      e_->timestamp_ns = (ts_); \
      e_->function_id = (fid_); \
      e_->thread_id = (t_)->tid; \
      e_->event_kind = (kind_); \
      e_->call_depth = (depth_); \
      e_->detail_seq = ADA_NO_DETAIL; \
      (t_)->head = h_ + 1; \
      ADA_STORE_RELEASE (&(t_)->ctl->head, h_ + 1); \
    } \
  } while (0)

/* The ring looked full: refresh the tail, wait or drop, then write. */
static void
ada_emit_slow (ThreadState * t, guint64 timestamp, guint64 function_id, guint32 kind,
               guint32 depth)
{
  t->cached_tail = ada_load_acquire (&t->ctl->tail);
  if (t->head - t->cached_tail >= ada_state.index_capacity && !ada_wait_for_room (t))
  {
    t->ctl->drops++;
    return;
  }
  ADA_EMIT (t, timestamp, function_id, kind, depth);
}

void
ada_on_enter (GumInvocationContext * ic)
{
  guint64 now;
  ThreadState * t;
  guint64 sp = ADA_SP (ic);
  guint32 depth;

  ADA_NOW (now);
  ADA_THREAD (t);
  if (t->overflowed)
  {
    g_atomic_pointer_add ((volatile gssize *) &ada_state.region->overflow_events, 1);
    return;
  }
  /* Frames at or below this sp have been left without a return (longjmp,
   * exception unwinding, a tail call): they are not open any more. */
  if (t->depth_extra == 0)
    while (t->shadow_len > 0 && t->shadow_sp[t->shadow_len - 1] <= sp)
      t->shadow_len--;
  depth = t->shadow_len + t->depth_extra;
  if (t->shadow_len < ADA_SHADOW_MAX)
    t->shadow_sp[t->shadow_len++] = sp;
  else
    t->depth_extra++;
  ADA_EMIT (t, now, (guint64) GUM_IC_GET_FUNC_DATA (ic, gsize), ADA_EVENT_CALL, depth);
}

void
ada_on_leave (GumInvocationContext * ic)
{
  guint64 now;
  ThreadState * t;
  guint64 sp = ADA_SP (ic);
  guint32 depth;

  ADA_NOW (now);
  ADA_THREAD (t);
  if (t->overflowed)
  {
    g_atomic_pointer_add ((volatile gssize *) &ada_state.region->overflow_events, 1);
    return;
  }
  /* sp on leave is the sp its CALL saw. Deeper entries were left without a
   * return; the matching entry gives the CALL's depth, which a RETURN carries. */
  if (t->depth_extra > 0)
  {
    t->depth_extra--;
    depth = t->shadow_len + t->depth_extra;
  }
  else
  {
    while (t->shadow_len > 0 && t->shadow_sp[t->shadow_len - 1] < sp)
      t->shadow_len--;
    if (t->shadow_len > 0 && t->shadow_sp[t->shadow_len - 1] == sp)
      t->shadow_len--;
    depth = t->shadow_len;
  }
  ADA_EMIT (t, now, (guint64) GUM_IC_GET_FUNC_DATA (ic, gsize), ADA_EVENT_RETURN, depth);
}
