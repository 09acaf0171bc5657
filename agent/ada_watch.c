/*
 * ada_watch.c: callbacks on functions ada watches rather than records, with either engine:
 * std::terminate (ada_on_terminate: which hooked call a C++ exception could not unwind
 * through), the --trigger functions (ada_on_trigger: the flight recorder's trigger ring),
 * exit(), _exit() and abort() (ada_on_exit, ada_on__exit, ada_on_abort), and fork() and
 * execve() where Frida does not hold children (ada_on_fork, ada_on_exec_enter; a child's
 * fatal signals, ada_child_fatal); and this process's children (ada_children).
 */

/*
 * std::terminate was called. With hooked calls open on this thread, that is
 * most likely a C++ exception that could not unwind through one of them
 * (Frida's return trampolines have no unwind information): say which.
 */
void
ada_on_terminate (GumInvocationContext * ic)
{
  RegionHeader * h = ada_state.region;
  ThreadState * t = ada_tls_get ();
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
  ada_wake_drain (h);  /* the window around a trigger is cut as the drain takes it */
}

/* Whether this is the process ada was loaded into: not a forked child (ADA_FORKED), nor a
 * vfork child, which shares its parent's memory and so reads the parent's flag. */
static gboolean
ada_own_process (void)
{
  if (ADA_FORKED ())
    return FALSE;
#ifdef ADA_PID_SYSCALL
  return (guint32) syscall (ADA_PID_SYSCALL) == ada_state.pid;
#else
  return TRUE;
#endif
}

/*
 * exit(), _exit() or abort() was called (ADA_END_*): the agent's handler (JavaScript,
 * AgentEnding._onEndCall) notes exit()'s status and lets the program's atexit handlers and
 * destructors run, recorded; at _exit() or abort(), the process's real end, it hands the
 * rings over. Not in a child, which never enters JavaScript from here: a forked child Frida
 * does not hold (recorder.py, _hold_children) has a copy of the script's engine whose lock
 * another thread may have held at the fork, and it would wait for it for ever (1 child in
 * about 600 did); a vfork child's _exit after a failed exec is not the traced process's exit.
 */
static void
ada_end_called (GumInvocationContext * ic, gint kind)
{
  if (ada_state.on_end == NULL || !ada_own_process ())
    return;
  ada_state.exit_window = 0;  /* Frida's preparation is over: see ada_exit_window_thread */
  ada_state.on_end (kind == ADA_END_ABORT ? 0
      : (gint) (gsize) gum_invocation_context_get_nth_argument (ic, 0), kind);
}

void
ada_on_exit (GumInvocationContext * ic)
{
  ada_end_called (ic, ADA_END_EXIT);
}

void
ada_on__exit (GumInvocationContext * ic)
{
  ada_end_called (ic, ADA_END__EXIT);
}

void
ada_on_abort (GumInvocationContext * ic)
{
  ada_end_called (ic, ADA_END_ABORT);
}

#ifdef ADA_CHILD_SIGNALS
/*
 * A forked child that Frida does not hold (recorder.py, _hold_children) inherits Frida's
 * handler of fatal signals (its exceptor) and a copy of the locks other threads of the
 * parent held at the fork, for ever held in the child. A child that crashed then waited for
 * ever instead of dying, and its parent for it: with --transport rpc, where the agent answers
 * ada all the time, 9 runs of 10 with 60 crashing children did, the child waiting for the
 * script engine's lock (the agent's exception handler is JavaScript); with that handler taken
 * away around each fork, still 1 run in 5, the child spinning on a lock in Frida's own code
 * (sched_yield: by my reading its heap's, as the exceptor looks at the faulting instruction).
 * So at its fork (ada_on_fork) a child's fatal signals that went to Frida go to
 * ada_child_fatal, which enters neither: it asks libc's sigaction for the program's handler
 * (Frida replaced sigaction, and answers from its own table, without a lock), and hands the
 * signal to it, or lets the signal take its course as it would without ada. SIGTRAP stays
 * (ada's breakpoint hooks, ada_inline_trap).
 */
typedef struct
{
  gpointer handler;
  guint64 mask[16];
  gint flags;
  gint pad;
  gpointer restorer;
} AdaLibcSigaction;  /* glibc's struct sigaction (64-bit) */

#define ADA_SA_SIGINFO_FLAG 4
extern int sigaction (int signal, const AdaLibcSigaction * act, AdaLibcSigaction * old);

static const gint ada_child_fatal_signals[] = { 6, 11, 7, 4, 8, 31 };  /* SIGABRT, SIGSEGV,
                                                                     * SIGBUS, SIGILL, SIGFPE, SIGSYS */

/* Whether a handler is code of Frida's agent (its exceptor's). */
static gboolean
ada_frida_handler (guint64 handler)
{
  const guint64 * frida = &ada_state.own_code[2];

  return handler >= frida[0] && handler < frida[1];
}

static void
ada_child_fatal (int signal, gpointer info, gpointer uc)
{
  AdaLibcSigaction program;
  guint64 act[4] = { 0, 0, 0, 0 };

  if (sigaction (signal, NULL, &program) != 0)
    program.handler = NULL;
  if (program.handler == (gpointer) ada_child_fatal ||
      ada_frida_handler ((guint64) (gsize) program.handler))
    program.handler = NULL;  /* the kernel's answer, not Frida's table: nobody's handler */
  if ((program.flags & ADA_SA_SIGINFO_FLAG) != 0 && program.handler != NULL)
  {
    ((void (*) (int, gpointer, gpointer)) program.handler) (signal, info, uc);
    return;
  }
  if ((gsize) program.handler > 1)
  {
    ((void (*) (int)) program.handler) (signal);
    return;
  }
  /* SIG_DFL or SIG_IGN: the kernel's own action from now on. A fault comes again as this
   * returns; a signal sent (si_code <= 0: kill, raise, abort) is sent again. */
  act[0] = (guint64) (gsize) program.handler;
  syscall (ADA_RT_SIGACTION_SYSCALL, (glong) signal, act, NULL, 8L);
  if (((const gint *) info)[2] <= 0)
    syscall (ADA_TGKILL_SYSCALL, syscall (ADA_PID_SYSCALL), syscall (ADA_TID_SYSCALL),
        (glong) signal);
}

/* In the child: ada_child_fatal in front of each fatal signal that went to Frida's code. */
static void
ada_child_fatal_install (void)
{
  guint i;

  for (i = 0; i < G_N_ELEMENTS (ada_child_fatal_signals); i++)
  {
    guint64 act[4];

    if (syscall (ADA_RT_SIGACTION_SYSCALL, (glong) ada_child_fatal_signals[i], NULL, act,
        8L) != 0 || !ada_frida_handler (act[0]))
      continue;
    act[0] = (guint64) (gsize) ada_child_fatal;  /* Frida's flags, restorer and mask kept */
    syscall (ADA_RT_SIGACTION_SYSCALL, (glong) ada_child_fatal_signals[i], act, NULL, 8L);
  }
}
#endif

/*
 * fork() returned. In the parent, the child's pid goes into the region for the host's
 * manifest: a child Frida does not hold at its fork (recorder.py, _hold_children) is seen
 * nowhere else. The first ADA_FORK_SLOTS are kept; `forks` counts them all. In the child,
 * its fatal signals stay out of Frida's code (ada_child_fatal).
 */
void
ada_on_fork (GumInvocationContext * ic)
{
  RegionHeader * h = ada_state.region;
  gssize pid = (gssize) gum_invocation_context_get_return_value (ic);
  guint32 n;

#ifdef ADA_CHILD_SIGNALS
  if (pid == 0 && ADA_FORKED ())
    ada_child_fatal_install ();
#endif
  if (pid <= 0 || !ada_own_process ())
    return;
  n = (guint32) g_atomic_int_add ((volatile gint *) &h->forks, 1);
  if (n < ADA_FORK_SLOTS)
    ((volatile guint32 *) ((guint8 *) h + ADA_FORKS_OFFSET))[n] = (guint32) pid;
}

/*
 * execve() in a process Frida does not hold at its exec (see ada_on_fork): Frida then
 * reports the new image as the process's end, and the host tells an exec from a kill by
 * this flag. execve returns only when it failed, which clears it.
 */
void
ada_on_exec_enter (GumInvocationContext * ic)
{
  (void) ic;
  if (ada_own_process ())
    *(volatile guint32 *) &ada_state.region->exec_pending = 1;
}

void
ada_on_exec_leave (GumInvocationContext * ic)
{
  (void) ic;
  if (ada_own_process ())
    *(volatile guint32 *) &ada_state.region->exec_pending = 0;
}

#ifdef ADA_GETDENTS_SYSCALL
extern gssize read (int fd, gpointer buf, gsize count);
#define ADA_CHILDREN_THREADS 1024  /* threads looked at; the rest of a bigger process's are not */

/* The pids listed in one /proc/self/task/TID/children file, appended to out[n..max). */
static guint32
ada_thread_children (guint32 tid, guint32 * out, guint32 n, guint32 max)
{
  gchar path[64] = "/proc/self/task/";
  gchar digits[12];
  gchar text[4096];
  guint32 at = 16, d = 0, value = 0;
  gssize len;
  gssize i;
  int fd;

  do
    digits[d++] = (gchar) ('0' + tid % 10);
  while ((tid /= 10) != 0);
  while (d > 0)
    path[at++] = digits[--d];
  for (const gchar * rest = "/children"; *rest != '\0'; rest++)
    path[at++] = *rest;
  path[at] = '\0';
  fd = open (path, 0);
  if (fd < 0)
    return n;
  len = read (fd, text, sizeof (text));
  close (fd);
  for (i = 0; i < len && n < max; i++)
  {
    if (text[i] >= '0' && text[i] <= '9')
    {
      value = value * 10 + (guint32) (text[i] - '0');
    }
    else if (value != 0)
    {
      out[n++] = value;
      value = 0;
    }
  }
  return n;
}

/*
 * The pids of this process's children, as every thread's /proc/self/task/TID/children lists
 * them (Linux, Android): at most max into out; how many. For the handover (ada_ending.js,
 * noteChildren), in C: Process.enumerateThreads would stop every thread to read its
 * registers, through a helper process it forks, as the process exits.
 */
guint32
ada_children (guint32 * out, guint32 max)
{
  guint32 tids[ADA_CHILDREN_THREADS];
  guint32 count = ada_tasks (tids, ADA_CHILDREN_THREADS);
  guint32 n = 0;

  for (guint32 i = 0; i < count; i++)
    n = ada_thread_children (tids[i], out, n, max);
  return n;
}
#else
guint32
ada_children (guint32 * out, guint32 max)
{
  (void) out;
  (void) max;
  return 0;
}
#endif
