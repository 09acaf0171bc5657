'use strict';
/*
 * ada's inline hook engine (--hook-engine inline), the part every CPU shares: code space
 * near the hooked functions, the vector through which the stubs reach the C hot path
 * (ada_inline.c: ada_inline_enter, ada_inline_leave), ada's own code ranges, and putting
 * functions back. Each CPU's file (ada_inline_x64.js, ada_inline_arm64.js) extends
 * InlineHooks with its stubs: the entry stub per function, the one exit stub, the code the
 * vector points at once ada has left, and the patch at the function's first instruction.
 *
 * The stubs reach the C code through a vector in a page of their own (enter, leave).
 * When ada leaves, the vector is pointed at code that needs nothing of the agent (enter:
 * do nothing; leave: pop the thread's shadow-stack entry, found through the pthread key
 * the hot path set, and return there), and the pages are never unmapped: a thread still
 * inside a hooked function returns safely after ada is gone.
 */

const INLINE_PAGE_RX = 5;        /* PROT_READ | PROT_EXEC */
const INLINE_PAGE_RW = 3;
const INLINE_ARENA_BYTES = 256 * 1024;

/*
 * ada's own code and Frida's agent, whose calls into hooked functions are not the program's
 * (ada_own_call): their mappings into AdaState, and Frida's threads now (ada_frida_thread),
 * for either engine.
 */
function writeOwnCode(cm, layout, state) {
  const frida = new NativeFunction(cm.ada_frida_code, 'pointer', [])();
  [cm.ada_on_enter, frida].forEach((address, i) => {
    const range = mappingOf(address);
    if (range === null)
      return;
    state.add(layout['agent.state_own_code'] + 16 * i).writePointer(range[0]);
    state.add(layout['agent.state_own_code'] + 16 * i + 8).writePointer(range[1]);
  });
  const fridaThreads = fridaThreadIds(layout['agent.frida_tids']);
  fridaThreads.forEach((tid, i) => state.add(layout['agent.state_frida_tids'] + 4 * i).writeU32(tid));
  state.add(layout['agent.state_frida_tid_count']).writeU32(fridaThreads.length);
}

class InlineHooks {
  /*
   * cm: the compiled hot path; layout: its ada_layout(); state: AdaState; arch: the CPU's
   * constants ({entryRet, exitRet}: the stubs' frames, checked against ada_platform.c;
   * reach: how far the patch's jump goes; hintStep: the step between mmap hints; vectors:
   * x86_64's stubs save xmm0-15). This writes the exit stub: what the subclass's stub
   * writers read must come in here, not be set after super().
   */
  constructor(cm, layout, state, mapFlags, arch) {
    if (layout['agent.inline_entry_ret'] !== arch.entryRet || layout['agent.inline_exit_ret'] !== arch.exitRet)
      throw new Error(`ada_platform.c and the ${Process.arch} inline stubs disagree on their frames`);
    this.cm = cm;
    this.state = state;
    this.layout = layout;
    this.mapFlags = mapFlags;
    this.reach = arch.reach;
    this.hintStep = arch.hintStep;
    this.vectors = arch.vectors === true;  /* x86_64: the stubs save xmm0-15 (ada_layout.h) */
    this.mmap = new NativeFunction(Module.getGlobalExportByName('mmap'), 'pointer',
      ['pointer', 'size_t', 'int', 'int', 'int', 'int64']);
    this.munmap = new NativeFunction(Module.getGlobalExportByName('munmap'), 'int',
      ['pointer', 'size_t']);
    this.scratch = Memory.alloc(256);  /* for code written only to be measured or copied */
    this.arenas = [];
    this.hooks = [];   /* {at, size, bytes, round}: every patch's original bytes */
    this.traps = [];   /* breakpoint hooks {at, stub} (see _publishTraps) */
    this.trapTables = [];  /* every table published: a thread may still read an old one */
    this.trapProblem = undefined;  /* null once the SIGTRAP handler is in; else why not */
    this.hold = null;  /* the ThreadHold the patches go in under (the agent's; see hookAll) */
    this.vector = this._map(NULL, Process.pageSize, INLINE_PAGE_RW);
    this.vector.writePointer(cm.ada_inline_enter);
    this.vector.add(8).writePointer(cm.ada_inline_leave);
    this.exitStub = this._writeExitStub();
    this.detached = this._writeDetachedCode(state);
    state.add(layout['agent.state_inline_exit']).writePointer(this.exitStub);
  }

  _map(hint, size, prot) {
    const p = this.mmap(hint, size, prot, this.mapFlags & ~0x4000, -1, 0);  /* no NORESERVE */
    if (p.equals(ptr(-1)))
      throw new Error(`cannot map ${size} bytes for the inline hooks`);
    return p;
  }

  /* `size` bytes of code space within the patch's reach of `near` (null: anywhere). */
  _take(near, size) {
    const fits = a => a.used + size <= a.size &&
      (near === null || (this._reaches(near, a.base) && this._reaches(near, a.base.add(a.size))));
    let arena = this.arenas.find(fits);
    if (arena === undefined) {
      arena = this._newArena(near);
      if (arena === null)
        return null;
    }
    const at = arena.base.add(arena.used);
    arena.used += size;
    return at;
  }

  _reaches(from, to) {
    const d = to.compare(from) >= 0 ? to.sub(from) : from.sub(to);
    return d.compare(ptr(this.reach)) < 0;
  }

  /* Pages within reach of `near`: mmap with hints below the module, then above it. */
  _newArena(near) {
    const tries = near === null ? [NULL] : [];
    if (near !== null) {
      const base = near.and(ptr(0xffff).not());
      for (let k = 1; k <= 32; k++) {
        tries.push(base.sub(k * this.hintStep));
        tries.push(base.add(k * this.hintStep));
      }
    }
    for (const hint of tries) {
      if (near !== null && hint.compare(ptr(0x10000)) < 0)
        continue;
      const p = this.mmap(hint, INLINE_ARENA_BYTES, INLINE_PAGE_RX, this.mapFlags & ~0x4000, -1, 0);
      if (p.equals(ptr(-1)))
        continue;
      if (near !== null && !(this._reaches(near, p) && this._reaches(near, p.add(INLINE_ARENA_BYTES)))) {
        this.munmap(p, INLINE_ARENA_BYTES);
        continue;
      }
      const arena = { base: p, size: INLINE_ARENA_BYTES, used: 0 };
      this.arenas.push(arena);
      return arena;
    }
    return null;
  }

  /*
   * What the detached code (each CPU's _writeDetachedCode) needs, read here once: it finds
   * the thread's InlineStack with pthread_getspecific(key) and its entries at `entries`,
   * 32 bytes each (indexed with a shift), and calls abort where it finds no entry.
   */
  _detachedFacts(state) {
    if (this.layout['agent.sizeof_inline_entry'] !== 32)
      throw new Error('inline shadow stack entries are not 32 bytes');
    return {
      key: state.add(this.layout['agent.state_inline_key']).readU32(),
      entries: this.layout['agent.inline_stack_entries'],
      getspecific: Module.getGlobalExportByName('pthread_getspecific'),
      abort: Module.getGlobalExportByName('abort'),
    };
  }

  /*
   * Hook functions: items {code (the code it runs, past any jump thunk), functionId,
   * address}; for each, null when done, else why it cannot be (the caller leaves it to
   * Frida's Interceptor). The stubs are written first (each CPU's _plan, _putStub; a few
   * Memory.patchCode calls for the lot: patchMany), then the functions' first bytes (each
   * CPU's _headBytes) with the program's threads held (ThreadHold.writeCode: none runs
   * those bytes as they change, none resumes inside them). The bytes after a head stay as
   * they were: a thread past the head runs them as it would have. With `trap`, the last
   * resort for functions neither engine could take: a breakpoint hook (each CPU's
   * _planTrap), a signal per call.
   */
  hookAll(items, { trap = false } = {}) {
    const reasons = items.map(() => null);
    const plans = [];
    items.forEach((item, index) => {
      const plan = trap ? this._planTrap(item.code) : this._plan(item.code);
      if (typeof plan === 'string')
        reasons[index] = plan;
      else
        plans.push(Object.assign(plan, { index, functionId: item.functionId, address: item.address }));
    });
    plans.sort((a, b) => a.target.compare(b.target));
    const placed = [];
    for (const p of plans) {
      const before = placed[placed.length - 1];
      if (before !== undefined && p.target.compare(before.target.add(this._headSize(before))) < 0) {
        reasons[p.index] = `it starts inside the first bytes of ${before.address}, hooked`;
        continue;
      }
      p.stub = this._take(p.target, this.stubSize);
      if (p.stub === null)
        reasons[p.index] = 'no memory within a jump of it';
      else
        placed.push(p);
    }
    const stubs = placed.map(plan => ({ at: plan.stub, size: this.stubSize, plan }));
    patchMany(stubs, (mem, stub) => this._putStub(mem, stub.plan));
    /* rounds[k]: the k-th patch of every plan (a jump a function's head leads to goes in
     * before the head that leads to it) */
    const rounds = [];
    for (const { plan, error } of stubs) {
      if (error !== undefined) {
        reasons[plan.index] = error;
        continue;
      }
      this._patches(plan).forEach(({ at, bytes }, k) => {
        (rounds[k] = rounds[k] || []).push({ at, size: bytes.byteLength, bytes, plan, round: k,
                                             original: at.readByteArray(bytes.byteLength) });
      });
    }
    this._publishTraps(stubs.filter(({ plan, error }) => error === undefined && plan.trap));
    const done = [];
    for (const round of rounds) {
      const go = round.filter(p => reasons[p.plan.index] === null);
      for (const p of this.hold.writeCode(go))
        p.error = 'a thread stayed inside its first bytes while ada hooked it';
      for (const p of go) {
        if (p.error !== undefined)
          reasons[p.plan.index] = p.error;
        done.push(p);
      }
    }
    /* A plan whose later patch failed keeps its earlier ones (a jump in padding nothing
     * leads to): harmless, and put back with the rest. */
    for (const p of done)
      if (p.error === undefined)
        this.hooks.push({ at: p.at, size: p.size, bytes: p.original, round: p.round });
    return reasons;
  }

  /* A breakpoint hook's plan (see hookAll), or why there is none: none on this CPU. */
  _planTrap(code) {
    return `no breakpoint hooks on ${Process.arch}`;
  }

  /*
   * The SIGTRAP handler of the breakpoint hooks (ada_inline_trap, x86_64 Linux), put in
   * front on first need: null once it is, else why it cannot be. `restorer`: the code its
   * signal frames return through where the handler before it had none.
   */
  _trapHandler(restorer) {
    if (this.trapProblem === undefined) {
      const install = this.cm.ada_inline_trap_install;
      if (install === undefined)
        this.trapProblem = `no breakpoint hooks on ${Process.platform} ${Process.arch}`;
      else if (new NativeFunction(install, 'int', ['pointer'])(restorer()) !== 0)
        this.trapProblem = 'its SIGTRAP handler could not be installed (rt_sigaction failed)';
      else
        this.trapProblem = null;
    }
    return this.trapProblem;
  }

  /* The breakpoint hooks' table, with `stubs` ({plan} each) added, published whole: the
   * handler reads it through one pointer (written before the int3s are). */
  _publishTraps(stubs) {
    if (stubs.length === 0)
      return;
    for (const { plan } of stubs)
      this.traps.push({ at: plan.target, stub: plan.stub });
    this.traps.sort((a, b) => a.at.compare(b.at));
    const table = Memory.alloc(16 + 16 * this.traps.length);
    table.writeU64(this.traps.length);
    this.traps.forEach((t, i) => {
      table.add(16 + 16 * i).writePointer(t.at);
      table.add(24 + 16 * i).writePointer(t.stub);
    });
    this.trapTables.push(table);
    this.state.add(this.layout['agent.state_traps']).writePointer(table);
  }

  /* The SIGTRAP handler before ada's back, once the functions are (ada leaves). */
  removeTrapHandler() {
    if (this.trapProblem === null)
      new NativeFunction(this.cm.ada_inline_trap_remove, 'void', [])();
    this.trapProblem = undefined;
  }

  /* How many bytes at a plan's target its patch covers (each CPU's plans may say). */
  _headSize(plan) {
    return plan.headSize !== undefined ? plan.headSize : this.headSize;
  }

  /* The patches that hook a plan, in the order they go in: {at, bytes} each. One here, the
   * head; a CPU whose heads can lead elsewhere first overrides it. */
  _patches(plan) {
    return [{ at: plan.target, bytes: this._headBytes(plan) }];
  }

  /* Put every function back; the stubs and shadow stacks stay for threads still inside. */
  unhook() {
    const hooks = this.hooks.splice(0);
    const last = hooks.reduce((m, h) => Math.max(m, h.round), 0);
    for (let round = last; round >= 0; round--)  /* heads first: then nothing leads on */
      this.hold.writeCode(hooks.filter(h => h.round === round));
  }

  /* The stubs stop calling the agent (see the opening comment). */
  detach() {
    this.vector.writePointer(this.detached.enter);
    this.vector.add(8).writePointer(this.detached.leave);
  }
}
