/* Loads the plugin PATH (argv[1]) with dlopen after DELAY_MS (argv[3]), calls plug_work()
 * N times (argv[2]), unloads it, and does it all ROUNDS times (argv[4], default 1). With
 * GATE (argv[5], "-" for none) it first prints "waiting" and waits until that file exists.
 * host_work() is called once a round, from the executable itself. With BUSY (argv[6], 1) a
 * second thread calls busy_work() without pause until the rounds are done: a recording's
 * drain then never rests while the plugin loads. */
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

volatile long sink;
static volatile int rounds_done;

__attribute__((noinline)) long host_work(long x)
{
  sink += x;
  return sink;
}

__attribute__((noinline, noipa)) long busy_work(long x)
{
  return x + 1;
}

static void *busy(void *arg)
{
  (void) arg;
  while (!rounds_done)
    sink = busy_work(sink);
  return NULL;
}

int main(int argc, char **argv)
{
  long n = argc > 2 ? atol(argv[2]) : 10;
  long delay_ms = argc > 3 ? atol(argv[3]) : 300;
  long rounds = argc > 4 ? atol(argv[4]) : 1;
  pthread_t busy_thread;
  int busy_on = argc > 6 && atoi(argv[6]) != 0;
  if (argc > 5 && strcmp(argv[5], "-") != 0) {
    printf("waiting\n");
    fflush(stdout);
    while (access(argv[5], F_OK) != 0)
      usleep(10 * 1000);
  }
  if (busy_on && pthread_create(&busy_thread, NULL, busy, NULL) != 0)
    return 1;
  for (long r = 0; r < rounds; r++) {
    usleep(delay_ms * 1000);
    void *lib = dlopen(argv[1], RTLD_NOW);
    if (lib == NULL) {
      fprintf(stderr, "%s\n", dlerror());
      return 1;
    }
    long (*work)(long) = (long (*)(long)) dlsym(lib, "plug_work");
    for (long i = 0; i < n; i++)
      sink += work(i);
    host_work(r);
    dlclose(lib);
  }
  rounds_done = 1;
  if (busy_on)
    pthread_join(busy_thread, NULL);
  printf("done\n");
  fflush(stdout);
  return 0;
}
