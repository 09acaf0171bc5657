'use strict';
/*
 * ada agent, the ending (AgentEnding, methods of AdaAgent): how a recording ends. The
 * host stops it (stopByHost, stop); or the process exits, execs or dies of a fatal signal,
 * and what ada has not taken yet is handed over in one ada:final message (dispose, the
 * hooks on exit, _exit and abort, the exception handler), waiting (bounded) for the host's
 * ada:ack. A forked child's copy of this script does none of this (_forked).
 */

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

/* A /proc file's bytes as a string (one character a byte: a command line holds NULs, which
 * File.readAllText refuses), or null where it cannot be read. */
function readProc(path) {
  try {
    return String.fromCharCode(...new Uint8Array(File.readAllBytes(`/proc/${path}`)));
  } catch (e) {
    return null;
  }
}

const AgentEnding = {
  /*
   * Frida calls this as the process exits or execs (its own hooks on exit, _exit and abort
   * run before ada's), and when the script is unloaded. At an exit ada's own hooks, which run
   * next, hand the rings over at the process's real end (_onEndCall): the recording goes on
   * through the program's atexit handlers and destructors. On exec, or at an exit before
   * those hooks are in, everything ada has not taken yet is handed over here: with the RPC
   * transport the rings die with the process, and through a relay (a portal, frida-server)
   * a message sent while the process dies can be lost, so Frida's call waits (bounded) for
   * ada's acknowledgement. On unload ada has drained already (it stopped first).
   */
  dispose(reason) {
    if (reason === 'exit' && this.endHooked && !this.handedOver && !this.stoppedByHost &&
        !this._forked()) {
      this.stateAddress.add(this.layout['agent.state_exit_window']).writeU32(1);
      return null;  /* until ada's hook: threads starting meanwhile are Frida's (ada_rings.c) */
    }
    this.stop();
    this.releaseWaiters();  /* the script goes: nothing is drained after this */
    if (this._forked())
      return null;  /* a forked child's copy: the recording and its rings are the parent's */
    if (reason !== 'exit' && reason !== 'exec' || this.handedOver || this.stoppedByHost)
      return null;  /* ada is finishing: it takes what is left itself, and acks nothing */
    const acked = new Promise(resolve => {
      const timer = setTimeout(() => resolve(false), HANDOVER_TIMEOUT_MS);
      recv(MESSAGES.ack, () => {
        clearTimeout(timer);
        resolve(true);
      });
    });
    this._sendHandover(reason, null);
    if (reason === 'exit')
      this._attachEndHooks();  /* stop() removed them; exit goes on to _exit, with its status */
    return acked;
  },

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
    const rpcData = this.regionKind === 'rpc' && this.region !== null;
    this.handedOver = true;
    send({ type: MESSAGES.final, reason, crash, heads, exitStatus: this.exitStatus,
           children: this._newChildren(), forks: this._forkCount(),
           unrecordedThreads: this._unrecordedThreads() },
         rpcData ? this._collect(this._pendingBytes()) : null);
  },

  /*
   * The threads that started while Frida prepared the exit, taken for Frida's and not
   * recorded (ada_exit_window_thread), that Frida has not cloaked since: the program's.
   * Those past the ids kept count too (as the program's: nobody can tell).
   */
  _unrecordedThreads() {
    const L = this.layout, state = this.stateAddress;
    const count = state.add(L['agent.state_exit_window_count']).readU32();
    const kept = Math.min(count, L['agent.exit_window_tids']);
    let unrecorded = count - kept;
    for (let i = 0; i < kept; i++) {
      if (!Cloak.hasThread(state.add(L['agent.state_exit_window_tids'] + 4 * i).readU32()))
        unrecorded++;
    }
    return unrecorded;
  },

  /*
   * Where Frida holds children at their fork, the host learns of each one only once the
   * child has recovered from its fork, which goes through the host and can come after the
   * parent's end (under emulation, seconds after). So the handover names the children
   * forked since the host began to hold them (noteChildren) that may still be held: alive,
   * with this process's command line (a held child has run nothing of its own since its
   * fork; one started by posix_spawn or clone, which Frida does not hold, has exec'd). The
   * host waits for those. Linux and Android only (/proc); elsewhere none.
   */
  noteChildren() {
    this.childrenBefore = this._children();
    this.forks = forkCounter();
    if (this.regionKind === 'rpc')
      this.forkGate = forkGate();
    return { forkGate: this.forkGate !== null ? this.forkGate.patched() : null };
  },

  /* How many children this process has forked since noteChildren, where that can be
   * counted (forkCounter); null elsewhere. */
  _forkCount() {
    return this.forks !== null ? this.forks.count() : null;
  },

  _newChildren() {
    if (this.childrenBefore === undefined)
      return [];
    const ours = readProc('self/cmdline');
    return [...this._children()].filter(pid => !this.childrenBefore.has(pid) &&
                                         ours !== null && readProc(`${pid}/cmdline`) === ours);
  },

  _children() {
    const max = 1024;
    if (this.childrenFn === undefined) {
      this.childrenFn = new NativeFunction(this.cm.ada_children, 'uint32', ['pointer', 'uint32']);
      this.childrenOut = Memory.alloc(4 * max);
    }
    const n = this.childrenFn(this.childrenOut, max);
    const pids = new Set();
    for (let i = 0; i < n; i++)
      pids.add(this.childrenOut.add(4 * i).readU32());
    return pids;
  },

  /* Wait, blocking this thread (not the JavaScript one), for the host's acknowledgement. */
  _awaitAck() {
    const flag = Memory.alloc(4);
    recv(MESSAGES.ack, () => flag.writeU32(1));
    if (this.waitFlagFn === undefined)
      this.waitFlagFn = new NativeFunction(this.cm.ada_wait_flag, 'uint32', ['pointer', 'uint32']);
    return this.waitFlagFn(flag, HANDOVER_TIMEOUT_MS) !== 0;
  },

  /*
   * exit(), _exit() and abort(), after Frida's own hooks on them (see dispose). exit()'s and
   * _exit()'s status is the process's exit status. A session that came through a portal is
   * not disposed at exit (Frida keeps those apart): these hooks hand the rings over either way.
   */
  _attachEndHooks() {
    if (this.onEndCallback === undefined) {
      this.onEndCallback = new NativeCallback((status, kind) => this._onEndCall(status, kind),
                                              'void', ['int', 'int']);
      this.stateAddress.add(this.layout['agent.state_on_end']).writePointer(this.onEndCallback);
    }
    const seen = new Set();
    /* C: a forked child stays out of here */
    for (const [name, onEnter] of [['exit', this.cm.ada_on_exit], ['_exit', this.cm.ada_on__exit],
                                   ['abort', this.cm.ada_on_abort]]) {
      const address = Module.findGlobalExportByName(name);
      if (address === null || seen.has(address.toString()))
        continue;
      seen.add(address.toString());
      try {
        Interceptor.attach(address, { onEnter });
        this.endHooked = true;
      } catch (e) {
      }
    }
  },

  /*
   * exit() notes its status and lets the program's atexit handlers and destructors run,
   * recorded; exit() then calls _exit(). At _exit() or abort(), the last the process runs
   * of its own (abort's SIGABRT comes next: _onException), the rings are handed over and
   * the thread waits, bounded, for the host to have taken them.
   */
  _onEndCall(status, kind) {
    if (this._forked())
      return;  /* a forked child's exit: not the traced process's */
    const C = this.layout;
    if (kind !== C['agent.end_abort'] && this.exitStatus === null) {
      this.exitStatus = status;
      if (this.handedOver) {  /* dispose handed over first (before these hooks were in) */
        send({ type: MESSAGES.exitStatus, status });
        this._awaitAck();
        return;
      }
    }
    if (kind === C['agent.end_exit'] || this.handedOver)
      return;
    this.releaseWaiters();
    this._sendHandover('exit', null);
    this._awaitAck();
  },

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
  },

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
  },

  /* ada stops the recording: it drains what is left, releases the waiters, and unloads this
   * script. */
  stopByHost() {
    this.stoppedByHost = true;
    this.stop();
    return { hold: this.hold !== null ? Object.assign({}, this.hold.stats) : null,
             forks: this._forkCount(),
             children: this.forks !== null ? this._newChildren() : [] };  /* still held */
  },

  /* Hooks out, pushes and watches stopped. It renews the host's beat as it goes, as hook()
   * does: the beats that come meanwhile wait for this JavaScript thread, and a thread of the
   * program waiting for room (the pushes have stopped) must not take the host for gone while
   * the hooks come out (presumably what dropped an event in 3 of 25 recordings of the
   * slow-push test in the emulated arm64 machine, its threads trusting the host 1.5 s and
   * the host beating every 0.15 s; none in 12 with these renewals). */
  stop() {
    this._renewBeat();
    this._stopPushing();
    if (this.forkGate !== null)
      this.forkGate.stop();
    if (this.clockTimer !== null) {
      clearInterval(this.clockTimer);
      this.clockTimer = null;
    }
    if (this.observer !== undefined) {
      this.observer.detach();
      this.observer = undefined;
    }
    if (this.hooked) {
      this._putBackInterceptorHeads();
      Interceptor.detachAll();
      this.endHooked = false;
      Interceptor.flush();
      this._renewBeat();
      if (this.inline !== null) {
        this._leaveInline();
        this._renewBeat();
      }
      this.hooked = false;
    }
    if (this.hold !== null)
      this.hold.remove();
    if (this.forks !== null)
      this.forks.stop();
    if (this.cm !== null && this.finiFn === undefined) {
      this.finiFn = new NativeFunction(this.cm.ada_fini, 'void', []);
      this.finiFn();
    }
    return true;  /* the waiters stay until releaseWaiters: ada drains first */
  },

  _renewBeat() {
    if (this.cm !== null && !this._forked())
      this.heartbeat();
  },

  /*
   * The stop flag: a thread waiting for room in a full ring drops its event from now on
   * instead of waiting. Set when nothing more will be drained: by the host once it has
   * drained what was left after the unhook (a thread caught waiting as the hooks came out
   * then gets its room, and its event is recorded), by the agent itself at a handover.
   */
  releaseWaiters() {
    if (this.region !== null && !this._forked())
      this.region.add(this.layout['header.stop']).writeU32(1);
  },

  /* In a forked child's copy of this script (its region is the parent's, shared). */
  _forked() {
    return this.here !== null && this.here.readU32() === 0;
  },
};
