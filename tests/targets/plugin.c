/* A plugin: built as libplug.so.1.2.3 (soname libplug.so.1, symlinks libplug.so.1 and
 * libplug.so) by the tests, loaded with dlopen by plugin_host.c or linked by plugin_linked.c.
 * The plug_extra_N functions are never called: hooked with plug_work (-i 'libplug.so!plug_*'),
 * they make hooking the plugin as it loads take longer. */
volatile long plug_sink;

long plug_work(long x)
{
  for (long i = 0; i < x % 5; i++)
    plug_sink += i;
  return plug_sink + x;
}

#define PLUG_EXTRA(n) long plug_extra_##n(long x) { plug_sink += n; return plug_sink + x; }
#define PLUG_EXTRA8(n) PLUG_EXTRA(n##0) PLUG_EXTRA(n##1) PLUG_EXTRA(n##2) PLUG_EXTRA(n##3) \
  PLUG_EXTRA(n##4) PLUG_EXTRA(n##5) PLUG_EXTRA(n##6) PLUG_EXTRA(n##7)
PLUG_EXTRA8(1) PLUG_EXTRA8(2) PLUG_EXTRA8(3) PLUG_EXTRA8(4)
