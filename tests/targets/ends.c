/* Calls work() N times (argv[1]) on each of T threads (argv[2]; 0: on the main thread), waits
 * for them, then ends as argv[3] says (an exit runs an atexit handler and a destructor, which
 * call late() LATE_CALLS times in all, on the main thread):
 *   exit:S      exit(S)                  _exit:S   _exit(S), no atexit handlers
 *   segv        a write through NULL, outside any traced function
 *   segv-traced a write through NULL inside boom(), a function the tests trace
 *   abort       abort()                  kill      SIGKILL to itself
 * With a fourth argument GATE it first waits until the file GATE exists; with "@hooked" it
 * waits until the first bytes of work() change (a hook is patched in), so that it calls and
 * ends at once as ada attaches, before ada is ready to drain (tests/test_endings.py). */
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

volatile long sink;
volatile long *volatile nowhere;

__attribute__((noinline)) long work(long x)
{
  sink += x;
  return x * 2;
}

__attribute__((noinline)) long boom(long x)
{
  *nowhere = x;
  return x;
}

__attribute__((noinline)) long late(long x)
{
  sink -= x;
  return x;
}

static void at_exit(void)
{
  for (long i = 0; i < 3; i++)
    late(i);
}

__attribute__((destructor)) static void at_unload(void)
{
  late(10);
  late(11);
}

static long calls;

static void *run(void *arg)
{
  (void) arg;
  for (long i = 0; i < calls; i++)
    work(i);
  return NULL;
}

int main(int argc, char **argv)
{
  calls = argc > 1 ? atol(argv[1]) : 1000;
  long threads = argc > 2 ? atol(argv[2]) : 0;
  const char *how = argc > 3 ? argv[3] : "exit:0";
  if (threads > 256)
    threads = 256;
  atexit(at_exit);
  if (argc > 4 && strcmp(argv[4], "@hooked") == 0) {
    unsigned char before[16];
    memcpy(before, (const void *) work, sizeof before);
    printf("waiting for a hook\n");
    fflush(stdout);
    while (memcmp(before, (const void *) work, sizeof before) == 0)
      usleep(1000);
  } else if (argc > 4) {
    printf("waiting for %s\n", argv[4]);
    fflush(stdout);
    while (access(argv[4], F_OK) != 0)
      usleep(10 * 1000);
  }
  if (threads == 0) {
    run(NULL);
  } else {
    pthread_t t[256];
    for (long i = 0; i < threads; i++)
      pthread_create(&t[i], NULL, run, NULL);
    for (long i = 0; i < threads; i++)
      pthread_join(t[i], NULL);
  }
  if (strncmp(how, "exit:", 5) == 0)
    exit(atoi(how + 5));
  if (strncmp(how, "_exit:", 6) == 0)
    _exit(atoi(how + 6));
  if (strcmp(how, "segv") == 0)
    *nowhere = 1;
  if (strcmp(how, "segv-traced") == 0)
    boom(1);
  if (strcmp(how, "abort") == 0)
    abort();
  if (strcmp(how, "kill") == 0)
    kill(getpid(), SIGKILL);
  return 0;
}
