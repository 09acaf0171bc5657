'use strict';
/*
 * ada agent: the one-time work inside the target. It resolves the selected
 * functions (ada_selection.js, loaded before this file), as the target starts
 * and as modules load, maps the ring region, compiles ada_hooks.c with CModule
 * and attaches its C callbacks with Interceptor. JavaScript never runs per call.
 *
 * Written against the frida 17 API: Process.getModuleByName / findModuleByName
 * and Module instance methods, Module.getGlobalExportByName (the static
 * Module.findExportByName and friends are gone).
 */

const O_RDWR = 2;
const O_CLOEXEC = Process.platform === 'darwin' ? 0x1000000 : 0x80000;
const PROT_READ_WRITE = 3;
const MAP_SHARED = 1;
const CLOCK_BOOTTIME = 7;
const AGENT_STATE_BYTES = 64 * 1024;
const LAYOUT_CAPACITY = 128;     /* entries ada_layout() may report */
const LAYOUT_ENTRY_BYTES = 16;   /* {const char *name; guint64 value} on a 64-bit target */
const CLOCK_CALIBRATION_MS = 20;  /* between the start-up pair and the first latest pair */
const CLOCK_PAIR_INTERVAL_MS = 100;
const HANDOVER_TIMEOUT_MS = 10000;  /* how long a dying process waits for ada to take its rings */

/* Frida's exception types, as the signals that raise them (Linux, then Darwin numbers). */
const SIGNALS = {
  'access-violation': { name: 'SIGSEGV', linux: [11, 7], darwin: [11, 10] },
  'guard-page': { name: 'SIGSEGV', linux: [11], darwin: [11] },
  'abort': { name: 'SIGABRT', linux: [6], darwin: [6] },
  'illegal-instruction': { name: 'SIGILL', linux: [4], darwin: [4] },
  'arithmetic': { name: 'SIGFPE', linux: [8], darwin: [8] },
  'breakpoint': { name: 'SIGTRAP', linux: [5], darwin: [5] },
  'system': { name: 'SIGSYS', linux: [31], darwin: [12] },
};

function fatalSignal(type) {
  const s = SIGNALS[type];
  if (s === undefined)
    return null;
  return { name: s.name, numbers: Process.platform === 'darwin' ? s.darwin : s.linux };
}

/* Every platform difference of the hot path is decided here. */
function platformConfig(clockSource) {
  const arch = Process.arch;
  const platform = Process.platform;
  if (arch !== 'x64' && arch !== 'arm64')
    throw new Error(`unsupported architecture ${arch}: ada supports x86_64 and arm64`);
  if (platform !== 'darwin' && platform !== 'linux')
    throw new Error(`unsupported platform ${platform}`);
  const symbols = { ada_memcpy: Module.getGlobalExportByName('memcpy') };
  for (const name of ['pthread_key_create', 'pthread_setspecific', 'pthread_key_delete', 'mmap',
                      'abort', 'sigfillset', 'pthread_sigmask'])
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
    symbols.ada_clock_gettime = findVdsoClock() || Module.getGlobalExportByName('clock_gettime');
    for (const name of ['syscall', 'pthread_self', 'pthread_getattr_np', 'pthread_attr_getstack',
                        'pthread_attr_destroy', 'posix_fallocate'])
      symbols[name] = Module.getGlobalExportByName(name);
    clockType = 3;
    anonMapFlags = 0x0002 | 0x0020 | 0x4000;  /* MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE */
  }
  return { arch, defines: hotPathDefines(platform, arch, facts), symbols, clockType, anonMapFlags };
}

/*
 * The #defines that adapt ada_hooks.c to a platform: a pure function of what
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
  defines.push('#define ADA_STACK_PTHREAD_ATTR 1');
  defines.push('#define ADA_RESERVE_RINGS 1');  /* posix_fallocate on the /dev/shm file */
  defines.push(`#define ADA_SAFE_READ_SYSCALL ${arch === 'x64' ? 310 : 270}`);  /* process_vm_readv */
  defines.push('#define ADA_ANON_MAP_FLAGS 0x4022');  /* MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE */
  defines.push('#define ADA_SIG_SETMASK 2');
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

/*
 * The inline hook engine for this CPU (ada_inline_<arch>.js), or one line on why not.
 */
function inlineEngine(cm, layout, state, mapFlags) {
  if (Process.arch === 'x64' && shadowStacksOn())
    throw new Error('--hook-engine inline cannot run in a process with CET shadow stacks on ' +
                    '(it redirects return addresses): use --hook-engine frida');
  if (Process.arch === 'x64' && typeof InlineHooksX64 !== 'undefined')
    return new InlineHooksX64(cm, layout, state, mapFlags);
  throw new Error(`--hook-engine inline is not available on ${Process.arch} yet ` +
                  '(x86_64 only): use --hook-engine frida');
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
 * ada_hooks.c): 1 in a private page, never unmapped, that Linux empties in a forked child
 * (MADV_WIPEONFORK, 4.14+). Where that cannot be had, the flag stays 1 in a child too.
 */
function hereFlag(mapFlags) {
  const page = mapAnonymous(Process.pageSize, mapFlags);
  if (page === null)
    throw new Error('cannot map a page for the hot path');
  page.writeU32(1);
  const madvise = Module.findGlobalExportByName('madvise');
  if (Process.platform === 'linux' && madvise !== null)
    new NativeFunction(madvise, 'int', ['pointer', 'size_t', 'int'])(page, Process.pageSize,
                                                                      18 /* MADV_WIPEONFORK */);
  return page;
}

/* Linux 6.6+ says so in /proc/self/status ("x86_Thread_features: shstk ..."). */
function shadowStacksOn() {
  try {
    return /^x86_Thread_features:.*\bshstk\b/m.test(File.readAllText('/proc/self/status'));
  } catch (e) {
    return false;
  }
}

/*
 * CModule's toolchains: 'internal' is Frida's TinyCC (always there, code not
 * optimized); 'external' runs the target system's compiler (gcc -O2 on Linux),
 * from inside the target process. 'fallback': external if it works, else
 * internal, saying why.
 */
function compileHotPath(source, symbols, toolchain) {
  let fallback = null;
  if (toolchain !== 'internal') {
    try {
      return { module: new CModule(source, symbols, { toolchain: 'external' }), toolchain: 'external',
               fallback };
    } catch (e) {
      if (toolchain === 'external')
        throw new Error(`the system toolchain cannot compile the hot path: ${firstLine(e.message)}`);
      fallback = firstLine(e.message);
    }
  }
  return { module: new CModule(source, symbols, { toolchain: 'internal' }), toolchain: 'internal',
           fallback };
}

/*
 * The ring region's layout as the compiled hot path defines it: every offset
 * and constant this agent and the host touch, by name (ada_layout() in
 * ada_hooks.c). The host checks the same report against its own mirror.
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

/* Where code at `address` is: module!symbol+offset, ada's inline stubs, or null. */
function describeAddress(address) {
  try {
    const symbol = DebugSymbol.fromAddress(address);
    if (symbol.moduleName !== null)
      return symbol.toString();
  } catch (e) {
  }
  return null;
}

function firstLine(text) {
  return String(text).split('\n').filter(line => line.trim() !== '')[0] || String(text);
}

function hex64(hi, lo) {
  return '0x' + hi.toString(16).padStart(8, '0') + lo.toString(16).padStart(8, '0');
}

class AdaAgent {
  constructor() {
    this.cm = null;
    this.here = null;        /* see hereFlag: reads 0 in a forked child's copy of this script */
    this.keepAlive = [];   /* JS references that keep agent memory from being freed */
    this.region = null;
    this.regionFd = -1;      /* the shared memory file, open while the process lives */
    this.regionSize = 0;
    this.layout = null;      /* the region's offsets and constants by name (readLayout) */
    this.selection = null;       /* Selection of the functions to trace (ada_selection.js) */
    this.triggerSelection = null;
    this.modules = new Map();    /* file -> {moduleId, ...}: module ids are stable across reloads */
    this.seen = new Set();       /* 'path@base' of every module considered */
    this.pending = [];           /* modules that loaded while the initial hooks went in */
    this.live = false;           /* initial hooks in: modules that load now are hooked as they load */
    this.hookedAddresses = new Map();  /* address string -> function id, for the hot path's table */
    this.codeOwners = new Map();  /* hooked code (after thunks) -> 'module!name' hooked there */
    this.triggerCount = 0;
    this.hooked = false;
    this.config = null;
    this.stage = null;       /* RPC transport: staging buffer for pull() */
    this.clockTimer = null;  /* refreshes the clock pair while timestamps are raw ticks */
    this.tails = [];         /* RPC transport: [index, detail] cursor the host has consumed */
    this.crashed = false;    /* a fatal signal's handover is done */
    this.handedOver = false; /* the rings went to ada as the process ends */
    this.stoppedByHost = false;
    this.exitStatus = null;
    this.stringArgs = new Map();  /* functionId -> regs[] slots holding C strings */
    this.inline = null;      /* the inline hook engine (--hook-engine inline), or Frida's Interceptor */
    this.threads = null;     /* the hot path's ThreadState array */
  }

  init(config) {
    const plat = platformConfig(config.clockSource);
    /* u64 values arrive as decimal strings; the offsets used in pull() fit a double. */
    this.config = Object.assign({}, config, {
      indexRingsOffset: Number(config.indexRingsOffset),
      detailRingsOffset: Number(config.detailRingsOffset),
    });
    const state = Memory.alloc(AGENT_STATE_BYTES);
    const symbols = Object.assign({ ada_state: state }, plat.symbols);
    const compiled = compileHotPath(plat.defines.join('\n') + '\n' + config.source, symbols,
                                    config.toolchain);
    this.cm = compiled.module;
    const L = this.layout = readLayout(this.cm);
    if (L['agent.sizeof_state'] > AGENT_STATE_BYTES)
      throw new Error(`agent state of ${L['agent.sizeof_state']} bytes exceeds ${AGENT_STATE_BYTES}`);
    this.region = config.shmPath !== null ? this._mapShared(config.shmPath, config.regionSize)
                                          : this._mapPrivate(config.regionSize, plat.anonMapFlags);
    this.regionSize = config.regionSize;
    this._writeHeader(config);
    const threads = Memory.alloc(config.maxThreads * L['agent.sizeof_thread_state']);
    state.add(L['agent.state_region']).writePointer(this.region);
    state.add(L['agent.state_threads']).writePointer(threads);
    state.add(L['agent.state_region_fd']).writeS32(this.regionFd);
    new NativeFunction(this.cm.ada_init, 'void', ['uint32'])(Process.id);
    this.here = hereFlag(plat.anonMapFlags);
    state.add(L['agent.state_here']).writePointer(this.here);
    this.keepAlive.push(state, threads, symbols);
    this.threads = threads;
    if (config.hookEngine === 'inline')
      this.inline = inlineEngine(this.cm, L, state, plat.anonMapFlags);
    const ticks = this.region.add(L['header.clock_ticks']).readU32() === 1;
    if (ticks)
      this._startClockPairs();
    return {
      clockAnchor: this.clockAnchor(),
      pid: Process.id,
      arch: plat.arch,
      platform: Process.platform,
      pointerSize: Process.pointerSize,
      clockType: plat.clockType,
      clockSource: ticks ? 'tsc' : 'os',
      toolchain: compiled.toolchain,
      toolchainFallback: compiled.fallback,
      mainModule: { name: Process.mainModule.name, path: Process.mainModule.path },
      layout: L,
    };
  }

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
  }

  /* Raw-tick timestamps: the pairs the host converts them with (ada_clock_pair). */
  _startClockPairs() {
    const pair = new NativeFunction(this.cm.ada_clock_pair, 'void', ['uint32']);
    pair(1);
    Thread.sleep(CLOCK_CALIBRATION_MS / 1000);
    pair(0);
    this.clockTimer = setInterval(() => pair(0), CLOCK_PAIR_INTERVAL_MS);
    this.keepAlive.push(pair);
  }

  _mapShared(path, size) {
    const open = new NativeFunction(Module.getGlobalExportByName('open'), 'int', ['pointer', 'int']);
    const close = new NativeFunction(Module.getGlobalExportByName('close'), 'int', ['int']);
    const mmap = new NativeFunction(Module.getGlobalExportByName('mmap'), 'pointer',
      ['pointer', 'size_t', 'int', 'int', 'int', 'int64']);
    const fd = open(Memory.allocUtf8String(path), O_RDWR | O_CLOEXEC);
    if (fd < 0)
      throw new Error(`cannot open ring region ${path}`);
    const base = mmap(NULL, size, PROT_READ_WRITE, MAP_SHARED, fd, 0);
    if (base.equals(ptr(-1))) {
      close(fd);
      throw new Error(`cannot map ring region ${path} (${size} bytes)`);
    }
    /* Kept open: the hot path reserves each thread's rings in it as threads start
     * (ada_reserve_rings); ada unlinks the file once this mapping exists. */
    this.regionFd = fd;
    return base;
  }

  _mapPrivate(size, flags) {
    const base = mapAnonymous(size, flags);
    if (base === null)
      throw new Error(`cannot reserve ${Math.round(size / 1048576)} MB for the rings in the target; ` +
                      'lower --max-threads, --ring-kb or --detail-ring-kb');
    return base;
  }

  /* The fields the host chose; ada_init() completes the header (magic last). */
  _writeHeader(c) {
    const r = this.region;
    const at = field => r.add(this.layout['header.' + field]);
    at('max_threads').writeU32(c.maxThreads);
    at('index_capacity').writeU32(c.indexCapacity);
    at('detail_capacity').writeU32(c.detailCapacity);
    at('policy').writeU32(c.policy);
    at('heartbeat_ns').writeU64(uint64(c.heartbeatNs));
    at('stall_ns').writeU64(uint64(c.stallNs));
    at('index_rings_offset').writeU64(uint64(c.indexRingsOffset));
    at('detail_rings_offset').writeU64(uint64(c.detailRingsOffset));
    at('region_size').writeU64(uint64(c.regionSize));
    at('detail_mode').writeU32(c.detailMode);
    at('stack_bytes').writeU32(c.stackBytes);
    at('trigger_gap_ns').writeU64(uint64(c.triggerGapNs));
  }

  /* A thread slot's control block in the region at `base` (or in a copy of it). */
  _slot(base, slot) {
    return base.add(this.layout['region.slots_offset'] + slot * this.layout['sizeof.slot']);
  }

  _registered() {
    return Math.min(this.region.add(this.layout['header.registered']).readU32(), this.config.maxThreads);
  }

  /*
   * The selection, applied to every module present now (ada_selection.js), and
   * from now on to each module that loads (Process.attachModuleObserver). The
   * functions found here are hooked by hook(); later ones as their module loads.
   */
  resolve(selection, triggers) {
    this.selection = new Selection(selection);
    this.triggerSelection = new Selection(triggers);
    this.observer = Process.attachModuleObserver({
      onAdded: module => this._moduleAdded(module),
      onRemoved: module => this._moduleRemoved(module),
    });
    const now = this._clockNs();
    const found = [];
    for (const module of Process.enumerateModules()) {
      this.seen.add(`${module.path}@${module.base}`);
      const names = moduleNames(module);
      found.push({ module, names, functions: this.selection.functionsIn(module, names.names),
                   triggers: this.triggerSelection.functionsIn(module, names.names) });
    }
    /* Module ids: the main executable 0, then the others with functions, by path. */
    const main = Process.mainModule.path;
    found.sort((a, b) => (a.module.path === main ? -1 : b.module.path === main ? 1 :
                          a.module.path < b.module.path ? -1 : a.module.path > b.module.path ? 1 : 0));
    const loaded = found.map(f => f.names.names);
    const functions = [];
    const triggerList = [];
    for (const f of found) {
      functions.push(...this._adopt(f.module, f.names, f.functions, now));
      triggerList.push(...this._adoptTriggers(f.module, f.triggers));
    }
    this.initial = { functions, triggers: triggerList };
    return {
      functions, triggers: triggerList, hits: this.selection.hits,
      waiting: this.selection.waitingFor(loaded), anyModule: this.selection.anyModule,
      triggersWaiting: this.triggerSelection.waitingFor(loaded),
      triggersAnyModule: this.triggerSelection.anyModule,
    };
  }

  /* Ids for a module's selected functions: function_id = module_id << 32 | symbol_index. */
  _adopt(module, names, selected, now) {
    if (selected.size === 0)
      return [];
    let entry = this.modules.get(names.file);
    if (entry === undefined) {
      const moduleId = module.path === Process.mainModule.path ? 0
        : [...this.modules.values()].filter(m => m.moduleId !== 0).length + 1;
      entry = { moduleId, file: names.file };
      this.modules.set(names.file, entry);
    }
    const list = [...selected.values()].sort((a, b) => a.address.compare(b.address));
    return list.map((f, index) => ({
      functionId: hex64(entry.moduleId, index), moduleId: entry.moduleId, symbolIndex: index,
      name: f.name, address: f.address.toString(), module: module.name, modulePath: module.path,
      moduleFile: names.file, moduleNames: names.names, moduleBase: module.base.toString(),
      moduleSize: module.size, addedNs: now,
    }));
  }

  /* --trigger functions: their calls go to ada_on_trigger, under ids of their own. */
  _adoptTriggers(module, selected) {
    return [...selected.values()].map(f => ({
      triggerId: hex64(0xffffffff, this.triggerCount++), name: f.name, module: module.name,
      address: f.address.toString(),
    }));
  }

  _clockNs() {
    if (this.clockFn === undefined)
      this.clockFn = new NativeFunction(this.cm.ada_clock_ns, 'uint64', []);
    return this.clockFn().toString();
  }

  /*
   * Which argument registers of a function hold C strings to capture with its detail
   * (ada_capture_strings): the host reads them from debug information before hook().
   * functionId -> bit mask of regs[] slots.
   */
  setStringArgs(masks) {
    for (const [functionId, mask] of Object.entries(masks))
      this.stringArgs.set(functionId, mask);
    if (this.hookedAddresses.size !== 0)
      this._publishTable();  /* functions hooked already (a module loaded later) */
  }

  /* address -> function_id for the hot path (ADA_FUNCTION_ID in ada_hooks.c: same hash),
   * published whole as a new table (threads may be reading the old one: it is kept). */
  _publishTable() {
    let slots = 1024;
    while (slots < this.hookedAddresses.size * 2)
      slots *= 2;
    const mask = slots - 1;
    const TABLE_HEADER = 16;
    const SLOT = this.layout['agent.sizeof_function_slot'];
    const table = Memory.alloc(TABLE_HEADER + slots * SLOT);
    table.writeU64(mask);
    const base = table.add(TABLE_HEADER);
    for (const [address, functionId] of this.hookedAddresses) {
      const a = ptr(address);
      let i = a.shr(4).xor(a.shr(17)).and(mask).toUInt32();
      while (!base.add(i * SLOT).readPointer().isNull())
        i = (i + 1) & mask;
      base.add(i * SLOT).writePointer(a);
      base.add(i * SLOT + 8).writeU64(uint64(functionId));
      base.add(i * SLOT + 16).writeU64(this.stringArgs.get(functionId) || 0);
    }
    this.keepAlive.push(table);
    if (this.setFunctionsFn === undefined)
      this.setFunctionsFn = new NativeFunction(this.cm.ada_set_functions, 'void', ['pointer']);
    this.setFunctionsFn(table);
  }

  /* Hook functions and triggers; returns the ones Frida refused, in the host's words later. */
  _attach(functions, triggers) {
    const failures = [];
    const fallbacks = [];  /* functions the inline engine left to the Interceptor, and why */
    const aliases = [];    /* functions that only jump to another one's code, hooked already */
    for (const f of functions)
      this.hookedAddresses.set(f.address, f.functionId);
    this._publishTable();
    const callbacks = { onEnter: this.cm.ada_on_enter, onLeave: this.cm.ada_on_leave };
    /* Frida's Interceptor and ada's hot path call these for a thread's hooked calls:
     * hooked, they would recurse until the target crashes. */
    const machinery = ['pthread_getspecific', 'pthread_setspecific']
      .map(name => Module.findGlobalExportByName(name)).filter(a => a !== null);
    /* The code each function runs, past jump thunks, as Frida's Interceptor resolves them.
     * Functions whose own code it is go first: a thunk to one of them is then recorded
     * under its name, not hooked twice (which would record each call twice). */
    const code = functions.map(f => this._resolveRedirects(ptr(f.address)));
    const own = i => code[i].equals(ptr(functions[i].address)) ? 0 : 1;
    const order = functions.map((f, i) => i).sort((a, b) => own(a) - own(b) || a - b);
    let hooked = 0;
    for (const i of order) {
      const f = functions[i], at = code[i];
      const owner = this.codeOwners.get(at.toString());
      if (owner !== undefined) {
        aliases.push({ name: f.name, module: f.module, address: f.address, as: owner });
        hooked++;
        continue;
      }
      if (machinery.some(a => at.equals(a))) {
        this.hookedAddresses.delete(f.address);
        failures.push({ name: f.name, module: f.module, address: f.address,
                        error: 'ada and Frida call it on every hooked call: it cannot be traced' });
        continue;
      }
      try {
        const reason = this.inline !== null ? this.inline.hook(at, f.functionId, ptr(f.address)) : '';
        if (reason !== null) {
          Interceptor.attach(ptr(f.address), callbacks, ptr(f.functionId));
          if (this.inline !== null)
            fallbacks.push({ name: f.name, module: f.module, address: f.address, reason });
        }
        this.codeOwners.set(at.toString(), `${f.module}!${f.name}`);
        hooked++;
      } catch (e) {
        this.hookedAddresses.delete(f.address);
        failures.push({ name: f.name, module: f.module, address: f.address, error: e.message });
      }
    }
    const onTrigger = { onEnter: this.cm.ada_on_trigger };
    for (const t of triggers) {
      try {
        Interceptor.attach(ptr(t.address), onTrigger, ptr(t.triggerId));
      } catch (e) {
        failures.push({ name: t.name, module: t.module, address: t.address, error: e.message,
                        trigger: true });
      }
    }
    Interceptor.flush();
    return { hooked, failures, fallbacks, aliases };
  }

  /*
   * Where the code at `address` really starts: through `jmp target` and `jmp [rip+x]`
   * (x86_64) or `b target` (arm64) thunks, stopping at code ada hooked already (it starts
   * with ada's own jump now), as Frida's Interceptor resolves a function it attaches to.
   */
  _resolveRedirects(address) {
    let at = address;
    for (let hops = 0; hops < 8 && !this.codeOwners.has(at.toString()); hops++) {
      let insn;
      try {
        insn = Instruction.parse(at);
      } catch (e) {
        break;
      }
      if (insn.mnemonic !== 'jmp' && insn.mnemonic !== 'b')
        break;
      const op = insn.operands[0];
      if (op.type === 'imm')
        at = ptr(op.value);
      else if (op.type === 'mem' && op.value.base === 'rip' && op.value.index === undefined)
        at = insn.next.add(op.value.disp).readPointer();
      else
        break;
    }
    return at;
  }

  /* The functions resolve() found; from now on modules are hooked as they load. */
  hook() {
    Process.setExceptionHandler(details => this._onException(details));
    this._attachExitHooks();
    for (const module of Process.enumerateModules())
      this._watchRuntime(module);
    const result = this._attach(this.initial.functions, this.initial.triggers);
    this.initial = null;
    this.hooked = true;
    this.live = true;
    const pending = this.pending;
    this.pending = [];
    for (const module of pending)
      this._moduleAdded(module);
    return result;
  }

  /* A module loaded (or, before hook(), one the initial pass may not have seen). */
  _moduleAdded(module) {
    const key = `${module.path}@${module.base}`;
    if (this.seen.has(key))
      return;
    if (!this.live) {
      this.pending.push(module);
      return;
    }
    this.seen.add(key);
    this._watchRuntime(module);
    const names = moduleNames(module);
    const functions = this._adopt(module, names, this.selection.functionsIn(module, names.names),
                                  this._clockNs());
    const triggers = this._adoptTriggers(module,
                                         this.triggerSelection.functionsIn(module, names.names));
    if (functions.length === 0 && triggers.length === 0)
      return;
    const { hooked, failures, fallbacks, aliases } = this._attach(functions, triggers);
    send({ type: 'ada:module-loaded', module: module.name, functions, triggers, hooked, failures,
           fallbacks, aliases, hits: this.selection.hits });
  }

  /*
   * std::terminate, where a C++ runtime defines it (ada_on_terminate says why); with the
   * inline engine, the unwinder's entry points and __cxa_begin_catch too (see
   * ada_inline_unwinding in ada_hooks.c: an exception unwinds through hooked calls).
   * Not _Unwind_Backtrace: a backtrace stops at the first hooked call, as with Frida's
   * Interceptor.
   */
  _watchRuntime(module) {
    /* Probes (a C function, not {onEnter}): Frida then leaves the return address alone,
     * which an unwinder starting in that very function needs. */
    const hooks = [['_ZSt9terminatev', this.cm.ada_on_terminate]];
    if (this.inline !== null) {
      for (const name of ['_Unwind_RaiseException', '_Unwind_Resume', '_Unwind_Resume_or_Rethrow',
                          '_Unwind_ForcedUnwind'])
        hooks.push([name, this.cm.ada_inline_unwinding]);
      hooks.push(['__cxa_begin_catch', this.cm.ada_inline_caught]);
    }
    for (const [name, callbacks] of hooks) {
      const address = module.findExportByName(name);
      if (address === null)
        continue;
      try {
        Interceptor.attach(address, callbacks);
      } catch (e) {
      }
    }
  }

  /* Frida keeps a module it has hooks in loaded; this is for the record. */
  _moduleRemoved(module) {
    const key = `${module.path}@${module.base}`;
    if (!this.seen.delete(key))
      return;
    send({ type: 'ada:module-unloaded', path: module.path, base: module.base.toString(),
           removedNs: this._clockNs() });
  }

  /*
   * RPC transport: the host's consumer side, done here on its behalf. Records
   * the tails the host has consumed (that is the back-pressure producers wait
   * on), then returns one buffer: a prefix, the header page, the control block
   * of every registered slot, a segment table and the new ring bytes. A slot's
   * head in the copy is cut back to what the buffer holds, so the host's view
   * is always whole events and whole detail records.
   */
  pull(tails, budget, freed) {
    const c = this.config;
    const L = this.layout;
    const P = c.pull;  /* the buffer's format, as the host reads it (tracer/record/transport.py) */
    const r = this.region;
    const eventBytes = L['sizeof.event'];
    for (let i = 0; i < tails.length; i += 3) {
      const slot = tails[i];
      const ctl = this._slot(r, slot);
      ctl.add(L['slot.tail']).writeU64(uint64(tails[i + 1]));
      ctl.add(L['slot.detail_tail']).writeU64(uint64(tails[i + 2]));
      this.tails[slot] = [tails[i + 1], tails[i + 2]];
    }
    for (const slot of freed || [])
      this._free(slot);
    this.heartbeat();
    const registered = this._registered();
    const controls = L['region.slots_offset'] + registered * L['sizeof.slot'];
    const fixed = P.prefixBytes + controls;
    const maxSegments = registered * 2;
    const capacity = fixed + maxSegments * P.segmentBytes + budget;
    if (this.stage === null || this.stage.size < capacity)
      this.stage = { base: Memory.alloc(capacity), size: capacity };
    const st = this.stage.base;
    const copyOfRegion = st.add(P.prefixBytes);
    Memory.copy(copyOfRegion, r, controls);
    const table = st.add(fixed);
    let data = fixed + maxSegments * P.segmentBytes;
    let segments = 0;
    let left = budget;
    const addSegment = (slot, lane, start, length, ringBase, ringSize) => {
      const pos = start % ringSize;
      const first = Math.min(length, ringSize - pos);
      Memory.copy(st.add(data), ringBase.add(pos), first);
      if (first < length)
        Memory.copy(st.add(data + first), ringBase, length - first);
      const e = table.add(segments * P.segmentBytes);
      e.add(P.segment.slot).writeU32(slot);
      e.add(P.segment.lane).writeU32(lane);
      e.add(P.segment.start).writeU64(uint64(start));
      e.add(P.segment.length).writeU64(uint64(length));
      e.add(P.segment.offset).writeU64(uint64(data));
      segments++;
      data += length;
      left -= length;
    };
    for (let slot = 0; slot < registered; slot++) {
      const ctl = this._slot(r, slot);
      const copy = this._slot(copyOfRegion, slot);
      const state = ctl.add(L['slot.state']).readU32();
      if (state !== L['const.slot_active'] && state !== L['const.slot_ended'])
        continue;
      const [tail, dtail] = this.tails[slot] || [0, 0];
      /* Index head before detail head, as the local drain reads them: every index
       * event sent then has its detail record (written first) available too. */
      const head = ctl.add(L['slot.head']).readU64().toNumber();
      const dhead = c.detailCapacity > 0 ? ctl.add(L['slot.detail_head']).readU64().toNumber() : 0;
      /* A slot's detail is sent whole (whole records) or waits for the next pull. */
      let detailSent = 0;
      if (dhead > dtail && dhead - dtail <= left) {
        addSegment(slot, 1, dtail, dhead - dtail, r.add(c.detailRingsOffset + slot * c.detailCapacity),
                   c.detailCapacity);
        detailSent = dhead - dtail;
      }
      copy.add(L['slot.detail_head']).writeU64(uint64(dtail + detailSent));
      const events = Math.max(0, Math.min(head - tail, Math.floor(left / eventBytes)));
      const ringBytes = c.indexCapacity * eventBytes;
      if (events > 0)
        addSegment(slot, 0, tail * eventBytes, events * eventBytes,
                   r.add(c.indexRingsOffset + slot * ringBytes), ringBytes);
      copy.add(L['slot.head']).writeU64(uint64(tail + events));
      /* The host frees an ended slot once it has drained it: only when all of it is sent. */
      if (state === L['const.slot_ended'] && (tail + events < head || detailSent < dhead - dtail))
        copy.add(L['slot.state']).writeU32(L['const.slot_active']);
    }
    st.add(P.prefix.magic).writeU32(P.magic);
    st.add(P.prefix.segments).writeU32(segments);
    st.add(P.prefix.registered).writeU32(registered);
    st.add(P.prefix.capacity).writeU32(maxSegments);
    return ArrayBuffer.wrap(st, data);
  }

  /* RPC transport: the host has drained an ended thread's slot; a new thread may claim it
   * (the host's side of this is RingReader.free_slot, on the local device). */
  _free(slot) {
    const L = this.layout;
    const ctl = this._slot(this.region, slot);
    if (ctl.add(L['slot.state']).readU32() !== L['const.slot_ended'])
      return;
    ctl.add(L['slot.tail']).writeU64(0);
    ctl.add(L['slot.detail_tail']).writeU64(0);
    this.tails[slot] = [0, 0];
    const releases = ctl.add(L['slot.releases']);
    releases.writeU32(releases.readU32() + 1);
    ctl.add(L['slot.state']).writeU32(L['const.slot_free']);
  }

  heartbeat() {
    if (this.heartbeatFn === undefined)
      this.heartbeatFn = new NativeFunction(this.cm.ada_heartbeat, 'void', []);
    this.heartbeatFn();
  }

  /*
   * Frida calls this as the process exits or execs (it hooks exit, _exit and
   * abort), and when the script is unloaded. On exit and exec everything ada has
   * not taken yet is handed over: with the RPC transport the rings die with the
   * process, and through a relay (a portal, frida-server) a message sent while
   * the process dies can be lost, so Frida's call waits (bounded) for ada's
   * acknowledgement. On unload ada has drained already (it stopped first).
   */
  dispose(reason) {
    this.stop();
    if (this._forked())
      return null;  /* a forked child's copy: the recording and its rings are the parent's */
    if (reason !== 'exit' && reason !== 'exec' || this.handedOver || this.stoppedByHost)
      return null;  /* ada is finishing: it takes what is left itself, and acks nothing */
    const acked = new Promise(resolve => {
      const timer = setTimeout(() => resolve(false), HANDOVER_TIMEOUT_MS);
      recv('ada:ack', () => {
        clearTimeout(timer);
        resolve(true);
      });
    });
    this._sendHandover(reason, null);
    if (reason === 'exit')
      this._attachExitHooks();  /* stop() removed them; exit goes on to _exit */
    return acked;
  }

  /*
   * One handover message: why the process ends, the ring heads at this moment
   * (what ada must have received for nothing to be lost) and, with the RPC
   * transport, every ring byte not pulled yet.
   */
  _sendHandover(reason, crash) {
    const L = this.layout;
    const heads = [];
    if (this.region !== null) {
      for (let slot = 0; slot < this._registered(); slot++) {
        const ctl = this._slot(this.region, slot);
        heads.push([slot, ctl.add(L['slot.generation']).readU32(),
                    ctl.add(L['slot.head']).readU64().toString(),
                    ctl.add(L['slot.detail_head']).readU64().toString()]);
      }
    }
    const rpcData = this.config !== null && this.config.shmPath === null && this.region !== null;
    this.handedOver = true;
    send({ type: 'ada:final', reason, crash, heads, exitStatus: this.exitStatus },
         rpcData ? this.pull([], this._pendingBytes(), []) : null);
  }

  /* Wait, blocking this thread (not the JavaScript one), for the host's acknowledgement. */
  _awaitAck() {
    const flag = Memory.alloc(4);
    recv('ada:ack', () => flag.writeU32(1));
    if (this.waitFlagFn === undefined)
      this.waitFlagFn = new NativeFunction(this.cm.ada_wait_flag, 'uint32', ['pointer', 'uint32']);
    return this.waitFlagFn(flag, HANDOVER_TIMEOUT_MS) !== 0;
  }

  /*
   * exit() and _exit(): their status is the process's exit status. Frida's own
   * hook on them calls dispose() first, which hands the rings over; but a
   * session that came through a portal is not disposed at exit (Frida keeps
   * those apart), so the first of these calls hands them over if nobody has.
   */
  _attachExitHooks() {
    const seen = new Set();
    for (const name of ['exit', '_exit']) {
      const address = Module.findGlobalExportByName(name);
      if (address === null || seen.has(address.toString()))
        continue;
      seen.add(address.toString());
      try {
        Interceptor.attach(address, { onEnter: args => this._onExitCall(args[0].toInt32()) });
      } catch (e) {
      }
    }
  }

  _onExitCall(status) {
    if (this._forked())
      return;  /* a forked child's exit: not the traced process's */
    if (this.exitStatus !== null)
      return;  /* exit() calls _exit() with the same status */
    this.exitStatus = status;
    if (this.handedOver) {
      send({ type: 'ada:exit-status', status });
    } else {
      if (this.region !== null)
        this.region.add(this.layout['header.stop']).writeU32(1);
      this._sendHandover('exit', null);
    }
    this._awaitAck();
  }

  /*
   * A fatal signal (Process.setExceptionHandler: Frida calls this first, on the
   * faulting thread). If the program has its own handler for the signal (ART and
   * JVMs use SIGSEGV for null checks) it is not ours to judge: nothing is done.
   * Otherwise the process is about to die: say how, hand the rings over, and
   * let the signal take its course.
   */
  _onException(details) {
    const signal = fatalSignal(details.type);
    if (signal === null || this.crashed || this._forked() ||
        this._programHandles(signal.numbers))
      return false;
    this.crashed = true;
    const memory = details.memory || null;
    const crash = {
      signal: signal.name, type: details.type, address: details.address.toString(),
      threadId: Process.getCurrentThreadId(),
      memoryOperation: memory !== null ? memory.operation : null,
      memoryAddress: memory !== null ? memory.address.toString() : null,
      symbol: describeAddress(details.address),
    };
    try {
      this._sendHandover('crash', crash);
      this._awaitAck();
    } catch (e) {
    }
    return false;
  }

  /* Whether the program installed its own handler for any of these signals. */
  _programHandles(numbers) {
    if (this.sigactionFn === undefined) {
      const address = Module.findGlobalExportByName('sigaction');
      this.sigactionFn = address === null ? null
        : new NativeFunction(address, 'int', ['int', 'pointer', 'pointer']);
    }
    if (this.sigactionFn === null)
      return false;
    const old = Memory.alloc(256);  /* larger than any platform's struct sigaction */
    for (const n of numbers) {
      if (this.sigactionFn(n, NULL, old) === 0) {
        const handler = old.readPointer();
        if (!handler.isNull() && !handler.equals(ptr(1)))  /* SIG_DFL 0, SIG_IGN 1 */
          return true;
      }
    }
    return false;
  }

  /* Ring bytes produced but not yet consumed by the host, over all slots. */
  _pendingBytes() {
    const L = this.layout;
    const registered = this._registered();
    let total = 0;
    for (let slot = 0; slot < registered; slot++) {
      const ctl = this._slot(this.region, slot);
      const state = ctl.add(L['slot.state']).readU32();
      if (state !== L['const.slot_active'] && state !== L['const.slot_ended'])
        continue;
      const [tail, dtail] = this.tails[slot] || [0, 0];
      total += (ctl.add(L['slot.head']).readU64().toNumber() - tail) * L['sizeof.event'];
      if (this.config.detailCapacity > 0)
        total += ctl.add(L['slot.detail_head']).readU64().toNumber() - dtail;
    }
    return total;
  }

  /*
   * The inline engine's functions are put back and its stubs stop calling the hot path;
   * then wait (a little) for threads that were inside the hot path to leave it: this
   * script, and the hot path with it, is unloaded next.
   */
  _leaveInline() {
    this.inline.unhook();
    this.inline.detach();
    const L = this.layout;
    const deadline = Date.now() + 200;
    Thread.sleep(0.01);
    for (let slot = 0; slot < this._registered(); slot++) {
      const busy = this.threads.add(slot * L['agent.sizeof_thread_state'] + L['agent.thread_busy']);
      while (busy.readU32() !== 0 && Date.now() < deadline)
        Thread.sleep(0.001);
    }
  }

  /* ada stops the recording: it drains what is left, and unloads this script. */
  stopByHost() {
    this.stoppedByHost = true;
    return this.stop();
  }

  stop() {
    if (this.clockTimer !== null) {
      clearInterval(this.clockTimer);
      this.clockTimer = null;
    }
    if (this.observer !== undefined) {
      this.observer.detach();
      this.observer = undefined;
    }
    if (this.hooked) {
      Interceptor.detachAll();
      Interceptor.flush();
      if (this.inline !== null)
        this._leaveInline();
      this.hooked = false;
    }
    if (this.cm !== null && this.finiFn === undefined) {
      this.finiFn = new NativeFunction(this.cm.ada_fini, 'void', []);
      this.finiFn();
    }
    if (this.region !== null && !this._forked())
      this.region.add(this.layout['header.stop']).writeU32(1);
    return true;
  }

  /* In a forked child's copy of this script (its region is the parent's, shared). */
  _forked() {
    return this.here !== null && this.here.readU32() === 0;
  }
}

const agent = new AdaAgent();

rpc.exports = {
  init: config => agent.init(config),
  resolve: (selection, triggers) => agent.resolve(selection, triggers),
  hook: () => agent.hook(),
  pull: (tails, budget, freed) => agent.pull(tails, budget, freed),
  stop: () => agent.stopByHost(),
  clockAnchor: () => agent.clockAnchor(),
  setStringArgs: masks => agent.setStringArgs(masks),
  /* For the tests: compile-check the hot path for platforms this host is not. */
  hotPathDefines: (platform, arch, facts) => hotPathDefines(platform, arch, facts),
  cmoduleBuiltins: () => CModule.builtins,
  dispose: reason => agent.dispose(reason),
};
