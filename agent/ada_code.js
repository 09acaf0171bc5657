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

/* A thread's scheduling state from /proc/self/task/<tid>/status: {runnable, switches (its
 * context switches so far)}, or null (it ended, or no procfs). */
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
  return { runnable: state[1] === 'R', switches: parseInt(voluntary[1], 10) + parseInt(forced[1], 10) };
}

/*
 * Wait until each of `tids` (but this one) that was on a CPU, or waiting for one, as this
 * was called has run on since: seen off the run queue (asleep: a thread in a few
 * instructions of hook code makes no system call), or switched out again (it had a CPU
 * after the call). A thread preempted anywhere has then gone on from where it was. At
 * most capMs: a thread that keeps a CPU to itself is never switched out, and is not stuck
 * either. Without procfs, capMs / 10 (every thread had some time, most likely). Nothing
 * here calls a function through libc from this thread (a hooked one would count it as the
 * program's): the tids come from the caller, the files are read by Frida's own code.
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
      waiting.set(tid, s.switches);
  }
  const deadline = Date.now() + capMs;
  while (waiting.size > 0 && Date.now() < deadline) {
    Thread.sleep(0.001);
    for (const [tid, switches] of waiting) {
      const s = threadSchedule(tid);
      if (s === null || !s.runnable || s.switches !== switches)
        waiting.delete(tid);
    }
  }
}
