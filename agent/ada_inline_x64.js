'use strict';
/*
 * ada's inline hook engine, x86_64 part (--hook-engine inline): the stubs, on the shared
 * InlineHooks (ada_inline.js). The platform-neutral C half is in ada_inline.c
 * (ada_inline_enter / ada_inline_leave).
 *
 * Per hooked function, in pages ada maps near it (a 5-byte jmp reaches them):
 *   entry stub   push every caller-saved register and rbp, align the stack, save
 *                xmm0-15 (unless the hot path was built to leave them alone: see
 *                ada_layout.h), call ada_inline_enter (function_id, frame, address), restore,
 *                then fall into
 *   trampoline   the function's first instructions, relocated (X86Relocator), and a
 *                jmp back to the rest of the function.
 * The function's first instructions become `jmp entry stub` (Memory.patchCode). A function
 * shorter than that jump (`lea eax, [rdi+rsi]; ret`: 4 bytes) takes it over the alignment
 * padding that follows it, or, where none does, takes a 2-byte `jmp short` to a `jmp entry
 * stub` put in padding within its reach (CodePadding: bytes between a function's end and
 * the next symbol, all nop or int3, which nothing runs). Where neither fits, the last
 * resort is an int3 and a SIGTRAP handler (_planTrap, ada_inline_trap).
 * One exit stub serves every function: a redirected return lands there; it saves the
 * same registers, calls ada_inline_leave, which gives the real return address, and
 * returns to it. All caller-saved registers, not just the arguments and
 * results: gcc (-fipa-ra) keeps a caller's values in registers a callee it knows leaves
 * alone, and (stack alignment propagation) calls such a callee with the stack misaligned.
 * A redirected call goes through PUSHER on its way in, so that both returns are foreseen.
 */

const STUB_BYTES = 512;   /* entry stub (~360 bytes) + relocated prologue and jmp back */
const JMP_BYTES = 5;      /* jmp rel32 (and call rel32) */
const MOVABS_RAX = new Uint8Array([0x48, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0]).buffer;
/* jmp qword [rip + 0], then the 8 bytes it reads */
const JMP_RIP = new Uint8Array([0xff, 0x25, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0]).buffer;
const SHORT_JMP_BYTES = 2;  /* jmp rel8 */
const NEAR = 0x7ff00000;  /* a rel32 jump's reach, with room to spare */
const ENDBR64 = [0xf3, 0x0f, 0x1e, 0xfa];
/* push orders (ada_platform.c names the frames' slots: ADA_ENTRY_*, ADA_EXIT_*) */
const ENTRY_SAVED = ['rdi', 'rsi', 'rdx', 'rcx', 'r8', 'r9', 'rax', 'r10', 'r11', 'rbp'];
const EXIT_SAVED = ['rax', 'rdx', 'rcx', 'rsi', 'rdi', 'r8', 'r9', 'r10', 'r11', 'rbp'];
const ENTRY_RET = ENTRY_SAVED.length;  /* frame index of the return address */
const EXIT_RET = EXIT_SAVED.length;
const XMM_BYTES = 16 * 16;
/*
 * The CPU foresees a `ret` from its return-stack predictor, which each `call` pushes. A
 * redirected call would leave it one entry short: the hooked function's `ret` goes to the
 * exit stub, not where the caller's `call` said (a misprediction on every call, about
 * 15-20 cycles). So the entry stub of a call ada_inline_enter redirected goes through the
 * PUSHER, a `call` placed just before the exit stub: the predictor then holds the exit
 * stub above the caller's return, and both returns are foreseen. The call's own push is
 * dropped at once (PUSHER_BACK), which goes on to the stub's relocated instructions: the
 * stub left their address RESUME_BELOW bytes below the stack pointer the function is
 * entered with, in the 128-byte red zone that a signal handler's frame leaves alone.
 */
const RESUME_BELOW = 8 * ENTRY_SAVED.length + 8;  /* the word below the entry stub's frame */
/* lea rsp, [rsp + 8]; jmp qword [rsp - RESUME_BELOW] */
const PUSHER_BACK = new Uint8Array([0x48, 0x8d, 0x64, 0x24, 0x08,
                                    0xff, 0x64, 0x24, 0x100 - RESUME_BELOW]).buffer;

/* movdqu [rsp + disp], xmmN (store) or movdqu xmmN, [rsp + disp] (load), N < 16 */
function movdquRsp(store, n, disp) {
  const bytes = [0xf3];
  if (n >= 8)
    bytes.push(0x44);  /* REX.R */
  bytes.push(0x0f, store ? 0x7f : 0x6f);
  if (disp < 128)
    return bytes.concat([0x44 | ((n & 7) << 3), 0x24, disp]);
  return bytes.concat([0x84 | ((n & 7) << 3), 0x24, disp & 0xff, (disp >> 8) & 0xff, 0, 0]);
}

/* Every vector register to (store) or from (load) the aligned area at rsp: the bytes, made
 * once (putBytes copies an ArrayBuffer in microseconds, but takes about 30 us to convert a
 * JavaScript array: with arrays, writing the stubs took 3 ms a function). */
const VECTORS = [false, true].map(store =>
  new Uint8Array([].concat(...Array.from({ length: 16 }, (_, i) => movdquRsp(store, i, 16 * i)))).buffer);

function putVectors(w, store) {
  w.putBytes(VECTORS[store ? 1 : 0]);
}

/* Push `saved`, the frame (rsp) into `frameReg`, align the stack and, unless the hot path
 * keeps them itself (ada_layout.h: built by gcc, it uses none), save the vectors: what a
 * stub keeps of the caller's registers around its call into the hot path. */
function putSave(w, saved, frameReg, vectors) {
  for (const reg of saved)
    w.putPushReg(reg);
  w.putMovRegReg(frameReg, 'rsp');
  w.putMovRegReg('rbp', 'rsp');  /* rbp is among `saved` */
  w.putAndRegU32('rsp', 0xfffffff0);
  if (vectors) {
    w.putSubRegImm('rsp', XMM_BYTES);
    putVectors(w, true);
  }
}

/* The other half of putSave; `between` writes code after the vectors are back, while the
 * stack is still the stub's (rax is free there). */
function putRestore(w, saved, vectors, between = null) {
  if (vectors)
    putVectors(w, false);
  if (between !== null)
    between();
  w.putMovRegReg('rsp', 'rbp');
  for (const reg of [...saved].reverse())
    w.putPopReg(reg);
}

/*
 * The alignment padding in modules' code, for the jumps of functions too short to hold one:
 * after a function's end (its symbol's size), the nop and int3 instructions up to the next
 * symbol, or up to a 16-byte boundary where a function without a symbol (a static one in a
 * stripped library) starts. A compiler's fill: nothing executes it or jumps into it. Found
 * per module on first need, and handed out once: a claimed byte is never given again.
 */
class CodePadding {
  constructor() {
    this.modules = new Map();  /* module path -> its runs {start, end}, by address */
  }

  /* Claim [start, end) if it lies in one run of padding. */
  claim(start, end) {
    const runs = this._runs(start);
    const run = runs.find(r => r.start.compare(start) <= 0 && r.end.compare(end) >= 0);
    if (run === undefined)
      return false;
    this._take(runs, run, start, end);
    return true;
  }

  /* Claim `size` bytes starting in [lo, hi]: the start, or null. */
  claimNear(lo, hi, size) {
    const runs = this._runs(lo);
    for (const run of runs) {
      const start = run.start.compare(lo) > 0 ? run.start : lo;
      if (start.compare(hi) <= 0 && start.add(size).compare(run.end) <= 0) {
        this._take(runs, run, start, start.add(size));
        return start;
      }
    }
    return null;
  }

  _take(runs, run, start, end) {
    const pieces = [];
    if (run.start.compare(start) < 0)
      pieces.push({ start: run.start, end: start });
    if (end.compare(run.end) < 0)
      pieces.push({ start: end, end: run.end });
    runs.splice(runs.indexOf(run), 1, ...pieces);
  }

  _runs(address) {
    const module = Process.findModuleByAddress(address);
    if (module === null)
      return [];
    let runs = this.modules.get(module.path);
    if (runs === undefined) {
      runs = paddingRuns(module);
      this.modules.set(module.path, runs);
    }
    return runs;
  }
}

const PADDING_MAX = 64;  /* longer gaps are not alignment */

/* A module's padding runs (see CodePadding), by address. */
function paddingRuns(module) {
  let symbols;
  try {
    symbols = module.enumerateSymbols();
  } catch (e) {
    return [];
  }
  const end = module.base.add(module.size);
  const inside = a => !a.isNull() && a.compare(module.base) >= 0 && a.compare(end) < 0;
  const starts = [...new Set(symbols.filter(s => inside(s.address)).map(s => s.address.toString()))]
    .map(a => ptr(a)).sort((a, b) => a.compare(b));
  const runs = new Map();
  for (const s of symbols) {
    if (s.type !== 'function' || !s.size || !inside(s.address))
      continue;
    const start = s.address.add(s.size);
    let lo = 0, hi = starts.length;
    while (lo < hi) {
      const mid = (lo + hi) >> 1;
      if (starts[mid].compare(start) < 0)
        lo = mid + 1;
      else
        hi = mid;
    }
    const next = lo < starts.length ? starts[lo] : end;
    const padEnd = paddingEnd(start, next);
    if (padEnd !== null && !runs.has(start.toString()))
      runs.set(start.toString(), { start, end: padEnd });
  }
  return [...runs.values()].sort((a, b) => a.start.compare(b.start));
}

/* Where the nop and int3 instructions from `start` end, if that is `next` (the next
 * symbol) or a 16-byte boundary within PADDING_MAX; else null (no padding, or code). */
function paddingEnd(start, next) {
  const limit = next.sub(start).compare(ptr(PADDING_MAX)) <= 0 ? next : start.add(PADDING_MAX);
  let at = start;
  try {
    while (at.compare(limit) < 0) {
      const insn = Instruction.parse(at);
      if (insn.mnemonic !== 'nop' && insn.mnemonic !== 'int3')
        break;
      at = insn.next;
    }
  } catch (e) {
    return null;
  }
  if (at.equals(start) || at.compare(limit) > 0)
    return null;
  return at.equals(next) || at.and(15).isNull() ? at : null;
}

class InlineHooksX64 extends InlineHooks {
  /* cm: the compiled hot path; layout: its ada_layout(); state: AdaState; saveVectors: save
   * xmm0-15 in the stubs even when the hot path keeps them itself (ADA_INLINE_VECTORS=save). */
  constructor(cm, layout, state, mapFlags, saveVectors) {
    /* (the base constructor writes the exit stub: what it saves goes in with `arch`) */
    super(cm, layout, state, mapFlags,
          { entryRet: ENTRY_RET, exitRet: EXIT_RET, reach: NEAR, hintStep: 0x1000000,
            vectors: saveVectors || layout['agent.stubs_save_vectors'] !== 0 });
    this.stubSize = STUB_BYTES;
    this.headSize = JMP_BYTES;
    this.padding = new CodePadding();
  }

  /* The PUSHER (`call` to PUSHER_BACK) and, right after it, the exit stub: its address. */
  _writeExitStub() {
    const size = 384;
    const at = this._take(null, size);
    const vector = this.vector;
    Memory.patchCode(at, size, code => {
      const w = new X86Writer(code, { pc: at });
      w.putCallNearLabel('back');
      w.putPushReg('rax');  /* the exit stub: the slot the real return address goes in */
      putSave(w, EXIT_SAVED, 'rdi', this.vectors);
      w.putMovRegAddress('rax', vector);
      w.putCallRegOffsetPtr('rax', 8);
      w.putMovRegOffsetPtrReg('rbp', 8 * EXIT_RET, 'rax');
      putRestore(w, EXIT_SAVED, this.vectors);
      w.putRet();
      w.putLabel('back');
      w.putBytes(PUSHER_BACK);
      w.flush();
      if (w.offset > size)
        throw new Error('inline exit stub overflows its space');
    });
    this.pusher = at;
    return at.add(JMP_BYTES);
  }

  /*
   * What the vector points at once ada has left: enter does nothing (a thread that
   * was inside an entry stub as the function was restored runs it unrecorded); leave
   * pops the thread's entry (pthread_getspecific(inline_key), no agent code) and
   * returns the real return address.
   */
  _writeDetachedCode(state) {
    const size = 160;
    const at = this._take(null, size);
    const { key, entries, getspecific, abort } = this._detachedFacts(state);
    Memory.patchCode(at, size, code => {
      const w = new X86Writer(code, { pc: at });
      w.putXorRegReg('eax', 'eax');  /* enter: FALSE, nothing redirected */
      w.putRet();
      w.putPadding(13);
      w.putPushReg('rbx');  /* leave (frame in rdi; the exit stub aligned the stack) */
      w.putPushReg('r12');
      w.putSubRegImm('rsp', 8);
      w.putMovRegReg('rbx', 'rdi');
      w.putMovRegU32('edi', key);
      w.putMovRegAddress('rax', getspecific);
      w.putCallReg('rax');
      w.putTestRegReg('rax', 'rax');
      w.putJccNearLabel('je', 'fail', 'no-hint');
      w.putLeaRegRegOffset('rdx', 'rbx', 8 * EXIT_RET);  /* the call's sp */
      w.putMovRegRegOffsetPtr('rcx', 'rax', 0);  /* len */
      w.putLabel('next');
      w.putTestRegReg('rcx', 'rcx');
      w.putJccNearLabel('je', 'fail', 'no-hint');
      w.putMovRegReg('r8', 'rcx');
      w.putShlRegU8('r8', 5);  /* 32 * rcx */
      w.putAddRegReg('r8', 'rax');
      w.putAddRegImm('r8', entries - 32);  /* &entries[rcx - 1] */
      w.putSubRegImm('rcx', 1);
      w.putCmpRegOffsetPtrReg('r8', 0, 'rdx');
      w.putJccShortLabel('jne', 'next', 'no-hint');
      w.putMovRegPtrReg('rax', 'rcx');  /* len = index of this entry */
      w.putMovRegRegOffsetPtr('rax', 'r8', 8);  /* its real return address */
      w.putAddRegImm('rsp', 8);
      w.putPopReg('r12');
      w.putPopReg('rbx');
      w.putRet();
      w.putLabel('fail');
      w.putMovRegAddress('rax', abort);
      w.putCallReg('rax');
      w.flush();
      if (w.offset > size)
        throw new Error('inline detached code overflows its space');
    });
    return { enter: at, leave: at.add(16) };
  }

  /* Where the jump goes (past an endbr64: indirect calls need that landing pad), how many
   * bytes of whole instructions the stub relocates and how many the head covers (and, for a
   * short jump, where its jmp to the stub goes: `slot`), or why it cannot be hooked. */
  _plan(code) {
    let target = code;
    if (ENDBR64.every((b, i) => target.add(i).readU8() === b))
      target = target.add(ENDBR64.length);
    const scan = this._scan(target);
    if (typeof scan === 'string')
      return scan;
    if (scan.length >= JMP_BYTES && scan.blocked === null)
      return { target, length: scan.length, headSize: JMP_BYTES };
    return this._planShort(target, scan);
  }

  /*
   * A function that ends (ret, jmp) before 5 bytes: the jump goes over the padding after
   * it, or else a short jump leads to one put in padding within 128 bytes; neither if one
   * of its own branches lands inside what the patch covers. The short jump also serves a
   * function with a call or system call in its first 5 bytes, past its first 2.
   */
  _planShort(target, scan) {
    const backInto = size => scan.branches.some(t => t.compare(target) > 0 &&
                                                     t.compare(target.add(size)) < 0);
    if (scan.ended && !backInto(JMP_BYTES) &&
        this.padding.claim(target.add(scan.length), target.add(JMP_BYTES)))
      return { target, length: scan.length, headSize: JMP_BYTES };
    let length = 0;
    for (const size of scan.sizes) {
      if (length >= SHORT_JMP_BYTES)
        break;
      length += size;
    }
    if (length >= SHORT_JMP_BYTES && !backInto(SHORT_JMP_BYTES)) {
      const from = target.add(SHORT_JMP_BYTES);  /* a short jump's displacement counts from here */
      const slot = this.padding.claimNear(from.sub(128), from.add(127), JMP_BYTES);
      if (slot !== null)
        return { target, length, headSize: SHORT_JMP_BYTES, slot };
    }
    const why = scan.blocked !== null ? `its first instructions cannot move (${scan.blocked})`
      : `too short to hook inline (${scan.length} bytes before it ends)`;
    return `${why}, with no alignment padding ${scan.blocked !== null ? '' : 'after it or '}` +
      'within a short jump of it to hold a jump';
  }

  /*
   * The last resort, for a function the jumps cannot take (no padding within a short jump:
   * code built at -O1 or -Os packs functions): int3 over its first byte, its first
   * instruction relocated into the stub. The SIGTRAP handler (ada_inline_trap) sends the
   * thread on to the stub: a signal's round trip per call.
   */
  _planTrap(code) {
    const problem = this._trapHandler(signalRestorer);
    if (problem !== null)
      return problem;
    let target = code;
    if (ENDBR64.every((b, i) => target.add(i).readU8() === b))
      target = target.add(ENDBR64.length);
    const scan = this._scan(target);
    if (typeof scan === 'string')
      return scan;
    if (scan.sizes.length === 0)
      return 'its first instruction cannot be relocated';
    return { target, length: scan.sizes[0], headSize: 1, trap: true };
  }

  /* The entry stub and trampoline of `plan` (see the opening comment), written at mem. */
  _putStub(mem, plan) {
    const w = new X86Writer(mem, { pc: plan.stub });
    const r = new X86Relocator(plan.target, w);
    try {
      putSave(w, ENTRY_SAVED, 'rsi', this.vectors);
      w.putMovRegU64('rdi', uint64(plan.functionId));
      w.putMovRegAddress('rdx', plan.address);
      w.putMovRegAddress('rax', this.vector);
      w.putCallRegOffsetPtr('rax', 0);
      w.putTestRegReg('eax', 'eax');  /* redirected? (the flags outlive the restore) */
      let resumeAt = -1;
      putRestore(w, ENTRY_SAVED, this.vectors, () => {
        resumeAt = w.offset + 2;  /* movabs rax, imm64: filled in below */
        w.putBytes(MOVABS_RAX);
        w.putMovRegOffsetPtrReg('rbp', -8, 'rax');  /* RESUME_BELOW under the entry's sp */
      });
      w.putJccShortLabel('je', 'resume', 'no-hint');
      const pusherAt = w.offset + 6;  /* jmp qword [rip]; the PUSHER's address: below */
      w.putBytes(JMP_RIP);
      w.putLabel('resume');
      const resume = plan.stub.add(w.offset);
      let n = 0;
      do
        n = r.readOne();
      while (n < plan.length && n !== 0);
      r.writeAll();
      if (!r.eoi)
        w.putJmpAddress(plan.target.add(n));
      w.flush();
      if (w.offset > STUB_BYTES)
        throw new Error(`its inline stub overflows its space (${w.offset} bytes)`);
      mem.add(resumeAt).writePointer(resume);
      mem.add(pusherAt).writePointer(this.pusher);
    } finally {
      r.dispose();
      w.dispose();
    }
  }

  /* `jmp stub`, 5 bytes at the target; for a short jump's plan, `jmp short slot` there. */
  _headBytes(plan) {
    if (plan.trap)
      return new Uint8Array([0xcc]).buffer;  /* int3 */
    if (plan.slot !== undefined) {
      const distance = plan.slot.sub(plan.target.add(SHORT_JMP_BYTES)).toInt32();
      return new Uint8Array([0xeb, distance & 0xff]).buffer;
    }
    return this._jmpBytes(plan.target, plan.stub);
  }

  /* `jmp to` written at `at`: 5 bytes. */
  _jmpBytes(at, to) {
    const w = new X86Writer(this.scratch, { pc: at });
    try {
      w.putJmpAddress(to);
      w.flush();
      if (w.offset !== JMP_BYTES)
        throw new Error(`inline stub out of a near jump's reach of ${at}`);
      return this.scratch.readByteArray(JMP_BYTES);
    } finally {
      w.dispose();
    }
  }

  /* A short jump's plan: the jump to the stub in the padding first, then the head. */
  _patches(plan) {
    const head = { at: plan.target, bytes: this._headBytes(plan) };
    return plan.slot === undefined ? [head]
      : [{ at: plan.slot, bytes: this._jmpBytes(plan.slot, plan.stub) }, head];
  }

  /*
   * The function's first instructions, read until they make room for the jmp or the
   * function ends (ret, jmp): {length (bytes read), sizes (each instruction's), branches
   * (where its direct jumps go), ended (by a ret or jmp, not an instruction it could not
   * read), blocked (a call or system call that cannot move, which ends them: it would
   * return into the relocated copy)}; or why they cannot move at all.
   */
  _scan(target) {
    const w = new X86Writer(this.scratch);
    const r = new X86Relocator(target, w);
    const sizes = [], branches = [];
    let n = 0, ended = false, blocked = null;
    try {
      while (n < JMP_BYTES) {
        const next = r.readOne();
        if (next === 0)
          break;
        const insn = r.input;
        if (next < JMP_BYTES && /^(call|syscall|sysenter|int)/.test(insn.mnemonic)) {
          if (n < SHORT_JMP_BYTES)
            return `its first instructions cannot move (${insn.mnemonic} at +${n})`;
          blocked = `${insn.mnemonic} at +${n}`;  /* the instructions before it may do */
          break;
        }
        if (/^(j|loop)/.test(insn.mnemonic) && insn.operands.length > 0 && insn.operands[0].type === 'imm')
          branches.push(ptr(insn.operands[0].value));
        sizes.push(next - n);
        n = next;
        if (r.eoi) {
          ended = true;
          break;
        }
      }
    } finally {
      r.dispose();
      w.dispose();
    }
    return { length: n, sizes, branches, ended, blocked };
  }
}
