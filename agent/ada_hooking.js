'use strict';
/*
 * ada agent, the hooking (AgentHooking, methods of AdaAgent): the selection
 * (ada_selection.js) applied to the modules present at start (resolve) and to each one
 * that loads later (the module observer, reported to the host as it happens); ids for the
 * functions found; the hot path's table of hooked addresses; attaching the C callbacks
 * through Frida's Interceptor or the inline engine (ada_inline_<arch>.js, chosen by
 * inlineEngine); the runtime's functions ada watches (std::terminate, and the unwinder's
 * for the inline engine); and taking the inline engine's hooks out when ada stops.
 */

/*
 * The engine --hook-engine asks for: {name: 'inline' or 'frida', why}. auto takes the
 * inline engine on x86_64 Linux (its fastest, and it records tail calls, exceptions and
 * signal handlers where the Interceptor cannot) unless CET shadow stacks are on, and Frida's
 * Interceptor elsewhere (the arm64 stubs have run only under emulation: docs/platforms.md).
 */
function chooseEngine(asked) {
  if (asked !== 'auto')
    return { name: asked, why: `--hook-engine ${asked}` };
  if (Process.arch !== 'x64' || Process.platform !== 'linux')
    return { name: 'frida', why: `auto: Frida's Interceptor on ${Process.platform} ${Process.arch}` };
  if (shadowStacksOn())
    return { name: 'frida', why: "auto: Frida's Interceptor, as CET shadow stacks are on" };
  return { name: 'inline', why: 'auto: the inline engine on x86_64 Linux' };
}

/* Why a function was not hooked: its first bytes held a thread each time ada looked. */
const THREAD_INSIDE = 'a thread was inside its first bytes each time ada looked (asleep in a ' +
  'system call there, most likely): a jump written there would have crashed it';

/* How many bytes at `at` Frida's Interceptor overwrites: on x86_64 the instructions that
 * make room for its 5-byte jump (unless its trampoline is out of a jump's reach); 16. */
function interceptorPatchSize(at) {
  if (Process.arch !== 'x64')
    return 16;
  let size = 0;
  try {
    while (size < 5)
      size += Instruction.parse(at.add(size)).size;
  } catch (e) {
    return 16;
  }
  return size;
}

/*
 * The inline hook engine for this CPU (ada_inline_<arch>.js), or one line on why not.
 */
function inlineEngine(cm, layout, state, mapFlags, saveVectors) {
  if (Process.arch === 'x64' && shadowStacksOn())
    throw new Error('--hook-engine inline cannot run in a process with CET shadow stacks on ' +
                    '(it redirects return addresses): use --hook-engine frida');
  if (Process.arch === 'x64')
    return new InlineHooksX64(cm, layout, state, mapFlags, saveVectors);
  if (Process.arch === 'arm64' && Process.platform === 'linux')
    return new InlineHooksArm64(cm, layout, state, mapFlags);
  throw new Error(`--hook-engine inline is not available on ${Process.platform} ${Process.arch} ` +
                  '(x86_64, and arm64 on Linux and Android): use --hook-engine frida');
}

/* Linux 6.6+ says so in /proc/self/status ("x86_Thread_features: shstk ..."). */
function shadowStacksOn() {
  try {
    return /^x86_Thread_features:.*\bshstk\b/m.test(File.readAllText('/proc/self/status'));
  } catch (e) {
    return false;
  }
}

/* Where a `jmp target`, `jmp [rip+x]` (x86_64) or `b target` (arm64) goes; null for others. */
function jumpTarget(insn) {
  if (insn.mnemonic !== 'jmp' && insn.mnemonic !== 'b')
    return null;
  const op = insn.operands[0];
  if (op.type === 'imm')
    return ptr(op.value);
  if (op.type === 'mem' && op.value.base === 'rip' && op.value.index === undefined)
    return insn.next.add(op.value.disp).readPointer();
  return null;
}

/*
 * Whether the code at `at` starts with a jump into memory no module holds: a runtime hook.
 * Besides the jumps above, Frida's Interceptor writes `adrp xN, page; br xN` and
 * `ldr xN, literal; br xN` on arm64 (guminterceptor-arm64.c).
 */
function jumpsOutOfModules(at) {
  let to = null;
  try {
    const insn = Instruction.parse(at);
    to = jumpTarget(insn);
    const op = insn.operands;
    if (to === null && (insn.mnemonic === 'adrp' || insn.mnemonic === 'ldr') &&
        op.length === 2 && op[0].type === 'reg' && op[1].type === 'imm') {
      const next = Instruction.parse(insn.next);
      if (next.mnemonic === 'br' && next.operands[0].value === op[0].value)
        to = insn.mnemonic === 'adrp' ? ptr(op[1].value) : ptr(op[1].value).readPointer();
    }
  } catch (e) {
    return false;
  }
  return to !== null && Process.findModuleByAddress(to) === null;
}

function hex64(hi, lo) {
  return '0x' + hi.toString(16).padStart(8, '0') + lo.toString(16).padStart(8, '0');
}

const AgentHooking = {
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
      symbolHints: this.selection.symbolHints(found.map(f => ({ module: f.module,
                                                                names: f.names.names }))),
      waiting: this.selection.waitingFor(loaded), anyModule: this.selection.anyModule,
      triggersWaiting: this.triggerSelection.waitingFor(loaded),
      triggersAnyModule: this.triggerSelection.anyModule,
    };
  },

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
  },

  /* --trigger functions: their calls go to ada_on_trigger, under ids of their own. */
  _adoptTriggers(module, selected) {
    return [...selected.values()].map(f => ({
      triggerId: hex64(0xffffffff, this.triggerCount++), name: f.name, module: module.name,
      address: f.address.toString(),
    }));
  },

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
  },

  /* address -> function_id for the hot path (ADA_FUNCTION_ID in ada_rings.c: same hash),
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
  },

  /* Hook functions and triggers; returns the ones Frida refused, in the host's words later. */
  _attach(functions, triggers) {
    const failures = [];
    const fallbacks = [];  /* functions the inline engine left to the Interceptor, and why */
    const aliases = [];    /* functions that only jump to another one's code, hooked already */
    const breakpoints = [];  /* functions hooked through an int3 (the inline engine's last resort) */
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
    /* Each function's code is hooked once: a function whose code another one's is, hooked
     * already (or first in this list), is an alias of it. */
    const owners = new Map();
    const aliasOf = new Map();   /* index -> the index it is an alias of */
    const candidates = [];
    for (const i of order) {
      const f = functions[i], key = code[i].toString();
      const owner = this.codeOwners.get(key);
      if (owner !== undefined) {
        aliases.push({ name: f.name, module: f.module, address: f.address, as: owner });
        continue;
      }
      if (owners.has(key)) {
        aliasOf.set(i, owners.get(key));
        continue;
      }
      if (machinery.some(a => code[i].equals(a))) {
        this.hookedAddresses.delete(f.address);
        failures.push({ name: f.name, module: f.module, address: f.address,
                        error: 'ada and Frida call it on every hooked call: it cannot be traced' });
        continue;
      }
      owners.set(key, i);
      candidates.push(i);
    }
    const item = i => ({ code: code[i], functionId: functions[i].functionId,
                         address: ptr(functions[i].address) });
    /* ADA_INLINE_HOOK=breakpoint in ada's environment: every function through an int3 */
    const trapAll = this.inline !== null && this.config.inlineHook === 'breakpoint';
    /* A function whose code starts with a jump out of every module carries a runtime hook
     * already: Frida's own (its exception handling replaces sigaction and signal; child
     * gating attaches to fork and execve) or another tool's. Moving that jump into a stub
     * broke the hook's bookkeeping (a traced sigaction aborted the program), and chaining
     * onto a hook is what the Interceptor does: it takes these. */
    const hookedElsewhere = this.inline === null ? new Set()
      : new Set(candidates.filter(i => jumpsOutOfModules(code[i])));
    const inlined = candidates.filter(i => !hookedElsewhere.has(i));
    const inlineReasons = this.inline === null ? [] :
      this.inline.hookAll(inlined.map(item), { trap: trapAll });
    this.heartbeat();  /* see hook() */
    const reasonOf = new Map(inlined.map((i, k) => [i, inlineReasons[k]]));
    const reasons = candidates.map(i => this.inline === null ? ''
      : hookedElsewhere.has(i) ? 'hooked already at run time, by Frida itself or another tool'
      : reasonOf.get(i));
    const refused = [];  /* {i, reason, error}: neither the jumps nor the Interceptor took it */
    const heads = [];    /* {at, before}: code the Interceptor is about to change */
    candidates.forEach((i, k) => {
      const f = functions[i];
      try {
        if (reasons[k] !== null) {
          const before = readCode(code[i]);
          heads.push({ at: code[i], before, i,
                       listener: Interceptor.attach(ptr(f.address), callbacks, ptr(f.functionId)) });
          if (this.inline !== null)
            fallbacks.push({ name: f.name, module: f.module, address: f.address, reason: reasons[k] });
        } else if (trapAll) {
          breakpoints.push({ name: f.name, module: f.module, address: f.address,
                             reason: 'ADA_INLINE_HOOK=breakpoint' });
        }
        this.codeOwners.set(code[i].toString(), `${f.module}!${f.name}`);
      } catch (e) {
        refused.push({ i, reason: this.inline !== null ? reasons[k] : null, error: e.message });
      }
    });
    const failed = new Map();  /* index -> why no engine could hook it */
    for (const { i } of this._flushInterceptor(heads)) {
      const f = functions[i];
      failed.set(i, THREAD_INSIDE);
      this.hookedAddresses.delete(f.address);
      this.codeOwners.delete(code[i].toString());
      const fallback = fallbacks.findIndex(x => x.address === f.address);
      if (fallback >= 0)
        fallbacks.splice(fallback, 1);
      failures.push({ name: f.name, module: f.module, address: f.address, error: THREAD_INSIDE });
    }
    /* The last resort: a breakpoint hook (the inline engine, x86_64 Linux), a signal a call. */
    this.heartbeat();  /* see hook() */
    const traps = this.inline === null || refused.length === 0 ? []
      : this.inline.hookAll(refused.map(r => item(r.i)), { trap: true });
    refused.forEach(({ i, reason, error }, k) => {
      const f = functions[i];
      if (traps[k] === null) {
        breakpoints.push({ name: f.name, module: f.module, address: f.address, reason });
        this.codeOwners.set(code[i].toString(), `${f.module}!${f.name}`);
        return;
      }
      failed.set(i, error);
      this.hookedAddresses.delete(f.address);
      failures.push({ name: f.name, module: f.module, address: f.address, error,
                      inline: reason === null ? null : `${reason}; as a breakpoint: ${traps[k]}` });
    });
    for (const [i, owner] of aliasOf) {
      const f = functions[i], o = functions[owner];
      if (failed.has(owner)) {
        this.hookedAddresses.delete(f.address);
        failures.push({ name: f.name, module: f.module, address: f.address, error: failed.get(owner) });
      } else {
        aliases.push({ name: f.name, module: f.module, address: f.address, as: `${o.module}!${o.name}` });
      }
    }
    const hooked = functions.length - failures.length;
    const triggerHeads = [];
    const onTrigger = { onEnter: this.cm.ada_on_trigger };
    for (const t of triggers) {
      try {
        const at = this._resolveRedirects(ptr(t.address));
        const before = readCode(at);
        triggerHeads.push({ at, before, t,
                            listener: Interceptor.attach(ptr(t.address), onTrigger, ptr(t.triggerId)) });
      } catch (e) {
        failures.push({ name: t.name, module: t.module, address: t.address, error: e.message,
                        trigger: true });
      }
    }
    for (const { t } of this._flushInterceptor(triggerHeads))
      failures.push({ name: t.name, module: t.module, address: t.address, error: THREAD_INSIDE,
                      trigger: true });
    this._noteInterceptorHeads(heads.concat(triggerHeads));
    const late = heads.filter(h => h.late).map(({ i }) => functions[i])
      .concat(triggerHeads.filter(h => h.late).map(({ t }) => t))
      .map(f => ({ name: f.name, module: f.module, address: f.address }));
    return { hooked, failures, fallbacks, aliases, breakpoints, late };
  },

  /*
   * The Interceptor writes the jumps of the attaches before it as its transaction ends
   * (Interceptor.flush, or the next call that leaves the JavaScript lock: nothing between
   * the attaches and here may): with the program's threads held (ThreadHold), none of them
   * inside the bytes it replaces. Frida's jump (x86_64) covers whole instructions, 5 bytes
   * or more, the rest padded; elsewhere up to 16 bytes. heads: {at, listener} each. A head
   * a thread stays inside of (asleep in a system call there) is let go unwritten: the heads
   * of those are returned (THREAD_INSIDE).
   */
  _flushInterceptor(heads) {
    const ranges = heads.map(({ at }) => ({ at, size: interceptorPatchSize(at) }));
    const inside = this.hold.run(ranges, inside => {
      for (const k of inside)
        heads[k].listener.detach();
      Interceptor.flush();
    });
    const left = heads.filter((h, k) => inside.has(k));
    heads.splice(0, heads.length, ...heads.filter((h, k) => !inside.has(k)));
    for (const h of this._awaitWritten(heads))
      h.late = true;
    return left;
  },

  /*
   * The heads whose jumps Interceptor.flush did not write: another thread waiting to run
   * JavaScript holds Frida's transaction open (see ada_await_written in ada_hold.c). Waits,
   * outside the runtime, until they are written, for up to 1 s; returns those still not
   * written then (hooked, but calls until Frida writes them are not recorded). Code Frida
   * had hooked already (a jump out of every module) shows no change: not waited for.
   */
  _awaitWritten(heads) {
    const unwritten = ({ at, before }) => {
      const now = readCode(at);
      return before !== null && now !== null && before.every((b, k) => b === now[k]);
    };
    const pending = heads.filter(h => unwritten(h) && !jumpsOutOfModules(h.at));
    if (pending.length === 0)
      return [];
    if (this.awaitWrittenFn === undefined)
      this.awaitWrittenFn = new NativeFunction(this.cm.ada_await_written, 'uint',
        ['pointer', 'pointer', 'uint', 'uint'], { scheduling: 'cooperative' });
    const n = pending.length, at = Memory.alloc(8 * n), was = Memory.alloc(8 * n);
    pending.forEach((h, k) => {
      at.add(8 * k).writePointer(h.at);
      was.add(8 * k).writeByteArray(Array.from(h.before.slice(0, 8)));
    });
    this.writesAwaited += n;
    if (this.awaitWrittenFn(at, was, n, 1000) === 0)
      return [];
    return pending.filter(unwritten);
  },

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
      const to = jumpTarget(insn);
      if (to === null || Process.findModuleByAddress(to) === null)
        break;   /* not a thunk; or a runtime hook's jump (see _attach), which stays the code */
      at = to;
    }
    return at;
  },

  /*
   * The functions resolve() found; from now on modules are hooked as they load. The host
   * is alive while it waits for this call, and its drain starts only after it: the
   * heartbeat is renewed as hooking goes (see _attach). Threads of a running program fill
   * their rings as soon as their functions are hooked, and wait for room with the wait
   * policy; with the last beat the host's at configuration (before the hot path was
   * compiled), a slow attach (gcc and hooking on a loaded machine) passed the 2 s after
   * which a waiting thread takes the host for gone and drops: one event a thread, counted.
   */
  hook() {
    this.heartbeat();
    Process.setExceptionHandler(details => this._onException(details));
    for (const module of Process.enumerateModules())
      this._watchRuntime(module);
    const result = this._attach(this.initial.functions, this.initial.triggers);
    this._attachEndHooks();  /* after the selection's: a traced _exit is recorded before the handover */
    this.heartbeat();
    this.initial = null;
    this.hooked = true;
    this.live = true;
    const pending = this.pending;
    this.pending = [];
    for (const module of pending)
      this._moduleAdded(module);
    return Object.assign(result, { hold: Object.assign({}, this.hold.stats),
                                   writesAwaited: this.writesAwaited });
  },

  /* A module loaded (or, before hook(), one the initial pass may not have seen). */
  _moduleAdded(module) {
    if (this.forkGate !== null)
      this.forkGate.patch(module);  /* its calls of fork() too (forkGate, ada_code.js) */
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
    const { hooked, failures, fallbacks, aliases, breakpoints, late } =
      this._attach(functions, triggers);
    send({ type: MESSAGES.moduleLoaded, module: module.name, functions, triggers, hooked, failures,
           fallbacks, aliases, breakpoints, late, writesAwaited: this.writesAwaited,
           hits: this.selection.hits });
  },

  /*
   * posix_spawn and posix_spawnp (system() and popen() call them too), where Frida holds
   * children (recorder.py, _hold_children) and the C library is glibc: each call runs with
   * its thread's hooks paused. glibc starts the spawn child with clone(CLONE_VM |
   * CLONE_VFORK) and no new TLS, so the child's execve runs in this process's memory with
   * this thread's TLS, through the execve hook of Frida's child gating, which then readies
   * this process's agent for an exec of its own: the recording ended there, 'clean', with
   * the rest of the process's calls lost uncounted. A NativeFunction with traps 'none' has
   * the Interceptor ignore the calling thread (and so the child) for the call, and
   * ada_pause_thread has the inline engine do the same. The cost: hooked functions that
   * posix_spawn itself calls (mmap, sigprocmask, sigaction), or the child before its exec
   * (sigaction for each signal), are not recorded, with either engine; the header counts
   * the calls (paused_spawns) and the host says so. The old
   * versioned posix_spawn (GLIBC_2.2.5, for binaries linked before glibc 2.15) is not
   * covered, nor other C libraries (bionic's and musl's are untested).
   */
  watchSpawn() {
    const L = this.layout, counter = this.region.add(L['header.paused_spawns']);
    const types = ['pointer', 'pointer', 'pointer', 'pointer', 'pointer', 'pointer'];
    this.spawnHooks = [];
    if (Process.platform !== 'linux')
      return;
    this.pauseThread = new NativeFunction(this.cm.ada_pause_thread, 'pointer', []);
    this.resumeThread = new NativeFunction(this.cm.ada_resume_thread, 'void', ['pointer']);
    for (const name of ['posix_spawn', 'posix_spawnp']) {
      const address = Module.findGlobalExportByName(name);
      const module = address === null ? null : Process.findModuleByAddress(address);
      if (module === null || module.name !== 'libc.so.6')
        continue;
      const original = new NativeFunction(address, 'int', types, { traps: 'none' });
      const replacement = new NativeCallback((...args) => {
        counter.writeU32(counter.readU32() + 1);  /* under the JavaScript lock */
        const was = this.pauseThread();  /* the inline engine's ignore (ada_control.c) */
        try {
          return original(...args);
        } finally {
          this.resumeThread(was);
        }
      }, 'int', types);
      this.spawnHooks.push(replacement);
      Interceptor.replace(address, replacement);
    }
  },

  /*
   * fork() and execve(), in a process Frida does not hold at either (recorder.py,
   * _hold_children): ada_on_fork keeps the children's pids for the manifest, and
   * ada_on_exec_enter tells the host that the process's end is an exec.
   */
  watchForksAndExec() {
    const hooks = [['fork', { onLeave: this.cm.ada_on_fork }],
                   ['execve', { onEnter: this.cm.ada_on_exec_enter,
                                onLeave: this.cm.ada_on_exec_leave }]];
    for (const [name, callbacks] of hooks) {
      const address = Module.findGlobalExportByName(name);
      if (address !== null)
        Interceptor.attach(address, callbacks);
    }
  },

  /*
   * std::terminate, where a C++ runtime defines it (ada_on_terminate says why); with the
   * inline engine, the unwinder's entry points and __cxa_begin_catch too (see
   * ada_inline_unwinding in ada_inline.c: an exception unwinds through hooked calls).
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
  },

  /* Frida keeps a module it has hooks in loaded; this is for the record. */
  _moduleRemoved(module) {
    const key = `${module.path}@${module.base}`;
    if (!this.seen.delete(key))
      return;
    send({ type: MESSAGES.moduleUnloaded, path: module.path, base: module.base.toString(),
           removedNs: this._clockNs() });
  },

  /* What the Interceptor changed at each place (see _putBackInterceptorHeads): the bytes
   * from the first changed to the last, as they were. */
  _noteInterceptorHeads(heads) {
    for (const { at, before } of heads) {
      const now = readCode(at);
      if (before === null || now === null)
        continue;
      let first = 0, last = Math.min(before.length, now.length) - 1;
      while (first <= last && before[first] === now[first])
        first++;
      while (last >= first && before[last] === now[last])
        last--;
      if (first <= last)
        this.interceptorHeads.push({ at: at.add(first), size: last - first + 1,
                                     bytes: before.slice(first, last + 1) });
    }
  },

  /*
   * Before the Interceptor lets go. As it puts a function back, Frida frees the function's
   * trampoline at once when no thread is counted inside it (guminterceptor.c,
   * gum_interceptor_transaction_end); a thread is counted only once the trampoline's code
   * has run a little way. A thread that took the jump in the function's first bytes and
   * was preempted before it was counted then ran freed memory: a program recorded while
   * it kept running crashed now and then as ada left (SIGSEGV, execute of an address just
   * unmapped, or a read of a freed context). So ada puts the first bytes back itself
   * first, lets every thread that may be between the jump and the count run on (see
   * letThreadsPass; a thread that has made a hooked call is registered, with its tid; one
   * whose very first hooked call is in those instructions is not waited for), and only
   * then lets the Interceptor go (it writes the same bytes again, and frees what no thread
   * is in). Code the Interceptor had hooked already (Frida's own hooks, on readdir for
   * one) shows no change and stays: Frida's hook keeps its trampoline.
   */
  _putBackInterceptorHeads() {
    const heads = this.interceptorHeads.splice(0);
    if (heads.length === 0)
      return;
    this.hold.writeCode(heads);
    const L = this.layout, tids = [];
    for (let slot = 0; slot < this._registered(); slot++)
      tids.push(this.threads.add(slot * L['agent.sizeof_thread_state'] + L['agent.thread_tid']).readU32());
    letThreadsPass(tids, 2000);
  },

  /*
   * The inline engine's functions are put back and its stubs stop calling the hot path;
   * then wait (a little) for threads that were inside the hot path to leave it: this
   * script, and the hot path with it, is unloaded next.
   */
  _leaveInline() {
    /* detach first: the recording ends at one instant for every function and thread. Put
     * back first, a call open then could still record its return (through the exit stub,
     * the agent still in the vector) while no new call was recorded: in the arm64 guest a
     * 300 ms call returned in that window (run 27), so its last call showed closed. */
    this.inline.detach();
    this.inline.unhook();
    const L = this.layout;
    const deadline = Date.now() + 200;
    Thread.sleep(0.01);
    for (let slot = 0; slot < this._registered(); slot++) {
      const busy = this.threads.add(slot * L['agent.sizeof_thread_state'] + L['agent.thread_busy']);
      while (busy.readU32() !== 0 && Date.now() < deadline)
        Thread.sleep(0.001);
    }
    /* after the waits: a thread that hit an int3 just before it went is past the handler */
    this.inline.removeTrapHandler();
  },
};
