"""Frida's exceptions in the user's words: one short sentence each, saying what to do.

Every error frida raises while ada attaches, hooks or records passes through here on its way to a
TracerError, so the wording lives in one place.
"""

from __future__ import annotations

import os
import sys

import frida
from frida.core import RPCException

from .options import Target

# Every error the frida bindings raise for a target or device problem.
FRIDA_ERRORS: tuple[type[BaseException], ...] = tuple(
    getattr(frida, name) for name in dir(frida)
    if name.endswith("Error") and isinstance(getattr(frida, name), type)) + (RPCException,)


def describe_frida_error(e: BaseException) -> str:
    """A frida error as a short sentence (frida's own text, first line only)."""
    text = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
    text = text.removeprefix("Error: ")  # an exception the agent threw, relayed by RPC
    return text[0].lower() + text[1:] if text[:1].isupper() and not text[:2].isupper() else text


def describe_hook_failure(error: str) -> str:
    """Why Frida's Interceptor refused a function, in ada's words (its own text otherwise)."""
    if "unable to intercept function" in error:
        return ("Frida cannot move its first instructions aside for a hook (the function is "
                "too short, or starts with code Frida cannot relocate)")
    if "already" in error:
        return f"it is already hooked in this process ({error})"
    return error


def explain_attach_error(e: BaseException, device: frida.core.Device, target: Target,
                         pid: int | None, detached: bool) -> str:
    """Why attaching, loading the agent or hooking failed, as the user should read it.

    Called before a spawned target is killed: whether it is still alive tells "it exited
    during attach" from any other failure.
    """
    text = describe_frida_error(e)
    if "locked" in text.lower():
        return f"{device.name} is locked: unlock it and try again ({text})"
    if isinstance(e, frida.ProcessNotFoundError):
        return f"no such process: {target.describe()} ({text})"
    if isinstance(e, frida.ExecutableNotFoundError):
        if device.type != "local" and target.spawns:
            app = target.value[0]  # type: ignore[index]
            return (f"app '{app}' is not installed on {device.name} "
                    f"(frida-ps -Uai lists the apps): {text}")
        return f"cannot spawn {target.describe()}: {text}"
    if isinstance(e, frida.PermissionDeniedError):
        return f"permission denied attaching to {target.describe()}: {text}"
    if detached or (pid is not None and not target_alive(device, pid)):
        return f"the target ({target.describe()}) exited during attach ({text})"
    return f"cannot trace {target.describe()}: {text}"


def target_alive(device: frida.core.Device, pid: int) -> bool:
    """Is the process still live? (False for a zombie: it has exited.)"""
    if device.type == "local" and sys.platform.startswith("linux"):
        try:
            with open(f"/proc/{pid}/stat", "rb") as f:
                return f.read().rsplit(b")", 1)[1].split()[0] not in (b"Z", b"X")
        except (OSError, IndexError):
            return False
    if device.type == "local":
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return False
        except OSError:
            pass
        return True
    try:
        return any(p.pid == pid for p in device.enumerate_processes())
    except FRIDA_ERRORS:
        return True  # cannot tell: keep frida's own words
