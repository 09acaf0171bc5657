/* Hard cases for the inline hook engine; argv[1] picks one:
 *   deep N        recurse(N) nests N calls (non-tail), and returns
 *   signals N     main calls work() N times while a 20 us timer's SIGALRM (to this thread)
 *                 runs a handler that calls in_handler(); prints "handler <calls>"
 *   altstack N    as signals, but on a second thread whose handler runs on an alternate
 *                 signal stack mapped before that thread's own stack (so above it, where
 *                 mmap hands out addresses downwards); prints "handler <calls> above <0|1>"
 *   parked GATE   a second thread calls park() (300 ms each) until the file GATE exists
 *                 (ada leaves meanwhile, with a call open); main calls work() every ms
 *                 until then; prints "ok" after
 *   watched GATE  main calls watch_head() until the file GATE exists; a call ada redirected
 *                 (its return address is not in a module) spins until its first bytes are
 *                 what they were at the start (ada put them back); prints "watching", "ok"
 *   handlers N    N times: sigaction(SIGUSR1), signal(SIGUSR2), work(), then raise each
 *                 signal (their handlers call in_handler()); prints "handler <calls>"
 *                 (Frida's own exception handling replaces sigaction and signal)
 *   spin GATE [T] [F]  T threads (2; at most 16) call work(), or framed() with F "framed",
 *                 in a tight loop until the file GATE exists (ada patches it while they run
 *                 it, and puts it back); prints "spinning", then "calls <n>"
 * Every function is noinline and exported (-rdynamic). */
#define _GNU_SOURCE
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

volatile long sink;
static volatile long handled;

__attribute__((noinline)) long recurse(long n)
{
  sink += n;
  if (n <= 1)
    return 1;
  return recurse(n - 1) + 1;  /* not a tail call */
}

__attribute__((noinline)) long work(long x)
{
  sink += x;
  return x * 2;
}

/* A frame's prologue: instructions start inside the first 5 bytes (x86_64: push 1 byte,
 * mov 3), where a hook's jump goes: a thread stopped there resumes inside the jump. */
long framed(long x);
#if defined(__aarch64__)
__asm__(".globl framed\n.type framed, %function\nframed:\n"
        "  stp x29, x30, [sp, #-16]!\n  mov x29, sp\n  add x0, x0, x0\n"
        "  ldp x29, x30, [sp], #16\n  ret\n.size framed, .-framed\n");
#else
__asm__(".globl framed\n.type framed, @function\nframed:\n"
        "  push %rbp\n  mov %rsp, %rbp\n  lea (%rdi,%rdi,1), %rax\n"
        "  pop %rbp\n  ret\n.size framed, .-framed\n");
#endif

long thunk(long x);
#if defined(__aarch64__)
__asm__(".globl thunk\n.type thunk, %function\nthunk:\n  b work\n.size thunk, 4\n");
#else
__asm__(".globl thunk\n.type thunk, @function\nthunk:\n  jmp work\n.size thunk, 5\n");
#endif

__attribute__((noinline)) long in_handler(long x)
{
  sink += x;
  return x + 1;
}

static void on_alarm(int sig)
{
  (void) sig;
  in_handler(handled++);
}

static const char *gate;

static void alarms_to_this_thread(timer_t *timer)
{
  struct sigevent ev;
  memset(&ev, 0, sizeof ev);
  ev.sigev_notify = SIGEV_THREAD_ID;
  ev.sigev_signo = SIGALRM;
  ev._sigev_un._tid = gettid();
  timer_create(CLOCK_MONOTONIC, &ev, timer);
  struct itimerspec every = {{0, 20000}, {0, 20000}};
  timer_settime(*timer, 0, &every, NULL);
}

static stack_t alternate;
static long altstack_calls;
static int altstack_above;

static void *on_altstack(void *arg)  /* calls work() with SIGALRMs on its own stack */
{
  (void) arg;
  sigaltstack(&alternate, NULL);
  char here;
  altstack_above = (char *) alternate.ss_sp > &here;
  timer_t timer;
  alarms_to_this_thread(&timer);
  for (long i = 0; i < altstack_calls; i++)
    work(i);
  sigset_t alarm;
  sigemptyset(&alarm);
  sigaddset(&alarm, SIGALRM);
  pthread_sigmask(SIG_BLOCK, &alarm, NULL);
  timer_delete(timer);
  return NULL;
}

__attribute__((noinline)) long park(long x)
{
  usleep(300 * 1000);
  return x + 1;
}

static unsigned long long head_before;  /* watch_head's first 8 bytes, before ada came */
extern char __executable_start[], etext[];  /* this program's code (the linker's symbols) */

/* Its caller is main. Not dladdr(), which takes the dynamic loader's lock, as Frida's
 * injection does to load its agent: called in a tight loop, it may keep that lock from the
 * injection (an attach here timed out once in four runs of test_inline.py on two workers,
 * "unexpectedly timed out trying to sync up with agent", 2026-11-29). */
__attribute__((noinline)) long watch_head(long x)
{
  char *ret = __builtin_return_address(0);
  if (ret >= __executable_start && ret < etext)
    return x + 1;  /* returns into this program: a call ada did not redirect */
  while (*(volatile unsigned long long *) (void *) watch_head != head_before)
    sink++;        /* redirected: until ada puts the first bytes back */
  return x + 1;
}

static void *parked(void *arg)  /* inside park() most of the time, in calls ada redirected */
{
  (void) arg;
  for (long i = 0; access(gate, F_OK) != 0; i++)
    park(i);
  return NULL;
}

static volatile long spun[16];
static long (*volatile spun_function)(long) = work;

static void *spin(void *arg)
{
  volatile long *count = arg;
  while (access(gate, F_OK) != 0)
    for (int i = 0; i < 10000; i++)
      *count += 1 + (spun_function(i) & 0);
  return NULL;
}

static void *ten(void *arg)
{
  (void) arg;
  for (long i = 0; i < 10; i++)
    work(i);
  return NULL;
}

int main(int argc, char **argv)
{
  const char *how = argc > 1 ? argv[1] : "deep";
  long n = argc > 2 ? atol(argv[2]) : 100000;
  if (strcmp(how, "deep") == 0) {
    printf("depth %ld\n", recurse(n));
  } else if (strcmp(how, "signals") == 0) {
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_alarm;
    sigaction(SIGALRM, &sa, NULL);
    /* to this thread only (not to a thread of ada's agent), so the count is exact */
    struct sigevent ev;
    memset(&ev, 0, sizeof ev);
    ev.sigev_notify = SIGEV_THREAD_ID;
    ev.sigev_signo = SIGALRM;
    ev._sigev_un._tid = gettid();
    timer_t timer;
    timer_create(CLOCK_MONOTONIC, &ev, &timer);
    struct itimerspec every = {{0, 20000}, {0, 20000}};
    timer_settime(timer, 0, &every, NULL);
    for (long i = 0; i < n; i++)
      work(i);
    sigset_t alarm;
    sigemptyset(&alarm);
    sigaddset(&alarm, SIGALRM);
    sigprocmask(SIG_BLOCK, &alarm, NULL);  /* one may be pending: it stays so */
    timer_delete(timer);
    printf("handler %ld\n", handled);
  } else if (strcmp(how, "handlers") == 0) {
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_alarm;
    for (long i = 0; i < n; i++) {
      sigaction(SIGUSR1, &sa, NULL);
      signal(SIGUSR2, on_alarm);
      work(i);
      raise(SIGUSR1);
      raise(SIGUSR2);
    }
    printf("handler %ld\n", handled);
  } else if (strcmp(how, "altstack") == 0) {
    alternate.ss_size = 1 << 20;
    alternate.ss_sp = mmap(NULL, alternate.ss_size, PROT_READ | PROT_WRITE,
                           MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_alarm;
    sa.sa_flags = SA_ONSTACK;
    sigaction(SIGALRM, &sa, NULL);
    altstack_calls = n;
    pthread_t t;
    pthread_create(&t, NULL, on_altstack, NULL);
    pthread_join(t, NULL);
    printf("handler %ld above %d\n", handled, altstack_above);
  } else if (strcmp(how, "watched") == 0) {
    gate = argv[2];
    memcpy(&head_before, (void *) watch_head, sizeof head_before);
    printf("watching\n");
    fflush(stdout);
    for (long i = 0; access(gate, F_OK) != 0; i++)
      watch_head(i);
    printf("ok\n");
  } else if (strcmp(how, "parked") == 0) {
    gate = argv[2];
    pthread_t t;
    pthread_create(&t, NULL, parked, NULL);
    printf("parked\n");
    fflush(stdout);
    while (access(gate, F_OK) != 0) {
      work(1);
      usleep(1000);
    }
    pthread_join(t, NULL);
    printf("ok\n");
  } else if (strcmp(how, "spin") == 0) {
    gate = argv[2];
    int threads = argc > 3 ? atoi(argv[3]) : 2;
    long calls = 0;
    pthread_t t[16];
    if (threads < 1 || threads > 16)
      return 2;
    if (argc > 4 && strcmp(argv[4], "framed") == 0)
      spun_function = framed;
    for (int i = 0; i < threads; i++)
      pthread_create(&t[i], NULL, spin, (void *) &spun[i]);
    printf("spinning\n");
    fflush(stdout);
    for (int i = 0; i < threads; i++) {
      pthread_join(t[i], NULL);
      calls += spun[i];
    }
    printf("calls %ld\n", calls);
  } else if (strcmp(how, "thunk") == 0) {
    for (long i = 0; i < n; i++)
      thunk(i);
  } else if (strcmp(how, "churn") == 0) {
    for (long i = 0; i < n; i++) {
      pthread_t t;
      pthread_create(&t, NULL, ten, NULL);
      pthread_join(t, NULL);
    }
  }
  fflush(stdout);
  return 0;
}
