'use strict';
/*
 * ada agent, the transport (AgentTransport, methods of AdaAgent): the ring region and how
 * its bytes reach the host. The region is shared memory the host maps too (the shm
 * transport: a memfd made here, which the host opens through /proc/PID/fd, else the /dev/shm
 * file the host made) or private pages the host pulls from (the rpc transport: pull() copies what
 * is new into one buffer, and does the host's consumer side here: the tails it consumed,
 * the slots it freed, its heartbeat). The header fields the host chose are written here
 * before ada_init completes the header.
 */

const O_RDWR = 2;
const O_CLOEXEC = Process.platform === 'darwin' ? 0x1000000 : 0x80000;
const MAP_SHARED = 1;

const NAP_WATCH_MS = 10;  /* how often a napping host's rings are looked at (_watchWhileHostNaps) */

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
   * RPC transport: the host's consumer side, done here on its behalf. Records
   * the tails the host has consumed (that is the back-pressure producers wait
   * on), then returns one buffer: a prefix, the header page, the control block
   * of every registered slot, a segment table and the new ring bytes. A slot's
   * head in the copy is cut back to what the buffer holds, so the host's view
   * is always whole events and whole detail records.
   */
  pull(tails, budget, freed) {
    const c = this.config;
    const L = this.layout;
    const P = c.pull;  /* the buffer's format, as the host reads it (tracer/record/transport.py) */
    const r = this.region;
    const eventBytes = L['sizeof.event'];
    for (let i = 0; i < tails.length; i += 3) {
      const slot = tails[i];
      const ctl = this._slot(r, slot);
      ctl.add(L['slot.tail']).writeU64(uint64(tails[i + 1]));
      ctl.add(L['slot.detail_tail']).writeU64(uint64(tails[i + 2]));
      this.tails[slot] = [tails[i + 1], tails[i + 2]];
    }
    for (const slot of freed || [])
      this._free(slot);
    this.heartbeat();
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
    for (let slot = 0; slot < registered; slot++) {
      const ctl = this._slot(r, slot);
      const copy = this._slot(copyOfRegion, slot);
      const state = ctl.add(L['slot.state']).readU32();
      if (state !== L['const.slot_active'] && state !== L['const.slot_ended'])
        continue;
      const [tail, dtail] = this.tails[slot] || [0, 0];
      /* Index head before detail head, as the local drain reads them: every index
       * event sent then has its detail record (written first) available too. */
      const head = ctl.add(L['slot.head']).readU64().toNumber();
      const dhead = c.detailCapacity > 0 ? ctl.add(L['slot.detail_head']).readU64().toNumber() : 0;
      /* A slot's detail is sent whole (whole records) or waits for the next pull. */
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
    }
    if (segments === 0)
      this._watchWhileHostNaps();
    else
      this._stopWatching();
    st.add(P.prefix.magic).writeU32(P.magic);
    st.add(P.prefix.segments).writeU32(segments);
    st.add(P.prefix.registered).writeU32(registered);
    st.add(P.prefix.capacity).writeU32(maxSegments);
    return ArrayBuffer.wrap(st, data);
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
   * Over rpc the host beats by message (ada:beat, every 100 ms from a thread of its own,
   * except while its drain naps on nothing) besides each pull: on a slow link (a portal to
   * the emulated arm64 machine, 1 MB/s) one pull's reply took longer than rpc_stall_s, and
   * threads waiting for room dropped events with the host alive. Beats travel the other way than the ring bytes, so they are not
   * queued behind them.
   */
  _listenForBeats() {
    const onBeat = () => {
      this.heartbeat();
      recv(MESSAGES.beat, onBeat);
    };
    recv(MESSAGES.beat, onBeat);
  },

  heartbeat() {
    if (this.heartbeatFn === undefined)
      this.heartbeatFn = new NativeFunction(this.cm.ada_heartbeat, 'void', []);
    this.heartbeatFn();
  },

  /*
   * RPC transport: after a pull that found nothing, the host naps longer and longer (up to
   * nap.py's LONGEST_RPC_S), and here a timer tells it by message (ada:wake) when there is
   * something to pull again: ring bytes, or a thread that ended (its slot to free). Before,
   * the host pulled every 25 ms to see, and each pull is a call into this process over
   * Frida's channel: with children followed, Frida left a few forked children in 60
   * unannounced at that pace, and fewer the rarer the calls (docs/recording.md, "Children and
   * exec"). A timer here costs no call across. One wake a pull: a thread that ended and is
   * not freed yet does not wake the host again and again.
   */
  _watchWhileHostNaps() {
    if (this.napWatch !== null)
      return;
    if (this.toPullFn === undefined)
      this.toPullFn = new NativeFunction(this.cm.ada_rings_to_pull, 'uint32', []);
    const ended = this.toPullFn() & 0x7fffffff;
    this.napWatch = setInterval(() => {
      if (this._forked()) {  /* a forked child's copy: the host pulls from the parent */
        this._stopWatching();
        return;
      }
      const now = this.toPullFn();
      if (now >>> 31 !== 0 || (now & 0x7fffffff) > ended) {
        this._stopWatching();
        send({ type: MESSAGES.wake });
      }
    }, NAP_WATCH_MS);
  },

  _stopWatching() {
    if (this.napWatch !== null) {
      clearInterval(this.napWatch);
      this.napWatch = null;
    }
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
