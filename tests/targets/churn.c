/* Starts and ends THREADS (argv[1], default 1000) short-lived threads, AT_ONCE (argv[2],
 * default 8) at a time; thread i calls work() exactly (i % 7) + 1 times and writes its tid
 * and i to stdout. With argv[3] "hold", each thread of a batch waits after its first call
 * until all of the batch have made theirs (all hold a ring at once, however fast calls are). */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

volatile long sink;
static pthread_mutex_t out_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_barrier_t held;
static int hold;

__attribute__((noinline)) long work(long x)
{
  sink += x;
  return x;
}

static void *run(void *arg)
{
  long i = (long) arg;
  for (long k = 0; k < (i % 7) + 1; k++) {
    work(k);
    if (k == 0 && hold)
      pthread_barrier_wait(&held);
  }
  pthread_mutex_lock(&out_lock);
  printf("%ld %ld\n", (long) syscall(SYS_gettid), i);
  pthread_mutex_unlock(&out_lock);
  return NULL;
}

int main(int argc, char **argv)
{
  long n = argc > 1 ? atol(argv[1]) : 1000;
  long batch = argc > 2 ? atol(argv[2]) : 8;
  hold = argc > 3 && strcmp(argv[3], "hold") == 0;
  pthread_t *t = calloc(batch, sizeof (pthread_t));
  for (long base = 0; base < n; base += batch) {
    long m = n - base < batch ? n - base : batch;
    if (hold)
      pthread_barrier_init(&held, NULL, (unsigned) m);
    for (long j = 0; j < m; j++)
      pthread_create(&t[j], NULL, run, (void *) (base + j));
    for (long j = 0; j < m; j++)
      pthread_join(t[j], NULL);
    if (hold)
      pthread_barrier_destroy(&held);
  }
  fflush(stdout);
  return 0;
}
