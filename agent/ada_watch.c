/*
 * ada_watch.c: callbacks on functions ada watches rather than records, with either engine:
 * std::terminate (ada_on_terminate: which hooked call a C++ exception could not unwind
 * through) and the --trigger functions (ada_on_trigger: the flight recorder's trigger ring).
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
}
