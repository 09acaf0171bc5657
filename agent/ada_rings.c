/*
 * ada_rings.c: a thread's rings. Claiming them: the shared memory reserved a slot at a
 * time, a slot claimed on a thread's first hooked call (ada_claim_slot, ada_register_thread)
 * and given back as it exits (ada_thread_exit). Writing into them, for either engine: the
 * per-call steps (ADA_THREAD, ADA_EMIT, waiting for room under the wait policy) and the
 * detail lane's records (registers, stack window, C strings). The per-call steps only the
 * Frida engine's callbacks take are here too, with the others: ADA_BEGIN, ADA_FUNCTION_ID,
 * ada_count_stale_frames, ada_ic_regs.
 */

/*
 * The host's drain naps, longer and longer, while its passes find nothing (drain.py; nap.py),
 * on the header's drain_asleep word: a futex on Linux, which the first producer to find its
 * ring half full (ada_wait_for_room), or full, or a slot wanting, or a trigger, wakes. So a
 * program at rest costs the host a few wakes a second, and one that starts to run finds its
 * rings drained before they fill. Elsewhere there is no futex and the drain naps only briefly.
 */
static void
ada_wake_drain (RegionHeader * h)
{
#ifdef ADA_FUTEX_SYSCALL
  if (h->drain_asleep == 0)
    return;
  h->drain_asleep = 0;
  g_atomic_int_add ((volatile gint *) &h->drain_wakes, 1);
  syscall (ADA_FUTEX_SYSCALL, (glong) (gsize) &h->drain_asleep, (glong) 1 /* FUTEX_WAKE */,
      (glong) 1);
#endif
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
 * Whether the drain has been silent for stall_ns (the host is taken to be gone). The beat is
 * read before the clock, and one newer than the clock is no silence: the drain beats
 * thousands of times a second, and a beat written between a clock read and the beat's read
 * made the age negative, which, unsigned, read as an age of centuries. On the emulated arm64
 * machine, where a clock read is slow, that dropped a thread now and then with the host alive.
 */
static gboolean
ada_host_silent (const RegionHeader * h)
{
  guint64 beat = *(volatile const guint64 *) &h->heartbeat_ns;
  guint64 now = ada_now ();

  return now > beat && now - beat > h->stall_ns;
}

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
    if (!pending || h->policy != ADA_POLICY_WAIT || h->stop || ada_host_silent (h))
      return -1;
    ada_wake_drain (h);  /* the drain frees the slots of threads that ended */
    if (++spins < 64)
      g_thread_yield ();
    else
      ada_nap (50);
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
 * ada's own call to pthread_sigmask by their return address. Until its signals wait, the
 * TLS says `unmasked`: a handler that runs in that instant has its hooked calls counted
 * as skipped the same way (the inline engine; the Interceptor's are not counted). One that
 * runs just before, while the TLS is still empty, registers the thread itself: the thread
 * keeps that slot (one thread, one slot; its exit_key value says it has one).
 */
static ThreadState *
ada_register_thread (void)
{
  guint64 all[16], old[16];  /* sigset_t: 128 bytes on Linux, 4 on Darwin */
  ThreadState * t;

  gum_tls_key_set_value (ada_state.tls_key, &ada_state.unmasked);
  sigfillset (all);
  pthread_sigmask (ADA_SIG_SETMASK, all, old);
  gum_tls_key_set_value (ada_state.tls_key, &ada_state.registering);
  /* A handler that ran before the TLS said `unmasked` (between the caller's look at it
   * and the line above) registered this thread itself: its slot is this thread's. */
  t = pthread_getspecific (ada_state.exit_key);
  if (t == NULL)
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
  t->cached_tail = (guint64) 0 - s->index_capacity / 2;  /* see ada_wait_for_room */
  t->overflowed = 0;
  t->depth_extra = 0;
  t->stale_frames = 0;
  t->shadow_len = 0;
  t->detail_count = 0;
  t->detail_head = 0;
  t->detail_cached_tail = (guint64) 0 - s->detail_capacity / 2;
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

/* One of the threads Frida had started when ada's agent loaded (the agent lists them:
 * Frida cloaks its threads). Frida leaves its threads out of its Interceptor while they
 * run its code, but not always as one ends: libc's thread exit (free, madvise) was
 * recorded, under emulation, as a thread of the program. */
static gboolean
ada_frida_thread (void)
{
  const AdaState * s = &ada_state;
  guint32 i, tid;

  if (s->frida_tid_count == 0)
    return FALSE;
  tid = ada_os_thread_id ();
  for (i = 0; i < s->frida_tid_count; i++)
    if (s->frida_tids[i] == tid)
      return TRUE;
  return FALSE;
}

/*
 * Whether this thread starts while Frida prepares the process's exit: from Frida's call of
 * the agent's dispose at exit(), _exit() or abort() until ada's own hook on it runs next
 * (AgentEnding.dispose, ada_on_exit). Frida starts a thread of its own then (in about one
 * exit in four here), and libc's thread start (__ctype_init, setjmp) calls hooked functions
 * before Frida cloaks it. Such a thread is taken for Frida's; its id is kept, and the
 * handover names those Frida has not cloaked since: the program's, not recorded (counted).
 */
static gboolean
ada_exit_window_thread (void)
{
  AdaState * s = &ada_state;
  guint32 i;

  if (!s->exit_window)
    return FALSE;
  i = (guint32) g_atomic_int_add ((volatile gint *) &s->exit_window_count, 1);
  if (i < ADA_EXIT_WINDOW_TIDS)
    s->exit_window_tids[i] = ada_os_thread_id ();
  return TRUE;
}

/*
 * A thread's first hooked call, with either engine (its TLS is empty): one of Frida's
 * threads (ada_frida_thread, ada_exit_window_thread) is marked so for good (the TLS says
 * `frida`, which both engines leave alone); any other gets a slot. While the thread id is
 * read, the TLS says `unmasked`: the syscall is ada's own call (see ada_register_thread).
 */
static ThreadState *
ada_first_call (void)
{
  AdaState * s = &ada_state;

  gum_tls_key_set_value (s->tls_key, &s->unmasked);
  if (ada_frida_thread () || ada_exit_window_thread ())
  {
    gum_tls_key_set_value (s->tls_key, &s->frida);
    return &s->frida;
  }
  return ada_register_thread ();
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
    t = ada_tls_get (); \
    if (t == NULL) \
      ADA_FOREIGN (t = ada_first_call ()); \
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
    if (t != &ada_state.registering && t != &ada_state.unmasked && t != &ada_state.frida) \
      g_atomic_pointer_add ((volatile gssize *) &ada_state.region->overflow_events, 1); \
    return; \
  }

/*
 * Wait until the drain has consumed enough for `need` more units (events or
 * bytes) in a ring of `capacity`. FALSE when the record must be dropped: the
 * drop policy, the stop flag, or a drain silent for stall_ns (the host
 * is gone, and waiting longer would hang the target). While it waits, t->waiting_sp
 * marks its stack: the hooked functions its sleeps call are ada's (ada_inline_ours).
 *
 * The callers come here when their ring looks full by *cached_tail: this leaves it half a
 * ring behind the real tail while the ring is less than half full, so that the next visit
 * comes at half full, to wake a napping drain (ada_wake_drain) before the ring fills; past
 * half, the real tail, and the fast path writes on until the ring is full.
 */
static gboolean
ada_wait_for_room (ThreadState * t, volatile guint64 * tail, guint64 * cached_tail, guint64 head,
    guint64 need, guint64 capacity)
{
  RegionHeader * h = ada_state.region;
  SlotControl * ctl = t->ctl;
  guint spins = 0;
  guint64 since = 0;
  gboolean room;

  t->waiting_sp = (guint64) (gsize) &spins;
  for (;;)
  {
    guint64 seen = ada_load_acquire (tail);
    *cached_tail = seen;
    if (head + need - seen <= capacity / 2)
    {
      *cached_tail = seen - capacity / 2;
      room = TRUE;
      break;
    }
    ada_wake_drain (h);
    if (head + need - seen <= capacity)
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
    if ((++spins & 63) == 0 && ada_host_silent (h))
    {
      room = FALSE;
      break;
    }
    if (spins < 1024)
      g_thread_yield ();
    else
      ada_nap (50);
  }
  t->waiting_sp = 0;
  if (since != 0)
  {
    ctl->waits++;
    ctl->wait_ns += ada_now () - since;
  }
  return room;
}

static void ada_emit_slow (ThreadState * t, guint64 timestamp, guint64 function_id,
                           guint32 kind, guint32 depth, guint32 detail_seq);

/* Whether the thread's index ring has room for one event, as far as the thread knows (its
 * cached tail): ADA_EMIT_WRITE may then write one. */
#define ADA_EMIT_ROOM(t_) ((t_)->head - (t_)->cached_tail < ada_state.index_capacity)

/* One event into a ring with room (ADA_EMIT_ROOM), published to the drain. */
#define ADA_EMIT_WRITE(t_, ts_, fid_, kind_, depth_, dseq_) \
  do { \
    guint64 h_ = (t_)->head; \
    IndexEvent * e_ = &(t_)->ring[h_ & ada_state.index_mask]; \
    e_->timestamp_ns = (ts_); \
    e_->function_id = (fid_); \
    e_->thread_id = (t_)->tid; \
    e_->event_kind = (kind_); \
    e_->call_depth = (depth_); \
    e_->detail_seq = (dseq_); \
    (t_)->head = h_ + 1; \
    ADA_STORE_RELEASE (&(t_)->ctl->head, h_ + 1); \
  } while (0)

#define ADA_EMIT(t_, ts_, fid_, kind_, depth_, dseq_) \
  do { \
    if (!ADA_EMIT_ROOM (t_)) { \
      ADA_FOREIGN (ada_emit_slow ((t_), (ts_), (fid_), (kind_), (depth_), (dseq_))); \
    } else { \
      ADA_EMIT_WRITE ((t_), (ts_), (fid_), (kind_), (depth_), (dseq_)); \
    } \
  } while (0)

/* The index ring looked full: refresh the tail, wait or drop, then write. */
static void
ada_emit_slow (ThreadState * t, guint64 timestamp, guint64 function_id, guint32 kind,
               guint32 depth, guint32 detail_seq)
{
  if (!ada_wait_for_room (t, &t->ctl->tail, &t->cached_tail, t->head, 1, ada_state.index_capacity))
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
      !ada_wait_for_room (t, &t->ctl->detail_tail, &t->detail_cached_tail, t->detail_head, total,
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
      !ada_wait_for_room (t, &t->ctl->tail, &t->cached_tail, t->head, 1, ada_state.index_capacity))
  {
    t->ctl->drops++;
    return;
  }
  detail_seq = ada_write_detail (t, r, function_address, timestamp, function_id, kind,
      (guint32) t->head, return_address);
  ADA_EMIT (t, timestamp, function_id, kind, depth, detail_seq);
}
