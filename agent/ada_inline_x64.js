'use strict';
/*
 * ada's inline hook engine, x86_64 part (--hook-engine inline): the stubs, on the shared
 * InlineHooks (ada_inline.js). The platform-neutral C half is in ada_inline.c
 * (ada_inline_enter / ada_inline_leave).
 *
 * Per hooked function, in pages ada maps near it (a 5-byte jmp reaches them):
 *   entry stub   push every caller-saved register and rbp, align the stack, save
 *                xmm0-15, call ada_inline_enter (function_id, frame, address), restore,
 *                then fall into
 *   trampoline   the function's first instructions, relocated (X86Relocator), and a
 *                jmp back to the rest of the function.
 * The function's first instructions become `jmp entry stub` (Memory.patchCode).
 * One exit stub serves every function: a redirected return lands there; it saves the
 * same registers, calls ada_inline_leave, which gives the real return address, and
 * returns to it. All caller-saved registers, not just the arguments and results: gcc
 * (-fipa-ra) keeps a caller's values in registers a callee it knows leaves alone, and
 * (stack alignment propagation) calls such a callee with the stack misaligned.
 */

const STUB_BYTES = 512;   /* entry stub (~360 bytes) + relocated prologue and jmp back */
const JMP_BYTES = 5;      /* jmp rel32 */
const NEAR = 0x7ff00000;  /* a rel32 jump's reach, with room to spare */
const ENDBR64 = [0xf3, 0x0f, 0x1e, 0xfa];
/* push orders (ada_platform.c names the frames' slots: ADA_ENTRY_*, ADA_EXIT_*) */
const ENTRY_SAVED = ['rdi', 'rsi', 'rdx', 'rcx', 'r8', 'r9', 'rax', 'r10', 'r11', 'rbp'];
const EXIT_SAVED = ['rax', 'rdx', 'rcx', 'rsi', 'rdi', 'r8', 'r9', 'r10', 'r11', 'rbp'];
const ENTRY_RET = ENTRY_SAVED.length;  /* frame index of the return address */
const EXIT_RET = EXIT_SAVED.length;
const XMM_BYTES = 16 * 16;

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

/* Push `saved`, the frame (rsp) into `frameReg`, align the stack and save the vectors:
 * what a stub keeps of the caller's registers around its call into the hot path. */
function putSave(w, saved, frameReg) {
  for (const reg of saved)
    w.putPushReg(reg);
  w.putMovRegReg(frameReg, 'rsp');
  w.putMovRegReg('rbp', 'rsp');  /* rbp is among `saved` */
  w.putAndRegU32('rsp', 0xfffffff0);
  w.putSubRegImm('rsp', XMM_BYTES);
  putVectors(w, true);
}

/* The other half of putSave. */
function putRestore(w, saved) {
  putVectors(w, false);
  w.putMovRegReg('rsp', 'rbp');
  for (const reg of [...saved].reverse())
    w.putPopReg(reg);
}

class InlineHooksX64 extends InlineHooks {
  /* cm: the compiled hot path; layout: its ada_layout(); state: AdaState. */
  constructor(cm, layout, state, mapFlags) {
    super(cm, layout, state, mapFlags,
          { entryRet: ENTRY_RET, exitRet: EXIT_RET, reach: NEAR, hintStep: 0x1000000 });
    this.stubSize = STUB_BYTES;
    this.headSize = JMP_BYTES;
  }

  _writeExitStub() {
    const size = 384;
    const at = this._take(null, size);
    const vector = this.vector;
    Memory.patchCode(at, size, code => {
      const w = new X86Writer(code, { pc: at });
      w.putPushReg('rax');  /* the slot the real return address goes in */
      putSave(w, EXIT_SAVED, 'rdi');
      w.putMovRegAddress('rax', vector);
      w.putCallRegOffsetPtr('rax', 8);
      w.putMovRegOffsetPtrReg('rbp', 8 * EXIT_RET, 'rax');
      putRestore(w, EXIT_SAVED);
      w.putRet();
      w.flush();
      if (w.offset > size)
        throw new Error('inline exit stub overflows its space');
    });
    return at;
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
      w.putRet();  /* enter */
      w.putPadding(15);
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

  /* Where the jump goes (past an endbr64: indirect calls need that landing pad) and how
   * many bytes of whole instructions the stub relocates, or why it cannot be hooked. */
  _plan(code) {
    let target = code;
    if (ENDBR64.every((b, i) => target.add(i).readU8() === b))
      target = target.add(ENDBR64.length);
    const length = this._prologueLength(target);
    return typeof length === 'string' ? length : { target, length };
  }

  /* The entry stub and trampoline of `plan` (see the opening comment), written at mem. */
  _putStub(mem, plan) {
    const w = new X86Writer(mem, { pc: plan.stub });
    const r = new X86Relocator(plan.target, w);
    try {
      putSave(w, ENTRY_SAVED, 'rsi');
      w.putMovRegU64('rdi', uint64(plan.functionId));
      w.putMovRegAddress('rdx', plan.address);
      w.putMovRegAddress('rax', this.vector);
      w.putCallRegOffsetPtr('rax', 0);
      putRestore(w, ENTRY_SAVED);
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
    } finally {
      r.dispose();
      w.dispose();
    }
  }

  /* `jmp stub`, 5 bytes. */
  _headBytes(plan) {
    const w = new X86Writer(this.scratch, { pc: plan.target });
    try {
      w.putJmpAddress(plan.stub);
      w.flush();
      if (w.offset !== JMP_BYTES)
        throw new Error(`inline stub out of a near jump's reach of ${plan.target}`);
      return this.scratch.readByteArray(JMP_BYTES);
    } finally {
      w.dispose();
    }
  }

  /*
   * The first 5 bytes at `target` (the jump, or the original bytes back), written at mem
   * (where target is writable). The rest of the relocated instructions stay as they were (a
   * thread that entered before, and is past the first 5 bytes, runs them as it would have).
   * When the 5 bytes lie in one aligned 8-byte word (a function starts 16-byte aligned
   * without an endbr64), one 8-byte store writes them: a thread executing the function
   * meanwhile sees the old bytes or the new, never half of each. Otherwise the bytes are
   * written one after another, as Frida's Interceptor does.
   */
  _putHead(mem, target, head) {
    const offset = target.and(7).toInt32();
    if (offset <= 8 - JMP_BYTES) {
      const word = mem.sub(offset);
      const bytes = new Uint8Array(word.readByteArray(8));
      bytes.set(new Uint8Array(head), offset);
      word.writeU64(uint64(new DataView(bytes.buffer).getBigUint64(0, true).toString()));
    } else {
      mem.writeByteArray(head);
    }
  }

  /*
   * How many bytes of whole instructions make room for the jmp, or why there are not
   * enough: the function ends first (too short), or an instruction cannot move (a
   * call or system call would return into the relocated copy).
   */
  _prologueLength(target) {
    const w = new X86Writer(this.scratch);
    const r = new X86Relocator(target, w);
    let n = 0;
    try {
      while (n < JMP_BYTES) {
        const next = r.readOne();
        if (next === 0)
          return `too short to hook inline (${n} bytes before it ends)`;
        const insn = r.input;
        if (next < JMP_BYTES && /^(call|syscall|sysenter|int)/.test(insn.mnemonic))
          return `its first instructions cannot move (${insn.mnemonic} at +${n})`;
        n = next;
        if (r.eoi && n < JMP_BYTES)
          return `too short to hook inline (${n} bytes)`;
      }
    } finally {
      r.dispose();
      w.dispose();
    }
    return n;
  }
}
