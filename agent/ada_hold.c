/*
 * ada_hold.c: the program's threads held still while ada writes code (Linux; under
 * ADA_HOLD_SIGNAL). The agent's side is ThreadHold in ada_code.js.
 *
 * A function's first bytes are not written in one store. A jump of 5 bytes that crosses an
 * aligned word is two stores, and putting a prologue back is a copy. A thread that runs
 * there meanwhile can execute half old bytes and half new: SIGSEGV on a read of a wild
 * address. A thread stopped between two of the instructions being replaced resumes in the
 * middle of the new jump. Both engines had this: a busy program crashed about one attach
 * in ten under load.
 *
 * So each of the program's threads on a CPU is sent a signal (tgkill). Its handler, ada_hold_stop,
 * notes where the thread was (the pc the kernel will resume it at) and waits until the
 * agent has written. The agent writes only when no held thread is inside the bytes it
 * replaces (else it lets them go, and asks again). Every thread then returns to user mode
 * through the kernel (rt_sigreturn), so it also fetches the new code afresh.
 *
 * A held thread goes on by itself after ADA_HOLD_MAX_NS: it may hold a lock the writer
 * needs (an allocator's), and ada must never stop a program for good. The agent counts
 * those (ada_hold_end) and says so.
 *
 * The handler is installed with the system call itself, on a real-time signal nobody
 * handles; before ada leaves, the signal is ignored (which discards one still pending in
 * a thread that blocked it meanwhile) and then put back as it was. The kernel enters it
 * through code outside the CModule (the agent's lastingCode), which counts the threads in
 * and out around the call: the CModule is freed as ada leaves, and a thread must not be
 * on its way out of it then (ada_hold_remove).
 */

#ifdef ADA_HOLD_SIGNAL
#define ADA_HOLD_MAX_NS 1000000000ULL   /* a held thread goes on by itself after 1 s */
#define ADA_HOLD_HELD 1     /* seen[]: in the handler, its pc noted */
#define ADA_HOLD_GONE 2     /* the thread had left */
#define ADA_HOLD_ASLEEP 3   /* asleep in the kernel as it was to be asked: not signalled */
#define ADA_EINTR 4
#define ADA_HOLD_SA_SIGINFO 4ULL
#define ADA_HOLD_SA_ONSTACK 0x08000000ULL
#define ADA_HOLD_SA_RESTART 0x10000000ULL
#define ADA_HOLD_SA_RESTORER 0x04000000ULL
#define ADA_FUTEX_WAIT_PRIVATE 128
#define ADA_FUTEX_WAKE_PRIVATE 129

typedef struct { gint64 tv_sec; glong tv_nsec; } AdaHoldTimespec;

static guint32
ada_hold_load (volatile guint32 * p)
{
  return (guint32) g_atomic_int_add ((volatile gint *) p, 0);
}

static void
ada_hold_set (volatile guint32 * p, guint32 v)
{
  g_atomic_int_add ((volatile gint *) p, (gint) (v - *p));
}

static void
ada_hold_sleep_ns (glong ns)
{
  AdaHoldTimespec ts = { 0, ns };
  syscall (ADA_NANOSLEEP_SYSCALL, &ts, NULL);
}

/* Whether the signal ended a system call early: the thread resumes right after the system
 * call's instruction with -EINTR for its result. It was seen on a CPU and went to sleep before
 * the signal landed (ada_hold_ask); poll, select, epoll_wait, nanosleep and the like are not
 * restarted after a handler, SA_RESTART or not, and the number to restart one is gone from
 * the frame. So it is counted, and ada says so. (An EINTR another signal caused at the same
 * moment would count too.) */
static gboolean
ada_hold_cut_a_sleep_short (gpointer uc)
{
  guint64 pc = *(guint64 *) ((guint8 *) uc + ADA_UC_PC);
  gint64 result = *(gint64 *) ((guint8 *) uc + ADA_UC_RESULT);
  const guint8 * code = (const guint8 *) (gsize) (pc - ADA_SYSCALL_INSN_BYTES);
  guint32 insn = 0, k;

  if (result != -ADA_EINTR)
    return FALSE;
  for (k = 0; k < ADA_SYSCALL_INSN_BYTES; k++)  /* no libc here: its functions may be hooked */
    insn |= (guint32) code[k] << (8 * k);
  return insn == ADA_SYSCALL_INSN;
}

/* The handler: a thread ada asked (it is in tids[]) waits while the gate is closed. */
void
ada_hold_stop (int sig, gpointer info, gpointer uc)
{
  AdaHold * h = &ada_state.hold;
  guint32 tid, i, count;

  (void) sig;
  (void) info;
  if (ada_hold_cut_a_sleep_short (uc))
    g_atomic_int_add ((volatile gint *) &h->cut_short, 1);
  if (ada_hold_load (&h->gate) == 0)
    return;   /* late: the hold it was sent for is over */
  tid = ada_os_thread_id ();
  count = ada_hold_load (&h->count);
  for (i = 0; i < count && h->tids[i] != tid; i++)
    ;
  if (i == count || ada_hold_load (&h->seen[i]) != 0)
    return;
  h->pcs[i] = *(guint64 *) ((guint8 *) uc + ADA_UC_PC);
  ada_hold_set (&h->seen[i], ADA_HOLD_HELD);
  while (ada_hold_load (&h->gate) != 0)
  {
    AdaHoldTimespec ts = { 0, 2000000 };

    if (ada_now () > h->deadline_ns)
    {
      g_atomic_int_add ((volatile gint *) &h->escaped, 1);
      break;
    }
    syscall (ADA_FUTEX_SYSCALL, &h->gate, (glong) ADA_FUTEX_WAIT_PRIVATE, 1L, &ts, NULL, 0L);
  }
#ifdef ADA_TEST_HOLD_LINGER_NS
  ada_hold_sleep_ns (ADA_TEST_HOLD_LINGER_NS);  /* tests: a thread slow to leave, let go */
#endif
}

/* What the signal's action is now: 0 SIG_DFL, 1 SIG_IGN, 2 ada's handler, 3 another. */
int
ada_hold_disposition (int signal)
{
  guint64 now[4];

  if (syscall (ADA_RT_SIGACTION_SYSCALL, (glong) signal, NULL, now, 8L) != 0)
    return 3;
  if (now[0] == 0 || now[0] == 1)
    return (int) now[0];
  return now[0] == (guint64) (gsize) ada_state.hold.entry_code ? 2 : 3;
}

/* The hold's entry in front for `signal` (nobody's: SIG_DFL): `code` (the agent's
 * lastingCode) counts each thread in `entry`->inside and calls ada_hold_stop; `restorer`: the
 * code a handler returns through (x86_64 needs one; NULL elsewhere: the kernel's). 0, or -1. */
int
ada_hold_install (int signal, gpointer code, AdaHoldEntry * entry, gpointer restorer)
{
  AdaHold * h = &ada_state.hold;
  guint64 act[4];

  if (ada_hold_disposition (signal) != 0)
    return -1;
  h->entry = entry;
  h->entry_code = code;
  entry->handler = (gpointer) ada_hold_stop;  /* before the handler is in: a system call follows */
  act[0] = (guint64) (gsize) code;
  act[1] = ADA_HOLD_SA_SIGINFO | ADA_HOLD_SA_ONSTACK | ADA_HOLD_SA_RESTART |
      (restorer != NULL ? ADA_HOLD_SA_RESTORER : 0);
  act[2] = (guint64) (gsize) restorer;
  act[3] = 0;
  if (syscall (ADA_RT_SIGACTION_SYSCALL, (glong) signal, act, NULL, 8L) != 0)
    return -1;
  h->signal = (guint32) signal;
  return 0;
}

/*
 * The signal ignored (a copy still pending in a thread that blocks it is discarded), then
 * nobody's again; then the entry's handler cleared, and a wait (up to 1 s) until no thread
 * is in the entry: a signal delivered just before (late: its hold long over) may still be
 * on its way through ada_hold_stop. After this no thread runs the CModule's code for the
 * hold, and none will: the agent can be unloaded. Returns how many are still in the entry.
 *
 * The clearing and the entry's count are a Dekker pair: the entry raises the count, then
 * (a full barrier between) reads the handler; this clears the handler, then (an atomic
 * read-modify-write, a full barrier) reads the count. Either the thread sees NULL or this
 * sees it counted, and waits.
 */
guint32
ada_hold_remove (void)
{
  AdaHold * h = &ada_state.hold;
  guint64 act[4] = { 1, 0, 0, 0 };
  guint64 deadline;

  if (h->signal == 0)
    return 0;
  if (ada_hold_disposition ((int) h->signal) == 2)
  {
    syscall (ADA_RT_SIGACTION_SYSCALL, (glong) h->signal, act, NULL, 8L);
    act[0] = 0;
    syscall (ADA_RT_SIGACTION_SYSCALL, (glong) h->signal, act, NULL, 8L);
  }
  h->signal = 0;
  g_atomic_pointer_add (&h->entry->handler, -(gssize) h->entry->handler);
  deadline = ada_now () + 1000000000ULL;
  while (ada_hold_load (&h->entry->inside) != 0 && ada_now () < deadline)
    ada_hold_sleep_ns (50000);
  return ada_hold_load (&h->entry->inside);
}

/* Thread tid's state now, from /proc/self/task/TID/stat: 'R' (on a CPU or waiting for one),
 * 'S', 'D', ...; 0 if it is gone. `fd` gets the file, left open: the caller signals before
 * it closes it, so that as little time as can be passes between the look and the signal. */
static gchar
ada_hold_state (guint32 tid, int * fd)
{
  gchar path[32];
  gchar digits[12];
  gchar text[256];
  guint32 n = 0, k;
  glong got, i;

  for (k = 0; k < 16; k++)
    path[k] = "/proc/self/task/"[k];
  do
    digits[n++] = (gchar) ('0' + tid % 10);
  while ((tid /= 10) != 0);
  while (n > 0)
    path[k++] = digits[--n];
  for (n = 0; n < 6; n++)
    path[k + n] = "/stat"[n];
  *fd = open (path, 0);
  if (*fd < 0)
    return 0;
  got = syscall (ADA_READ_SYSCALL, (glong) *fd, text, (glong) sizeof (text));
  for (i = got - 1; i > 0 && text[i] != ')'; i--)  /* "tid (name) S ...": the last ')' */
    ;
  return i > 0 && i + 2 < got ? text[i + 2] : 0;
}

/*
 * Ask threads tids[0..n) to hold (appended to those asked already; `first`: a new hold)
 * and wait up to wait_ms for them. Returns how many of all those asked are held, or -1
 * when the handler is no longer ada's (the program took the signal).
 */
int
ada_hold_ask (const guint32 * tids, guint32 n, gboolean first, guint32 wait_ms)
{
  AdaHold * h = &ada_state.hold;
  guint32 start, i, held;
  guint64 deadline;
  glong pid;

  if (h->signal == 0 || ada_hold_disposition ((int) h->signal) != 2)
    return -1;
  if (first)
  {
    ada_hold_set (&h->count, 0);
    ada_hold_set (&h->escaped, 0);
    h->deadline_ns = ada_now () + ADA_HOLD_MAX_NS + (guint64) wait_ms * 1000000ULL;
    ada_hold_set (&h->gate, 1);
  }
  start = ada_hold_load (&h->count);
  if (start + n > ADA_HOLD_THREADS)
    n = ADA_HOLD_THREADS - start;
  for (i = 0; i < n; i++)
  {
    h->tids[start + i] = tids[i];
    h->pcs[start + i] = 0;
    ada_hold_set (&h->seen[start + i], 0);
  }
  ada_hold_set (&h->count, start + n);  /* after the entries: the handler reads up to it */
  pid = syscall (ADA_PID_SYSCALL);
  for (i = start; i < start + n; i++)
  {
    /* The agent chose threads on a CPU a while ago (ThreadHold._programThreads). One that
     * has gone to sleep since is not signalled (it would wake with EINTR): the look is
     * made again right before the signal, which leaves a microsecond for the race, not the
     * milliseconds of the agent's list (ada_hold_cut_a_sleep_short counts what is left). */
    int fd = -1;
    gchar state = ada_hold_state (h->tids[i], &fd);
#ifdef ADA_TEST_HOLD_SIGNAL_SLEEPERS
    if (state != 0)
      state = 'R';  /* tests: every thread signalled, asleep or not */
#endif
    if (state == 0)
      ada_hold_set (&h->seen[i], ADA_HOLD_GONE);
    else if (state != 'R')
      ada_hold_set (&h->seen[i], ADA_HOLD_ASLEEP);
    else if (syscall (ADA_TGKILL_SYSCALL, pid, (glong) h->tids[i], (glong) h->signal) != 0)
      ada_hold_set (&h->seen[i], ADA_HOLD_GONE);
    if (fd >= 0)
      close (fd);
  }
  deadline = ada_now () + (guint64) wait_ms * 1000000ULL;
  for (;;)
  {
    guint32 waiting = 0;

    held = 0;
    for (i = 0; i < start + n; i++)
    {
      guint32 seen = ada_hold_load (&h->seen[i]);
      waiting += seen == 0;
      held += seen == ADA_HOLD_HELD || seen == ADA_HOLD_ASLEEP;
    }
    if (waiting == 0 || ada_now () > deadline)
      break;
    ada_hold_sleep_ns (50000);
  }
  return (int) held;
}

/* Where held thread k was (the pc it resumes at); 0: not held (gone, or not in time);
 * 1: asleep in the kernel as it was to be asked (not signalled: the agent reads where it
 * will resume from /proc). */
guint64
ada_hold_pc (guint32 k)
{
  AdaHold * h = &ada_state.hold;
  guint32 seen = k < ada_hold_load (&h->count) ? ada_hold_load (&h->seen[k]) : 0;

  return seen == ADA_HOLD_HELD ? h->pcs[k] : seen == ADA_HOLD_ASLEEP ? 1 : 0;
}

/* How many system calls the hold's signal has ended early so far (EINTR): see
 * ada_hold_cut_a_sleep_short. */
guint32
ada_hold_cut_short (void)
{
  return ada_hold_load (&ada_state.hold.cut_short);
}

/* size bytes at `at`, one aligned 8-byte store per word they touch: bytes that lie in one
 * word (an arm64 head, always; an x86_64 jump that does not cross a word) change in one
 * store. The hold stops only the threads on a CPU: one asleep in a system call may wake
 * and run these bytes while they change, and must see them old or new, never half of each
 * (arm64, byte by byte: the head's `adrp x2` became, for a moment, an `adrp` of another
 * register, and the next load read address 0x68). Words never cross a page, so every word
 * lies in the pages made writable. */
static void
ada_hold_put (guint8 * at, const guint8 * bytes, guint64 size)
{
  guint8 * end = at + size;
  guint8 * word;

  for (word = (guint8 *) ((gsize) at & ~(gsize) 7); word < end; word += 8)
  {
    guint64 value = *(volatile guint64 *) word;
    guint8 * v = (guint8 *) &value;
    guint32 k;

    for (k = 0; k < 8; k++)
    {
      if (word + k >= at && word + k < end)
        v[k] = bytes[word + k - at];
    }
    *(volatile guint64 *) word = value;
  }
}

/* Write n pieces of code, entries {at, bytes, size} (the pages writable), while held: no
 * allocation, no lock, so the threads wait microseconds. */
void
ada_hold_write (const guint64 * entries, guint32 n)
{
  guint32 i;

  for (i = 0; i < n; i++)
  {
    guint8 * at = (guint8 *) (gsize) entries[3 * i];
    const guint8 * bytes = (const guint8 *) (gsize) entries[3 * i + 1];
    guint64 size = entries[3 * i + 2];

    ada_hold_put (at, bytes, size);
    gum_clear_cache (at, size);
  }
}

/* Wait `us` microseconds (between asks: the threads run on out of the bytes). */
void
ada_hold_nap (guint32 us)
{
  ada_hold_sleep_ns ((glong) us * 1000);
}

/* Let the held threads go, and wait (up to 200 ms) until they have left the handler.
 * Returns how many had gone on by themselves before (ADA_HOLD_MAX_NS). */
guint32
ada_hold_end (void)
{
  AdaHold * h = &ada_state.hold;
  guint64 deadline = ada_now () + 200000000ULL;

  ada_hold_set (&h->gate, 0);
  syscall (ADA_FUTEX_SYSCALL, &h->gate, (glong) ADA_FUTEX_WAKE_PRIVATE, 0x7fffffffL, NULL, NULL, 0L);
  while (ada_hold_load (&h->entry->inside) != 0 && ada_now () < deadline)
    ada_hold_sleep_ns (50000);
  return ada_hold_load (&h->escaped);
}
#endif

/*
 * Frida's Interceptor writes the jumps of its attaches as its transaction ends, and that
 * transaction is the process's, not the thread's: every thread that enters the JavaScript
 * runtime joins it before it waits for the runtime's lock (gumquickcore.c,
 * _gum_quick_scope_enter). So an attach made while another thread waits to run JavaScript
 * (the agent's clock timer, a message, a call from the host) is written only when that
 * thread leaves, after this one's Interceptor.flush and after it returned. Made in a
 * module's onAdded, the load went on, dlopen returned, and the calls right after it ran
 * unhooked: a recording with a late-loaded library's first calls missing, nothing said
 * (likely two CI failures; with Frida alone, scripts/frida_lateload_repro.py, 4 loads in 20).
 *
 * The agent calls this with cooperative scheduling, which leaves the runtime and its part
 * of the transaction: the waiting thread runs, leaves, and the jumps are written. Waits until
 * each of the n places no longer holds the 8 bytes `before` had, or for timeout_ms; returns
 * how many still do. A place it cannot read counts as written (the code went away; or no
 * safe read on this platform, where it does not wait).
 */
guint
ada_await_written (const guint64 * at, const guint64 * before, guint n, guint timeout_ms)
{
  guint64 deadline = ada_now () + (guint64) timeout_ms * 1000000ULL;
  guint i, left;

  for (;;)
  {
    left = 0;
    for (i = 0; i != n; i++)
    {
      guint64 now;
      if (ada_safe_read ((guint8 *) &now, at[i], 8) != 8)
        continue;
      if (now == before[i])
        left++;
    }
    if (left == 0 || ada_now () >= deadline)
      return left;
    ada_nap (100);
  }
}
