/*
 * ada_interceptor.c: the Frida engine (--hook-engine frida, and the inline engine's
 * fallback for a function it cannot patch): ada_on_enter / ada_on_leave, the callbacks
 * Frida's Interceptor runs around each hooked call; the shadow stack that pairs a RETURN
 * with its CALL; calls a longjmp left (ada_left_frames); and tail calls, told by a return
 * address that is still one of the Interceptor's trampolines (ada_frida_return_trampoline).
 * ada_same_stack serves the inline engine too.
 */

/* A call made by ada itself (this module, or Frida's code it calls: the TLS lookup, a
 * wait, mapping a shadow stack) into a hooked function: it returns to one of these
 * ranges. It runs unrecorded and is no loss: the program did not make it. */
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
    if (t->shadow_fid[t->shadow_len] == ADA_FRIDA_CALL)
    {
      t->in_frida_call = 0;  /* (a call Frida's code made: no event) */
      left--;
      continue;
    }
    ADA_EMIT (t, now, t->shadow_fid[t->shadow_len], ADA_EVENT_EXCEPTION,
        t->shadow_len + ADA_INLINE_OPEN (t), ADA_NO_DETAIL);
  }
  return left;
}

/*
 * Frida engine: is this thread inside a call Frida's code made (see ada_on_enter)? A call
 * or return at a higher sp, on the same stack, shows that call was left without a return
 * (a longjmp out of it): that ends the pause.
 */
static gboolean
ada_in_frida_call (ThreadState * t, guint64 sp)
{
  guint64 at;

  if (!t->in_frida_call)
    return FALSE;
  at = t->shadow_sp[t->shadow_len - 1];
  if (sp > at && ada_same_stack (t, sp, at))
  {
    t->shadow_len--;
    t->in_frida_call = 0;
    return FALSE;
  }
  return TRUE;
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
  if (ada_in_frida_call (t, sp))
    return;  /* under a call Frida's code made: not the program's */
  ADA_FUNCTION_ID (ic, fid);
  /* Calls at or below this sp have been left without a return (a longjmp), but for a
   * tail call (see ada_left_frames): they are not open any more. */
  if (t->depth_extra == 0 && t->shadow_len > 0 && t->shadow_sp[t->shadow_len - 1] <= sp &&
      ada_left_frames (t, ic, sp, now, TRUE) != 0)
    ada_count_stale_frames (t, ic);
  /* Frida's code runs on program threads too (the exception handler, its fork and exit
   * handling outside a listener): a call that returns into it (ada_own_call) is not the
   * program's, nor is any hooked call under it. Its entry (no event; the function's
   * address where a return address goes) marks the pause until it returns. */
  if (ada_own_call (ADA_ENTRY_RETURN_ADDRESS (ic)) && t->depth_extra == 0 &&
      t->shadow_len < ADA_SHADOW_MAX)
  {
    t->shadow_fid[t->shadow_len] = ADA_FRIDA_CALL;
    t->shadow_ret[t->shadow_len] = (guint64) (gsize) ic->function;
    t->shadow_sp[t->shadow_len++] = sp;
    t->in_frida_call = 1;
    return;
  }
  depth = ADA_INTERCEPTOR_OPEN (t) + ADA_INLINE_OPEN (t);
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
    ADA_FOREIGN (ada_emit_with_detail (t, &r, (guint64) (gsize) ic->function, now, fid,
        ADA_EVENT_CALL, depth, ret));
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
  if (ada_in_frida_call (t, sp))
  {
    guint32 top = t->shadow_len - 1;
    if (sp == t->shadow_sp[top] && (guint64) (gsize) ic->function == t->shadow_ret[top])
    {
      t->shadow_len--;  /* the call Frida's code made returns: the program's record again */
      t->in_frida_call = 0;
    }
    return;
  }
  /* sp on leave is the sp its CALL saw. Deeper entries were left without a
   * return (each ends with an EXCEPTION event); the matching entry gives the CALL's
   * depth, which a RETURN carries. A tail call and the call that jumped to it share an
   * sp: the innermost returns first, and its entry is the top one. */
  if (t->depth_extra > 0)
  {
    t->depth_extra--;
    depth = ADA_INTERCEPTOR_OPEN (t) + ADA_INLINE_OPEN (t);
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
    depth = t->shadow_len + ADA_INLINE_OPEN (t);
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
    ADA_FOREIGN (ada_emit_with_detail (t, &r, (guint64) (gsize) ic->function, now, fid,
        ADA_EVENT_RETURN, depth, ret));
  }
}
