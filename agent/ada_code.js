'use strict';
/*
 * Writing code in a running process, and waiting for its threads: what both hook engines
 * need (the inline engine's patches, ada_inline.js; putting the Interceptor's hooks back,
 * ada_hooking.js). On Linux it reads /proc/self (maps, task); elsewhere it knows less and
 * says so in what it returns.
 */

/*
 * The process's mappings, [start, end) each, in address order. Frida hides its own memory
 * from Process.enumerateRanges, so on Linux this reads /proc/self/maps; elsewhere none.
 */
function readMappings() {
  let maps;
  try {
    maps = File.readAllText('/proc/self/maps');
  } catch (e) {
    return [];
  }
  const result = [];
  for (const line of maps.split('\n')) {
    const m = /^([0-9a-f]+)-([0-9a-f]+) /.exec(line);
    if (m !== null)
      result.push([ptr('0x' + m[1]), ptr('0x' + m[2])]);
  }
  return result;
}

/* The index in `mappings` (readMappings) of the one that holds `address`, or -1. */
function mappingIndex(mappings, address) {
  let lo = 0, hi = mappings.length;
  while (lo < hi) {
    const mid = (lo + hi) >> 1;
    if (address.compare(mappings[mid][1]) >= 0)
      lo = mid + 1;
    else
      hi = mid;
  }
  return lo < mappings.length && address.compare(mappings[lo][0]) >= 0 ? lo : -1;
}

/* [start, end) of the mapping that holds `address` (null: none known; then ada's own calls
 * into hooked functions are counted with the skipped ones). */
function mappingOf(address) {
  const mappings = readMappings();
  const i = mappingIndex(mappings, address);
  return i < 0 ? null : mappings[i];
}

/*
 * Write code at many places with few Memory.patchCode calls (each one reads the process's
 * mappings and changes page protections: about a millisecond): places within one mapping
 * share a call. items: {at, size, ...}; write(mem, item) writes item's bytes at mem (where
 * item.at is writable); an error it throws goes to item.error, and the others are written.
 */
function patchMany(items, write) {
  const mappings = readMappings();
  const sorted = [...items].sort((a, b) => a.at.compare(b.at));
  let i = 0;
  while (i < sorted.length) {
    const where = mappingIndex(mappings, sorted[i].at);
    let j = i + 1;
    let end = sorted[i].at.add(sorted[i].size);
    while (j < sorted.length && where >= 0 && mappingIndex(mappings, sorted[j].at) === where &&
           sorted[j].at.add(sorted[j].size).compare(mappings[where][1]) <= 0) {
      const e = sorted[j].at.add(sorted[j].size);
      if (e.compare(end) > 0)
        end = e;
      j++;
    }
    const group = sorted.slice(i, j), start = sorted[i].at;
    Memory.patchCode(start, end.sub(start).toUInt32(), mem => {
      for (const item of group) {
        try {
          write(mem.add(item.at.sub(start)), item);
        } catch (e) {
          item.error = e.message;
        }
      }
    });
    i = j;
  }
}

/* The first CODE_PEEK bytes at `at` as a Uint8Array, or null where they cannot be read. */
const CODE_PEEK = 16;

function readCode(at) {
  try {
    return new Uint8Array(at.readByteArray(CODE_PEEK));
  } catch (e) {
    return null;
  }
}

/*
 * `bytes` (an ArrayBuffer or Uint8Array) at `target`, written at mem (where target is
 * writable). When they lie in one aligned 8-byte word, one 8-byte store writes them: a
 * thread executing there meanwhile sees the old bytes or the new, never half of each.
 * Otherwise they are written one after another, as Frida's Interceptor does.
 */
function putCodeBytes(mem, target, bytes) {
  const b = new Uint8Array(bytes);
  const offset = target.and(7).toInt32();
  if (offset <= 8 - b.length) {
    const word = mem.sub(offset);
    const current = new Uint8Array(word.readByteArray(8));
    current.set(b, offset);
    word.writeU64(uint64(new DataView(current.buffer).getBigUint64(0, true).toString()));
  } else {
    mem.writeByteArray(b.buffer);
  }
}

/* The ids of the process's threads, from /proc/self/task (Linux; elsewhere null). Through
 * libc's readdir: before hooks go in, or a hooked readdir counts this thread as the program's. */
function taskIds() {
  let opendir, readdir, closedir;
  try {
    opendir = new NativeFunction(Module.getGlobalExportByName('opendir'), 'pointer', ['pointer']);
    readdir = new NativeFunction(Module.getGlobalExportByName('readdir'), 'pointer', ['pointer']);
    closedir = new NativeFunction(Module.getGlobalExportByName('closedir'), 'int', ['pointer']);
  } catch (e) {
    return null;
  }
  const dir = opendir(Memory.allocUtf8String('/proc/self/task'));
  if (dir.isNull())
    return null;
  const ids = [];
  const NAME = 19;  /* offsetof(struct dirent, d_name) on 64-bit Linux, glibc and bionic */
  for (let entry = readdir(dir); !entry.isNull(); entry = readdir(dir)) {
    const tid = parseInt(entry.add(NAME).readUtf8String(), 10);
    if (tid > 0)
      ids.push(tid);
  }
  closedir(dir);
  return ids;
}

/*
 * The ids of Frida's own threads (it cloaks them: Cloak.hasThread) among the process's (on
 * Linux; elsewhere none). A thread's first hooked call usually tells a Frida thread by its
 * return address (ada_own_call); one that comes through libc called by Frida does not: the
 * hot path checks this list then (ada_frida_thread).
 */
function fridaThreadIds(max) {
  return (taskIds() || []).filter(tid => Cloak.hasThread(tid)).slice(0, max);
}

/* A thread's scheduling state from /proc/self/task/<tid>/: {runnable, switches (its context
 * switches so far), ranNs (its time on a CPU so far, from schedstat; null without it)}, or
 * null (it ended, or no procfs). */
function threadSchedule(tid) {
  let text;
  try {
    text = File.readAllText(`/proc/self/task/${tid}/status`);
  } catch (e) {
    return null;
  }
  const state = /^State:\s*(\S)/m.exec(text);
  const voluntary = /^voluntary_ctxt_switches:\s*(\d+)/m.exec(text);
  const forced = /^nonvoluntary_ctxt_switches:\s*(\d+)/m.exec(text);
  if (state === null || voluntary === null || forced === null)
    return null;
  let ranNs = null;
  try {
    ranNs = parseInt(File.readAllText(`/proc/self/task/${tid}/schedstat`).split(' ')[0], 10);
  } catch (e) {
    /* a kernel without CONFIG_SCHED_INFO: the switches alone */
  }
  return { runnable: state[1] === 'R', switches: parseInt(voluntary[1], 10) + parseInt(forced[1], 10),
           ranNs: Number.isFinite(ranNs) ? ranNs : null };
}

/*
 * Wait until each of `tids` (but this one) that was on a CPU, or waiting for one, as this
 * was called has run on since: seen off the run queue (asleep: a thread in a few
 * instructions of hook code makes no system call), switched out again (it had a CPU after
 * the call), or with more time on a CPU than it had (schedstat: a thread that keeps a CPU to
 * itself shows it at the next tick). A thread preempted anywhere has then gone on from where
 * it was. At most capMs: a preempted thread gets a CPU back within milliseconds where one is
 * to spare, but in the emulated arm64 machine, both CPUs busy, it may wait far longer (the
 * program that died there as ada left it, once a whole run, may be such a thread running a
 * freed trampoline: see _putBackInterceptorHeads). Without procfs, capMs / 10 (every thread
 * had some time, most likely). Nothing here calls a function through libc from this thread (a
 * hooked one would count it as the program's): the tids come from the caller, the files are
 * read by Frida's own code.
 */
function letThreadsPass(tids, capMs) {
  try {
    File.readAllText('/proc/self/status');
  } catch (e) {
    Thread.sleep(capMs / 10000);
    return;
  }
  const self = Process.getCurrentThreadId();
  const waiting = new Map();
  for (const tid of tids) {
    const s = tid === self ? null : threadSchedule(tid);
    if (s !== null && s.runnable)
      waiting.set(tid, s);
  }
  const deadline = Date.now() + capMs;
  while (waiting.size > 0 && Date.now() < deadline) {
    Thread.sleep(0.001);
    for (const [tid, was] of waiting) {
      const s = threadSchedule(tid);
      if (s === null || !s.runnable || s.switches !== was.switches ||
          (s.ranNs !== null && was.ranNs !== null && s.ranNs > was.ranNs))
        waiting.delete(tid);
    }
  }
}

/*
 * The program's threads held still while ada writes code (Linux; ada_hold.c has why): each
 * is sent a signal whose handler reports its pc and waits; ada writes once none of them is
 * inside the bytes it replaces (the bytes after a range's first: a thread at its first
 * byte runs the new instruction whole). One per agent, for both engines.
 *
 * Only threads on a CPU (or waiting for one) are asked: one asleep in the kernel runs no
 * code, and the signal would cut its sleep short; where it will resume is checked instead.
 * Threads that block the signal are not asked (a program's sigwait would take it); Frida's
 * are not either (they may hold the locks the writer needs). A thread asked that has not
 * stopped after HOLD_WAIT_MS is not waited for; the bytes a thread is still inside after
 * HOLD_TRIES asks are left unwritten (`inside` in run()). Each is counted in `stats`, which
 * ada reports (the manifest's thread_hold).
 */
const HOLD_WAIT_MS = 300;
const HOLD_TRIES = 50;
const HOLD_SETTLE_MS = 50;
const HOLD_FIRST_SIGNAL = 64;  /* SIGRTMAX on Linux; down to HOLD_LAST_SIGNAL, the first nobody handles */
const HOLD_LAST_SIGNAL = 40;

class ThreadHold {
  /* signalSleepers (tests only): sleeping threads are asked too (their sleeps cut short). */
  constructor(cm, signalSleepers = false) {
    this.cm = cm;
    this.signalSleepers = signalSleepers;
    this.problem = cm.ada_hold_install === undefined ? `no thread hold on ${Process.platform}` : undefined;
    this.stats = { holds: 0, notHeld: 0, wentOn: 0, inside: 0, asks: 0, ms: 0, cutShort: 0 };
  }

  /* A NativeFunction of the hold that keeps the JavaScript lock: a cooperative call ends
   * the Interceptor's transaction, which would write its hooks before the threads hold. */
  _fn(name, ret, args) {
    return new NativeFunction(this.cm[name], ret, args, { scheduling: 'exclusive' });
  }

  /* null once the handler is in, else why there is no hold (then code is written as before).
   * The agent calls it at init: installing the handler ends the Interceptor's transaction
   * (the protection of lastingCode's page, as measured), which must not happen between
   * attaches and run(). */
  ready() {
    if (this.problem !== undefined)
      return this.problem;
    this.ask = this._fn('ada_hold_ask', 'int', ['pointer', 'uint32', 'int', 'uint32']);
    this.pc = this._fn('ada_hold_pc', 'uint64', ['uint32']);
    this.end = this._fn('ada_hold_end', 'uint32', []);
    this.cutShort = this._fn('ada_hold_cut_short', 'uint32', []);
    this.write = this._fn('ada_hold_write', 'void', ['pointer', 'uint32']);
    this.nap = this._fn('ada_hold_nap', 'void', ['uint32']);
    this.tasks = this._fn('ada_tasks', 'uint32', ['pointer', 'uint32']);
    const disposition = this._fn('ada_hold_disposition', 'int', ['int']);
    const install = this._fn('ada_hold_install', 'int', ['int', 'pointer', 'pointer', 'pointer']);
    const code = lastingCode();
    if (code.holdEntry.isNull())
      return this.problem = `no thread hold on ${Process.arch}`;
    this.problem = 'no real-time signal is free (every one has a handler)';
    for (let s = HOLD_FIRST_SIGNAL; s >= HOLD_LAST_SIGNAL; s--) {
      if (disposition(s) === 0 && install(s, code.holdEntry, code.holdData, code.restorer) === 0) {
        this.signal = s;
        this.problem = null;
        break;
      }
    }
    return this.problem;
  }

  /*
   * The program's threads now, {ids, blocking, sleeping}: /proc/self/task less Frida's and
   * this one. Only those on a CPU, or waiting for one, are asked (`ids`): a signal would cut
   * a sleep short (EINTR), and a thread asleep in the kernel runs no code; where it will
   * resume is read instead (`sleeping`, see _resumesAt). ada_hold_ask looks again right
   * before each signal (this list is milliseconds old by then). Those that block the signal are
   * not asked either; `blocking` counts those of them still on a CPU after up to
   * HOLD_SETTLE_MS (Frida's thread that loaded its agent is not cloaked, blocks every
   * signal, and wakes briefly as messages come and go).
   */
  _programThreads(self) {
    const buffer = Memory.alloc(4 * 4096);
    const n = this.tasks(buffer, 4096);
    const ids = [], sleeping = [];
    let awake = [];
    for (let i = 0; i < n; i++) {
      const tid = buffer.add(4 * i).readU32();
      if (tid === self || Cloak.hasThread(tid))
        continue;
      const state = this._state(tid);
      if (state === null)
        continue;
      if (!state.runnable && !this.signalSleepers)
        sleeping.push(tid);
      else if (state.blocks)
        awake.push(tid);
      else
        ids.push(tid);
    }
    for (let waited = 0; awake.length > 0 && waited < HOLD_SETTLE_MS; waited++) {
      this.nap(1000);
      awake = awake.filter(tid => {
        const state = this._state(tid);
        return state !== null && state.runnable;
      });
    }
    return { ids, blocking: awake.length, sleeping };
  }

  /* Thread tid's {runnable (on a CPU or waiting for one), blocks (the signal: SigBlk)}, from
   * its status; null if it is gone. */
  _state(tid) {
    let text;
    try {
      text = File.readAllText(`/proc/self/task/${tid}/status`);
    } catch (e) {
      return null;
    }
    const mask = /\nSigBlk:\s*([0-9a-f]+)/.exec(text);
    const state = /\nState:\s*(\S)/.exec(text);
    let blocks = false;
    if (mask !== null) {
      const digit = mask[1].length - 1 - Math.floor((this.signal - 1) / 4);
      blocks = digit >= 0 && (parseInt(mask[1][digit], 16) & (1 << ((this.signal - 1) % 4))) !== 0;
    }
    return { runnable: state === null || state[1] === 'R', blocks };
  }

  /* Where a thread asleep in the kernel resumes (its pc, the last field of
   * /proc/self/task/TID/syscall); null where that does not say (it is running again). */
  _resumesAt(tid) {
    try {
      const fields = File.readAllText(`/proc/self/task/${tid}/syscall`).trim().split(' ');
      const pc = fields[fields.length - 1];
      return pc.startsWith('0x') ? ptr(pc) : null;
    } catch (e) {
      return null;
    }
  }

  /* Ask threads `tids` to hold (first: a new hold); how many of all asked are held, or -1. */
  _ask(tids, first) {
    const buffer = Memory.alloc(4 * Math.max(1, tids.length));
    tids.forEach((tid, i) => buffer.add(4 * i).writeU32(tid));
    return this.ask(buffer, tids.length, first ? 1 : 0, HOLD_WAIT_MS);
  }

  /*
   * Call write(inside) while the program's threads are held: ranges [{at, size}] are the
   * bytes about to change; `inside` is the set of indexes of those a held thread stayed
   * inside of through HOLD_TRIES asks (write around them). Without a hold (ready() says
   * why), write(new Set()) straight away. Returns `inside`.
   */
  run(ranges, write) {
    if (ranges.length === 0 || this.ready() !== null) {
      write(new Set());
      return new Set();
    }
    const self = Process.getCurrentThreadId();
    const started = Date.now();
    this.stats.holds++;
    for (let attempt = 1; ; attempt++) {
      this.stats.asks++;
      const asked = [];
      let held = 0, now = this._programThreads(self), fresh = now.ids;
      do {  /* again until no thread is new: a held thread starts none */
        held = this._ask(fresh, asked.length === 0);
        if (held < 0) {  /* the program took the signal: no hold from now on */
          this.problem = `the program took signal ${this.signal}`;
          this.end();
          write(new Set());
          return new Set();
        }
        asked.push(...fresh);
        const known = new Set(asked);
        now = this._programThreads(self);
        fresh = now.ids.filter(tid => !known.has(tid));
      } while (fresh.length > 0);
      const inside = new Set();
      const known = new Set(asked);
      const pcs = asked.map((tid, k) => {
        const pc = ptr(this.pc(k));  /* 1: asleep when it was to be signalled, not asked */
        return pc.equals(ptr(1)) ? this._resumesAt(tid) : pc;
      }).concat(now.sleeping.filter(tid => !known.has(tid)).map(tid => this._resumesAt(tid)));
      for (const pc of pcs) {
        if (pc === null || pc.isNull())
          continue;
        ranges.forEach((r, i) => {
          if (pc.compare(r.at) > 0 && pc.compare(r.at.add(r.size)) < 0)
            inside.add(i);
        });
      }
      if (inside.size === 0 || attempt === HOLD_TRIES) {
        try {
          write(inside);
        } finally {
          this.stats.wentOn += this.end();
          this.stats.cutShort = this.cutShort();
        }
        this.stats.notHeld += asked.length - held + now.blocking;
        this.stats.inside += inside.size;
        this.stats.ms += Date.now() - started;
        return inside;
      }
      this.end();
      this.nap(1000);  /* let them run out of those bytes (not Thread.sleep: see _fn) */
    }
  }

  /* Write items' bytes ({at, bytes}) while held: the pages made writable first, so that the
   * threads wait only for the copy. Returns the items left unwritten (see run's `inside`).
   * Where pages cannot be made writable and executable at once, Memory.patchCode writes
   * them, still held. */
  writeCode(items) {
    if (items.length === 0)
      return [];
    const pageSize = Process.pageSize;
    const pages = new Map();  /* page -> its protection before */
    for (const { at, bytes } of items) {
      const first = at.and(ptr(pageSize - 1).not());
      const last = at.add(bytes.byteLength - 1).and(ptr(pageSize - 1).not());
      for (let p = first; p.compare(last) <= 0; p = p.add(pageSize)) {
        if (!pages.has(p.toString())) {
          const range = Process.findRangeByAddress(p);
          pages.set(p.toString(), range === null ? 'r-x' : range.protection);
        }
      }
    }
    const writable = [];
    let ok = true;
    for (const p of pages.keys()) {
      try {
        ok = Memory.protect(ptr(p), pageSize, 'rwx');
      } catch (e) {
        ok = false;
      }
      if (!ok)
        break;
      writable.push(p);
    }
    const ranges = items.map(({ at, bytes }) => ({ at, size: bytes.byteLength }));
    let skipped;
    if (ok) {
      const entries = Memory.alloc(24 * items.length);
      const copies = items.map(({ bytes }) => {
        const copy = Memory.alloc(bytes.byteLength);
        copy.writeByteArray(bytes);
        return copy;
      });
      skipped = this.run(ranges, inside => {
        let n = 0;
        items.forEach(({ at, bytes }, i) => {
          if (inside.has(i))
            return;
          entries.add(24 * n).writePointer(at);
          entries.add(24 * n + 8).writePointer(copies[i]);
          entries.add(24 * n + 16).writeU64(bytes.byteLength);
          n++;
        });
        if (this.problem === null)
          this.write(entries, n);
        else  /* no hold: as before it, one store where the bytes fit a word */
          items.forEach((item, i) => {
            if (!inside.has(i))
              putCodeBytes(item.at, item.at, item.bytes);
          });
      });
    }
    for (const p of writable)
      Memory.protect(ptr(p), pageSize, pages.get(p));
    if (!ok)
      skipped = this.run(ranges, inside =>
        patchMany(items.filter((item, i) => !inside.has(i)), (mem, item) => putCodeBytes(mem, item.at, item.bytes)));
    return items.filter((item, i) => skipped.has(i));
  }

  /* The handler out (after the last hold: ada leaves). `stats.leftInside`: threads still in
   * its entry after the wait (then the CModule may be freed under them; never seen). */
  remove() {
    if (this.problem === null) {
      this.stats.leftInside = this._fn('ada_hold_remove', 'uint32', [])();
      this.stats.cutShort = this.cutShort();  /* with a late signal's, if any */
    }
    this.problem = 'ada left';
  }
}

/*
 * Code that must outlive ada, in two pages never unmapped (the first rw, for the data; the
 * second r-x): a thread may still run through it just after ada has left and the CModule is
 * freed. Made once per script.
 * - `restorer` (x86_64): `mov rax, 15 (rt_sigreturn); syscall`, the code a signal handler ada
 *   installs returns through, the bytes unwinders recognise a signal frame by. NULL on
 *   arm64, where the kernel's own (the vDSO's) is used.
 * - `holdEntry`: the hold's signal handler as the kernel sees it. It counts the thread in
 *   (`holdData`: u32 inside, then the handler at +8), calls the handler there unless it is
 *   NULL (ada has left), counts it out, and returns to the restorer: no instruction of a
 *   thread in the hold's handler runs in the CModule after it is counted out, so once
 *   ada_hold_remove has cleared the handler and seen no thread inside, the CModule can go.
 *   (The handler itself in the CModule, a thread counted out there still had to return
 *   through it: that thread met freed code as ada left, SIGSEGV with pc equal to lr.)
 */
let lasting = null;

function lastingCode() {
  if (lasting === null) {
    const mmap = new NativeFunction(Module.getGlobalExportByName('mmap'), 'pointer',
      ['pointer', 'size_t', 'int', 'int', 'int', 'int64'], { scheduling: 'exclusive' });
    const size = Process.pageSize;
    const data = mmap(NULL, 2 * size, 3, 0x22, -1, 0);  /* rw, MAP_PRIVATE | MAP_ANONYMOUS */
    if (data.equals(ptr(-1)))
      throw new Error('cannot map a page for a signal handler');
    const code = data.add(size);
    let restorer = NULL, holdEntry;
    if (Process.arch === 'x64') {
      restorer = code;
      code.writeByteArray([0x48, 0xc7, 0xc0, 0x0f, 0x00, 0x00, 0x00, 0x0f, 0x05]);
      holdEntry = code.add(16);
      holdEntry.writeByteArray(holdEntryX64(holdEntry, data));
    } else if (Process.arch === 'arm64') {
      holdEntry = code;
      holdEntryArm64(holdEntry, data).forEach((insn, i) => holdEntry.add(4 * i).writeU32(insn));
    } else {
      holdEntry = NULL;
    }
    Memory.protect(code, size, 'r-x');
    lasting = { restorer, holdEntry, holdData: data };
  }
  return lasting;
}

function signalRestorer() {
  return lastingCode().restorer;
}

/* The hold's entry on x86_64 at `at` (see lastingCode); rax is the only register it uses
 * before the call, the stack aligned for it as for any call. */
function holdEntryX64(at, data) {
  const rel = (target, end) => {
    const d = target.sub(at.add(end)).toInt32();
    return [d & 0xff, (d >> 8) & 0xff, (d >> 16) & 0xff, (d >>> 24) & 0xff];
  };
  return [
    0xf0, 0xff, 0x05, ...rel(data, 7),           /*  0 lock inc dword [inside] */
    0x48, 0x8b, 0x05, ...rel(data.add(8), 14),   /*  7 mov rax, [handler] */
    0x48, 0x85, 0xc0,                            /* 14 test rax, rax */
    0x74, 0x0a,                                  /* 17 je 29 */
    0x48, 0x83, 0xec, 0x08,                      /* 19 sub rsp, 8 */
    0xff, 0xd0,                                  /* 23 call rax */
    0x48, 0x83, 0xc4, 0x08,                      /* 25 add rsp, 8 */
    0xf0, 0xff, 0x0d, ...rel(data, 36),          /* 29 lock dec dword [inside] */
    0xc3,                                        /* 36 ret (to the restorer) */
  ];
}

/* The hold's entry on arm64 at `at` (see lastingCode): x9-x12 (temporaries) only, x0-x2 the
 * handler's arguments untouched; the counts by exclusive load and store (no LSE on v8.0). */
function holdEntryArm64(at, data) {
  const adrX9 = index => {
    const d = data.sub(at.add(4 * index)).toInt32();
    return (0x10000000 | ((d & 3) << 29) | (((d >> 2) & 0x7ffff) << 5) | 9) >>> 0;
  };
  return [
    0xa9bf7bfd,   /*  0 stp x29, x30, [sp, #-16]! */
    0x910003fd,   /*  1 mov x29, sp */
    adrX9(2),     /*  2 adr x9, inside */
    0x885ffd2a,   /*  3 ldaxr w10, [x9] */
    0x1100054a,   /*  4 add w10, w10, #1 */
    0x880bfd2a,   /*  5 stlxr w11, w10, [x9] */
    0x35ffffab,   /*  6 cbnz w11, 3 */
    0xd5033bbf,   /*  7 dmb ish: the count before the handler is read */
    0xf940052c,   /*  8 ldr x12, [x9, #8] (the handler) */
    0xb400004c,   /*  9 cbz x12, 11 */
    0xd63f0180,   /* 10 blr x12 */
    adrX9(11),    /* 11 adr x9, inside */
    0x885ffd2a,   /* 12 ldaxr w10, [x9] */
    0x5100054a,   /* 13 sub w10, w10, #1 */
    0x880bfd2a,   /* 14 stlxr w11, w10, [x9] */
    0x35ffffab,   /* 15 cbnz w11, 12 */
    0xa8c17bfd,   /* 16 ldp x29, x30, [sp], #16 */
    0xd65f03c0,   /* 17 ret (to the restorer) */
  ];
}

/*
 * A count of the children this process forks, kept where Frida holds them at their fork:
 * Frida now and then leaves a held child unannounced, and it then runs untraced, while ada
 * learns of a held child only from that announcement (docs/recording.md, "Children and
 * exec"). glibc runs its atfork child handlers in every child fork() makes (and Frida makes
 * vfork a fork where it holds children); the handler here adds one to a word in a shared
 * page when the child's parent is the process that registered it (a grandchild inherits the
 * registration, not the count). Code and page are never unmapped (as lastingCode's: a fork
 * under way as ada leaves may still run it); the registration is taken back as ada leaves,
 * with __cxa_finalize and the page as the handle, glibc's way of dropping a library's fork
 * handlers as it is unloaded. No hook on fork(): a second listener there beside Frida's
 * broke Frida's holding (measured, docs/recording.md). null where this cannot count: not
 * glibc, or neither x86_64 nor arm64.
 */
function forkCounter() {
  const find = name => Module.findGlobalExportByName(name);
  const register = find('__register_atfork'), finalize = find('__cxa_finalize');
  if (register === null || finalize === null || find('gnu_get_libc_version') === null ||
      (Process.arch !== 'x64' && Process.arch !== 'arm64'))
    return null;
  const mmap = new NativeFunction(find('mmap'), 'pointer',
    ['pointer', 'size_t', 'int', 'int', 'int', 'int64'], { scheduling: 'exclusive' });
  const size = Process.pageSize;
  const page = mmap(NULL, size, 3, 0x21, -1, 0);  /* rw, MAP_SHARED | MAP_ANONYMOUS */
  const code = mmap(NULL, size, 3, 0x22, -1, 0);  /* rw, then r-x */
  if (page.equals(ptr(-1)) || code.equals(ptr(-1)))
    return null;
  page.writeU32(Process.id);  /* +0 the parent, +4 the count */
  if (Process.arch === 'x64') {
    code.writeByteArray(FORK_COUNT_X64);
    code.add(9).writePointer(page);
  } else {
    FORK_COUNT_ARM64.forEach((word, i) => code.add(4 * i).writeU32(word));
    code.add(4 * FORK_COUNT_ARM64.length).writePointer(page);
  }
  if (!Memory.protect(code, size, 'r-x'))
    return null;  /* not executable: registered, it would crash the next fork's child */
  const registerFn = new NativeFunction(register, 'int', ['pointer', 'pointer', 'pointer', 'pointer']);
  if (registerFn(NULL, NULL, code, page) !== 0)
    return null;
  const finalizeFn = new NativeFunction(finalize, 'void', ['pointer']);
  let registered = true;
  return {
    count: () => page.add(4).readU32(),
    stop: () => {
      if (registered)
        finalizeFn(page);
      registered = false;
    },
  };
}

/* The atfork child handler on x86_64 (see forkCounter), the page's address written at 9:
 * rax, rcx, r11 (the syscall's) and rdx, all the caller's to lose. */
const FORK_COUNT_X64 = [
  0xb8, 0x6e, 0x00, 0x00, 0x00,  /*  0 mov eax, 110 (getppid) */
  0x0f, 0x05,                    /*  5 syscall */
  0x48, 0xba, 0, 0, 0, 0, 0, 0, 0, 0,  /*  7 movabs rdx, page */
  0x3b, 0x02,                    /* 17 cmp eax, [rdx] (the parent) */
  0x75, 0x04,                    /* 19 jne 25 */
  0xf0, 0xff, 0x42, 0x04,        /* 21 lock inc dword [rdx + 4] (the count) */
  0xc3,                          /* 25 ret */
];

/* The same on arm64, the page's address after the last word (at 48): x0 and x8-x11, the
 * caller's to lose; the count by exclusive load and store (no LSE on v8.0), as
 * holdEntryArm64's. */
const FORK_COUNT_ARM64 = [
  0xd28015a8,   /*  0 mov x8, #173 (getppid) */
  0xd4000001,   /*  1 svc #0 */
  0x58000149,   /*  2 ldr x9, 12 (the page's address) */
  0xb940012a,   /*  3 ldr w10, [x9] (the parent) */
  0x6b0a001f,   /*  4 cmp w0, w10 */
  0x540000c1,   /*  5 b.ne 11 */
  0x91001129,   /*  6 add x9, x9, #4 (the count) */
  0x885ffd2a,   /*  7 ldaxr w10, [x9] */
  0x1100054a,   /*  8 add w10, w10, #1 */
  0x880bfd2a,   /*  9 stlxr w11, w10, [x9] */
  0x35ffffab,   /* 10 cbnz w11, 7 */
  0xd65f03c0,   /* 11 ret */
];

/*
 * The fork gate, for the rpc transport where Frida holds children at their fork: nothing of
 * ada's crosses Frida's channel while the process is inside fork(). A message crossing the
 * parent's channel as it forks lets Frida kill the child now and then, or stop the parent for
 * good (Frida 17: the window opens in Frida's own listener on fork(), before any atfork
 * handler; docs/recording.md, "Children and exec"). ada cannot add a listener of its own on
 * fork() (a second one breaks Frida's holding), so the program's own calls of fork() are
 * routed through a stub put in the slots of their import tables (GOT): it counts the process
 * as forking and waits while a send is under way, then calls fork(), then counts it out. A
 * send begins only where no fork has (begin(): Dekker's order, a full fence on each side),
 * and end() says it is over. Stub and counts are raw mmap'd pages, never unmapped: a thread
 * may be inside fork() as ada leaves, and a child returns from fork() into the stub after
 * Frida has disposed of the parent's script in it. Shown with Frida alone
 * (scripts/frida_fork_repro.py --fork-markers gotraw). Not gated: fork() called through
 * no import slot (static binaries, syscall()), or bound to another fork than the C
 * library's. null on CPUs other than x86_64 and arm64.
 */
function forkGate() {
  const fork = Module.findGlobalExportByName('fork');
  if (fork === null || (Process.arch !== 'x64' && Process.arch !== 'arm64'))
    return null;
  const mmap = new NativeFunction(Module.getGlobalExportByName('mmap'), 'pointer',
    ['pointer', 'size_t', 'int', 'int', 'int', 'int64'], { scheduling: 'exclusive' });
  const size = Process.pageSize;
  const data = mmap(NULL, 2 * size, 3, 0x22, -1, 0);  /* +0 forking, +4 sending; MAP_PRIVATE */
  if (data.equals(ptr(-1)))
    return null;
  const code = data.add(size);
  let stub, begin;
  if (Process.arch === 'x64') {
    stub = code;
    code.writeByteArray(FORK_GATE_X64);
    code.add(3).writePointer(data);
    code.add(27).writePointer(fork);
    code.add(50).writePointer(data);
    begin = code.add(48);
  } else {
    stub = code;
    FORK_GATE_ARM64.forEach((word, i) => code.add(4 * i).writeU32(word));
    code.add(88).writePointer(data);
    code.add(96).writePointer(fork);
    begin = code.add(128);
    FORK_BEGIN_ARM64.forEach((word, i) => begin.add(4 * i).writeU32(word));
    begin.add(48).writePointer(data);
  }
  if (!Memory.protect(code, size, 'r-x'))
    return null;
  const beginFn = new NativeFunction(begin, 'uint32', [], { scheduling: 'exclusive' });
  const slots = [];  /* {slot, original}: what was there before the stub */
  const gate = {
    begin: () => beginFn() !== 0,
    end: () => data.add(4).writeU32(0),
    /* Route `module`'s imports of fork() through the stub (also as modules load). */
    patch(module) {
      let imports;
      try {
        imports = module.enumerateImports();
      } catch (e) {
        return;
      }
      for (const imp of imports) {
        if (imp.name !== 'fork' || imp.slot === undefined || imp.slot === null)
          continue;
        const original = imp.slot.readPointer();
        /* Bound to the C library's fork, or not yet (lazy binding: into the module's PLT) */
        const inModule = original.compare(module.base) >= 0 &&
          original.compare(module.base.add(module.size)) < 0;
        if (original.equals(stub) || !(original.equals(fork) || inModule))
          continue;
        if (writeSlot(imp.slot, stub))
          slots.push({ slot: imp.slot, original });
      }
    },
    /* Put every slot back (the stub stays: a thread may be in it). */
    stop() {
      for (const { slot, original } of slots.splice(0)) {
        try {
          if (slot.readPointer().equals(stub))
            writeSlot(slot, original);
        } catch (e) {
          /* its module is gone */
        }
      }
    },
    patched: () => slots.length,
  };
  for (const module of Process.enumerateModules())
    gate.patch(module);
  return gate;
}

/* Write a pointer into an import slot, which may be read-only (RELRO): made writable for
 * the one aligned store, then given its protection back. */
function writeSlot(slot, value) {
  const range = Process.findRangeByAddress(slot);
  if (range === null)
    return false;
  const page = slot.and(ptr(Process.pageSize - 1).not());
  const writable = range.protection.charAt(1) === 'w';
  if (!writable && !Memory.protect(page, Process.pageSize, 'rw-'))
    return false;
  slot.writePointer(value);
  if (!writable)
    Memory.protect(page, Process.pageSize, range.protection);
  return true;
}

/* The fork gate's stub on x86_64 (see forkGate): the page at 3 and 50, fork() at 27;
 * begin() at 48. rbx (saved) keeps the page across fork(); eax, fork()'s result, is kept. */
const FORK_GATE_X64 = [
  0x53,                                /*  0 push rbx (and the stack aligned for the call) */
  0x48, 0xbb, 0, 0, 0, 0, 0, 0, 0, 0,  /*  1 movabs rbx, page */
  0xf0, 0xff, 0x03,                    /* 11 lock inc dword [rbx] (forking) */
  0x8b, 0x43, 0x04,                    /* 14 mov eax, [rbx + 4] (sending) */
  0x85, 0xc0,                          /* 17 test eax, eax */
  0x74, 0x04,                          /* 19 je 25 */
  0xf3, 0x90,                          /* 21 pause */
  0xeb, 0xf5,                          /* 23 jmp 14 */
  0x48, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0,  /* 25 movabs rax, fork */
  0xff, 0xd0,                          /* 35 call rax */
  0xf0, 0xff, 0x0b,                    /* 37 lock dec dword [rbx] */
  0x5b,                                /* 40 pop rbx */
  0xc3,                                /* 41 ret */
  0x90, 0x90, 0x90, 0x90, 0x90, 0x90,  /* 42 */
  0x48, 0xba, 0, 0, 0, 0, 0, 0, 0, 0,  /* 48 movabs rdx, page (begin) */
  0xb8, 0x01, 0x00, 0x00, 0x00,        /* 58 mov eax, 1 */
  0x87, 0x42, 0x04,                    /* 63 xchg [rdx + 4], eax (sending; a full fence) */
  0x8b, 0x02,                          /* 66 mov eax, [rdx] (forking) */
  0x85, 0xc0,                          /* 68 test eax, eax */
  0x75, 0x03,                          /* 70 jne 75 */
  0xb0, 0x01,                          /* 72 mov al, 1: may send */
  0xc3,                                /* 74 ret */
  0xc7, 0x42, 0x04, 0, 0, 0, 0,        /* 75 mov dword [rdx + 4], 0 */
  0x31, 0xc0,                          /* 82 xor eax, eax: may not */
  0xc3,                                /* 84 ret */
];

/* The same stub on arm64, the page at 88 and fork() at 96; x19 (saved) keeps the page
 * across fork(), x0 is fork()'s result; the count by exclusive load and store (no LSE on
 * v8.0), then a full fence before sending is read. */
const FORK_GATE_ARM64 = [
  0xa9be7bfd,   /*  0 stp x29, x30, [sp, #-32]! */
  0x910003fd,   /*  1 mov x29, sp */
  0xf9000bf3,   /*  2 str x19, [sp, #16] */
  0x58000273,   /*  3 ldr x19, 88 (the page) */
  0x885ffe69,   /*  4 ldaxr w9, [x19] */
  0x11000529,   /*  5 add w9, w9, #1 */
  0x880afe69,   /*  6 stlxr w10, w9, [x19] */
  0x35ffffaa,   /*  7 cbnz w10, 4 */
  0xd5033bbf,   /*  8 dmb ish */
  0xb9400669,   /*  9 ldr w9, [x19, #4] (sending) */
  0x34000069,   /* 10 cbz w9, 13 */
  0xd503203f,   /* 11 yield */
  0x17fffffd,   /* 12 b 9 */
  0x58000170,   /* 13 ldr x16, 96 (fork) */
  0xd63f0200,   /* 14 blr x16 */
  0x885ffe69,   /* 15 ldaxr w9, [x19] */
  0x51000529,   /* 16 sub w9, w9, #1 */
  0x880afe69,   /* 17 stlxr w10, w9, [x19] */
  0x35ffffaa,   /* 18 cbnz w10, 15 */
  0xf9400bf3,   /* 19 ldr x19, [sp, #16] */
  0xa8c27bfd,   /* 20 ldp x29, x30, [sp], #32 */
  0xd65f03c0,   /* 21 ret */
];

/* begin() on arm64, at 128 of the code page, the page at 48 from it. */
const FORK_BEGIN_ARM64 = [
  0x58000181,   /*  0 ldr x1, 48 (the page) */
  0x52800022,   /*  1 mov w2, #1 */
  0xb9000422,   /*  2 str w2, [x1, #4] (sending) */
  0xd5033bbf,   /*  3 dmb ish */
  0xb9400023,   /*  4 ldr w3, [x1] (forking) */
  0x35000063,   /*  5 cbnz w3, 8 */
  0x52800020,   /*  6 mov w0, #1: may send */
  0xd65f03c0,   /*  7 ret */
  0xb900043f,   /*  8 str wzr, [x1, #4] */
  0x52800000,   /*  9 mov w0, #0: may not */
  0xd65f03c0,   /* 10 ret */
  0xd503201f,   /* 11 nop */
];
