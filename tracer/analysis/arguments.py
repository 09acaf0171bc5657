"""Arguments, return values and callers by name: the detail lane's registers and stack window
decoded by each traced function's debug information (debuginfo.py) and the calling convention.

- x86_64 System V: integer arguments in rdi, rsi, rdx, rcx, r8, r9, then on the stack from
  sp+8 at entry (sp holds the return address); a struct returned in memory takes rdi first;
  results in rax (and rdx for the second eightbyte).
- arm64 AAPCS64: x0-x7, then the stack from sp (in 8-byte slots; Apple's variant packs them by
  their natural alignment); an indirect result goes in x8, not in the arguments; results in x0
  (and x1). A struct of more than 16 bytes is passed by reference (a pointer in the register).

Floating-point arguments and results are in vector registers, which the detail lane does not
record: they show as `?` (and take no integer register). Without debug information for a
function, the raw argument registers are shown, as before.
"""

from __future__ import annotations

import sys
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ada.atf import format as F
from ada.atf.manifest import Manifest, Module
from ada.atf.reader import DetailEvent
from ada.atf.session import SessionReader

from .debuginfo import Function, ModuleDebug, Type, UnknownFormat

RAW_ARGS = 3  # argument registers shown without debug information
GPRS = {F.ARCH_X86_64: 6, F.ARCH_ARM64: 8}
RESULT_SLOTS = {F.ARCH_X86_64: (6, 2), F.ARCH_ARM64: (0, 1)}  # rax, rdx / x0, x1
STACK_ARGS_AT = {F.ARCH_X86_64: 8, F.ARCH_ARM64: 0}  # past the return address on x86_64


def quote(data: bytes, truncated: bool) -> str:
    """A captured C string as C would write it: "hello", and "..." after it when it went on."""
    text = "".join(chr(b) if 0x20 <= b < 0x7F and b not in (0x22, 0x5C) else
                   {0x22: '\\"', 0x5C: "\\\\", 0x0A: "\\n", 0x09: "\\t"}.get(b, f"\\x{b:02x}")
                   for b in data)
    return f'"{text}"' + ("..." if truncated else "")


def format_value(value: int, t: Type) -> str:
    """An integer register (or stack slot) shown as its type says."""
    bits = 8 * max(1, min(t.size, 8))
    value &= (1 << bits) - 1
    if t.kind == "bool":
        return "true" if value & 0xFF else "false"
    if t.kind == "char":
        c = value & 0xFF
        return repr(chr(c)) if 0x20 <= c < 0x7F else f"'\\x{c:02x}'"
    if t.kind in ("int", "enum") and t.signed and value >= 1 << (bits - 1):
        value -= 1 << bits
    if t.kind == "enum":
        for v, name in t.enumerators:
            if v == value:
                return name
        return str(value)
    if t.kind == "int":
        return str(value)
    if t.kind == "float":
        return "?"
    return f"0x{value:x}"


@dataclass
class Convention:
    """Where one call's arguments are: the integer registers and the stack window."""

    arch: int
    apple: bool = False

    def places(self, fn: Function) -> list[tuple[str, Any]]:
        """Where each parameter is at the call: ("const", value) for a clone's fixed one,
        ("vector", None) in a vector register (not recorded), ("regs", (first, count,
        by_reference)) in integer registers, ("stack", (offset, size)) in the stack window
        (offset from sp at entry)."""
        gprs = GPRS.get(self.arch, 6)
        used = 1 if self._in_memory(fn.returns) and self.arch == F.ARCH_X86_64 else 0
        offset = STACK_ARGS_AT.get(self.arch, 0)
        out: list[tuple[str, Any]] = []
        for p in fn.params:
            t = p.type
            if p.constant is not None:
                out.append(("const", p.constant))
                continue
            if t.kind == "float" or (t.kind == "struct" and t.has_float):
                out.append(("vector", None))
                continue
            words, by_reference = 1, False
            if t.kind == "struct":
                if t.size > 16:
                    if self.arch == F.ARCH_ARM64:
                        by_reference = True  # a pointer to a copy, in a register
                    else:
                        words = 0  # a copy on the stack
                else:
                    words = max(1, (t.size + 7) // 8)
            elif t.kind == "int" and t.size == 16:
                words = 2
            if words and used + words <= gprs:
                out.append(("regs", (used, words, by_reference)))
                used += words
                continue
            if words and self.arch == F.ARCH_ARM64:
                used = gprs  # AAPCS64: once one is on the stack, the rest follow
            if self.apple and words == 1 and t.kind != "struct":
                size = align = max(1, min(t.size, 8))  # packed by natural alignment
            else:
                size, align = (t.size if words == 0 else 8 * words), 8
            offset = (offset + align - 1) // align * align
            out.append(("stack", (offset, size)))
            offset += (size + align - 1) // align * align
        return out

    def string_slots(self, fn: Function) -> int:
        """A mask of the regs[] slots holding `char *` parameters (captured with the detail
        lane: ada_capture_strings in agent/ada_hooks.c)."""
        mask = 0
        for p, (kind, where) in zip(fn.params, self.places(fn)):
            if p.type.kind == "string" and kind == "regs":
                mask |= 1 << where[0]
        return mask

    def arguments(self, fn: Function, regs: tuple[int, ...], stack: bytes,
                  strings: dict[int, tuple[bytes, bool]] | None = None
                  ) -> list[tuple[str, str]]:
        out = []
        for p, (kind, where) in zip(fn.params, self.places(fn)):
            t = p.type
            if kind == "const":
                out.append((p.name, format_value(where, t)))
            elif kind == "vector":
                out.append((p.name, "?"))
            elif kind == "regs":
                first, count, by_reference = where
                if t.kind == "string" and strings and first in strings:
                    out.append((p.name, quote(*strings[first])))
                else:
                    out.append((p.name, self._show(t, list(regs[first:first + count]),
                                                   by_reference)))
            else:
                offset, size = where
                chunk = stack[offset:offset + size]
                if len(chunk) < size or (t.kind == "struct" and t.size > 16):
                    out.append((p.name, "{...}" if t.kind == "struct" else "?"))
                    continue
                values = [int.from_bytes(chunk[i:i + 8].ljust(8, b"\0"), "little")
                          for i in range(0, size, 8)]
                out.append((p.name, self._show(t, values, False)))
        return out

    def result(self, fn: Function, regs: tuple[int, ...]) -> str | None:
        t = fn.returns
        if t.kind == "void":
            return None
        first, second = RESULT_SLOTS.get(self.arch, (0, 1))
        if t.kind == "float" or (t.kind == "struct" and t.has_float):
            return "?"
        if t.kind == "struct":
            if self._in_memory(t):
                return f"{{...}} @0x{regs[first]:x}"  # the callee returns the address
            words = [regs[first], regs[second]][:max(1, (t.size + 7) // 8)]
            return self._show(t, words, False)
        if t.kind == "int" and t.size == 16:
            return self._show(t, [regs[first], regs[second]], False)
        return format_value(regs[first], t)

    def _in_memory(self, t: Type) -> bool:
        return t.kind == "struct" and t.size > 16

    @staticmethod
    def _show(t: Type, values: list[int], by_reference: bool) -> str:
        if t.kind == "struct":
            if by_reference:
                return f"{{...}} @0x{values[0]:x}"
            return "{" + ", ".join(f"0x{v:x}" for v in values) + "}"
        if len(values) == 2:  # a 128-bit integer
            value = values[0] | values[1] << 64
            if t.signed and value >= 1 << 127:
                value -= 1 << 128
            return str(value)
        return format_value(values[0], t)


@dataclass
class Decoder:
    """A session's functions with their debug information (read when first needed), and its
    modules, for callers."""

    session: SessionReader
    symbols: list[Path] = field(default_factory=list)  # --symbols directories
    notes: list[str] = field(default_factory=list)
    _functions: dict[int, Function | None] = field(default_factory=dict)
    _modules: dict[int, tuple[ModuleDebug | None, int, int]] = field(default_factory=dict)
    _lock: threading.RLock = field(default_factory=threading.RLock)  # workers share it

    def __post_init__(self) -> None:
        manifest = self.session.manifest or Manifest(self.session.path, {})
        process = manifest.process
        self.arch = {"x86_64": F.ARCH_X86_64, "arm64": F.ARCH_ARM64}.get(
            str(process.arch), F.ARCH_X86_64)
        self.convention = Convention(self.arch, process.apple)
        self._module_rows = {m.module_id: m for m in manifest.modules}
        self._addresses: dict[int, tuple[int, int]] = {  # function_id -> (module, address)
            s.function_id: (s.module_id, s.address) for s in manifest.symbols
            if s.address is not None}

    def function(self, function_id: int) -> Function | None:
        """The traced function's debug information, or None (no file, no DWARF for it)."""
        with self._lock:
            return self._function(function_id)

    def _function(self, function_id: int) -> Function | None:
        if function_id not in self._functions:
            fn = None
            if function_id in self._addresses:
                module_id, address = self._addresses[function_id]
                debug, base, _ = self._module(module_id)
                if debug is not None and debug.has_dwarf:
                    fn = debug.function(address - base + debug.load_base)
            self._functions[function_id] = fn
        return self._functions[function_id]

    def _module(self, module_id: int) -> tuple[ModuleDebug | None, int, int]:
        if module_id in self._modules:
            return self._modules[module_id]
        row = self._module_rows.get(module_id) or Module(module_id)
        base, size = row.base, row.size
        debug = None
        path = find_module([row.file, row.path], self.symbols)
        if path is None:
            if module_id in self._module_rows:
                self.notes.append(f"{row.name}: its file is not here "
                                  f"({row.path}); --symbols DIR points at a copy")
        else:
            try:
                debug = open_module(path, self.symbols)
            except UnknownFormat as e:
                self.notes.append(f"{e}: raw registers shown")
            except Exception as e:  # noqa: BLE001 (unreadable, damaged...)
                self.notes.append(f"{path}: cannot read its debug information ({e})")
            else:
                if not debug.has_dwarf:
                    self.notes.append(f"{row.name}: no debug information "
                                      f"(raw registers shown; build with -g, or give its "
                                      f"split debug file's directory with --symbols)")
        self._modules[module_id] = (debug, base, size)
        return self._modules[module_id]

    # --- what the reading commands show ----------------------------------------------

    def call_values(self, function_id: int, event: DetailEvent
                    ) -> tuple[list[tuple[str, str]], bool]:
        """(each argument's name and value, whether they are named): without debug info,
        the first raw registers, as `arg1`..."""
        fn = self.function(function_id)
        if fn is None:
            return [(f"arg{i + 1}", f"0x{r:x}") for i, r in enumerate(event.regs[:RAW_ARGS])], \
                False
        return self.convention.arguments(fn, event.regs, event.stack, event.strings), True

    def call_text(self, function_id: int, event: DetailEvent) -> str:
        """`a=3, b=6`, or the raw registers (`0x3, 0x6, 0x0`) without debug info."""
        values, named = self.call_values(function_id, event)
        if not named:
            return ", ".join(value for _, value in values)
        fn = self.function(function_id)
        return ", ".join(f"{name}={value}" for name, value in values) + \
            (", ..." if fn is not None and fn.variadic else "")

    def return_text(self, function_id: int, event: DetailEvent) -> str | None:
        fn = self.function(function_id)
        if fn is None:
            value = event.return_value
            return None if value is None else f"0x{value:x}"
        return self.convention.result(fn, event.regs)

    def caller(self, address: int) -> str | None:
        """`main+0x1c (demo.c:42)` for a return address, from the module holding it."""
        with self._lock:
            return self._caller(address)

    def _caller(self, address: int) -> str | None:
        for module_id, row in self._module_rows.items():
            base, size = row.base, row.size
            if base <= address < base + size:
                debug = self._module(module_id)[0]
                if debug is None:
                    return None
                file_address = address - base + debug.load_base
                where, line = debug.where(file_address)
                place = debug.line(file_address - 1) if debug.has_dwarf else None
                text = where or f"{row.name}+0x{address - base:x}"
                if place:
                    text += f" ({Path(place[0]).name}:{place[1]})"
                return text
        return None

    def save(self) -> None:
        for debug, _, _ in self._modules.values():
            if debug is not None:
                debug.save()

    def say_notes(self) -> None:
        """What could not be decoded, once each, on stderr."""
        for note in dict.fromkeys(self.notes):
            print(f"ada: note: {note}", file=sys.stderr)


def find_module(paths: list[Any], symbols: list[Path] | tuple[Path, ...] = ()) -> Path | None:
    """A module's file on this machine: a copy by file name in `symbols` first (a trace from
    another machine), then the module's own path(s)."""
    names = [Path(p) for p in paths if p]
    for candidate in [d / n.name for d in symbols for n in names] + names:
        if candidate.is_file():
            return candidate
    return None


def open_module(path: Path, symbols: list[Path] | tuple[Path, ...] = ()) -> ModuleDebug:
    """A module's debug information, with its DWARF from a separate file when the module has
    none (ModuleDebug.split_debug_names): looked for in `symbols`, beside the module (a
    dSYM), then in /usr/lib/debug (where distributions put split debug files)."""
    debug = ModuleDebug(path)
    if debug.has_dwarf:
        return debug
    for d in [*symbols, path.parent, Path("/usr/lib/debug")]:
        for name in debug.split_debug_names():
            if (d / name).is_file():
                debug.close()
                return ModuleDebug(path, d / name)
    return debug



def string_slots(functions: list[dict[str, Any]], arch: str,
                 symbols: list[Path] | tuple[Path, ...] = ()) -> dict[str, int]:
    """{function_id: mask of the regs[] slots holding `char *` parameters} for functions as
    the agent finds them (modulePath, moduleBase, address, functionId); a module's file is
    looked for by name in `symbols` first (a phone's libraries copied to this machine), then
    at its path. Functions without debug information are left out."""
    convention = Convention({"x64": F.ARCH_X86_64, "x86_64": F.ARCH_X86_64,
                             "arm64": F.ARCH_ARM64}.get(arch, F.ARCH_X86_64))
    modules: dict[str, ModuleDebug | None] = {}
    out = {}
    for f in functions:
        path = f.get("modulePath")
        if path not in modules:
            found = find_module([path], symbols)
            try:
                modules[path] = open_module(found, symbols) if found is not None else None
            except Exception:  # noqa: BLE001 (unreadable: no strings to capture)
                modules[path] = None
        debug = modules[path]
        if debug is None or not debug.has_dwarf:
            continue
        fn = debug.function(int(f["address"], 16) - int(f["moduleBase"], 16) + debug.load_base)
        mask = convention.string_slots(fn) if fn is not None else 0
        if mask:
            out[f["functionId"]] = mask
    for debug in modules.values():
        if debug is not None:
            debug.save()
    return out
