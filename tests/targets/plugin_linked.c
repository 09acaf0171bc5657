/* Linked against the plugin through its soname (DT_NEEDED libplug.so.1, found through a
 * symlink to libplug.so.1.2.3); calls plug_work() N times (argv[1]). */
#include <stdlib.h>

extern long plug_work(long x);

int main(int argc, char **argv)
{
  long n = argc > 1 ? atol(argv[1]) : 10;
  long sum = 0;
  for (long i = 0; i < n; i++)
    sum += plug_work(i);
  return (int) (sum & 1) * 0;
}
