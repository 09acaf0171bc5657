/* Exits as soon as a second thread appears in it: Frida's agent starts threads
 * while it attaches, so the process is gone before the hooks are in place. */
#include <dirent.h>
#include <stdio.h>
#include <unistd.h>

void work(void) { usleep(100); }

static int thread_count(void)
{
  int n = 0;
  DIR *d = opendir("/proc/self/task");
  struct dirent *e;
  if (d == NULL)
    return 1;
  while ((e = readdir(d)) != NULL)
    if (e->d_name[0] != '.')
      n++;
  closedir(d);
  return n;
}

int main(void)
{
  printf("ready\n");
  fflush(stdout);
  for (;;)
  {
    if (thread_count() > 1)
      _exit(0);
    work();
  }
}
