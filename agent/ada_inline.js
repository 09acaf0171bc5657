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
 * [start, end) of the mapping that holds `address`. Frida hides its own memory from
 * Process.findRangeByAddress, so on Linux this reads /proc/self/maps; elsewhere null (then
 * ada's own calls into hooked functions are counted with the skipped ones).
 */
function mappingOf(address) {
  let maps;
  try {
    maps = File.readAllText('/proc/self/maps');
  } catch (e) {
    return null;
  }
  for (const line of maps.split('\n')) {
    const m = /^([0-9a-f]+)-([0-9a-f]+) /.exec(line);
    if (m === null)
      continue;
    const start = ptr('0x' + m[1]), end = ptr('0x' + m[2]);
    if (address.compare(start) >= 0 && address.compare(end) < 0)
      return [start, end];
  }
  return null;
}

/*
 * The ids of Frida's own threads (it cloaks them: Cloak.hasThread) among the process's, read
 * from /proc/self/task (on Linux; elsewhere none). A thread's first hooked call usually
 * tells a Frida thread by its return address (ada_own_call); one that comes through libc
 * called by Frida does not: the hot path checks this list then (ada_frida_thread).
 */
function fridaThreadIds(max) {
  const ids = [];
  let opendir, readdir, closedir;
  try {
    opendir = new NativeFunction(Module.getGlobalExportByName('opendir'), 'pointer', ['pointer']);
    readdir = new NativeFunction(Module.getGlobalExportByName('readdir'), 'pointer', ['pointer']);
    closedir = new NativeFunction(Module.getGlobalExportByName('closedir'), 'int', ['pointer']);
  } catch (e) {
    return ids;
  }
  const dir = opendir(Memory.allocUtf8String('/proc/self/task'));
  if (dir.isNull())
    return ids;
  const NAME = 19;  /* offsetof(struct dirent, d_name) on 64-bit Linux, glibc and bionic */
  for (let entry = readdir(dir); !entry.isNull() && ids.length < max; entry = readdir(dir)) {
    const tid = parseInt(entry.add(NAME).readUtf8String(), 10);
    if (tid > 0 && Cloak.hasThread(tid))
      ids.push(tid);
  }
  closedir(dir);
  return ids;
}

class InlineHooks {
  /*
   * cm: the compiled hot path; layout: its ada_layout(); state: AdaState; arch: the CPU's
   * constants ({entryRet, exitRet}: the stubs' frames, checked against ada_platform.c;
   * reach: how far the patch's jump goes; hintStep: the step between mmap hints).
   */
  constructor(cm, layout, state, mapFlags, arch) {
    if (layout['agent.inline_entry_ret'] !== arch.entryRet || layout['agent.inline_exit_ret'] !== arch.exitRet)
      throw new Error(`ada_platform.c and the ${Process.arch} inline stubs disagree on their frames`);
    this.layout = layout;
    this.mapFlags = mapFlags;
    this.reach = arch.reach;
    this.hintStep = arch.hintStep;
    this.mmap = new NativeFunction(Module.getGlobalExportByName('mmap'), 'pointer',
      ['pointer', 'size_t', 'int', 'int', 'int', 'int64']);
    this.munmap = new NativeFunction(Module.getGlobalExportByName('munmap'), 'int',
      ['pointer', 'size_t']);
    this.arenas = [];
    this.hooks = [];   /* {target, original bytes} of every patched function */
    this.vector = this._map(NULL, Process.pageSize, INLINE_PAGE_RW);
    this.vector.writePointer(cm.ada_inline_enter);
    this.vector.add(8).writePointer(cm.ada_inline_leave);
    this.exitStub = this._writeExitStub();
    this.detached = this._writeDetachedCode(state);
    state.add(layout['agent.state_inline_exit']).writePointer(this.exitStub);
    /* ada's own code, whose calls into hooked functions are not the program's */
    const frida = new NativeFunction(cm.ada_frida_code, 'pointer', [])();
    [cm.ada_inline_enter, frida].forEach((address, i) => {
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

  /* Put every function back; the stubs and shadow stacks stay for threads still inside. */
  unhook() {
    for (const h of this.hooks.splice(0))
      this._writeHead(h.target, h.original);
  }

  /* The stubs stop calling the agent (see the opening comment). */
  detach() {
    this.vector.writePointer(this.detached.enter);
    this.vector.add(8).writePointer(this.detached.leave);
  }
}
