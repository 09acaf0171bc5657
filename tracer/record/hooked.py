"""What is hooked in the target: functions and triggers found at start and as modules load.

The agent applies the selection to every module present at start and to each module that
loads later (agent/ada_selection.js); it reports each batch, and this keeps the record the
manifest and the last words of a recording come from: every function with its id and when its
module loaded, the trigger functions, what Frida refused to hook (in ada's words), modules
that went away, and which selection items never matched anything.

Frida-free. Batches arrive on Frida's message thread while the drain and the status line run
on others: everything here is appended under one lock, and read as copies.
"""

from __future__ import annotations

import threading
from typing import Any, Callable

from .frida_errors import describe_hook_failure
from .selection import describe_missed


class HookedFunctions:
    def __init__(self, selection: list[dict[str, Any]], triggers: list[dict[str, Any]],
                 warn: Callable[[str], None]) -> None:
        self.selection = selection
        self.trigger_selection = triggers
        self.warn = warn
        self._lock = threading.Lock()
        self.functions: list[dict[str, Any]] = []
        self.triggers: dict[int, dict[str, Any]] = {}  # trigger id -> the agent's entry
        self.failures: list[dict[str, Any]] = []
        # functions the inline engine left to Frida's Interceptor ({name, module, reason})
        self.fallbacks: list[dict[str, Any]] = []
        # functions that only jump to code hooked for another ({name, module, as}): their
        # calls are recorded under that one
        self.aliases: list[dict[str, Any]] = []
        # functions hooked through an int3 ({name, module, address, reason}: why no jump
        # fits), the inline engine's last resort: a signal each call
        self.breakpoints: list[dict[str, Any]] = []
        # functions whose jumps Frida wrote more than 1 s after ada hooked them (another thread
        # held its Interceptor's transaction: ada_await_written): calls before are missing
        self.late: list[dict[str, Any]] = []
        self.writes_awaited = 0  # jumps the agent found unwritten and waited for, all told
        self.unloaded: list[dict[str, Any]] = []  # {"path", "base", "removed_ns"}
        self.hits: list[int] = [0] * len(selection)  # functions each selection item added
        # per item: functions of its -i pattern found only in symbol tables at start (a hint)
        self.symbol_hints: list[int] = [0] * len(selection)

    def add(self, functions: list[dict[str, Any]], triggers: list[dict[str, Any]],
            failures: list[dict[str, Any]], hits: list[int],
            fallbacks: list[dict[str, Any]] | None = None,
            aliases: list[dict[str, Any]] | None = None,
            breakpoints: list[dict[str, Any]] | None = None,
            late: list[dict[str, Any]] | None = None,
            writes_awaited: int | None = None) -> None:
        """A batch the agent found (and hooked, but for `failures`; `fallbacks` by Frida's
        Interceptor instead of the inline engine; `aliases` through another's hook;
        `breakpoints` through an int3, where neither engine's jump fits; `late` hooked, but
        written by Frida only after more than 1 s; `writes_awaited` the agent's count so far
        of jumps it found unwritten and waited for)."""
        for f in failures:
            f["reason"] = describe_hook_failure(f["error"])
            if f.get("inline"):  # the inline engine's refusal came first
                f["reason"] = f"inline: {f['inline']}; Frida's Interceptor: {f['reason']}"
            use = "use as a trigger" if f.get("trigger") else "hook"
            self.warn(f"cannot {use} {f['name']} in {f['module']} ({f['address']}): "
                      f"{f['reason']}; the other functions are traced")
        self._say_some(fallbacks, "hooked by Frida's Interceptor instead of inline",
                       lambda f: f"{f['name']} ({f['reason']})")
        self._say_some(breakpoints, "hooked through a breakpoint (int3), as no jump fits: "
                       "each call costs a signal, microseconds", lambda f: f["name"])
        self._say_some(late, "hooked, but Frida wrote their jumps more than 1 s late (another "
                       "thread held its Interceptor): their calls until then are not recorded, "
                       "and not counted", lambda f: f["name"])
        self._say_some(aliases, "only jump to another selected function's code: their calls "
                       "are recorded under its name", lambda f: f"{f['name']} (as {f['as']})")
        with self._lock:
            self.functions.extend(functions)
            self.triggers.update({int(t["triggerId"], 16): t for t in triggers})
            self.failures.extend(failures)
            self.fallbacks.extend(fallbacks or [])
            self.aliases.extend(aliases or [])
            self.breakpoints.extend(breakpoints or [])
            self.late.extend(late or [])
            if writes_awaited is not None:
                self.writes_awaited = writes_awaited
            self.hits = list(hits)

    def _say_some(self, items: list[dict[str, Any]] | None, what: str,
                  describe: Callable[[dict[str, Any]], str]) -> None:
        """One warning for a batch: how many functions `what`, the first five by name."""
        if not items:
            return
        more = f" and {len(items) - 5} more (listed in the manifest)" if len(items) > 5 else ""
        self.warn(f"{len(items)} function(s) {what}: "
                  f"{', '.join(map(describe, items[:5]))}{more}")

    def unload(self, path: str, base: str, removed_ns: int) -> None:
        with self._lock:
            self.unloaded.append({"path": path, "base": base, "removed_ns": removed_ns})

    def trigger_name(self, trigger_id: int) -> str | None:
        entry = self.triggers.get(trigger_id)
        return entry["name"] if entry else None

    def function_name(self, function_id: int) -> str | None:
        with self._lock:
            for f in self.functions:
                if int(f["functionId"], 16) == function_id:
                    return f"{f['module']}!{f['name']}"
        return None

    def never_matched(self, hints: bool = False) -> list[str]:
        """The include items (as typed) that matched no function over the whole run; with
        `hints`, each -i that -s would have satisfied says so."""
        with self._lock:
            hits = list(self.hits)
        return [describe_missed(item, hint if hints else 0)
                for item, n, hint in zip(self.selection, hits, self.symbol_hints)
                if item["op"] == "include" and n == 0]

    def snapshot(self) -> dict[str, Any]:
        """Copies for the manifest."""
        with self._lock:
            return {"functions": list(self.functions), "failures": list(self.failures),
                    "fallbacks": list(self.fallbacks), "aliases": list(self.aliases),
                    "breakpoints": list(self.breakpoints), "late": list(self.late),
                    "writes_awaited": self.writes_awaited,
                    "unloaded": list(self.unloaded)}
