/* Loads the plugin PATH (argv[1]) with dlopen after DELAY_MS (argv[3]), calls plug_work()
 * N times (argv[2]), unloads it, and does it all ROUNDS times (argv[4], default 1). With
 * GATE (argv[5]) it first prints "waiting" and waits until that file exists. host_work() is
 * called once a round, from the executable itself. */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

volatile long sink;

__attribute__((noinline)) long host_work(long x)
{
  sink += x;
  return sink;
}

int main(int argc, char **argv)
{
  long n = argc > 2 ? atol(argv[2]) : 10;
  long delay_ms = argc > 3 ? atol(argv[3]) : 300;
  long rounds = argc > 4 ? atol(argv[4]) : 1;
  if (argc > 5) {
    printf("waiting\n");
    fflush(stdout);
    while (access(argv[5], F_OK) != 0)
      usleep(10 * 1000);
  }
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
  printf("done\n");
  fflush(stdout);
  return 0;
}
