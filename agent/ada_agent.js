'use strict';
/*
 * ada agent: the one-time work inside the target. This file, the last of the agent's
 * (AGENT_SCRIPTS in tracer/record/agent_code.py: joined in that order into one script, no
 * bundler), wires the others together: the AdaAgent class (its state, and init(): the
 * platform and the compiled hot path, the ring region, the hook engine), the methods the
 * other files give it (AgentClock in ada_platform.js, AgentHooking in ada_hooking.js,
 * AgentTransport in ada_transport.js, AgentEnding in ada_ending.js), and rpc.exports, the
 * host's way in. The selected functions (ada_selection.js) are resolved as the target
 * starts and as modules load; the hot path (the C files of agent/, compiled with CModule)
 * is attached with Interceptor or the inline engine. JavaScript never runs per call.
 * Messages to the host: MESSAGES (ada_messages.js).
 *
 * Written against the frida 17 API: Process.getModuleByName / findModuleByName
 * and Module instance methods, Module.getGlobalExportByName (the static
 * Module.findExportByName and friends are gone).
 */

const AGENT_STATE_BYTES = 64 * 1024;

class AdaAgent {
  constructor() {
    this.cm = null;
    this.plan = null;        /* what goes into the hot path (_plan) */
    this.here = null;        /* see hereFlag: reads 0 in a forked child's copy of this script */
    this.stateAddress = null;  /* the hot path's AdaState (ada_layout.h) */
    this.keepAlive = [];   /* JS references that keep agent memory from being freed */
    this.region = null;
    this.regionFd = -1;      /* the shared memory (memfd or file), open while the process lives */
    this.regionKind = null;  /* where the rings are: 'memfd', 'file' (shm transport) or 'rpc' */
    this.regionWhy = null;   /* why a memfd was asked for and not had */
    this.regionSize = 0;
    this.layout = null;      /* the region's offsets and constants by name (readLayout) */
    this.selection = null;       /* Selection of the functions to trace (ada_selection.js) */
    this.triggerSelection = null;
    this.modules = new Map();    /* file -> {moduleId, ...}: module ids are stable across reloads */
    this.seen = new Set();       /* 'path@base' of every module considered */
    this.pending = [];           /* modules that loaded while the initial hooks went in */
    this.live = false;           /* initial hooks in: modules that load now are hooked as they load */
    this.hookedAddresses = new Map();  /* address string -> function id, for the hot path's table */
    this.writesAwaited = 0;  /* Interceptor jumps found unwritten after a flush: _awaitWritten */
    this.codeOwners = new Map();  /* hooked code (after thunks) -> 'module!name' hooked there */
    this.interceptorHeads = [];  /* {at, size, bytes}: the Interceptor's hooks, as they were */
    this.triggerCount = 0;
    this.hooked = false;
    this.config = null;
    this.stage = null;       /* RPC transport: staging buffer for _collect() */
    this.clockTimer = null;  /* refreshes the clock pair while timestamps are raw ticks */
    this.tails = [];         /* RPC transport: [index, detail] cursor sent to the host */
    this.crashed = false;    /* a fatal signal's handover is done */
    this.handedOver = false; /* the rings went to ada as the process ends */
    this.stoppedByHost = false;
    this.exitStatus = null;
    this.endHooked = false;  /* ada's hooks on exit, _exit and abort are in: they hand over */
    this.stringArgs = new Map();  /* functionId -> regs[] slots holding C strings */
    this.inline = null;      /* the inline hook engine (--hook-engine inline), or Frida's Interceptor */
    this.hold = null;        /* the program's threads held while code is written (ThreadHold) */
    this.threads = null;     /* the hot path's ThreadState array */
    this.forks = null;       /* where Frida holds children: their count (forkCounter) */
    this.push = null;        /* rpc: the pusher's state (startPushing) */
    this.forkGate = null;    /* rpc, where Frida holds children: no push inside fork() (forkGate) */
  }

  /*
   * What goes into the hot path, decided once: the platform's facts and #defines, the
   * AdaState it points at, the addresses it calls. The host asks first (hotPathPlan) when
   * it compiles the hot path itself (tracer/record/hot_path_build.py); init uses the same.
   */
  _plan(config) {
    if (this.plan !== null)
      return this.plan;
    const plat = platformConfig(config.clockSource);
    const state = Memory.alloc(AGENT_STATE_BYTES);
    const symbols = Object.assign({ ada_state: state }, plat.symbols);
    /* ADA_INLINE_PROBE (measuring only): a hot path that stops part way (ada_inline.c) */
    const probe = config.inlineProbe ? [`#define ADA_PROBE_${config.inlineProbe.toUpperCase()} 1`] : [];
    /* ADA_TEST_HOLD_LINGER_MS (tests only): held threads slow on their way out (ada_hold.c) */
    const linger = config.holdLingerMs ? [`#define ADA_TEST_HOLD_LINGER_NS ${config.holdLingerMs * 1000000}`] : [];
    /* ADA_TEST_HOLD_SLEEPERS (tests only): the hold signals sleeping threads too (EINTR) */
    const sleepers = config.holdSleepers ? ['#define ADA_TEST_HOLD_SIGNAL_SLEEPERS 1'] : [];
    const defines = [...plat.defines, ...probe, ...linger, ...sleepers].join('\n') + '\n';
    this.plan = { plat, state, symbols, defines };
    return this.plan;
  }

  /* For the host that compiles the hot path: the #defines and Frida's headers it compiles
   * with (Linux only: elsewhere null, and the target compiles it). */
  hotPathPlan(config) {
    if (Process.platform !== 'linux')
      return null;
    return { defines: this._plan(config).defines, builtins: CModule.builtins };
  }

  /* binary: the hot path the host built from config.source (tracer/record/hot_path_build.py), or null */
  init(config, binary) {
    const { plat, state, symbols, defines } = this._plan(config);
    /* u64 values arrive as decimal strings; the offsets used in _collect() fit a double. */
    this.config = Object.assign({}, config, {
      indexRingsOffset: Number(config.indexRingsOffset),
      detailRingsOffset: Number(config.detailRingsOffset),
      source: null,  /* used once, below */
    });
    this.stateAddress = state;
    const compiled = compileHotPath(defines + config.source, symbols, config.toolchain, binary);
    this.cm = compiled.module;
    const L = this.layout = readLayout(this.cm);
    if (L['agent.sizeof_state'] > AGENT_STATE_BYTES)
      throw new Error(`agent state of ${L['agent.sizeof_state']} bytes exceeds ${AGENT_STATE_BYTES}`);
    this.region = this._mapRegion(config, plat.anonMapFlags);
    this.regionSize = config.regionSize;
    this._writeHeader(config);
    const threads = Memory.alloc(config.maxThreads * L['agent.sizeof_thread_state']);
    state.add(L['agent.state_region']).writePointer(this.region);
    state.add(L['agent.state_threads']).writePointer(threads);
    state.add(L['agent.state_region_fd']).writeS32(this.regionFd);
    new NativeFunction(this.cm.ada_init, 'void', ['uint32'])(Process.id);
    this._listenForBeats();
    const here = hereFlag(plat.anonMapFlags);
    this.here = here.page;
    state.add(L['agent.state_here']).writePointer(this.here);
    this.keepAlive.push(state, threads, symbols);
    this.threads = threads;
    writeOwnCode(this.cm, L, state);
    this.hold = new ThreadHold(this.cm, config.holdSleepers === true);
    this.hold.ready();  /* now: installing it ends the Interceptor's transaction (see run) */
    const engine = chooseEngine(config.hookEngine);
    if (engine.name === 'inline') {
      this.inline = inlineEngine(this.cm, L, state, plat.anonMapFlags,
                                 config.inlineVectors === 'save');
      this.inline.hold = this.hold;
    }
    const ticks = this.region.add(L['header.clock_ticks']).readU32() === 1;
    if (ticks)
      this._startClockPairs();
    return {
      clockAnchor: this.clockAnchor(),
      pid: Process.id,
      arch: plat.arch,
      platform: Process.platform,
      pointerSize: Process.pointerSize,
      clockType: plat.clockType,
      clockSource: ticks ? 'tsc' : 'os',
      toolchain: compiled.toolchain,
      toolchainFallback: compiled.fallback,
      hotPathBuilt: compiled.built,
      hotPathRefused: compiled.refused,
      wipesOnFork: here.wipesOnFork,
      tlsDirect: state.add(L['agent.state_tls_offset']).readU64().toNumber() !== 0,
      region: this.regionKind, regionFd: this.regionFd, regionWhy: this.regionWhy,
      hookEngine: engine.name,
      hookEngineWhy: engine.why,
      mainModule: { name: Process.mainModule.name, path: Process.mainModule.path },
      layout: L,
    };
  }
}

/* The methods of each concern, from the files before this one (plain objects: the files
 * are joined into one script, not loaded as modules). */
Object.assign(AdaAgent.prototype, AgentClock, AgentHooking, AgentTransport, AgentEnding);

const agent = new AdaAgent();

rpc.exports = {
  init: (config, binary) => agent.init(config, binary === undefined ? null : binary),
  hotPathPlan: config => agent.hotPathPlan(config),
  resolve: (selection, triggers) => agent.resolve(selection, triggers),
  hook: () => agent.hook(),
  watchForksAndExec: () => agent.watchForksAndExec(),
  noteChildren: () => agent.noteChildren(),
  watchSpawn: () => agent.watchSpawn(),
  startPushing: (budget, window, inFlight) => agent.startPushing(budget, window, inFlight),
  pull: (budget, freed) => agent.pull(budget, freed),
  stop: () => agent.stopByHost(),
  releaseWaiters: () => agent.releaseWaiters(),
  clockAnchor: () => agent.clockAnchor(),
  setStringArgs: masks => agent.setStringArgs(masks),
  /* For the tests: compile-check the hot path for platforms this host is not. */
  hotPathDefines: (platform, arch, facts) => hotPathDefines(platform, arch, facts),
  cmoduleBuiltins: () => CModule.builtins,
  dispose: reason => agent.dispose(reason),
};
