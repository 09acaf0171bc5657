'use strict';
/*
 * ada's inline hook engine, arm64 part (--hook-engine inline, Linux and Android): the
 * stubs, on the shared InlineHooks (ada_inline.js). The platform-neutral C half is in
 * ada_inline.c (ada_inline_enter / ada_inline_leave); ada_platform.c names the frames.
 *
 * Per hooked function, in pages ada maps within a `b` of it (+-128 MB):
 *   entry stub   save x0-x18, x29, x30 and q0-q31 (every register AAPCS64 lets a callee
 *                clobber: gcc keeps a caller's values in registers a callee it knows leaves
 *                alone), call ada_inline_enter (function_id, frame, address), restore them,
 *                x30 from the frame (ada_inline_enter points it at the exit stub), then
 *   trampoline   the function's first instruction, relocated (Arm64Relocator), and a `b`
 *                back to the second.
 * The function's first instruction becomes `b entry stub`: one aligned 4-byte store, so a
 * thread running the function meanwhile sees the old instruction or the new, and every
 * function, however short, can be hooked. A `bti` landing pad stays where it is (an
 * indirect call must land on it); a function that signs its return address (paciasp,
 * pacibsp) is left to Frida's Interceptor: the exit stub's address would fail its check.
 * One exit stub serves every function: a redirected return lands there with sp where the
 * function entered; it saves the same registers, calls ada_inline_leave, which gives the
 * real return address, and returns to it.
 *
 * Both returns foreseen: the CPU foresees a `ret` from its return-address stack, which each
 * `bl`/`blr` pushes. A redirected call would leave it one entry short: the function's `ret`
 * goes to the exit stub where the caller's `bl` said the caller, and the exit stub's `ret`
 * then pops the entry of the return above, and so on up. So a call ada_inline_enter
 * redirected (it returns TRUE) enters its trampoline through the PUSHER, a `blr x17` placed
 * just before the exit stub: it sets x30 to the exit stub and pushes that, above the
 * caller's entry. Like Frida's Interceptor, the entry stub leaves x16 and x17 changed (the
 * AAPCS64's intra-procedure-call scratch registers, which a veneer may change before any
 * call anyway); every other register reaches the function as the caller left it.
 */

const A64_STUB_BYTES = 512;    /* entry stub (~300 bytes) + relocated instruction, b back, literals */
const A64_REACH = 0x7f00000;   /* a `b`'s reach (128 MB), with room to spare */
const A64_FRAME_X = 176;       /* x0-x18, x29, an unused slot, x30: ADA_ENTRY_RET 21 */
const A64_FRAME_Q = 512;       /* q0-q31 */
const A64_RET = 21;
const A64_BTI = [0xd503241f, 0xd503245f, 0xd503249f, 0xd50324df];   /* bti, bti c, j, jc */
const A64_PAC_SP = [0xd503233f, 0xd503237f];                        /* paciasp, pacibsp */
const A64_ADR_X17_12 = 0x10000071;  /* adr x17, .+12 */
const A64_BLR_X17 = 0xd63f0220;
const A64_MOVZ_W0_0 = 0x52800000;

/* Save what a stub keeps of the caller's registers; afterwards sp + A64_FRAME_Q is the
 * frame ada_platform.c describes (its last slot ends at the sp the stub was entered with). */
function a64Save(w) {
  w.putSubRegRegImm('sp', 'sp', A64_FRAME_X);
  for (let i = 0; i < 18; i += 2)
    w.putStpRegRegRegOffset('x' + i, 'x' + (i + 1), 'sp', 8 * i, 'signed-offset');
  w.putStpRegRegRegOffset('x18', 'x29', 'sp', 8 * 18, 'signed-offset');
  w.putStrRegRegOffset('x30', 'sp', 8 * A64_RET);
  w.putSubRegRegImm('sp', 'sp', A64_FRAME_Q);
  for (let i = 0; i < 32; i += 2)
    w.putStpRegRegRegOffset('q' + i, 'q' + (i + 1), 'sp', 16 * i, 'signed-offset');
}

/* The other half of a64Save; x30 comes from the frame, where the C code may have changed it. */
function a64Restore(w) {
  for (let i = 0; i < 32; i += 2)
    w.putLdpRegRegRegOffset('q' + i, 'q' + (i + 1), 'sp', 16 * i, 'signed-offset');
  w.putAddRegRegImm('sp', 'sp', A64_FRAME_Q);
  for (let i = 0; i < 18; i += 2)
    w.putLdpRegRegRegOffset('x' + i, 'x' + (i + 1), 'sp', 8 * i, 'signed-offset');
  w.putLdpRegRegRegOffset('x18', 'x29', 'sp', 8 * 18, 'signed-offset');
  w.putLdrRegRegOffset('x30', 'sp', 8 * A64_RET);
  w.putAddRegRegImm('sp', 'sp', A64_FRAME_X);
}

/* Call vector[slot] with the frame in x1 (entry, after function_id in x0) or x0 (exit). */
function a64CallVector(w, vector, slot, frameReg) {
  w.putAddRegRegImm(frameReg, 'sp', A64_FRAME_Q);
  w.putLdrRegAddress('x16', vector);
  w.putLdrRegRegOffset('x16', 'x16', 8 * slot);
  w.putBlrReg('x16');
}

/* Write code at `at` (at most `size` bytes) with an Arm64Writer; `put` fills it. An error
 * is thrown after Memory.patchCode returns (one thrown inside its callback is reported as
 * the agent's, and the caller would go on to patch a half-written stub in). Arm64Writer's
 * put methods throw "invalid argument" where they cannot encode (a `b` out of reach). */
function a64Write(at, size, what, put) {
  let error = null;
  Memory.patchCode(at, size, code => {
    const w = new Arm64Writer(code, { pc: at });
    try {
      put(w);
      w.flush();
      if (w.offset > size)
        error = new Error(`inline ${what} overflows its space`);
    } catch (e) {
      error = new Error(`inline ${what}: ${e.message}`);
    } finally {
      w.dispose();
    }
  });
  if (error !== null)
    throw error;
}

class InlineHooksArm64 extends InlineHooks {
  /* cm: the compiled hot path; layout: its ada_layout(); state: AdaState. */
  constructor(cm, layout, state, mapFlags) {
    super(cm, layout, state, mapFlags,
          { entryRet: A64_RET, exitRet: A64_RET, reach: A64_REACH, hintStep: 0x400000 });
    this.stubSize = A64_STUB_BYTES;
    this.headSize = 4;
  }

  _writeExitStub() {
    const size = 384;
    const at = this._take(null, size);
    const vector = this.vector;
    a64Write(at, size, 'exit stub', w => {
      w.putInstruction(A64_BLR_X17);  /* the PUSHER: x30 = the exit stub, right after it */
      a64Save(w);
      a64CallVector(w, vector, 1, 'x0');
      w.putStrRegRegOffset('x0', 'sp', A64_FRAME_Q + 8 * A64_RET);  /* the real return address */
      a64Restore(w);
      w.putRet();
    });
    this.pusher = at;
    return at.add(4);
  }

  /*
   * What the vector points at once ada has left: enter does nothing (a thread that
   * was inside an entry stub as the function was restored runs it unrecorded); leave
   * pops the thread's entry (pthread_getspecific(inline_key), no agent code) and
   * returns the real return address.
   */
  _writeDetachedCode(state) {
    const size = 192;
    const at = this._take(null, size);
    const { key, entries, getspecific, abort } = this._detachedFacts(state);
    a64Write(at, size, 'detached code', w => {
      w.putInstruction(A64_MOVZ_W0_0);  /* enter: FALSE, nothing redirected */
      w.putRet();
      w.putNop(); w.putNop();
      w.putPushRegReg('x29', 'x30');  /* leave (the frame in x0) */
      w.putPushRegReg('x19', 'x20');
      w.putMovRegReg('x19', 'x0');
      w.putLdrRegU64('x0', key);
      w.putLdrRegAddress('x16', getspecific);
      w.putBlrReg('x16');
      w.putCbzRegLabel('x0', 'fail');
      w.putAddRegRegImm('x2', 'x19', 8 * A64_RET + 8);  /* the call's sp */
      w.putLdrRegRegOffset('x1', 'x0', 0);  /* len */
      w.putLabel('next');
      w.putCbzRegLabel('x1', 'fail');
      w.putSubRegRegImm('x1', 'x1', 1);
      w.putLslRegImm('x3', 'x1', 5);  /* 32 * index */
      w.putAddRegRegReg('x3', 'x3', 'x0');
      w.putAddRegRegImm('x3', 'x3', entries);  /* &entries[index] */
      w.putLdrRegRegOffset('x4', 'x3', 0);
      w.putCmpRegReg('x4', 'x2');
      w.putBCondLabel('ne', 'next');
      w.putStrRegRegOffset('x1', 'x0', 0);  /* len = index of this entry */
      w.putLdrRegRegOffset('x0', 'x3', 8);  /* its real return address */
      w.putPopRegReg('x19', 'x20');
      w.putPopRegReg('x29', 'x30');
      w.putRet();
      w.putLabel('fail');
      w.putLdrRegAddress('x16', abort);
      w.putBlrReg('x16');
    });
    return { enter: at, leave: at.add(16) };
  }

  /* Where the branch goes (past a `bti`: indirect calls need that landing pad), or why the
   * function cannot be hooked. */
  _plan(code) {
    let target = code;
    let first = target.readU32();
    if (A64_BTI.includes(first)) {
      target = target.add(4);
      first = target.readU32();
    }
    if (A64_PAC_SP.includes(first))
      return 'it signs its return address (pointer authentication): the exit stub would fail its check';
    if ((first & 0xfc000000) === 0x94000000 || (first & 0xfffffc1f) === 0xd63f0000)
      return 'its first instruction is a call, which cannot move';
    return { target };
  }

  /* The entry stub and trampoline of `plan` (see the opening comment), written at mem.
   * Arm64Writer's put methods throw "invalid argument" where they cannot encode. */
  _putStub(mem, plan) {
    const w = new Arm64Writer(mem, { pc: plan.stub });
    const r = new Arm64Relocator(plan.target, w);
    try {
      a64Save(w);
      w.putLdrRegU64('x0', uint64(plan.functionId));
      w.putLdrRegAddress('x2', plan.address);
      a64CallVector(w, this.vector, 0, 'x1');
      /* redirected? (a gboolean: w0) carried through the restore in x17's slot */
      w.putStrRegRegOffset('x0', 'sp', A64_FRAME_Q + 8 * 17);
      a64Restore(w);
      w.putCbzRegLabel('w17', 'trampoline');
      w.putInstruction(A64_ADR_X17_12);  /* x17 = the trampoline, three instructions on */
      w.putLdrRegAddress('x16', this.pusher);
      w.putBrReg('x16');
      w.putLabel('trampoline');
      if (r.readOne() === 0)
        throw new Error(`cannot read the instruction at ${plan.target}`);
      r.writeAll();
      if (!r.eoi)
        w.putBImm(plan.target.add(4));  /* within reach: _take saw to it */
      w.flush();
      if (w.offset > A64_STUB_BYTES)
        throw new Error(`its inline stub overflows its space (${w.offset} bytes)`);
    } catch (e) {
      throw new Error(`its inline stub cannot be written: ${e.message}`);
    } finally {
      r.dispose();
      w.dispose();
    }
  }

  /* `b stub`, 4 bytes (the stub is within A64_REACH: _take saw to it). */
  _headBytes(plan) {
    const distance = plan.stub.sub(plan.target).toInt32();
    this.scratch.writeU32((0x14000000 | ((distance >> 2) & 0x3ffffff)) >>> 0);
    return this.scratch.readByteArray(4);
  }
}
