/*
 * ada_platform.c: the hot path's platform shims, chosen by the #defines the agent prepends
 * (hotPathDefines() in ada_platform.js): the clock (ADA_NOW: the vDSO's or libc's
 * clock_gettime, raw TSC ticks, mach_continuous_time), the OS thread id, memory ordering
 * (ADA_STORE_RELEASE, ada_load_acquire), a call's sp and return address, the frames
 * of the inline engine's stubs (ADA_ENTRY_RET, ADA_INLINE_*_REGS), a thread's stack bounds and a
 * read that never faults (ada_safe_read). Here so the files after it read the same on
 * every platform; the few other platform branches sit with their only user
 * (ada_reserve_rings, ada_ic_regs, ada_frida_return_trampoline, ada_clock_anchor).
 */

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
 * Sleep for up to `us` microseconds, once: a signal ends it early, and the caller looks
 * again at what it waits for. Not g_usleep, which sleeps again for the rest: Linux counts
 * the rest to the timer's slack-extended end (50 us later), so under a program's timer
 * signals faster than that the rest grew with every signal (past a second within seconds)
 * and a thread waiting for room never woke, with the ring long drained. POSIX nanosleep:
 * time_t is a long on every platform ada runs on.
 */
typedef struct { glong tv_sec; glong tv_nsec; } AdaSleep;
extern int nanosleep (const AdaSleep * request, AdaSleep * remaining);
static void
ada_nap (guint32 us)
{
  AdaSleep ts = { (glong) (us / 1000000), (glong) (us % 1000000) * 1000 };
  nanosleep (&ts, NULL);
}

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
# if defined (__TINYC__)
#  define ADA_COMPILER_BARRIER() do { } while (0)  /* TinyCC keeps statements in order; no asm here */
# else
#  define ADA_COMPILER_BARRIER() __asm__ volatile ("" ::: "memory")
# endif
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

#if defined (HAVE_I386) && defined (__x86_64__)
/*
 * The caller's vector state around code of others (ADA_FOREIGN, ada_layout.h). With XSAVE,
 * the parts the OS keeps (XCR0) of x87, SSE, AVX and AVX-512's three, in xsave's standard
 * form; else fxsave (x87, SSE). Spelled as bytes: TinyCC's assembler has no xsave.
 */
# define ADA_XSAVE_KEPT 0xe7ULL  /* x87, SSE, AVX, opmask, ZMM_Hi256, Hi16_ZMM */

static void
ada_cpuid (guint32 leaf, guint32 sub, guint32 * out)
{
  guint32 a, b, c, d;
  __asm__ volatile ("cpuid" : "=a" (a), "=b" (b), "=c" (c), "=d" (d) : "a" (leaf), "c" (sub));
  out[0] = a;
  out[1] = b;
  out[2] = c;
  out[3] = d;
}

static void
ada_vectors_init (void)
{
  AdaState * s = &ada_state;
  guint32 r[4], lo, hi, i, end = 576;  /* the legacy area and the xsave header */
  guint64 mask;

  s->vector_mask = 0;
  s->vector_bytes = 512 + 64;
  ada_cpuid (1, 0, r);
  if ((r[2] & (1u << 27)) == 0)  /* OSXSAVE: the OS turned XSAVE on */
    return;
  __asm__ volatile (".byte 0x0f, 0x01, 0xd0" : "=a" (lo), "=d" (hi) : "c" (0));  /* xgetbv */
  mask = (((guint64) hi << 32) | lo) & ADA_XSAVE_KEPT;
  for (i = 2; i < 8; i++)
  {
    if ((mask & (1ULL << i)) == 0)
      continue;
    ada_cpuid (0xd, i, r);  /* eax: the part's size, ebx: its offset */
    end = MAX (end, r[1] + r[0]);
  }
  s->vector_mask = mask;
  s->vector_bytes = end + 64;
}

/* Save into `buffer` (vector_bytes long); returns the aligned start, for the restore. */
static guint8 *
ada_vectors_save (guint8 * buffer)
{
  guint8 * at = (guint8 *) (((gsize) buffer + 63) & ~(gsize) 63);
  guint64 m = ada_state.vector_mask;
  guint64 * header = (guint64 *) (at + 512);
  guint32 i;

  if (m == 0)
  {
    __asm__ volatile (".byte 0x48, 0x0f, 0xae, 0x07" : : "D" (at) : "memory");  /* fxsave64 */
    return at;
  }
  for (i = 0; i < 8; i++)
    header[i] = 0;  /* xrstor faults on a header whose reserved bytes are not 0 */
  __asm__ volatile (".byte 0x48, 0x0f, 0xae, 0x27"  /* xsave64 [rdi] */
      : : "D" (at), "a" ((guint32) m), "d" ((guint32) (m >> 32)) : "memory");
  return at;
}

static void
ada_vectors_restore (guint8 * at)
{
  guint64 m = ada_state.vector_mask;

  if (m == 0)
  {
    __asm__ volatile (".byte 0x48, 0x0f, 0xae, 0x0f" : : "D" (at) : "memory");  /* fxrstor64 */
    return;
  }
  __asm__ volatile (".byte 0x48, 0x0f, 0xae, 0x2f"  /* xrstor64 [rdi] */
      : : "D" (at), "a" ((guint32) m), "d" ((guint32) (m >> 32)) : "memory");
}
#else
static void
ada_vectors_init (void)
{
}
#endif

/*
 * The frames the inline engine's stubs save (agent/ada_inline_<arch>.js), as guint64
 * indexes; ada_layout reports the return slots and the JavaScript checks them. Every
 * caller-saved register is kept, vector ones too: gcc lets a caller keep values in
 * registers a callee it knows does not touch (and on x86_64 calls such a callee with the
 * stack misaligned). ADA_INLINE_ENTRY_REGS / ADA_INLINE_EXIT_REGS read a frame into the
 * detail record's registers (AdaRegs, the ATF order); ADA_INLINE_SP gives the sp the
 * function entered with (the shadow stack's key) from the address of the return slot.
 */
#if defined (HAVE_I386)
/*
 * x86_64. Entry: rbp r11 r10 rax r9 r8 rcx rdx rsi rdi, then the return address (its slot
 * is the sp the function entered with). Exit: rbp r11 r10 r9 r8 rdi rsi rcx rdx rax, then
 * the slot the real return address goes in. The vector registers are saved apart, below
 * an aligned stack pointer. The return address lives in the stack: an unwinder reads it
 * from the entry's sp (ADA_INLINE_RET_IN_STACK).
 */
# define ADA_ENTRY_RET 10
# define ADA_EXIT_RET 10
# define ADA_INLINE_SP(slot) ((guint64) (gsize) (slot))
# define ADA_INLINE_RET_IN_STACK 1
# define ADA_INLINE_ENTRY_REGS(r, f) \
  do { \
    (r)->regs[0] = (f)[9]; (r)->regs[1] = (f)[8]; (r)->regs[2] = (f)[7]; (r)->regs[3] = (f)[6]; \
    (r)->regs[4] = (f)[5]; (r)->regs[5] = (f)[4]; (r)->regs[6] = (f)[3]; (r)->regs[7] = (f)[2]; \
    (r)->fp = (f)[0]; \
  } while (0)
# define ADA_INLINE_EXIT_REGS(r, f) \
  do { \
    (r)->regs[2] = (f)[8]; (r)->regs[6] = (f)[9]; (r)->fp = (f)[0]; \
  } while (0)
# define ADA_INLINE_AVAILABLE 1
#elif defined (HAVE_ARM64) || defined (__aarch64__)
/*
 * arm64, both stubs: x0-x18 at 0-18, x29 at 19, 20 unused, x30 at 21 (entry: the return
 * address, which ada_inline_enter may point at the exit stub; exit: the slot the real
 * return address goes in). The frame ends where the function's sp was: the sp it entered
 * with is 8 bytes above the x30 slot. The return address lives in x30, which the function
 * saves where its own code says: an unwinder's copy is found by value (see
 * ada_inline_swap_returns).
 */
# define ADA_ENTRY_RET 21
# define ADA_EXIT_RET 21
# define ADA_INLINE_SP(slot) ((guint64) (gsize) (slot) + 8)
# define ADA_INLINE_ENTRY_REGS(r, f) \
  do { \
    guint32 k_; \
    for (k_ = 0; k_ < 8; k_++) \
      (r)->regs[k_] = (f)[k_]; \
    (r)->fp = (f)[19]; \
  } while (0)
# define ADA_INLINE_EXIT_REGS(r, f) \
  do { \
    (r)->regs[0] = (f)[0]; (r)->regs[1] = (f)[1]; (r)->fp = (f)[19]; \
  } while (0)
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

#ifdef ADA_GETDENTS_SYSCALL
extern int open (const char * path, int flags, ...);
extern int close (int fd);

/* The ids of the process's threads (/proc/self/task, read with the system call: a traced
 * readdir would see this thread), at most max into out; how many. For the thread hold
 * (ada_hold.c) and the children of the handover (ada_watch.c). */
guint32
ada_tasks (guint32 * out, guint32 max)
{
  guint8 entries[4096];
  guint32 n = 0;
  glong got;
  int dir;

  dir = open ("/proc/self/task", 0);
  if (dir < 0)
    return 0;
  while ((got = syscall (ADA_GETDENTS_SYSCALL, (glong) dir, entries, (glong) sizeof (entries))) > 0)
  {
    glong at = 0;

    while (at < got)
    {
      guint16 reclen = *(guint16 *) (entries + at + 16);  /* linux_dirent64: ino, off, reclen */
      const gchar * name = (const gchar *) entries + at + 19;  /* then type, then the name */
      guint32 tid = 0;

      for (; *name >= '0' && *name <= '9'; name++)
        tid = tid * 10 + (guint32) (*name - '0');
      if (tid != 0 && n < max)
        out[n++] = tid;
      at += reclen;
    }
  }
  close (dir);
  return n;
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

/*
 * The calling thread's ThreadState (ada's gum TLS key, a pthread key), twice a hooked call.
 * x86_64 glibc, built by gcc: read straight from the thread's own struct pthread, where
 * glibc keeps a key below 32 as a (seq, value) pair at a fixed offset from the thread
 * pointer (%fs). ada_tls_find learns the offset once, by writing two markers through the
 * key; a pair whose seq is not the key's is stale (an older key of that number), and then
 * pthread_getspecific answers, as it does everywhere else: it costs two calls (Frida's
 * wrapper, then libc's) where this costs two loads.
 */
#if defined (__x86_64__) && defined (ADA_TLS_GLIBC) && !defined (__TINYC__)
/* The two loads alone: NULL when they cannot answer (then ada_tls_get asks pthread). For a
 * fast path that calls nothing (see ada_inline_enter). */
static ADA_ALWAYS_INLINE gpointer
ada_tls_peek (void)
{
  const AdaState * s = &ada_state;
  guint64 seq, value;

  if (s->tls_offset == 0)
    return NULL;
  __asm__ volatile ("movq %%fs:(%1), %0" : "=r" (seq) : "r" (s->tls_offset - 8));
  __asm__ volatile ("movq %%fs:(%1), %0" : "=r" (value) : "r" (s->tls_offset));
  return seq == s->tls_seq ? (gpointer) (gsize) value : NULL;
}

static ADA_ALWAYS_INLINE gpointer
ada_tls_get (void)
{
  gpointer t = ada_tls_peek ();

  return t != NULL ? t : gum_tls_key_get_value (ada_state.tls_key);
}

/* Where the key's pair lies from the thread pointer (the struct pthread, whose first word
 * points at itself), or 0: found with one marker, confirmed with another, at one place
 * only; its seq is odd (glibc: a key in use). Run once, on the agent's thread, before any
 * hook. */
static void
ada_tls_find (void)
{
  AdaState * s = &ada_state;
  guint64 self, before[512], after[512], a = (guint64) (gsize) &s->registering,
      b = (guint64) (gsize) &s->unmasked;
  guint32 n, m, i, at = 0, found = 0;
  gpointer old = gum_tls_key_get_value (s->tls_key);

  __asm__ volatile ("movq %%fs:0, %0" : "=r" (self));
  gum_tls_key_set_value (s->tls_key, (gpointer) (gsize) a);
  n = ada_safe_read ((guint8 *) before, self, sizeof (before)) / 8;
  gum_tls_key_set_value (s->tls_key, (gpointer) (gsize) b);
  m = ada_safe_read ((guint8 *) after, self, sizeof (after)) / 8;
  gum_tls_key_set_value (s->tls_key, old);
  for (i = 1; i < MIN (n, m); i++)
  {
    if (before[i] == a && after[i] == b && before[i - 1] == after[i - 1] && (after[i - 1] & 1))
    {
      at = i;
      found++;
    }
  }
  if (found != 1)
    return;
  s->tls_seq = after[at - 1];
  s->tls_offset = 8 * (guint64) at;
}
#else
# define ada_tls_get() gum_tls_key_get_value (ada_state.tls_key)
# define ada_tls_peek() ada_tls_get ()
# define ada_tls_find() do { } while (0)
#endif
