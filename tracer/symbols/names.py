"""C++ names as people read them: demangled by the C++ runtime, and without their parameter
lists where the arguments follow (replay). Needs no debug information."""

from __future__ import annotations

from typing import Any

def without_parameters(name: str) -> str:
    """A demangled name without its parameter list (`ns::C::add(long, bool) const` ->
    `ns::C::add`), as uftrace shows C++ calls whose arguments follow."""
    depth, start = 0, name.find("operator()")
    start = start + len("operator()") if start >= 0 else 0
    for i in range(start, len(name)):
        c = name[i]
        if c == "<":
            depth += 1
        elif c == ">":
            depth -= 1
        elif c == "(" and depth == 0 and i > 0:
            return name[:i]
    return name


_demangled: dict[str, str] = {}
_cxa: Any = None


def demangle(name: str) -> str:
    """A C++ symbol's readable name (`_ZN3Foo3barEi` -> `Foo::bar(int)`), by the C++ runtime's
    own __cxa_demangle; any other name as it is."""
    global _cxa
    if not name.startswith("_Z"):
        return name
    if name in _demangled:
        return _demangled[name]
    import ctypes
    import ctypes.util
    if _cxa is None:
        _cxa = False
        for lib in ("stdc++", "c++abi", "c++"):
            path = ctypes.util.find_library(lib)
            try:
                handle = ctypes.CDLL(path or f"lib{lib}.so.6")
                f = handle.__cxa_demangle
            except (OSError, AttributeError):
                continue
            f.restype = ctypes.c_void_p
            f.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_void_p,
                          ctypes.POINTER(ctypes.c_int)]
            _cxa = (f, ctypes.CDLL(None).free)
            break
    out = name
    if _cxa:
        import ctypes
        f, free = _cxa
        status = ctypes.c_int(0)
        raw = f(name.encode(), None, None, ctypes.byref(status))
        if raw and status.value == 0:
            out = ctypes.string_at(raw).decode("utf-8", "replace")
        if raw:
            free(ctypes.c_void_p(raw))
    _demangled[name] = out
    return out
