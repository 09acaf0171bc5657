/* Forks one child; both call work() (the parent N times, the child M times, interleaved in
 * time). MODE (argv[3]): "wait" the parent waits for the child; "nowait" the parent exits
 * after its calls without waiting; "exec" the child execs this
 * program as "forks K" (the new image calls work() K = M times and exits); "orphan" the
 * parent exits at once and the child keeps calling work() every 10 ms for M calls; "serial"
 * the parent forks M children one after another, each calling work() 10 times, waiting for
 * each before the next (those children print nothing; if K of them die of SIGSEGV the
 * parent prints "killed K of M" and exits 3); "busy" like "serial", the parent making its N
 * calls before each fork instead of after them all (it records as it forks); "selfexec" the parent makes its N
 * calls and execs this program as "forks M" (no child); "spawn" the parent starts "sleep 600"
 * by posix_spawn (no fork; its output to /dev/null), makes its N calls and exits; "shell"
 * the parent makes N calls, runs system("true"), N calls, reads a line from
 * popen("echo hi"), N calls, and exits (both spawn their shell through posix_spawn in
 * glibc); "crash" the child makes its M calls, waits until the file GATE (argv[4]) exists and
 * dies of SIGSEGV, while the parent makes its N calls and waits for it; "crashes" like "serial",
 * but each child faults (SIGSEGV) after its calls, and the parent prints "crashed K of M" (the
 * children that ended as they should) and exits 0 only if K is M: killed by SIGSEGV, or with
 * HANDLER (argv[4]) "before" the parent's own SIGSEGV handler, set before the forks, ends
 * each with _exit(42), with "after" one the child sets after its fork ends it with _exit(43);
 * "abort": each child calls abort() instead, and SIGABRT must kill it. "forkexec" the
 * parent forks a child that makes its M calls, then execs this program at once as "forks N"
 * (the new image makes the N calls and exits without waiting). "tree" the parent
 * forks a child that forks a grandchild; the parent makes N calls, the others M; each
 * waits for its child.
 * Each other process prints "pid <role> <pid>" first. Built with -DFORK_MARKERS, "serial"
 * and "crashes" call fork_begins() just before each fork() and fork_ended() in the parent
 * just after it: hooked, they tell a script when the process is inside fork()
 * (scripts/frida_fork_repro.py --fork-markers). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

extern char **environ;
volatile long sink;

__attribute__((noinline)) long work(long x)
{
  sink += x;
  return x * 2;
}

#ifdef FORK_MARKERS
/* Each longer than the 5 bytes an Interceptor hook overwrites. */
__attribute__((noinline)) void fork_begins(void) { sink ^= 0x5a5a; sink += 1; }
__attribute__((noinline)) void fork_ended(void) { sink ^= 0xa5a5; sink += 1; }
#else
static void fork_begins(void) {}
static void fork_ended(void) {}
#endif

static void calls(long n, long pause_us)
{
  for (long i = 0; i < n; i++) {
    work(i);
    if (pause_us)
      usleep(pause_us);
  }
}

static void exit_42(int sig)
{
  (void) sig;
  _exit(42);
}

static void exit_43(int sig)
{
  (void) sig;
  _exit(43);
}

int main(int argc, char **argv)
{
  if (argc == 2) {  /* the new image after exec */
    printf("pid image %d\n", getpid());
    fflush(stdout);
    calls(atol(argv[1]), 0);
    return 0;
  }
  long n = argc > 1 ? atol(argv[1]) : 100;
  long m = argc > 2 ? atol(argv[2]) : 100;
  const char *mode = argc > 3 ? argv[3] : "wait";
  printf("pid parent %d\n", getpid());
  fflush(stdout);
  int crashes = strcmp(mode, "crashes") == 0;
  int busy = strcmp(mode, "busy") == 0;
  if (crashes || busy || strcmp(mode, "serial") == 0) {
    const char *handler = crashes && argc > 4 ? argv[4] : "none";
    int expected = strcmp(handler, "before") == 0 ? 42 : strcmp(handler, "after") == 0 ? 43 : 0;
    int dies_of = strcmp(handler, "abort") == 0 ? SIGABRT : SIGSEGV;
    long crashed = 0;
    if (expected == 42)
      signal(SIGSEGV, exit_42);
    for (long k = 0; k < m; k++) {
      if (busy)
        calls(n, 0);
      fork_begins();
      pid_t one = fork();
      if (one != 0)
        fork_ended();
      if (one == 0) {
        calls(10, 0);
        if (expected == 43)
          signal(SIGSEGV, exit_43);
        if (crashes && dies_of == SIGABRT)
          abort();
        if (crashes)
          *(volatile long *) 0 = 1;
        _exit(0);
      }
      int status = 0;
      waitpid(one, &status, 0);
      crashed += expected ? WIFEXITED(status) && WEXITSTATUS(status) == expected
                          : WIFSIGNALED(status) && WTERMSIG(status) == dies_of;
    }
    if (!busy)
      calls(n, 0);
    if (crashes) {
      printf("crashed %ld of %ld\n", crashed, m);
      return crashed == m ? 0 : 1;
    }
    if (crashed > 0)  /* serial: children that should have exited 0 and died of SIGSEGV */
      printf("killed %ld of %ld\n", crashed, m);
    return crashed > 0 ? 3 : 0;
  }
  if (strcmp(mode, "tree") == 0) {  /* a child that forks a grandchild; each waits */
    pid_t child = fork();
    if (child == 0) {
      printf("pid child %d\n", getpid());
      fflush(stdout);
      pid_t grandchild = fork();
      if (grandchild == 0) {
        printf("pid grandchild %d\n", getpid());
        fflush(stdout);
        calls(m, 0);
        _exit(0);
      }
      calls(m, 0);
      waitpid(grandchild, NULL, 0);
      _exit(0);
    }
    calls(n, 0);
    waitpid(child, NULL, 0);
    return 0;
  }
  if (strcmp(mode, "spawn") == 0) {  /* a child by posix_spawn (no fork), left running */
    char *sleeper[] = {"sleep", "600", NULL};
    posix_spawn_file_actions_t quiet;  /* it must not hold the output ada's caller reads */
    pid_t spawned;
    posix_spawn_file_actions_init(&quiet);
    posix_spawn_file_actions_addopen(&quiet, 1, "/dev/null", O_WRONLY, 0);
    posix_spawn_file_actions_addopen(&quiet, 2, "/dev/null", O_WRONLY, 0);
    if (posix_spawnp(&spawned, "sleep", &quiet, NULL, sleeper, environ) != 0)
      return 1;
    printf("pid spawned %d\n", spawned);
    fflush(stdout);
    calls(n, 0);
    return 0;
  }
  if (strcmp(mode, "shell") == 0) {
    char line[16];
    calls(n, 0);
    if (system("true") != 0)
      return 1;
    calls(n, 0);
    FILE *p = popen("echo hi", "r");
    if (p == NULL || fgets(line, sizeof line, p) == NULL || pclose(p) != 0)
      return 1;
    calls(n, 0);
    return 0;
  }
  if (strcmp(mode, "selfexec") == 0) {
    char count[32];
    calls(n, 0);
    snprintf(count, sizeof count, "%ld", m);
    execl(argv[0], argv[0], count, (char *) NULL);
    return 127;
  }
  pid_t child = fork();
  if (child == 0) {
    printf("pid child %d\n", getpid());
    fflush(stdout);
    if (strcmp(mode, "exec") == 0) {
      char count[32];
      snprintf(count, sizeof count, "%ld", m);
      execl(argv[0], argv[0], count, (char *) NULL);
      _exit(127);
    }
    calls(m, strcmp(mode, "orphan") == 0 ? 10000 : 100);
    if (strcmp(mode, "crash") == 0 && argc > 4) {
      while (access(argv[4], F_OK) != 0)
        usleep(10 * 1000);
      *(volatile long *) 0 = 1;
    }
    _exit(0);
  }
  if (strcmp(mode, "orphan") == 0)
    return 0;
  if (strcmp(mode, "forkexec") == 0) {  /* the parent execs at once, its child still running */
    char count[32];
    snprintf(count, sizeof count, "%ld", n);
    execl(argv[0], argv[0], count, (char *) NULL);
    return 127;
  }
  calls(n, 100);
  if (strcmp(mode, "nowait") != 0)
    waitpid(child, NULL, 0);
  return 0;
}
