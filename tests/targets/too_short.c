/* tiny() is shorter than the jump Frida's Interceptor would write over its start, and at -O1
 * no padding lies within a short jump of it: only the inline engine's breakpoint hook (int3)
 * takes it; work() can be hooked. main calls each N times (argv[1]).
 * With argv[2] = T, the program has a SIGTRAP handler of its own and raises SIGTRAP T times
 * after the calls (a program's traps must still reach it while ada hooks through int3),
 * printing "sigtrap <handled>"; with argv[3], it first prints "looping" and calls both until
 * that file exists (so ada can attach and leave meanwhile). */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

volatile long sink;
static volatile sig_atomic_t handled;

__attribute__((noinline)) int tiny(int x)
{
  return x * 2;
}

__attribute__((noinline)) long work(long x)
{
  sink += x;
  return x * 2;
}

static void on_trap(int sig)
{
  (void) sig;
  handled++;
}

int main(int argc, char **argv)
{
  long n = argc > 1 ? atol(argv[1]) : 10;
  long traps = argc > 2 ? atol(argv[2]) : -1;
  if (traps >= 0)
  {
    struct sigaction sa = { 0 };
    sa.sa_handler = on_trap;
    sigaction(SIGTRAP, &sa, NULL);
  }
  if (argc > 3)
  {
    printf("looping\n");
    fflush(stdout);
    while (access(argv[3], F_OK) != 0)
      sink += tiny(1) + work(1);
  }
  for (long i = 0; i < n; i++)
    sink += tiny((int) i) + work(i);
  for (long i = 0; i < traps; i++)
    raise(SIGTRAP);
  if (traps >= 0)
    printf("sigtrap %ld\n", (long) handled);
  return 0;
}
