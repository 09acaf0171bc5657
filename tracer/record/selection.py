"""Function selection in frida-trace's spelling, kept in the order given.

-i/-x [MODULE!]GLOB include/exclude exported functions, -I/-X MODULE include/
exclude whole modules, -a MODULE!OFFSET one address, -s [MODULE!]GLOB functions
from the symbol table (exported or not), -m/-M "-[Class selector]" include/exclude
Objective-C methods (globs allowed, as frida-trace takes them). The agent applies
them in order, each adding to or removing from the set (agent/ada_selection.js).
"""

from __future__ import annotations

import argparse
from typing import Any


# The flag each selection item was given with, to describe a selection in the user's spelling.
_FLAGS = {("include", "function"): "-i", ("exclude", "function"): "-x",
          ("include", "module"): "-I", ("exclude", "module"): "-X",
          ("include", "offset"): "-a", ("include", "symbol"): "-s",
          ("include", "objc"): "-m", ("exclude", "objc"): "-M"}


def _split(value: str) -> tuple[str | None, str]:
    module, sep, name = value.rpartition("!")
    return (module or None) if sep else None, name


def check_glob(flag: str, value: str, glob: str | None) -> None:
    """The agent turns globs into regular expressions (agent/ada_selection.js): `*`, `?`,
    `[abc]`, `[!abc]`. A `[` that never closes would be an error only the agent finds."""
    if glob is None:
        return
    i = 0
    while i < len(glob):
        if glob[i] == "[":
            close = glob.find("]", i + 2 if glob[i + 1:i + 2] in ("!", "]") else i + 1)
            if close < 0:
                raise ValueError(f"{flag} {value!r}: '[' at {i} is never closed (a set of "
                                 "characters is written [abc] or [!abc])")
            i = close
        i += 1


def parse_item(flag: str, value: str) -> dict[str, Any]:
    """One selection item for the agent; ValueError with the reason when malformed."""
    if not value:
        raise ValueError(f"{flag} needs a value")
    item = _parse_item(flag, value)
    if item["kind"] != "objc":
        check_glob(flag, value, item["module"])
        check_glob(flag, value, item["pattern"])
    return item


def _parse_item(flag: str, value: str) -> dict[str, Any]:
    if flag in ("-i", "-x", "-s"):
        module, pattern = _split(value)
        if not pattern:
            raise ValueError(f"{flag} {value!r}: no function pattern after '!'")
        return {"op": "exclude" if flag == "-x" else "include",
                "kind": "symbol" if flag == "-s" else "function",
                "module": module, "pattern": pattern, "offset": None}
    if flag in ("-m", "-M"):
        if not (value[:2] in ("-[", "+[", "*[") and value.endswith("]") and " " in value):
            raise ValueError(f"{flag} {value!r}: expected an Objective-C method like "
                             "'-[NSURLSession dataTask*]' or '+[* *Key*]'")
        return {"op": "include" if flag == "-m" else "exclude", "kind": "objc",
                "module": None, "pattern": value, "offset": None}
    if flag in ("-I", "-X"):
        return {"op": "include" if flag == "-I" else "exclude", "kind": "module",
                "module": value, "pattern": None, "offset": None}
    if flag == "-a":
        module, offset = _split(value)
        if module is None:
            raise ValueError(f"-a {value!r}: expected MODULE!OFFSET, e.g. libc.so.6!0x1234")
        try:
            off = int(offset, 0)
        except ValueError:
            raise ValueError(f"-a {value!r}: offset {offset!r} is not a number") from None
        if off < 0:
            raise ValueError(f"-a {value!r}: offset must not be negative")
        return {"op": "include", "kind": "offset", "module": module, "pattern": None,
                "offset": off}
    raise ValueError(f"unknown selection flag {flag}")


def describe_selection(selection: list[dict[str, Any]]) -> str:
    """The selection in the flags it was typed with, e.g. "-i libc.so.6!open* -X libm.so.6"."""
    parts = []
    for s in selection:
        flag = _FLAGS.get((s["op"], s["kind"]), "?")
        if s["kind"] == "module":
            parts.append(f"{flag} {s['module']}")
        elif s["kind"] == "offset":
            parts.append(f"{flag} {s['module']}!0x{s['offset']:x}")
        else:
            parts.append(f"{flag} {(s['module'] + '!') if s['module'] else ''}{s['pattern']}")
    return " ".join(parts) or "nothing selected"


def describe_missed(item: dict[str, Any], symbols: int) -> str:
    """An include item that matched nothing, with the hint when `symbols` functions of its
    pattern are in the symbol table: -i sees exported names only, -s every named function."""
    text = describe_selection([item])
    if symbols and item["kind"] == "function":
        text += (f" ({symbols} function(s) of that name are in the symbol table but not "
                 f"exported, which -i needs: {describe_selection([{**item, 'kind': 'symbol'}])} "
                 "traces them)")
    return text


class SelectionAction(argparse.Action):
    """Appends (in command-line order) to one shared list; `const` is the short flag whose
    meaning the option has, whichever spelling was typed."""

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace,
                 values: Any, option_string: str | None = None) -> None:
        items = getattr(namespace, self.dest, None) or []
        try:
            items.append(parse_item(self.const or option_string or "", values))
        except ValueError as e:
            parser.error(str(e))
        setattr(namespace, self.dest, items)


def add_selection_arguments(parser: argparse.ArgumentParser) -> None:
    g = parser.add_argument_group("function selection (frida-trace style, applied in order)")
    g.add_argument("-i", "--include", const="-i", dest="selection", action=SelectionAction,
                   metavar="[MODULE!]GLOB", help="include exported functions matching GLOB")
    g.add_argument("-x", "--exclude", const="-x", dest="selection", action=SelectionAction,
                   metavar="[MODULE!]GLOB", help="exclude functions matching GLOB")
    g.add_argument("-I", "--include-module", const="-I", dest="selection", action=SelectionAction,
                   metavar="MODULE", help="include every exported function of MODULE")
    g.add_argument("-X", "--exclude-module", const="-X", dest="selection", action=SelectionAction,
                   metavar="MODULE", help="exclude every function of MODULE")
    g.add_argument("-a", "--add", const="-a", dest="selection", action=SelectionAction,
                   metavar="MODULE!OFFSET", help="include the function at MODULE's base + OFFSET")
    g.add_argument("-m", "--include-objc-method", const="-m", dest="selection",
                   action=SelectionAction, metavar="OBJC_METHOD",
                   help="include Objective-C methods, e.g. '-[NSURLSession dataTask*]' "
                   "(iOS/macOS)")
    g.add_argument("-M", "--exclude-objc-method", const="-M", dest="selection",
                   action=SelectionAction, metavar="OBJC_METHOD",
                   help="exclude Objective-C methods")
    g.add_argument("-s", "--symbol", const="-s", dest="selection", action=SelectionAction,
                   metavar="[MODULE!]GLOB",
                   help="include functions from the symbol table (exported or not) matching GLOB")
