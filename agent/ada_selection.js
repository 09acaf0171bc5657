'use strict';
/*
 * The selection rule (-i/-x/-I/-X/-a/-s/-m/-M and --trigger), applied to one
 * module at a time: to every module present at start, and to each module that
 * loads later. Items apply in the order given (frida-trace's semantics), each
 * adding to or removing from the module's set: function (-i/-x), module
 * (-I/-X), offset (-a), symbol (-s, from the symbol table, exported or not),
 * objc (-m/-M, through Frida's ObjC resolver, once at start).
 *
 * A module matches a MODULE glob by any of its names: the file name, the full
 * path, the name and path it was loaded by (a symlink, the path given to
 * dlopen) and, on ELF systems, its soname (DT_SONAME, read from memory).
 * Used by ada_hooking.js, which comes after this file in the same script.
 */

const PT_LOAD = 1;
const PT_DYNAMIC = 2;
const DT_NULL = 0;
const DT_STRTAB = 5;
const DT_SONAME = 14;

function globToRegExp(glob) {
  const escaped = glob.replace(/[.+^${}()|\\]/g, '\\$&').replace(/\*/g, '.*').replace(/\?/g, '.')
    .replace(/\[!/g, '[^');
  try {
    return new RegExp(`^${escaped}$`);
  } catch (e) {
    throw new Error(`invalid pattern '${glob}': ${e.message}`);
  }
}

function basename(path) {
  return path.substring(path.lastIndexOf('/') + 1);
}

let realpathFn = undefined;

/* The file a path names, through symlinks (libc's realpath), or null. */
function realPath(path) {
  if (realpathFn === undefined) {
    const address = Module.findGlobalExportByName('realpath');
    realpathFn = address !== null ? new NativeFunction(address, 'pointer', ['pointer', 'pointer'])
                                  : null;
  }
  if (realpathFn === null)
    return null;
  const out = Memory.alloc(4096);
  const result = realpathFn(Memory.allocUtf8String(path), out);
  return result.isNull() ? null : out.readUtf8String();
}

/* An ELF module's DT_SONAME, read from its mapped headers; null where there is none. */
function soname(module) {
  try {
    const base = module.base;
    if (base.readU32() !== 0x464c457f || base.add(4).readU8() !== 2)  /* "\x7fELF", 64-bit */
      return null;
    const phoff = base.add(0x20).readU64().toNumber();
    const phentsize = base.add(0x36).readU16();
    const phnum = base.add(0x38).readU16();
    let bias = null;
    let dynamic = null;
    for (let i = 0; i < phnum; i++) {
      const ph = base.add(phoff + i * phentsize);
      const type = ph.readU32();
      const vaddr = ph.add(0x10).readU64();
      if (type === PT_LOAD && bias === null)
        bias = base.sub(vaddr.and(uint64('0xfffffffffffff000')));
      else if (type === PT_DYNAMIC)
        dynamic = vaddr;
    }
    if (bias === null || dynamic === null)
      return null;
    let strtab = null;
    let sonameOffset = null;
    for (let entry = bias.add(dynamic); ; entry = entry.add(16)) {
      const tag = entry.readU64().toNumber();
      if (tag === DT_NULL)
        break;
      if (tag === DT_STRTAB)
        strtab = entry.add(8).readPointer();
      else if (tag === DT_SONAME)
        sonameOffset = entry.add(8).readU64().toNumber();
    }
    if (strtab === null || sonameOffset === null)
      return null;
    /* glibc relocates the dynamic section's pointers in place; bionic and musl do not. */
    if (strtab.compare(bias) < 0)
      strtab = bias.add(strtab);
    return strtab.add(sonameOffset).readUtf8String();
  } catch (e) {
    return null;
  }
}

/* Every name a MODULE glob may match, and the module's identity (its file). */
function moduleNames(module) {
  const names = new Set([module.name, module.path]);
  const file = realPath(module.path);
  if (file !== null) {
    names.add(file);
    names.add(basename(file));
  }
  const so = Process.platform === 'darwin' ? null : soname(module);
  if (so !== null)
    names.add(so);
  return { file: file || module.path, names: [...names] };
}

class Selection {
  /* items: parsed by the host (tracer/record/selection.py). */
  constructor(items) {
    this.items = items;
    this.hits = items.map(() => 0);  /* functions each include item has added, over the run */
    this.objc = items.map((item, i) => item.kind === 'objc' ? this._objcMatches(item, i) : null);
  }

  /* Does an item's MODULE glob name the module (null: every module)? */
  _names(item, names) {
    if (item.module === null)
      return true;
    const re = globToRegExp(item.module);
    return names.some(n => re.test(n));
  }

  /* Include items naming no module that is loaded: the modules to wait for. */
  waitingFor(loadedNames) {
    const waiting = [];
    for (const item of this.items) {
      if (item.op !== 'include' || item.module === null || item.kind === 'objc')
        continue;
      const re = globToRegExp(item.module);
      if (!loadedNames.some(names => names.some(n => re.test(n))))
        waiting.push(item.module);
    }
    return [...new Set(waiting)];
  }

  /* Does an include item name no module (any module that loads later may match it)? */
  get anyModule() {
    return this.items.some(item => item.op === 'include' && item.kind !== 'objc' &&
                                   item.module === null);
  }

  /* The selected functions of one module: address string -> {name, address}. */
  functionsIn(module, names) {
    const selected = new Map();
    this.items.forEach((item, i) => {
      if (item.kind === 'objc') {
        this._applyObjC(item, i, module, selected);
        return;
      }
      if (!this._names(item, names))
        return;
      const nameRe = item.pattern !== null ? globToRegExp(item.pattern) : null;
      if (item.op === 'exclude') {
        for (const [key, f] of selected)
          if (item.kind === 'module' || nameRe.test(f.name))
            selected.delete(key);
        return;
      }
      const add = (name, address) => {
        const key = address.toString();
        if (!selected.has(key)) {
          selected.set(key, { name, address, item: i });
        }
      };
      if (item.kind === 'offset') {
        add(`${module.name}+0x${item.offset.toString(16)}`, module.base.add(item.offset));
      } else if (item.kind === 'symbol') {
        for (const s of module.enumerateSymbols())
          if (s.type === 'function' && !s.address.isNull() && nameRe.test(s.name))
            add(s.name, s.address);
      } else {
        for (const e of module.enumerateExports())
          if (e.type === 'function' && (item.kind === 'module' || nameRe.test(e.name)))
            add(e.name, e.address);
      }
    });
    for (const f of selected.values())
      this.hits[f.item]++;
    return selected;
  }

  /*
   * For each -i item that matched nothing: how many functions of its pattern the modules'
   * symbol tables hold (not exported, so -i cannot see them; -s would trace them). 0 where
   * none, or where the item is not an -i. Asked once, after the modules present at start.
   */
  symbolHints(modules) {
    return this.items.map((item, i) => {
      if (item.op !== 'include' || item.kind !== 'function' || this.hits[i] !== 0)
        return 0;
      const nameRe = globToRegExp(item.pattern);
      let count = 0;
      for (const { module, names } of modules) {
        if (!this._names(item, names))
          continue;
        try {
          for (const s of module.enumerateSymbols())
            if (s.type === 'function' && !s.address.isNull() && nameRe.test(s.name))
              count++;
        } catch (e) {
          /* a module whose symbols cannot be read gives no hint */
        }
      }
      return count;
    });
  }

  /* -m/-M matches, found once (the ObjC resolver scans every class): per module path. */
  _objcMatches(item, i) {
    let resolver;
    try {
      resolver = new ApiResolver('objc');
    } catch (e) {
      throw new Error(`${item.op === 'include' ? '-m' : '-M'} needs an Objective-C runtime ` +
                      '(an iOS or macOS target)');
    }
    return resolver.enumerateMatches(item.pattern).map(match => {
      const module = Process.findModuleByAddress(match.address);
      return { name: match.name, address: match.address, path: module !== null ? module.path : null };
    });
  }

  _applyObjC(item, i, module, selected) {
    for (const match of this.objc[i]) {
      if (match.path !== module.path)
        continue;
      const key = match.address.toString();
      if (item.op === 'exclude')
        selected.delete(key);
      else if (!selected.has(key))
        selected.set(key, { name: match.name, address: match.address, item: i });
    }
  }
}
