// C++ exceptions and longjmp through traced functions. argv[1]:
//   throw-through  thrower() throws, its caller catches: the exception crosses thrower's frame
//   throw-inside   thrower_catches() throws and catches within itself
//   longjmp N      jumper() longjmps out of itself N times
#include <csetjmp>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <stdexcept>

static std::jmp_buf env;
volatile long sink;

extern "C" __attribute__((noinline)) void thrower(long x)
{
  sink += x;
  if (x >= 0)
    throw std::runtime_error("thrown");
}

extern "C" __attribute__((noinline)) long thrower_catches(long x)
{
  try {
    if (x >= 0)
      throw std::runtime_error("caught here");
  } catch (const std::exception &) {
    return 1;
  }
  return 0;
}

extern "C" __attribute__((noinline)) void jumper(long x)
{
  sink += x;
  std::longjmp(env, 1);
}

static long resident_kb(void)
{
  long size = 0, resident = 0;
  FILE *f = std::fopen("/proc/self/statm", "r");
  if (f != NULL) {
    if (std::fscanf(f, "%ld %ld", &size, &resident) != 2)
      resident = 0;
    std::fclose(f);
  }
  return resident * 4;
}

int main(int argc, char **argv)
{
  const char *how = argc > 1 ? argv[1] : "throw-inside";
  if (std::strcmp(how, "throw-through") == 0) {
    try {
      thrower(1);
    } catch (const std::exception &e) {
      std::printf("caught %s\n", e.what());
    }
  } else if (std::strcmp(how, "throw-inside") == 0) {
    std::printf("caught %ld\n", thrower_catches(1));
  } else if (std::strcmp(how, "longjmp") == 0) {
    long n = argc > 2 ? std::atol(argv[2]) : 100;
    long before = resident_kb ();
    for (volatile long i = 0; i < n; i++)
      if (setjmp(env) == 0)
        jumper(i);
    std::printf("jumped %ld, resident memory grew by %ld KB\n", n, resident_kb () - before);
  }
  return 0;
}
