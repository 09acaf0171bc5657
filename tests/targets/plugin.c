/* A plugin: built as libplug.so.1.2.3 (soname libplug.so.1, symlinks libplug.so.1 and
 * libplug.so) by the tests, loaded with dlopen by plugin_host.c or linked by plugin_linked.c. */
volatile long plug_sink;

long plug_work(long x)
{
  for (long i = 0; i < x % 5; i++)
    plug_sink += i;
  return plug_sink + x;
}
