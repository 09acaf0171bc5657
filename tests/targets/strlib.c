/* A library with a C string parameter, loaded with dlopen by late_strings.c: its strings are
 * captured though it loads after ada starts. */
volatile long strlib_sink;

long greet(const char *who, long times)
{
  strlib_sink += who[0] * times;
  return strlib_sink;
}
