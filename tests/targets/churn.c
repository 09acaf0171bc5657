/* Starts and ends THREADS (argv[1], default 1000) short-lived threads, AT_ONCE (argv[2],
 * default 8) at a time; thread i calls work() exactly (i % 7) + 1 times and writes its tid
 * and i to stdout. */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/syscall.h>
#include <unistd.h>

volatile long sink;
static pthread_mutex_t out_lock = PTHREAD_MUTEX_INITIALIZER;

__attribute__((noinline)) long work(long x)
{
  sink += x;
  return x;
}

static void *run(void *arg)
{
  long i = (long) arg;
  for (long k = 0; k < (i % 7) + 1; k++)
    work(k);
  pthread_mutex_lock(&out_lock);
  printf("%ld %ld\n", (long) syscall(SYS_gettid), i);
  pthread_mutex_unlock(&out_lock);
  return NULL;
}

int main(int argc, char **argv)
{
  long n = argc > 1 ? atol(argv[1]) : 1000;
  long batch = argc > 2 ? atol(argv[2]) : 8;
  pthread_t *t = calloc(batch, sizeof (pthread_t));
  for (long base = 0; base < n; base += batch) {
    long m = n - base < batch ? n - base : batch;
    for (long j = 0; j < m; j++)
      pthread_create(&t[j], NULL, run, (void *) (base + j));
    for (long j = 0; j < m; j++)
      pthread_join(t[j], NULL);
  }
  fflush(stdout);
  return 0;
}
