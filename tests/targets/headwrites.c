/* Counts the stores into work()'s first 16 bytes, by any thread, with the CPU's own write
 * watchpoints (perf_event_open, one per CPU and 8-byte word; root). Meanwhile it calls work()
 * 1000 times every 20 ms and sleeps in poll() between: a thread asleep in a system call,
 * which ada's thread hold does not stop, that wakes and runs work()'s first bytes while ada
 * changes them. Prints "ready" (or "unsupported <why>" and exits 0); on a line on stdin, or
 * its end, prints "stores N interrupted M" and exits. M: the polls a signal cut short (EINTR),
 * which it polls again. ada's thread hold signals only threads it saw on a CPU, but one can
 * go to sleep between that look and the signal; treated as the end, one such poll made this
 * program leave early in a CI run (2026-11-29). */
#include <errno.h>
#include <linux/hw_breakpoint.h>
#include <linux/perf_event.h>
#include <poll.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#define MAX_COUNTERS 512

volatile long sink;

/* Aligned, so that an x86_64 jump (5 bytes) lies in one 8-byte word, as an arm64 `b` always does. */
__attribute__((noinline, aligned(16))) long work(long x)
{
  sink += x;
  return x;
}

int main(void)
{
  int fds[MAX_COUNTERS], n = 0;
  long cpus = sysconf(_SC_NPROCESSORS_CONF);

  setvbuf(stdout, NULL, _IOLBF, 0);
  for (long cpu = 0; cpu < cpus; cpu++) {
    for (int word = 0; word < 2 && n < MAX_COUNTERS; word++) {
      struct perf_event_attr a;
      memset(&a, 0, sizeof a);
      a.type = PERF_TYPE_BREAKPOINT;
      a.size = sizeof a;
      a.bp_type = HW_BREAKPOINT_W;
      a.bp_addr = ((uintptr_t) work & ~(uintptr_t) 7) + 8 * word;
      a.bp_len = HW_BREAKPOINT_LEN_8;
      int fd = (int) syscall(SYS_perf_event_open, &a, -1, (int) cpu, -1, 0);
      if (fd < 0 && errno == ENODEV)
        break;  /* that CPU is offline */
      if (fd < 0) {
        printf("unsupported perf_event_open write watchpoint: %s\n", strerror(errno));
        return 0;
      }
      fds[n++] = fd;
    }
  }
  printf("ready\n");
  struct pollfd in = { .fd = 0, .events = POLLIN };
  long interrupted = 0;
  for (;;) {
    int r = poll(&in, 1, 20);
    if (r < 0 && errno == EINTR) {
      interrupted++;
      continue;
    }
    if (r != 0)
      break;
    for (int i = 0; i < 1000; i++)
      work(i);
  }
  unsigned long long stores = 0;
  for (int i = 0; i < n; i++) {
    unsigned long long v = 0;
    if (read(fds[i], &v, sizeof v) == sizeof v)
      stores += v;
  }
  printf("stores %llu interrupted %ld\n", stores, interrupted);
  return 0;
}
