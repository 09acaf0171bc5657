/* dlopens LIB (argv[1]) and calls greet("world", i) N times (argv[2]), MS (argv[3], default
 * 20) milliseconds apart. */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

int main(int argc, char **argv)
{
  long n = argc > 2 ? atol(argv[2]) : 20;
  long ms = argc > 3 ? atol(argv[3]) : 20;
  usleep(200 * 1000);
  void *lib = dlopen(argv[1], RTLD_NOW);
  if (lib == NULL) {
    fprintf(stderr, "%s\n", dlerror());
    return 1;
  }
  long (*greet)(const char *, long) = (long (*)(const char *, long)) dlsym(lib, "greet");
  for (long i = 0; i < n; i++) {
    greet("world", i);
    usleep(ms * 1000);
  }
  return 0;
}
