"""Where a call's arguments and results are, by the calling convention, and how a value of a
known type reads: from the registers and the stack window the detail lane records.

- x86_64 System V: integer arguments in rdi, rsi, rdx, rcx, r8, r9, then on the stack from
  sp+8 at entry (sp holds the return address); a struct returned in memory takes rdi first;
  results in rax (and rdx for the second eightbyte).
- arm64 AAPCS64: x0-x7, then the stack from sp (in 8-byte slots; Apple's variant packs them by
  their natural alignment); an indirect result goes in x8, not in the arguments; results in x0
  (and x1). A struct of more than 16 bytes is passed by reference (a pointer in the register).

Floating-point arguments and results are in vector registers, which the detail lane does not
record: they show as `?` (and take no integer register). Recording uses it too: which
registers hold `char *` parameters, whose strings the hot path captures (string_slots).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ada.atf.format import ARCH_ARM64, ARCH_X86_64

from .debuginfo import Function, Type

GPRS = {ARCH_X86_64: 6, ARCH_ARM64: 8}
RESULT_SLOTS = {ARCH_X86_64: (6, 2), ARCH_ARM64: (0, 1)}  # rax, rdx / x0, x1
STACK_ARGS_AT = {ARCH_X86_64: 8, ARCH_ARM64: 0}  # past the return address on x86_64


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
        used = 1 if self._in_memory(fn.returns) and self.arch == ARCH_X86_64 else 0
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
                    if self.arch == ARCH_ARM64:
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
            if words and self.arch == ARCH_ARM64:
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
        lane: ada_capture_strings in the agent's hot path)."""
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
