'use strict';
/*
 * ada agent: the one-time work inside the target. It resolves the selected
 * functions, maps the ring region, compiles ada_hooks.c with CModule and
 * attaches its C callbacks with Interceptor. JavaScript never runs per call.
 *
 * Written against the frida 17 API: Process.getModuleByName / findModuleByName
 * and Module instance methods, Module.getGlobalExportByName (the static
 * Module.findExportByName and friends are gone).
 */

const O_RDWR = 2;
const PROT_READ_WRITE = 3;
const MAP_SHARED = 1;
const CLOCK_BOOTTIME = 7;
const AGENT_STATE_BYTES = 64 * 1024;
const LAYOUT_WORDS = 16;

/* Every platform difference of the hot path is decided here. */
function platformConfig() {
  const arch = Process.arch;
  if (arch !== 'x64' && arch !== 'arm64')
    throw new Error(`unsupported architecture ${arch}: ada supports x86_64 and arm64`);
  const defines = [];
  const symbols = { ada_memcpy: Module.getGlobalExportByName('memcpy') };
  let clockType;
  if (Process.platform === 'darwin') {
    const timebase = Memory.alloc(8);
    const machTimebaseInfo = new NativeFunction(Module.getGlobalExportByName('mach_timebase_info'), 'int', ['pointer']);
    machTimebaseInfo(timebase);
    defines.push('#define ADA_CLOCK_MACH 1');
    defines.push(`#define ADA_MACH_NUMER ${timebase.readU32()}ULL`);
    defines.push(`#define ADA_MACH_DENOM ${timebase.add(4).readU32()}ULL`);
    defines.push('#define ADA_STACK_DARWIN 1');
    defines.push('#define ADA_SAFE_READ_MACH 1');
    for (const name of ['mach_continuous_time', 'pthread_threadid_np', 'pthread_self',
                        'pthread_get_stackaddr_np', 'pthread_get_stacksize_np', 'mach_task_self_',
                        'mach_vm_read_overwrite'])
      symbols[name] = Module.getGlobalExportByName(name);
    clockType = 1;
  } else if (Process.platform === 'linux') {
    defines.push(`#define ADA_CLOCK_ID ${CLOCK_BOOTTIME}`);
    defines.push(`#define ADA_TID_SYSCALL ${arch === 'x64' ? 186 : 178}`);
    defines.push('#define ADA_STACK_PTHREAD_ATTR 1');
    defines.push(`#define ADA_SAFE_READ_SYSCALL ${arch === 'x64' ? 310 : 270}`);  /* process_vm_readv */
    symbols.ada_clock_gettime = findVdsoClock() || Module.getGlobalExportByName('clock_gettime');
    for (const name of ['syscall', 'pthread_self', 'pthread_getattr_np', 'pthread_attr_getstack',
                        'pthread_attr_destroy'])
      symbols[name] = Module.getGlobalExportByName(name);
    clockType = 3;
  } else {
    throw new Error(`unsupported platform ${Process.platform}`);
  }
  return { arch, defines, symbols, clockType };
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

function globToRegExp(glob) {
  const escaped = glob.replace(/[.+^${}()|\\]/g, '\\$&').replace(/\*/g, '.*').replace(/\?/g, '.')
    .replace(/\[!/g, '[^');
  return new RegExp(`^${escaped}$`);
}

function hex64(hi, lo) {
  return '0x' + hi.toString(16).padStart(8, '0') + lo.toString(16).padStart(8, '0');
}

class AdaAgent {
  constructor() {
    this.cm = null;
    this.keepAlive = [];   /* JS references that keep agent memory from being freed */
    this.region = null;
    this.regionSize = 0;
    this.selected = new Map();  /* address string -> {name, module, address} */
    this.functions = [];
    this.triggers = [];
    this.hooked = false;
  }

  init(config) {
    const plat = platformConfig();
    this.region = config.shmPath !== null ? this._mapShared(config.shmPath, config.regionSize)
                                          : Memory.alloc(config.regionSize);
    this.regionSize = config.regionSize;
    this._writeHeader(config);
    const state = Memory.alloc(AGENT_STATE_BYTES);
    const symbols = Object.assign({ ada_state: state }, plat.symbols);
    this.cm = new CModule(plat.defines.join('\n') + '\n' + config.source, symbols);
    const layout = Memory.alloc(LAYOUT_WORDS * 8);
    new NativeFunction(this.cm.ada_layout, 'void', ['pointer'])(layout);
    const words = [];
    for (let i = 0; i < LAYOUT_WORDS; i++)
      words.push(layout.add(i * 8).readU64().toNumber());
    if (words[11] > AGENT_STATE_BYTES)
      throw new Error(`agent state of ${words[11]} bytes exceeds ${AGENT_STATE_BYTES}`);
    const threads = Memory.alloc(config.maxThreads * words[10]);
    state.add(Process.pointerSize).writePointer(this.region);
    state.add(Process.pointerSize * 4).writePointer(threads);
    new NativeFunction(this.cm.ada_init, 'void', ['uint32'])(Process.id);
    this.keepAlive.push(state, layout, threads, symbols);
    return {
      pid: Process.id,
      arch: plat.arch,
      platform: Process.platform,
      pointerSize: Process.pointerSize,
      clockType: plat.clockType,
      mainModule: { name: Process.mainModule.name, path: Process.mainModule.path },
      layout: words,
    };
  }

  _mapShared(path, size) {
    const open = new NativeFunction(Module.getGlobalExportByName('open'), 'int', ['pointer', 'int']);
    const close = new NativeFunction(Module.getGlobalExportByName('close'), 'int', ['int']);
    const mmap = new NativeFunction(Module.getGlobalExportByName('mmap'), 'pointer',
      ['pointer', 'size_t', 'int', 'int', 'int', 'int64']);
    const fd = open(Memory.allocUtf8String(path), O_RDWR);
    if (fd < 0)
      throw new Error(`cannot open ring region ${path}`);
    const base = mmap(NULL, size, PROT_READ_WRITE, MAP_SHARED, fd, 0);
    close(fd);
    if (base.equals(ptr(-1)))
      throw new Error(`cannot map ring region ${path} (${size} bytes)`);
    return base;
  }

  _writeHeader(c) {
    const r = this.region;
    r.add(8).writeU32(1);
    r.add(12).writeU32(c.maxThreads);
    r.add(16).writeU32(c.indexCapacity);
    r.add(20).writeU32(c.detailCapacity);
    r.add(40).writeU32(c.policy);
    r.add(48).writeU64(uint64(c.heartbeatNs));
    r.add(56).writeU64(uint64(c.stallNs));
    r.add(64).writeU64(uint64(c.indexRingsOffset));
    r.add(72).writeU64(uint64(c.detailRingsOffset));
    r.add(80).writeU64(uint64(c.regionSize));
    r.add(88).writeU32(c.detailMode);
    r.add(92).writeU32(c.stackBytes);
    r.add(112).writeU64(uint64(c.triggerGapNs));
    r.writeU64(uint64('0x31474e4952414441'));  /* magic last: the header is complete */
  }

  /*
   * Selection, in the order given (frida-trace semantics): each entry adds to
   * or removes from the set. kind: function (-i/-x), module (-I/-X),
   * offset (-a), symbol (-s, from the symbol table, exported or not).
   */
  resolve(selection) {
    this.selected = this._select(selection);
    return { functions: this._assignIds(), warnings: [] };
  }

  /* --trigger patterns use the same spelling; their calls go to ada_on_trigger. */
  resolveTriggers(selection) {
    const found = [...this._select(selection).values()];
    this.triggers = found.map((f, i) => ({
      triggerId: hex64(0xffffffff, i), name: f.name, module: f.module.name, address: f.address.toString(),
    }));
    return this.triggers;
  }

  _select(selection) {
    const selected = new Map();
    const add = (module, name, address) => {
      const key = address.toString();
      if (!selected.has(key))
        selected.set(key, { name, module, address });
    };
    const modules = Process.enumerateModules();
    const matchModules = glob => {
      if (glob === null)
        return modules;
      const re = globToRegExp(glob);
      return modules.filter(m => re.test(m.name) || re.test(m.path));
    };
    for (const item of selection) {
      const nameRe = item.pattern !== null ? globToRegExp(item.pattern) : null;
      if (item.op === 'exclude') {
        const mods = new Set(matchModules(item.module).map(m => m.path));
        for (const [key, f] of selected) {
          if (mods.has(f.module.path) && (item.kind === 'module' || nameRe.test(f.name)))
            selected.delete(key);
        }
        continue;
      }
      for (const m of matchModules(item.module)) {
        if (item.kind === 'offset') {
          add(m, `${m.name}+0x${item.offset.toString(16)}`, m.base.add(item.offset));
        } else if (item.kind === 'symbol') {
          for (const s of m.enumerateSymbols())
            if (s.type === 'function' && !s.address.isNull() && nameRe.test(s.name))
              add(m, s.name, s.address);
        } else {
          for (const e of m.enumerateExports())
            if (e.type === 'function' && (item.kind === 'module' || nameRe.test(e.name)))
              add(m, e.name, e.address);
        }
      }
    }
    return selected;
  }

  /* function_id = module_id << 32 | symbol_index: main module 0, others by path; by address within. */
  _assignIds() {
    const main = Process.mainModule.path;
    const byModule = new Map();
    for (const f of this.selected.values()) {
      if (!byModule.has(f.module.path))
        byModule.set(f.module.path, { module: f.module, list: [] });
      byModule.get(f.module.path).list.push(f);
    }
    const others = [...byModule.keys()].filter(p => p !== main).sort();
    const order = (byModule.has(main) ? [main] : []).concat(others);
    this.functions = [];
    order.forEach((path, i) => {
      const moduleId = path === main ? 0 : (byModule.has(main) ? i : i + 1);
      const { module, list } = byModule.get(path);
      list.sort((a, b) => a.address.compare(b.address));
      list.forEach((f, index) => {
        this.functions.push({
          functionId: hex64(moduleId, index), moduleId, symbolIndex: index, name: f.name,
          address: f.address.toString(), module: module.name, modulePath: module.path,
          moduleBase: module.base.toString(), moduleSize: module.size,
        });
      });
    });
    return this.functions;
  }

  hook() {
    const failures = [];
    let hooked = 0;
    const callbacks = { onEnter: this.cm.ada_on_enter, onLeave: this.cm.ada_on_leave };
    for (const f of this.functions) {
      try {
        Interceptor.attach(ptr(f.address), callbacks, ptr(f.functionId));
        hooked++;
      } catch (e) {
        failures.push({ name: f.name, module: f.module, address: f.address, error: e.message });
      }
    }
    const onTrigger = { onEnter: this.cm.ada_on_trigger };
    for (const t of this.triggers) {
      try {
        Interceptor.attach(ptr(t.address), onTrigger, ptr(t.triggerId));
      } catch (e) {
        failures.push({ name: t.name, module: t.module, address: t.address, error: e.message,
                        trigger: true });
      }
    }
    Interceptor.flush();
    this.hooked = true;
    return { hooked, failures };
  }

  stop() {
    if (this.hooked) {
      Interceptor.detachAll();
      Interceptor.flush();
      this.hooked = false;
    }
    if (this.region !== null)
      this.region.add(44).writeU32(1);
    return true;
  }
}

const agent = new AdaAgent();

rpc.exports = {
  init: config => agent.init(config),
  resolve: selection => agent.resolve(selection),
  resolveTriggers: selection => agent.resolveTriggers(selection),
  hook: () => agent.hook(),
  stop: () => agent.stop(),
  dispose: () => agent.stop(),
};
