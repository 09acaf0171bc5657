'use strict';
/*
 * ada agent, the platform: every platform difference of the hot path is decided here
 * (platformConfig; hotPathDefines, the #defines put before the C files), the hot path is
 * compiled (compileHotPath: CModule, the system's gcc -O2 or TinyCC, or the host's gcc -O2
 * build loaded) and its layout read
 * (readLayout); the page that tells a forked child from the process ada was loaded into
 * (hereFlag); and the recording clock as the agent reads it (AgentClock, methods of
 * AdaAgent: the clock anchor, the (ticks, ns) pairs raw-tick timestamps are converted
 * with, the time a module loaded).
 */

const PROT_READ_WRITE = 3;
const CLOCK_BOOTTIME = 7;
const LAYOUT_CAPACITY = 128;     /* entries ada_layout() may report */
const LAYOUT_ENTRY_BYTES = 16;   /* {const char *name; guint64 value} on a 64-bit target */
const CLOCK_CALIBRATION_MS = 20;  /* between the start-up pair and the first latest pair */
const CLOCK_PAIR_INTERVAL_MS = 100;

/* Every platform difference of the hot path is decided here. */
function platformConfig(clockSource) {
  const arch = Process.arch;
  const platform = Process.platform;
  if (arch !== 'x64' && arch !== 'arm64')
    throw new Error(`unsupported architecture ${arch}: ada supports x86_64 and arm64`);
  if (platform !== 'darwin' && platform !== 'linux')
    throw new Error(`unsupported platform ${platform}`);
  const symbols = { ada_memcpy: Module.getGlobalExportByName('memcpy') };
  for (const name of ['pthread_key_create', 'pthread_setspecific', 'pthread_getspecific',
                      'pthread_key_delete', 'mmap',
                      'abort', 'sigfillset', 'pthread_sigmask', 'nanosleep'])
    symbols[name] = Module.getGlobalExportByName(name);
  const facts = {};
  let clockType;
  let anonMapFlags;  /* private anonymous pages, backed lazily (RPC transport's region) */
  if (platform === 'darwin') {
    const timebase = Memory.alloc(8);
    const machTimebaseInfo = new NativeFunction(Module.getGlobalExportByName('mach_timebase_info'), 'int', ['pointer']);
    machTimebaseInfo(timebase);
    facts.machNumer = timebase.readU32();
    facts.machDenom = timebase.add(4).readU32();
    for (const name of ['mach_continuous_time', 'pthread_threadid_np', 'pthread_self',
                        'pthread_get_stackaddr_np', 'pthread_get_stacksize_np', 'mach_task_self_',
                        'mach_vm_read_overwrite'])
      symbols[name] = Module.getGlobalExportByName(name);
    clockType = 1;
    anonMapFlags = 0x0002 | 0x1000;  /* MAP_PRIVATE | MAP_ANON */
  } else {
    facts.tsc = arch === 'x64' && clockSource !== 'os' && kernelClocksource() === 'tsc';
    facts.glibc = Module.findGlobalExportByName('gnu_get_libc_version') !== null;
    symbols.ada_clock_gettime = findVdsoClock() || Module.getGlobalExportByName('clock_gettime');
    for (const name of ['syscall', 'pthread_self', 'pthread_getattr_np', 'pthread_attr_getstack',
                        'pthread_attr_destroy', 'posix_fallocate', 'open', 'read', 'close', 'sigaction'])
      symbols[name] = Module.getGlobalExportByName(name);
    clockType = 3;
    anonMapFlags = 0x0002 | 0x0020 | 0x4000;  /* MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE */
  }
  return { arch, defines: hotPathDefines(platform, arch, facts), symbols, clockType, anonMapFlags };
}

/*
 * The #defines that adapt the hot path (the C files) to a platform: a pure function of what
 * platformConfig() found, so the tests can compile every combination.
 */
function hotPathDefines(platform, arch, facts) {
  if (platform === 'darwin')
    return [
      '#define ADA_CLOCK_MACH 1',
      `#define ADA_MACH_NUMER ${facts.machNumer}ULL`,
      `#define ADA_MACH_DENOM ${facts.machDenom}ULL`,
      '#define ADA_STACK_DARWIN 1',
      '#define ADA_SAFE_READ_MACH 1',
      '#define ADA_ANON_MAP_FLAGS 0x1002',  /* MAP_PRIVATE | MAP_ANON */
      '#define ADA_SIG_SETMASK 3',
    ];
  const defines = [`#define ADA_CLOCK_ID ${CLOCK_BOOTTIME}`];
  if (facts.tsc)
    defines.push('#define ADA_CLOCK_TSC 1');
  defines.push(`#define ADA_TID_SYSCALL ${arch === 'x64' ? 186 : 178}`);
  defines.push(`#define ADA_PID_SYSCALL ${arch === 'x64' ? 39 : 172}`);
  defines.push(`#define ADA_FUTEX_SYSCALL ${arch === 'x64' ? 202 : 98}`);  /* ada_wake_drain, ada_hold.c */
  defines.push(`#define ADA_GETDENTS_SYSCALL ${arch === 'x64' ? 217 : 61}`);  /* getdents64 */
  defines.push('#define ADA_STACK_PTHREAD_ATTR 1');
  defines.push('#define ADA_RESERVE_RINGS 1');  /* posix_fallocate on the /dev/shm file */
  defines.push(`#define ADA_SAFE_READ_SYSCALL ${arch === 'x64' ? 310 : 270}`);  /* process_vm_readv */
  defines.push('#define ADA_ANON_MAP_FLAGS 0x4022');  /* MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE */
  defines.push('#define ADA_SIG_SETMASK 2');
  /* the threads held while code is written (ada_hold.c): its signal's system calls, and
   * where the pc sits in the ucontext the kernel hands a handler */
  defines.push('#define ADA_HOLD_SIGNAL 1');
  const x64 = arch === 'x64';
  defines.push(`#define ADA_TGKILL_SYSCALL ${x64 ? 234 : 131}`);
  defines.push(`#define ADA_RT_SIGACTION_SYSCALL ${x64 ? 13 : 134}`);
  defines.push(`#define ADA_NANOSLEEP_SYSCALL ${x64 ? 35 : 101}`);
  defines.push(`#define ADA_UC_PC ${x64 ? 168 : 440}`);  /* gregs[REG_RIP]; uc_mcontext.pc */
  defines.push(`#define ADA_UC_RESULT ${x64 ? 144 : 184}`);  /* gregs[REG_RAX]; regs[0] */
  defines.push(`#define ADA_SYSCALL_INSN ${x64 ? '0x050fU' : '0xd4000001U'}`);  /* syscall; svc #0 */
  defines.push(`#define ADA_SYSCALL_INSN_BYTES ${x64 ? 2 : 4}`);
  defines.push(`#define ADA_READ_SYSCALL ${x64 ? 0 : 63}`);
  if (facts.glibc) {
    defines.push('#define ADA_TLS_GLIBC 1');  /* a thread's pthread keys at %fs (ada_tls_get) */
    defines.push('#define ADA_CHILD_SIGNALS 1');  /* glibc's struct sigaction (ada_child_fatal) */
  }
  return defines;
}

/*
 * The kernel's own clocksource. Only when it is the TSC does the kernel vouch
 * that the counter is invariant and in step across CPUs, and CLOCK_BOOTTIME is
 * then a linear function of it between NTP adjustments, which the host's
 * conversion follows (tracer/clock.py).
 */
function kernelClocksource() {
  try {
    return File.readAllText('/sys/devices/system/clocksource/clocksource0/current_clocksource').trim();
  } catch (e) {
    return null;
  }
}

/* Calling the vDSO directly keeps a traced libc clock_gettime out of the hot path. */
function findVdsoClock() {
  for (const name of ['linux-vdso.so.1', 'linux-vdso64.so.1', 'linux-gate.so.1']) {
    const vdso = Process.findModuleByName(name);
    if (vdso === null)
      continue;
    for (const sym of ['__vdso_clock_gettime', '__kernel_clock_gettime']) {
      const address = vdso.findExportByName(sym);
      if (address !== null)
        return address;
    }
  }
  return null;
}

/* Private anonymous pages, readable and writable; null if the system has none to give. */
function mapAnonymous(size, flags) {
  const mmap = new NativeFunction(Module.getGlobalExportByName('mmap'), 'pointer',
    ['pointer', 'size_t', 'int', 'int', 'int', 'int64']);
  const base = mmap(NULL, size, PROT_READ_WRITE, flags, -1, 0);
  return base.equals(ptr(-1)) ? null : base;
}

/*
 * The hot path's "this is the process ada was loaded into" flag (ADA_FORKED in
 * ada_layout.h): 1 in a private page, never unmapped, that Linux empties in a forked child
 * (MADV_WIPEONFORK, 4.14+). Where that cannot be had, the flag stays 1 in a child too:
 * `wipesOnFork` says which, and the host holds children at their fork only where it is false
 * or where it follows them (recorder.py).
 */
function hereFlag(mapFlags) {
  const page = mapAnonymous(Process.pageSize, mapFlags);
  if (page === null)
    throw new Error('cannot map a page for the hot path');
  page.writeU32(1);
  const madvise = Module.findGlobalExportByName('madvise');
  let wipesOnFork = false;
  if (Process.platform === 'linux' && madvise !== null)
    wipesOnFork = new NativeFunction(madvise, 'int', ['pointer', 'size_t', 'int'])(
        page, Process.pageSize, 18 /* MADV_WIPEONFORK */) === 0;
  return { page, wipesOnFork };
}

/*
 * CModule's toolchains: 'internal' is Frida's TinyCC (always there, code not
 * optimized); 'external' runs the target system's compiler (gcc -O2 on Linux),
 * from inside the target process. 'fallback': external if it works, else
 * internal, saying why. binary: the same gcc -O2 build, made by the host for a
 * target on its machine and cached there (tracer/record/hot_path_build.py), so
 * the attach spends no second in the compiler; CModule loads it as a shared
 * library (Frida 17.26 does on Linux; where it cannot, the target compiles).
 */
function compileHotPath(source, symbols, toolchain, binary) {
  let fallback = null;
  let refused = null;  /* why CModule would not load the host's build */
  if (binary !== null) {
    try {
      return { module: new CModule(binary, symbols), toolchain: 'external', fallback, built: 'host',
               refused };
    } catch (e) {
      refused = firstLine(e.message);
    }
  }
  if (toolchain !== 'internal') {
    try {
      return { module: new CModule(source, symbols, { toolchain: 'external' }), toolchain: 'external',
               fallback, built: 'target', refused };
    } catch (e) {
      if (toolchain === 'external')
        throw new Error(`the system toolchain cannot compile the hot path: ${firstLine(e.message)}`);
      fallback = firstLine(e.message);
    }
  }
  return { module: new CModule(source, symbols, { toolchain: 'internal' }), toolchain: 'internal',
           fallback, built: 'target', refused };
}

/*
 * The ring region's layout as the compiled hot path defines it: every offset
 * and constant this agent and the host touch, by name (ada_layout() in
 * ada_control.c). The host checks the same report against its own mirror.
 */
function readLayout(cm) {
  const entries = Memory.alloc(LAYOUT_CAPACITY * LAYOUT_ENTRY_BYTES);
  const count = new NativeFunction(cm.ada_layout, 'uint', ['pointer', 'uint'])(entries, LAYOUT_CAPACITY);
  if (count > LAYOUT_CAPACITY)
    throw new Error(`ada_layout() reports ${count} entries, more than ${LAYOUT_CAPACITY}`);
  const layout = {};
  for (let i = 0; i < count; i++) {
    const e = entries.add(i * LAYOUT_ENTRY_BYTES);
    layout[e.readPointer().readCString()] = e.add(8).readU64().toNumber();
  }
  return layout;
}

function firstLine(text) {
  return String(text).split('\n').filter(line => line.trim() !== '')[0] || String(text);
}

/* AdaAgent's clock methods. */
const AgentClock = {
  /*
   * The recording clock and the wall clock read together (ada_clock_anchor): the
   * recording clock's midpoint, the wall clock in ns, and how far apart the two
   * recording-clock reads were (the anchor's uncertainty). Where the C side cannot
   * read the wall clock (Darwin), Date.now() does, to the millisecond. Numbers go
   * as decimal strings: they exceed a double's exact range.
   */
  clockAnchor() {
    if (this.anchorFn === undefined)
      this.anchorFn = new NativeFunction(this.cm.ada_clock_anchor, 'void', ['pointer']);
    const out = Memory.alloc(24);
    this.anchorFn(out);
    const before = out.readU64(), after = out.add(16).readU64();
    let wall = out.add(8).readU64();
    let uncertainty = after.sub(before);
    if (wall.equals(0)) {
      wall = uint64(Date.now().toString() + '000000');
      uncertainty = uncertainty.add(1000000);
    }
    return {
      clockNs: before.add(after.sub(before).shr(1)).toString(),
      realtimeNs: wall.toString(),
      uncertaintyNs: uncertainty.toString(),
    };
  },

  /* Raw-tick timestamps: the pairs the host converts them with (ada_clock_pair). */
  _startClockPairs() {
    const pair = new NativeFunction(this.cm.ada_clock_pair, 'void', ['uint32']);
    pair(1);
    Thread.sleep(CLOCK_CALIBRATION_MS / 1000);
    pair(0);
    this.clockTimer = setInterval(() => pair(0), CLOCK_PAIR_INTERVAL_MS);
    this.keepAlive.push(pair);
  },

  _clockNs() {
    if (this.clockFn === undefined)
      this.clockFn = new NativeFunction(this.cm.ada_clock_ns, 'uint64', []);
    return this.clockFn().toString();
  },
};
