'use strict';
/*
 * ada agent, the transport (AgentTransport, methods of AdaAgent): the ring region and how
 * its bytes reach the host. The region is shared memory the host maps too (the shm
 * transport: a memfd made here, which the host opens through /proc/PID/fd, else the /dev/shm
 * file the host made) or private pages whose new bytes the agent pushes to the host (the rpc
 * transport: _collect() copies what is new into one buffer and moves the tails past it; the
 * host's beats bring the slots it freed and what it received). The header fields the host
 * chose are written here before ada_init completes the header.
 */

const O_RDWR = 2;
const O_CLOEXEC = Process.platform === 'darwin' ? 0x1000000 : 0x80000;
const MAP_SHARED = 1;

const PUSH_IDLE_MS = 10;  /* the pause between pushes while no ring fills (startPushing) */

const MFD_CLOEXEC = 1;
const SYS_MEMFD_CREATE = { x64: 319, arm64: 279 };

const AgentTransport = {
  /*
   * The region: a memfd when the host asked for one (Linux), else the host's /dev/shm file,
   * else private pages (the rpc transport). Sets regionKind ('memfd', 'file', 'rpc') and,
   * when a memfd could not be had, regionWhy.
   */
  _mapRegion(config, anonMapFlags) {
    if (config.memfd) {
      const base = this._mapMemfd(config.regionSize, Number(config.indexRingsOffset));
      if (base !== null) {
        this.regionKind = 'memfd';
        return base;
      }
    }
    if (config.shmPath !== null) {
      this.regionKind = 'file';
      return this._mapShared(config.shmPath, config.regionSize);
    }
    this.regionKind = 'rpc';
    return this._mapPrivate(config.regionSize, anonMapFlags);
  },

  /* A memfd of `size` bytes, its first `backed` bytes (header and slot controls) backed now
   * (each thread's rings are, as it starts: ada_reserve_rings), mapped shared; kept open.
   * Null, with regionWhy said, where the system has none or no memory for it. */
  _mapMemfd(size, backed) {
    const fn = (name, ret, args) => {
      const address = Module.findGlobalExportByName(name);
      return address !== null ? new NativeFunction(address, ret, args) : null;
    };
    let create = fn('memfd_create', 'int', ['pointer', 'uint']);
    if (create === null) {
      const syscall = fn('syscall', 'int', ['long', 'pointer', 'uint']);
      const number = SYS_MEMFD_CREATE[Process.arch];
      if (syscall !== null && number !== undefined)
        create = (name, flags) => syscall(number, name, flags);
    }
    const ftruncate = fn('ftruncate', 'int', ['int', 'int64']);
    const fallocate = fn('posix_fallocate', 'int', ['int', 'int64', 'int64']);
    const close = fn('close', 'int', ['int']);
    const mmap = fn('mmap', 'pointer', ['pointer', 'size_t', 'int', 'int', 'int', 'int64']);
    if (create === null || ftruncate === null || fallocate === null || close === null) {
      this.regionWhy = 'the target has no memfd_create';
      return null;
    }
    const fd = create(Memory.allocUtf8String('ada-rings'), MFD_CLOEXEC);
    if (fd < 0) {
      this.regionWhy = 'the target could not create a memfd';
      return null;
    }
    let base = ptr(-1);
    if (ftruncate(fd, size) === 0) {
      const error = fallocate(fd, 0, backed);
      if (error === 0)
        base = mmap(NULL, size, PROT_READ_WRITE, MAP_SHARED, fd, 0);
    }
    if (base.equals(ptr(-1))) {
      close(fd);
      this.regionWhy = `the target has no memory for a ${Math.round(size / 1048576)} MB memfd`;
      return null;
    }
    this.regionFd = fd;
    return base;
  },

  _mapShared(path, size) {
    const open = new NativeFunction(Module.getGlobalExportByName('open'), 'int', ['pointer', 'int']);
    const close = new NativeFunction(Module.getGlobalExportByName('close'), 'int', ['int']);
    const mmap = new NativeFunction(Module.getGlobalExportByName('mmap'), 'pointer',
      ['pointer', 'size_t', 'int', 'int', 'int', 'int64']);
    const fd = open(Memory.allocUtf8String(path), O_RDWR | O_CLOEXEC);
    if (fd < 0)
      throw new Error(`cannot open ring region ${path}`);
    const base = mmap(NULL, size, PROT_READ_WRITE, MAP_SHARED, fd, 0);
    if (base.equals(ptr(-1))) {
      close(fd);
      throw new Error(`cannot map ring region ${path} (${size} bytes)`);
    }
    /* Kept open: the hot path reserves each thread's rings in it as threads start
     * (ada_reserve_rings); ada unlinks the file once this mapping exists. */
    this.regionFd = fd;
    return base;
  },

  _mapPrivate(size, flags) {
    const base = mapAnonymous(size, flags);
    if (base === null)
      throw new Error(`cannot reserve ${Math.round(size / 1048576)} MB for the rings in the target; ` +
                      'lower --max-threads, --ring-kb or --detail-ring-kb');
    return base;
  },

  /* The fields the host chose; ada_init() completes the header (magic last). */
  _writeHeader(c) {
    const r = this.region;
    const at = field => r.add(this.layout['header.' + field]);
    at('max_threads').writeU32(c.maxThreads);
    at('index_capacity').writeU32(c.indexCapacity);
    at('detail_capacity').writeU32(c.detailCapacity);
    at('policy').writeU32(c.policy);
    at('heartbeat_ns').writeU64(uint64(c.heartbeatNs));
    at('stall_ns').writeU64(uint64(c.stallNs));
    at('index_rings_offset').writeU64(uint64(c.indexRingsOffset));
    at('detail_rings_offset').writeU64(uint64(c.detailRingsOffset));
    at('region_size').writeU64(uint64(c.regionSize));
    at('detail_mode').writeU32(c.detailMode);
    at('stack_bytes').writeU32(c.stackBytes);
    at('trigger_gap_ns').writeU64(uint64(c.triggerGapNs));
  },

  /* A thread slot's control block in the region at `base` (or in a copy of it). */
  _slot(base, slot) {
    return base.add(this.layout['region.slots_offset'] + slot * this.layout['sizeof.slot']);
  },

  _registered() {
    return Math.min(this.region.add(this.layout['header.registered']).readU32(), this.config.maxThreads);
  },

  /*
   * RPC transport: the ring bytes not sent yet, as one buffer (at most `budget` ring bytes):
   * a prefix, the header page, the control block of every registered slot, a segment table
   * and the new ring bytes. A slot's head in the copy is cut back to what the buffer holds,
   * so the host's view is always whole events and whole detail records. What the buffer
   * holds counts as consumed from then on: the slot's tails move past it (the room the
   * producers wait for), and the host gets its bytes in the order they were sent.
   */
  _collect(budget) {
    const c = this.config;
    const L = this.layout;
    const P = c.pull;  /* the buffer's format, as the host reads it (tracer/record/transport.py) */
    const r = this.region;
    const eventBytes = L['sizeof.event'];
    const isLive = state => state === L['const.slot_active'] || state === L['const.slot_ended'];
    const registered = this._registered();
    const controls = L['region.slots_offset'] + registered * L['sizeof.slot'];
    const fixed = P.prefixBytes + controls;
    const maxSegments = registered * 2;
    const capacity = fixed + maxSegments * P.segmentBytes + budget;
    if (this.stage === null || this.stage.size < capacity)
      this.stage = { base: Memory.alloc(capacity), size: capacity };
    const st = this.stage.base;
    const copyOfRegion = st.add(P.prefixBytes);
    Memory.copy(copyOfRegion, r, controls);
    const table = st.add(fixed);
    let data = fixed + maxSegments * P.segmentBytes;
    let segments = 0;
    let left = budget;
    const addSegment = (slot, lane, start, length, ringBase, ringSize) => {
      const pos = start % ringSize;
      const first = Math.min(length, ringSize - pos);
      Memory.copy(st.add(data), ringBase.add(pos), first);
      if (first < length)
        Memory.copy(st.add(data + first), ringBase, length - first);
      const e = table.add(segments * P.segmentBytes);
      e.add(P.segment.slot).writeU32(slot);
      e.add(P.segment.lane).writeU32(lane);
      e.add(P.segment.start).writeU64(uint64(start));
      e.add(P.segment.length).writeU64(uint64(length));
      e.add(P.segment.offset).writeU64(uint64(data));
      segments++;
      data += length;
      left -= length;
    };
    /* Exclusive: the JavaScript lock stays held through the call. Cooperative, it let a
     * crashing thread's handover run its own _collect in the middle of a push's, on the same
     * stage and tails (a remote recording's second lap of a ring read back as its first). */
    if (this.snapshotFn === undefined)
      this.snapshotFn = new NativeFunction(this.cm.ada_snapshot_slot, 'uint32', ['uint32', 'pointer'],
                                           { scheduling: 'exclusive' });
    for (let slot = 0; slot < registered; slot++) {
      const ctl = this._slot(r, slot);
      const copy = this._slot(copyOfRegion, slot);
      if (!isLive(ctl.add(L['slot.state']).readU32()))
        continue;
      /* Read again in C, in the order the producers publish (ada_snapshot_slot) */
      const state = this.snapshotFn(slot, copy);
      if (!isLive(state))
        continue;
      const [tail, dtail] = this.tails[slot] || [0, 0];
      const head = copy.add(L['slot.head']).readU64().toNumber();
      const dhead = c.detailCapacity > 0 ? copy.add(L['slot.detail_head']).readU64().toNumber() : 0;
      /* A slot's detail is sent whole (whole records) or waits for the next buffer. */
      let detailSent = 0;
      if (dhead > dtail && dhead - dtail <= left) {
        addSegment(slot, 1, dtail, dhead - dtail, r.add(c.detailRingsOffset + slot * c.detailCapacity),
                   c.detailCapacity);
        detailSent = dhead - dtail;
      }
      copy.add(L['slot.detail_head']).writeU64(uint64(dtail + detailSent));
      const events = Math.max(0, Math.min(head - tail, Math.floor(left / eventBytes)));
      const ringBytes = c.indexCapacity * eventBytes;
      if (events > 0)
        addSegment(slot, 0, tail * eventBytes, events * eventBytes,
                   r.add(c.indexRingsOffset + slot * ringBytes), ringBytes);
      copy.add(L['slot.head']).writeU64(uint64(tail + events));
      /* The host frees an ended slot once it has drained it: only when all of it is sent. */
      if (state === L['const.slot_ended'] && (tail + events < head || detailSent < dhead - dtail))
        copy.add(L['slot.state']).writeU32(L['const.slot_active']);
      if (events > 0 || detailSent > 0) {
        this.tails[slot] = [tail + events, dtail + detailSent];
        ctl.add(L['slot.tail']).writeU64(uint64(tail + events));
        ctl.add(L['slot.detail_tail']).writeU64(uint64(dtail + detailSent));
      }
    }
    st.add(P.prefix.magic).writeU32(P.magic);
    st.add(P.prefix.segments).writeU32(segments);
    st.add(P.prefix.registered).writeU32(registered);
    st.add(P.prefix.capacity).writeU32(maxSegments);
    return ArrayBuffer.wrap(st, data);
  },

  /*
   * RPC transport: the host asks for what is left as the recording stops (the pushes have
   * ended then: stop()), freeing first the slots it has drained since its last beat.
   */
  pull(budget, freed) {
    for (const slot of freed || [])
      this._free(slot);
    this.heartbeat();
    return this._collect(budget);
  },

  /* RPC transport: the host has drained an ended thread's slot; a new thread may claim it
   * (the host's side of this is RingReader.free_slot, on the local device). */
  _free(slot) {
    const L = this.layout;
    const ctl = this._slot(this.region, slot);
    if (ctl.add(L['slot.state']).readU32() !== L['const.slot_ended'])
      return;
    ctl.add(L['slot.tail']).writeU64(0);
    ctl.add(L['slot.detail_tail']).writeU64(0);
    this.tails[slot] = [0, 0];
    const releases = ctl.add(L['slot.releases']);
    releases.writeU32(releases.readU32() + 1);
    ctl.add(L['slot.state']).writeU32(L['const.slot_free']);
  },

  /*
   * RPC transport: the agent pushes the ring bytes to the host (ada:data), and the host
   * never calls in while the program runs: a call or a message crossing the channel as the
   * process forks lets Frida kill the child or stop the parent for good (docs/recording.md,
   * "Children and exec"; the host's pulls every 2 ms lost 9 children of 300 even with their
   * answers held while in fork()). Pushes go from a timer here: at once again after one that
   * carried a sixteenth of its budget or more, or found a ring a quarter full (in C:
   * ada_rings_to_pull), else PUSH_IDLE_MS later: a program recording at a modest pace then
   * makes at most a hundred pushes a second, not thousands of small ones (each costs the
   * target a message, and the host its acknowledgements: transport.py).
   * Where Frida holds children none begins while the program is inside fork() (forkGate,
   * ada_code.js). At most `window` bytes and `inFlight` pushes are on their way: the host's
   * beats say what it has received (a slow link holds the rest back in the rings, where the
   * producers wait).
   */
  startPushing(budget, window, inFlight) {
    this.push = { budget, window, inFlight, sent: 0, acked: 0, pushes: 0, ackedPushes: 0,
                  ended: -1, timer: null };
    this._pushAfter(0);
  },

  _pushAfter(ms) {
    this.push.timer = setTimeout(() => {
      if (this.push === null)
        return;
      this.push.timer = null;
      if (this.handedOver || this._forked())  /* a forked child's copy: the parent pushes */
        return;
      this._pushAfter(this._pushOnce() ? 0 : PUSH_IDLE_MS);  /* at once while they keep up */
    }, ms);
  },

  /* One push if there is something new and room in the window; true if the next should come
   * at once (a big one, or a ring filling). */
  _pushOnce() {
    const p = this.push;
    if (this._windowFull())
      return false;
    if (this.toPullFn === undefined)
      this.toPullFn = new NativeFunction(this.cm.ada_rings_to_pull, 'uint32', [],
                                         { scheduling: 'exclusive' });
    const now = this.toPullFn();
    const ended = now & 0x3fffffff, filling = (now >>> 30 & 1) === 1;
    if (now >>> 31 === 0 && ended === p.ended)
      return false;
    const gate = this.forkGate;
    if (gate !== null && !gate.begin())
      return false;  /* the program is inside fork() */
    let size;
    try {
      p.ended = ended;
      const data = this._collect(p.budget);
      size = data.byteLength;
      p.sent += size;
      p.pushes++;
      send({ type: MESSAGES.data }, data);
    } finally {
      if (gate !== null)
        gate.end();
    }
    return filling || size >= p.budget / 16;
  },

  _windowFull() {
    const p = this.push;
    return p.sent - p.acked >= p.window || p.pushes - p.ackedPushes >= p.inFlight;
  },

  _stopPushing() {
    if (this.push !== null && this.push.timer !== null)
      clearTimeout(this.push.timer);
    this.push = null;
  },

  /*
   * Over rpc the host beats by message (ada:beat: once a second from a thread of its own,
   * and from its drain once half the window is unacknowledged): on a slow link (a portal to
   * the emulated arm64 machine, 1 MB/s) one buffer took longer than rpc_stall_s to arrive,
   * and threads waiting for room dropped events with the host alive. Beats travel the other way than the ring
   * bytes, so they are not queued behind them. A beat carries the bytes and the count of
   * the pushes the host has received (the window) and the slots it has freed.
   */
  _listenForBeats() {
    const onBeat = message => {
      this.heartbeat();
      const freed = message.freed || [];
      for (const slot of freed)
        this._free(slot);
      if (this.push !== null) {
        if (message.received !== undefined)
          this.push.acked = message.received;
        if (message.pushes !== undefined)
          this.push.ackedPushes = message.pushes;
        if (freed.length > 0)
          this.push.ended = -1;  /* a slot that ends again is news */
      }
      recv(MESSAGES.beat, onBeat);
    };
    recv(MESSAGES.beat, onBeat);
  },

  heartbeat() {
    if (this.heartbeatFn === undefined)
      this.heartbeatFn = new NativeFunction(this.cm.ada_heartbeat, 'void', []);
    this.heartbeatFn();
  },

  /* Ring bytes produced but not yet consumed by the host, over all slots. */
  _pendingBytes() {
    const L = this.layout;
    const registered = this._registered();
    let total = 0;
    for (let slot = 0; slot < registered; slot++) {
      const ctl = this._slot(this.region, slot);
      const state = ctl.add(L['slot.state']).readU32();
      if (state !== L['const.slot_active'] && state !== L['const.slot_ended'])
        continue;
      const [tail, dtail] = this.tails[slot] || [0, 0];
      total += (ctl.add(L['slot.head']).readU64().toNumber() - tail) * L['sizeof.event'];
      if (this.config.detailCapacity > 0)
        total += ctl.add(L['slot.detail_head']).readU64().toNumber() - dtail;
    }
    return total;
  },
};
