/* Holds PID (argv[1]) as Frida's ptrace was seen to hold a child whose recovery from its fork
 * crashed (scripts/frida_fork_repro.py): stopped under ptrace after a fatal signal, for ever.
 * It traces the process, lets its signals through, and holds it stopped at its exit event
 * until this program ends (SIGKILL cannot end a process stopped there).
 * It prints "tracing" once attached and "holding" once the process is held at its exit. */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/ptrace.h>
#include <sys/wait.h>
#include <unistd.h>

int main(int argc, char **argv)
{
  pid_t pid = argc > 1 ? atoi(argv[1]) : 0;
  /* Frida may still trace it for a moment (its injection): try for 5 s. */
  for (int tries = 0; ptrace(PTRACE_SEIZE, pid, 0, PTRACE_O_TRACEEXIT) != 0; tries++) {
    if (tries == 100) {
      perror("ptrace");
      return 1;
    }
    usleep(50 * 1000);
  }
  printf("tracing\n");
  fflush(stdout);
  for (;;) {
    int status;
    if (waitpid(pid, &status, __WALL) != pid)
      return 1;
    if (!WIFSTOPPED(status))
      return 0;  /* gone (ended by someone else) */
    int event = status >> 16;
    if (event == PTRACE_EVENT_EXIT) {
      printf("holding\n");
      fflush(stdout);
      continue;  /* never let it go on: only this program's end does */
    }
    ptrace(PTRACE_CONT, pid, 0, event == PTRACE_EVENT_STOP ? 0 : WSTOPSIG(status));
  }
}
