/*
 * ada_control.c: what the agent's JavaScript calls (NativeFunction), never a hooked call:
 * ada_init once the region is mapped, ada_set_functions (the hooked functions' table),
 * ada_pause_thread and ada_resume_thread around a posix_spawn, the clocks (ada_clock_ns,
 * ada_clock_anchor, ada_clock_pair), the heartbeat (ada_heartbeat), ada_wait_flag for a
 * dying process's handover, and ada_layout(), the report of the shared layout by name that
 * the agent takes its offsets from and the host checks.
 */

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
  ada_vectors_init ();
  ada_tls_find ();
  s->overflow.overflowed = 1;
  s->registering.overflowed = 1;
  s->unmasked.overflowed = 1;
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

/*
 * posix_spawn's pause (watchSpawn in ada_hooking.js): until ada_resume_thread, this
 * thread's hooked calls are not the program's to record, nor are those of the child that
 * runs on its TLS until it execs (glibc's clone(CLONE_VM|CLONE_VFORK)): the TLS says
 * `frida`, which both engines leave alone. Returns what the TLS said, to put back.
 */
gpointer
ada_pause_thread (void)
{
  gpointer was = gum_tls_key_get_value (ada_state.tls_key);
  gum_tls_key_set_value (ada_state.tls_key, &ada_state.frida);
  return was;
}

void
ada_resume_thread (gpointer was)
{
  gum_tls_key_set_value (ada_state.tls_key, was);
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

/* The host is alive: written on each pull of the RPC transport (as the local drain does),
 * and as the host's hook() call goes (ada_hooking.js). */
void
ada_heartbeat (void)
{
  ada_state.region->heartbeat_ns = ada_now ();
}

/*
 * RPC transport, before each push (ada_transport.js, _pushOnce): whether a ring holds bytes
 * not sent yet (each push moves the tails past what it carried), as the top bit; whether one
 * is a quarter full or more (the next push then comes at once, not a pause later), as the
 * bit below; and how many threads have ended, their slots waiting for the host to free them,
 * below those. In C: a slot at a time from JavaScript took microseconds a slot, every 10 ms,
 * in a program at rest.
 */
guint32
ada_rings_to_pull (void)
{
  AdaState * s = &ada_state;
  RegionHeader * h = s->region;
  guint32 i, n = MIN (h->registered, h->max_threads), ended = 0, pending = 0, filling = 0;

  for (i = 0; i < n; i++)
  {
    SlotControl * c = &s->slots[i];
    if (c->state != ADA_SLOT_ACTIVE && c->state != ADA_SLOT_ENDED)
      continue;
    if (c->state == ADA_SLOT_ENDED)
      ended++;
    if (c->head > c->tail || c->detail_head > c->detail_tail)
      pending = 1;
    if (c->head - c->tail >= s->index_capacity / 4 ||
        (s->detail_capacity != 0 && c->detail_head - c->detail_tail >= s->detail_capacity / 4))
      filling = 1;
  }
  return (pending << 31) | (filling << 30) | ended;
}

/*
 * RPC transport (_collect in ada_transport.js): slot `slot`'s control block as the host is to
 * see it, in `out`. State and tid are read first, with acquire (a claim publishes the state
 * after the tid, the generation and the zeroed cursors), then the index head and the detail
 * head, each with acquire (published after the bytes it counts; index first, as the local
 * drain reads them), then the rest. Where loads may pass each other (arm64), a plain copy
 * from JavaScript showed a slot active with tid 0 to the host (the arm64 guest, 2026-11-30).
 * Returns the state.
 */
guint32
ada_snapshot_slot (guint32 slot, SlotControl * out)
{
  SlotControl * c = &ada_state.slots[slot];
  volatile guint64 * from = (volatile guint64 *) c;
  guint64 * to = (guint64 *) out;
  guint64 state_tid = ada_load_acquire (from);  /* state, then tid, little-endian */
  guint64 head = ada_load_acquire (&c->head);
  guint64 detail_head = ada_load_acquire (&c->detail_head);
  guint32 i;

  for (i = 0; i < sizeof (SlotControl) / sizeof (guint64); i++)
    to[i] = from[i];
  to[0] = state_tid;
  out->head = head;
  out->detail_head = detail_head;
  return out->state;
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
  guint64 end = ada_now () + (guint64) timeout_ms * 1000000;

  while (*flag == 0 && ada_now () < end)
    ada_nap (1000);  /* by the clock: a signal cuts a nap short */
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
  ADA_LAYOUT ("region.forks_offset", ADA_FORKS_OFFSET);
  ADA_LAYOUT ("region.fork_slots", ADA_FORK_SLOTS);
  ADA_LAYOUT ("const.slot_active", ADA_SLOT_ACTIVE);
  ADA_LAYOUT ("const.slot_ended", ADA_SLOT_ENDED);
  ADA_LAYOUT ("const.slot_free", ADA_SLOT_FREE);
  ADA_LAYOUT ("const.policy_wait", ADA_POLICY_WAIT);
  ADA_LAYOUT ("const.policy_drop", ADA_POLICY_DROP);
  ADA_LAYOUT ("agent.end_exit", ADA_END_EXIT);
  ADA_LAYOUT ("agent.end__exit", ADA_END__EXIT);
  ADA_LAYOUT ("agent.end_abort", ADA_END_ABORT);
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
  ADA_HEADER (trap_calls);
  ADA_HEADER (forks);
  ADA_HEADER (exec_pending);
  ADA_HEADER (paused_spawns);
  ADA_HEADER (drain_asleep);
  ADA_HEADER (drain_wakes);
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
  ADA_LAYOUT ("agent.state_frida_tids", ADA_OFFSET (AdaState, frida_tids));
  ADA_LAYOUT ("agent.state_frida_tid_count", ADA_OFFSET (AdaState, frida_tid_count));
  ADA_LAYOUT ("agent.state_traps", ADA_OFFSET (AdaState, traps));
  ADA_LAYOUT ("agent.frida_tids", ADA_FRIDA_TIDS);
  ADA_LAYOUT ("agent.state_exit_window", ADA_OFFSET (AdaState, exit_window));
  ADA_LAYOUT ("agent.state_exit_window_tids", ADA_OFFSET (AdaState, exit_window_tids));
  ADA_LAYOUT ("agent.state_exit_window_count", ADA_OFFSET (AdaState, exit_window_count));
  ADA_LAYOUT ("agent.exit_window_tids", ADA_EXIT_WINDOW_TIDS);
  ADA_LAYOUT ("agent.state_here", ADA_OFFSET (AdaState, here));
  ADA_LAYOUT ("agent.state_tls_offset", ADA_OFFSET (AdaState, tls_offset));
  ADA_LAYOUT ("agent.state_on_end", ADA_OFFSET (AdaState, on_end));
  ADA_LAYOUT ("agent.stubs_save_vectors", ADA_STUBS_SAVE_VECTORS);
  ADA_LAYOUT ("agent.thread_busy", ADA_OFFSET (ThreadState, busy));
  ADA_LAYOUT ("agent.thread_tid", ADA_OFFSET (ThreadState, tid));
  ADA_LAYOUT ("agent.inline_stack_entries", ADA_OFFSET (InlineStack, entries));
  ADA_LAYOUT ("agent.sizeof_inline_entry", sizeof (InlineEntry));
#ifdef ADA_INLINE_AVAILABLE
  ADA_LAYOUT ("agent.inline_entry_ret", ADA_ENTRY_RET);
  ADA_LAYOUT ("agent.inline_exit_ret", ADA_EXIT_RET);
#endif
  return n;
}
