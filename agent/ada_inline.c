/*
 * ada_inline.c: the inline engine's C half (--hook-engine inline; x86_64, and arm64 on
 * Linux; the whole file is under ADA_INLINE_AVAILABLE). The stubs ada_inline_<arch>.js write call
 * ada_inline_enter and ada_inline_leave; each thread's inline shadow stack holds the real
 * return addresses; ada_inline_unwinding and ada_inline_caught let a C++ exception unwind
 * through hooked calls.
 */

#ifdef ADA_INLINE_AVAILABLE
/*
 * The inline hook engine (--hook-engine inline; the stubs are written by
 * agent/ada_inline_x64.js and ada_inline_arm64.js). A hooked function's first instructions jump to its
 * entry stub, which saves the argument registers, calls ada_inline_enter, restores
 * them and runs the relocated first instructions. ada_inline_enter records the CALL,
 * pushes (sp, return address, function_id) on the thread's inline shadow stack and
 * points the return address at the one exit stub, which calls ada_inline_leave: it
 * records the RETURN and hands back the real return address to return to.
 * The frames the stubs save: see ADA_ENTRY_RET.
 */

/*
 * Measuring only (ADA_INLINE_PROBE in ada's environment, bench_trace.py --parts-only): a
 * hot path that stops part way, so that what each part of a call costs can be told apart.
 * entry: ada_inline_enter returns at once (the jump, the entry stub and its call; the
 * return is not redirected); redirect: the shadow stack and the exit stub as well, no
 * clock read, no event; clock: the two clock reads as well, no event. Nothing is
 * recorded; ada says so.
 */
#if defined (ADA_PROBE_REDIRECT)
# define ADA_PROBE_NOW(v) ((v) = 0)
#else
# define ADA_PROBE_NOW(v) ADA_NOW (v)
#endif
#if defined (ADA_PROBE_REDIRECT) || defined (ADA_PROBE_CLOCK)
# define ADA_PROBE_EMIT(t_, ts_, fid_, kind_, depth_, dseq_) do { (void) (ts_); (void) (fid_); } while (0)
# define ADA_PROBE_EMIT_WRITE ADA_PROBE_EMIT
#else
# define ADA_PROBE_EMIT ADA_EMIT
# define ADA_PROBE_EMIT_WRITE ADA_EMIT_WRITE
#endif

extern gpointer mmap (gpointer addr, gsize len, int prot, int flags, int fd, gint64 offset);
extern void abort (void);

/* Reserved, not committed: pages are touched only as deep as calls nest (32 MB of
 * address space per thread slot for a million nested calls). */
#define ADA_INLINE_STACK_ENTRIES (1 << 20)

/* The thread's first hooked call makes its stack (left NULL if mmap fails). */
static void
ada_inline_stack (ThreadState * t)
{
  gpointer p;

  p = mmap (NULL, sizeof (InlineStack) + (gsize) ADA_INLINE_STACK_ENTRIES * sizeof (InlineEntry),
      3 /* rw */, ADA_ANON_MAP_FLAGS, -1, 0);
  if (p == (gpointer) (gssize) -1)
    return;
  t->inline_stack = p;
  t->inline_stack->capacity = ADA_INLINE_STACK_ENTRIES;
  pthread_setspecific (ada_state.inline_key, p);
}


static void
ada_count (volatile guint64 * counter, gssize n)
{
  g_atomic_pointer_add ((volatile gssize *) counter, n);
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
    if (st->entries[n].function_id == ADA_FRIDA_CALL)
    {
      t->in_frida_call = 0;  /* Frida's call was left too: the program's calls record again */
      continue;
    }
    ADA_EMIT (t, now, st->entries[n].function_id, ADA_EVENT_EXCEPTION,
        (guint32) n + ADA_INTERCEPTOR_OPEN (t), ADA_NO_DETAIL);
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
static ADA_ALWAYS_INLINE guint64
ada_inline_live (const ThreadState * t, const InlineStack * st, guint64 sp, guint64 ret)
{
  guint64 n = st->len;

  while (n > 0 && st->entries[n - 1].sp <= sp && ada_same_stack (t, sp, st->entries[n - 1].sp) &&
      !(st->entries[n - 1].sp == sp && ret == ada_state.inline_exit))
    n--;
  return n;
}

/*
 * Whether a call that finds its thread busy is ada's, not the program's: it returns into
 * ada's or Frida's code, or it is nested in such a call while ada waits for room in a
 * full ring (glibc's nanosleep, called by ada_nap, calls clock_nanosleep): its sp is then
 * less than ADA_OWN_WAIT_SPAN below the wait's frame. A signal handler's calls come lower:
 * the kernel's frame for a signal alone is larger (x86_64: the red zone, the FPU state and
 * the context, over 1.1 KB; arm64: over 4.5 KB). Before, with every libc export hooked,
 * each 50-us sleep of a wait was counted as 2 events lost.
 */
#define ADA_OWN_WAIT_SPAN 1024

static gboolean
ada_inline_ours (const ThreadState * t, guint64 sp, guint64 ret)
{
  guint64 w = t->waiting_sp;

  return ada_own_call (ret) || (w != 0 && sp < w && w - sp < ADA_OWN_WAIT_SPAN);
}

/* ada_inline_enter, every case (see ada_inline_enter for the common one). */
static ADA_NOINLINE gboolean
ada_inline_enter_full (guint64 function_id, guint64 * frame, guint64 function_address)
{
  AdaState * s = &ada_state;
  guint64 now, sp = ADA_INLINE_SP (&frame[ADA_ENTRY_RET]), ret = frame[ADA_ENTRY_RET];
  ThreadState * t;
  InlineStack * st;
  InlineEntry * e;
  guint64 n;
  gboolean frida;

  if (ADA_FORKED ())
    return FALSE;
  /* A thread whose first hooked call comes from Frida's code (or ada's, run by Frida's
   * JavaScript thread) is one of Frida's: its Interceptor leaves them alone, and so does
   * this engine, for good; so is one Frida had started when the agent loaded (see
   * ada_first_call). */
  t = ada_tls_get ();
  if (t == NULL)
  {
    if (ada_own_call (ret))
    {
      ADA_FOREIGN (gum_tls_key_set_value (s->tls_key, &s->frida));
      return FALSE;
    }
    ADA_FOREIGN (t = ada_first_call ());
  }
  if (t->overflowed)
  {
    if (t == &s->unmasked)
    {
      if (!ada_own_call (ret))  /* a signal handler's, as its thread registers */
        ada_count (&s->region->skipped_events, 2);
    }
    else if (t != &s->registering && t != &s->frida)  /* else not the program's call */
      ada_count (&s->region->overflow_events, 2);
    return FALSE;
  }
  /* Busy: ada's own call, or a signal handler that interrupted this thread inside
   * ada_inline_enter/leave, whose ring and stack writes are half done. Its call runs
   * unrecorded (counted if the program made it). */
  if (t->busy)
  {
    if (!ada_inline_ours (t, sp, ret))
      ada_count (&s->region->skipped_events, 2);
    return FALSE;
  }
  t->busy = 1;
  ADA_COMPILER_BARRIER ();
  if (t->inline_stack == NULL)
    ADA_FOREIGN (ada_inline_stack (t));
  if (t->inline_stack == NULL)
  {
    ada_count (&s->region->skipped_events, 2);
    t->busy = 0;
    return FALSE;
  }
  ADA_PROBE_NOW (now);  /* once busy: a signal handler's events never come before this one's */
  st = t->inline_stack;
  /* Calls at or below this sp (on the same stack) were left without a return (a
   * longjmp: each ends with an EXCEPTION event), but for a tail call: a hooked function
   * jumped here, its return address (already the exit stub) is this call's. That call
   * stays open: this one returns through the exit stub to it, and it to its caller (each
   * gets its RETURN). */
  n = ada_inline_live (t, st, sp, ret);
  if (n < st->len)
    ada_inline_drop (t, st, n, now);
  /* Frida's code runs on program threads too (its exit and fork handling, the agent's
   * exception handler): a call it makes returns into it (ada_own_call). It is not the
   * program's, nor is any hooked call under it (libc's own, inside it): none is recorded
   * until it returns, through the exit stub, which is why it is redirected at all (its
   * entry says ADA_FRIDA_CALL, and no event is written). */
  if (t->in_frida_call)
  {
    ADA_COMPILER_BARRIER ();
    t->busy = 0;
    return FALSE;
  }
  if (n >= st->capacity)
  {
    st->len = n;
    ada_count (&s->region->skipped_events, 2);
    ADA_COMPILER_BARRIER ();
    t->busy = 0;
    return FALSE;
  }
  frida = ada_own_call (ret);
  e = &st->entries[n];
  e->sp = sp;
  e->ret = ret;
  e->function_id = frida ? ADA_FRIDA_CALL : function_id;
  e->unwinding = 0;
  ADA_COMPILER_BARRIER ();
  st->len = n + 1;
  if (frida)
  {
    t->in_frida_call = 1;
  }
  else if (s->detail_mode == ADA_DETAIL_OFF)
  {
    ADA_PROBE_EMIT (t, now, function_id, ADA_EVENT_CALL, (guint32) n + ADA_INTERCEPTOR_OPEN (t),
        ADA_NO_DETAIL);
  }
  else
  {
    AdaRegs r;
    ADA_INLINE_ENTRY_REGS (&r, frame);
    r.sp = sp;
    ADA_FOREIGN (ada_emit_with_detail (t, &r, function_address, now, function_id,
        ADA_EVENT_CALL, (guint32) n + ADA_INTERCEPTOR_OPEN (t), ret));  /* its stack window still shows the real return */
  }
  frame[ADA_ENTRY_RET] = s->inline_exit;
  ADA_COMPILER_BARRIER ();
  t->busy = 0;
  return TRUE;
}

/*
 * TRUE when the call's return now goes to the exit stub: x86_64's entry stub then has the
 * CPU's return predictor expect the exit stub (see PUSHER in ada_inline_x64.js).
 * The common case here, and nothing else: the program's call on a thread that records,
 * deeper than every open call (no call left by a longjmp, no tail call), room in its
 * ring, no detail record. It calls nothing, so gcc saves two registers for it rather
 * than six and spills nothing. What that gains is at the edge of what this machine can
 * show: a whole recorded call, target and drain pinned apart, 62.7 -> 58.5 ns (medians of
 * 12 pairs; the new code faster in 8 of them, 2026-11-29).
 * Every other case goes to ada_inline_enter_full, which decides again from the start.
 * The steps here are its steps, in its order: the thread is marked busy before its stack
 * and ring are read, so that a signal handler's calls cannot change them under it.
 */
gboolean
ada_inline_enter (guint64 function_id, guint64 * frame, guint64 function_address)
{
  AdaState * s = &ada_state;
  guint64 now, sp = ADA_INLINE_SP (&frame[ADA_ENTRY_RET]), ret = frame[ADA_ENTRY_RET], n;
  ThreadState * t;
  InlineStack * st;
  InlineEntry * e;

#ifdef ADA_PROBE_ENTRY
  return FALSE;
#endif
  if (ADA_FORKED () || s->detail_mode != ADA_DETAIL_OFF)
    goto full;
  t = ada_tls_peek ();
  if (t == NULL || t->overflowed || t->busy || t->inline_stack == NULL)
    goto full;
  /* Busy first: what a signal handler's hooked calls change (the stack, the ring) is read
   * once they wait */
  t->busy = 1;
  ADA_COMPILER_BARRIER ();
  st = t->inline_stack;
  n = st->len;
  if (t->in_frida_call || (n > 0 && st->entries[n - 1].sp <= sp) || n >= st->capacity ||
      ada_own_call (ret) || !ADA_EMIT_ROOM (t))
  {
    ADA_COMPILER_BARRIER ();
    t->busy = 0;
    goto full;
  }
  ADA_PROBE_NOW (now);
  e = &st->entries[n];
  e->sp = sp;
  e->ret = ret;
  e->function_id = function_id;
  e->unwinding = 0;
  ADA_COMPILER_BARRIER ();
  st->len = n + 1;
  ADA_PROBE_EMIT_WRITE (t, now, function_id, ADA_EVENT_CALL, (guint32) n + ADA_INTERCEPTOR_OPEN (t),
      ADA_NO_DETAIL);
  frame[ADA_ENTRY_RET] = s->inline_exit;
  ADA_COMPILER_BARRIER ();
  t->busy = 0;
  return TRUE;
full:
  return ada_inline_enter_full (function_id, frame, function_address);
}

/* ada_inline_leave, every case (see ada_inline_leave for the common one). */
static ADA_NOINLINE guint64
ada_inline_leave_full (guint64 * frame)
{
  AdaState * s = &ada_state;
  guint64 now, sp = ADA_INLINE_SP (&frame[ADA_EXIT_RET]), ret, fid, n, i;
  ThreadState * t;
  InlineStack * st;

  t = ada_tls_get ();
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
  if (fid == ADA_FRIDA_CALL)
  {
    st->len = i - 1;  /* Frida's call is over (no event): the program's calls record again */
    t->in_frida_call = 0;
    return ret;
  }
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
  ADA_PROBE_NOW (now);
  if (n > i)
    ada_inline_drop (t, st, i, now);
  st->len = i - 1;
  frame[ADA_EXIT_RET] = ret;  /* as before the call returned (a detail record's stack window) */
  if (s->detail_mode == ADA_DETAIL_OFF)
  {
    ADA_PROBE_EMIT (t, now, fid, ADA_EVENT_RETURN, (guint32) (i - 1) + ADA_INTERCEPTOR_OPEN (t),
        ADA_NO_DETAIL);
  }
  else
  {
    AdaRegs r;
    guint32 k;
    for (k = 0; k < 8; k++)
      r.regs[k] = 0;
    ADA_INLINE_EXIT_REGS (&r, frame);
    r.sp = sp;
    ADA_FOREIGN (ada_emit_with_detail (t, &r, 0, now, fid, ADA_EVENT_RETURN,
        (guint32) (i - 1) + ADA_INTERCEPTOR_OPEN (t), ret));
  }
  ADA_COMPILER_BARRIER ();
  t->busy = 0;
  return ret;
}

/*
 * Returns the address the hooked call really returns to (the exit stub jumps there).
 * The common case here, as in ada_inline_enter: the innermost open call returns, the
 * program's, on a thread not busy, with room in its ring and no detail record; every
 * other case goes to ada_inline_leave_full.
 */
guint64
ada_inline_leave (guint64 * frame)
{
  AdaState * s = &ada_state;
  guint64 now, sp = ADA_INLINE_SP (&frame[ADA_EXIT_RET]), ret, fid, n;
  ThreadState * t;
  InlineStack * st;

  if (ADA_FORKED () || s->detail_mode != ADA_DETAIL_OFF)
    goto full;
  t = ada_tls_peek ();
  if (t == NULL || t->busy || t->inline_stack == NULL)
    goto full;
  t->busy = 1;  /* first, as in ada_inline_enter */
  ADA_COMPILER_BARRIER ();
  st = t->inline_stack;
  n = st->len;
  if (n == 0 || st->entries[n - 1].sp != sp || st->entries[n - 1].function_id == ADA_FRIDA_CALL ||
      !ADA_EMIT_ROOM (t))
  {
    ADA_COMPILER_BARRIER ();
    t->busy = 0;
    goto full;
  }
  ret = st->entries[n - 1].ret;
  fid = st->entries[n - 1].function_id;
  ADA_PROBE_NOW (now);
  st->len = n - 1;
  frame[ADA_EXIT_RET] = ret;
  ADA_PROBE_EMIT_WRITE (t, now, fid, ADA_EVENT_RETURN, (guint32) (n - 1) + ADA_INTERCEPTOR_OPEN (t),
      ADA_NO_DETAIL);
  ADA_COMPILER_BARRIER ();
  t->busy = 0;
  return ret;
full:
  return ada_inline_leave_full (frame);
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
  ThreadState * t = ada_tls_get ();
  return t != NULL && !t->overflowed && t->inline_stack != NULL && !t->busy ? t : NULL;
}

#ifdef ADA_INLINE_RET_IN_STACK
/* x86_64: the call's return address is in the stack, at the sp it entered with. */
static gboolean
ada_inline_swap_slot (const InlineEntry * e, guint64 lo, guint64 from, guint64 to)
{
  volatile guint64 * slot = (volatile guint64 *) (gsize) e->sp;

  (void) lo;
  if (*slot != from)
    return FALSE;
  *slot = to;
  return TRUE;
}
#else
/* arm64: the function saved its x30 (the exit stub) where its own code chose, in its frame:
 * between the sp it entered with and `lo`, the sp of the next open call (or the unwinder's;
 * 0: on another stack).
 * Every word there that holds `from` becomes `to` (a stale copy in a local not yet written
 * changes too, which the program cannot tell). */
static gboolean
ada_inline_swap_slot (const InlineEntry * e, guint64 lo, guint64 from, guint64 to)
{
  volatile guint64 * p;
  gboolean found = FALSE;

  if (lo == 0 || lo >= e->sp)
    return FALSE;
  for (p = (volatile guint64 *) (gsize) (lo & ~(guint64) 7); (guint64) (gsize) p < e->sp; p++)
  {
    if (*p == from)
    {
      *p = to;
      found = TRUE;
    }
  }
  return found;
}
#endif

/* Calls below the stack pointer are gone; the open ones get their real return address
 * back (`unwinding`) or the exit stub again. A tail call's entries share one sp and one
 * saved return address: the call that jumped owns it. */
static void
ada_inline_swap_returns (GumInvocationContext * ic, gboolean unwinding)
{
  ThreadState * t = ada_inline_thread ();
  InlineStack * st;
  guint64 now, i, keep, sp, below;

  if (t == NULL)
    return;
  t->busy = 1;
  ADA_COMPILER_BARRIER ();
  ADA_NOW (now);
  st = t->inline_stack;
  sp = ADA_SP (ic);
  keep = ada_inline_live (t, st, sp, 0);
  if (keep < st->len)
    ada_inline_drop (t, st, keep, now);
  below = sp;  /* the sp of the next open call down, or the unwinder's */
  for (i = keep; i-- > 0;)
  {
    InlineEntry * e = &st->entries[i];
    guint64 lo = below < e->sp && ada_same_stack (t, e->sp, below) ? below : 0;
    gboolean swapped;

    if (i == 0 || st->entries[i - 1].sp != e->sp)
      below = e->sp;  /* (a tail call's entries share one frame: the group's lo is the same) */
    if (e->ret == ada_state.inline_exit || e->unwinding == (guint64) unwinding)
      continue;
    if (unwinding)
      swapped = ada_inline_swap_slot (e, lo, ada_state.inline_exit, e->ret);
    else
      swapped = ada_inline_swap_slot (e, lo, e->ret, ada_state.inline_exit);
    if (swapped)
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
#if defined (HAVE_I386) && defined (ADA_TID_SYSCALL)
/*
 * Breakpoint hooks (x86_64 Linux): the last resort for a function with no room for a
 * jump nor padding within a short jump of it (code built at -O1 or -Os packs functions).
 * Its first byte becomes int3; the SIGTRAP that follows lands in ada_inline_trap, which
 * sends the thread on to the function's entry stub, as the jump would have (rip, in the
 * frame the kernel restores), and counts the call: a signal's round trip each, some
 * microseconds. Any other SIGTRAP goes to the handler that was there (Frida's, which
 * passes it to the program's). Installed with the system call itself: Frida replaced
 * libc's sigaction to keep its own handler first, and a program's handler apart.
 */
#define ADA_SIGTRAP 5
#define ADA_SYS_RT_SIGACTION 13
#define ADA_SYS_TGKILL 234
#define ADA_SYS_GETPID 39
#define ADA_SA_SIGINFO 4ULL
#define ADA_SA_RESTORER 0x04000000ULL
#define ADA_SA_ONSTACK 0x08000000ULL
#define ADA_UC_RIP 168          /* offsetof (ucontext_t, uc_mcontext.gregs[REG_RIP]) */

/* The kernel's struct sigaction. What was there before lives in AdaState: TinyCC's code
 * pages are not writable, and neither are its static variables. */
typedef struct
{
  gpointer handler;
  guint64 flags;
  gpointer restorer;
  guint64 mask;
} AdaKernelSigaction;

/* What was in front before ada's handler (ada_state.trap_before). */
static AdaKernelSigaction *
ada_trap_before (void)
{
  return (AdaKernelSigaction *) ada_state.trap_before;
}

void
ada_inline_trap (int sig, gpointer info, gpointer uc)
{
  guint64 * rip = (guint64 *) ((guint8 *) uc + ADA_UC_RIP);
  const TrapTable * table = ada_state.traps;
  const AdaKernelSigaction * before = ada_trap_before ();
  guint64 at = *rip - 1, lo = 0, hi = table != NULL ? table->count : 0;

  while (lo < hi)
  {
    guint64 mid = (lo + hi) / 2;

    if (table->entries[mid].at < at)
      lo = mid + 1;
    else
      hi = mid;
  }
  if (table != NULL && lo < table->count && table->entries[lo].at == at)
  {
    if (!ADA_FORKED ())
      ada_count (&ada_state.region->trap_calls, 1);
    *rip = table->entries[lo].stub;
    return;
  }
  if ((before->flags & ADA_SA_SIGINFO) != 0 && before->handler != NULL)
  {
    ((void (*) (int, gpointer, gpointer)) before->handler) (sig, info, uc);
  }
  else if ((gsize) before->handler > 1)  /* neither SIG_DFL nor SIG_IGN */
  {
    ((void (*) (int)) before->handler) (sig);
  }
  else if (before->handler == NULL)
  {
    /* SIG_DFL: put it back and raise the trap again, delivered as the handler returns */
    syscall (ADA_SYS_RT_SIGACTION, (glong) ADA_SIGTRAP, before, NULL, 8L);
    ada_state.trap_installed = 0;
    syscall (ADA_SYS_TGKILL, syscall (ADA_SYS_GETPID), (glong) ada_os_thread_id (), (glong) ADA_SIGTRAP);
  }
}

/* Put ada_inline_trap in front for SIGTRAP (once); `restorer`: the code a handler returns
 * through (rt_sigreturn), used when the handler before had none. 0, or -1. */
int
ada_inline_trap_install (gpointer restorer)
{
  AdaKernelSigaction * before = ada_trap_before ();
  AdaKernelSigaction act;

  if (ada_state.trap_installed)
    return 0;
  if (syscall (ADA_SYS_RT_SIGACTION, (glong) ADA_SIGTRAP, NULL, before, 8L) != 0)
    return -1;
  act.handler = (gpointer) ada_inline_trap;
  act.flags = ADA_SA_SIGINFO | ADA_SA_ONSTACK | ADA_SA_RESTORER;
  act.restorer = (before->flags & ADA_SA_RESTORER) != 0 ? before->restorer : restorer;
  act.mask = 0;
  if (syscall (ADA_SYS_RT_SIGACTION, (glong) ADA_SIGTRAP, &act, NULL, 8L) != 0)
    return -1;
  ada_state.trap_installed = 1;
  return 0;
}

/* The handler before back (ada leaves: this module is unloaded next). */
void
ada_inline_trap_remove (void)
{
  if (!ada_state.trap_installed)
    return;
  syscall (ADA_SYS_RT_SIGACTION, (glong) ADA_SIGTRAP, ada_trap_before (), NULL, 8L);
  ada_state.trap_installed = 0;
}
#endif
#endif
