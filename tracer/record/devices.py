"""Devices and targets, with frida-tools' own options and helpers.

The device options (-D/-U/-R/-H and their companions) are added by frida-tools'
ConsoleApplication._add_device_arguments, so they read exactly as in frida-trace.
Its run loop is not used: ada reports errors on stderr in one line and prints
the session path last on stdout.
"""

from __future__ import annotations

import argparse
import os
import shutil
from typing import Callable

import frida
from frida_tools.application import ConsoleApplication, find_device, parse_typed_option

from ..errors import TracerError
from .frida_errors import FRIDA_ERRORS, describe_frida_error, target_alive
from .options import Target


class _RecordDeviceFlag(argparse._StoreConstAction):
    """-U and -R both store into device_type; remember each so two of them can be refused."""

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace,
                 values: object, option_string: str | None = None) -> None:
        namespace.device_flags = list(getattr(namespace, "device_flags", None) or []) + [
            option_string]
        super().__call__(parser, namespace, values, option_string)


def add_device_arguments(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("device (as in frida-tools; at most one of -D, -U, -R, -H)")
    ConsoleApplication._add_device_arguments(None, group)  # type: ignore[arg-type]
    for action in group._group_actions:
        if action.dest == "device_type" and isinstance(action, argparse._StoreConstAction):
            action.__class__ = _RecordDeviceFlag


def add_target_arguments(parser: argparse.ArgumentParser) -> None:
    g = parser.add_argument_group("target (exactly one)")
    g.add_argument("-p", "--attach-pid", type=int, metavar="PID", dest="pid",
                   help="attach to the process with this PID")
    g.add_argument("-n", "--attach-name", metavar="NAME", dest="name",
                   help="attach to the process with this name")
    g.add_argument("-N", "--attach-identifier", metavar="IDENTIFIER", dest="identifier",
                   help="attach to the running app with this bundle id or package name")
    g.add_argument("-f", "--file", metavar="FILE", dest="file",
                   help="spawn FILE (suspended), hook, resume; remaining arguments are its ARGS; "
                   "on a phone FILE is an app identifier")
    g.add_argument("args", nargs="*", metavar="ARGS", help="arguments for -f FILE")


def target_from_args(parser: argparse.ArgumentParser, args: argparse.Namespace) -> Target:
    given = [k for k in ("pid", "name", "identifier", "file") if getattr(args, k) is not None]
    if len(given) != 1:
        parser.error("give exactly one target: -p PID, -n NAME, -N IDENTIFIER or "
                     "-f FILE [ARGS...]")
    if args.args and args.file is None:
        parser.error(f"unexpected arguments {' '.join(args.args)!r} (ARGS go with -f FILE)")
    if args.file is not None:
        return Target("file", [args.file, *args.args])
    if args.pid is not None:
        if args.pid <= 0:
            parser.error(f"-p {args.pid}: not a process id")
        return Target("pid", args.pid)
    if args.identifier is not None:
        return Target("identifier", args.identifier)
    return Target("name", args.name)


def program_path(device: frida.core.Device, name: str) -> str:
    """The program `-f NAME` means: on the local device, a NAME without a slash is looked up on
    PATH as a shell would (Frida's spawn only takes paths), and failing that in the current
    directory, as Frida would; elsewhere NAME is an app id or a path on the device, which the
    device resolves."""
    if device.type != "local" or "/" in name:
        return name
    found = shutil.which(name) or (name if os.path.isfile(name) else None)
    if found is None:
        raise TracerError(f"cannot spawn {name}: no such program on PATH or in the current "
                          "directory")
    return found


def find_app_pid(device: frida.core.Device, identifier: str) -> int:
    """The pid of the running app with this bundle id / package name (case-insensitive)."""
    wanted = identifier.lower()
    apps = [a for a in device.enumerate_applications() if a.identifier.lower() == wanted]
    if not apps:
        raise TracerError(f"no app '{identifier}' is installed on {device.name} "
                          "(frida-ps -Uai lists the apps)")
    running = [a for a in apps if a.pid != 0]
    if not running:
        raise TracerError(f"app '{identifier}' is not running on {device.name}; "
                          f"spawn it with -f {identifier}")
    return running[0].pid


# Frida's Linux injector waits 5 s for its agent to answer once loaded (frida-core), then gives
# up: "unexpectedly timed out trying to sync up with agent". The emulated arm64 machine missed
# that on a program whose two threads kept both CPUs busy, about 1 attach in 7 (2026-11-26).
ATTACH_TRIES = 3


def attach(device: frida.core.Device, pid: int,
           info: Callable[[str], None] = lambda m: None) -> frida.core.Session:
    """device.attach(pid), tried again while the process lives when Frida's agent did not
    answer in time (ProcessNotRespondingError: a slow or busy machine); other errors raise.

    If a later try fails because the process died meanwhile, the first timeout is raised:
    it is what explains. (On a timeout Frida's injector unmaps its loader while the loader
    may still run in it; the program then dies with pc = lr in that page, docs/platforms.md.
    The later try only says "no such process" or "unable to find suitable code pages".)"""
    missed: frida.ProcessNotRespondingError | None = None
    for attempt in range(1, ATTACH_TRIES + 1):
        try:
            return device.attach(pid)
        except frida.ProcessNotRespondingError as e:
            if attempt == ATTACH_TRIES or not target_alive(device, pid):
                raise
            missed = missed or e
            info(f"Frida's agent did not answer in time ({describe_frida_error(e)}): "
                 f"attaching again ({attempt + 1} of {ATTACH_TRIES})")
        except Exception:  # frida's errors share no base of their own
            if missed is not None and not target_alive(device, pid):
                raise missed from None
            raise
    raise AssertionError("unreachable")


def check_device_arguments(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    chosen = [o for o, v in (("-D", args.device_id), ("-H", args.host)) if v is not None]
    chosen += getattr(args, "device_flags", None) or []
    if len(chosen) > 1:
        parser.error("Only one of -D, -U, -R, and -H may be specified")


def open_device(args: argparse.Namespace) -> frida.core.Device:
    """The device the options name (the local one by default), with --device-option applied."""
    device = _find_device(args)
    try:
        for text in args.device_options:
            name, value = parse_typed_option(text)
            device.override_option(name, value)
    except ValueError as e:
        raise TracerError(f"--device-option: {e}") from None
    except FRIDA_ERRORS as e:
        raise TracerError(f"--device-option: {describe_frida_error(e)}") from None
    return device


def setup_peer_connection(session: frida.core.Session, args: argparse.Namespace) -> None:
    """--p2p (with --stun-server and --relay), as frida-tools sets it up after attaching."""
    if getattr(args, "session_transport", None) != "p2p":
        return
    options = {}
    if args.stun_server is not None:
        options["stun_server"] = args.stun_server
    if args.relays is not None:
        options["relays"] = args.relays
    session.setup_peer_connection(**options)


def _find_device(args: argparse.Namespace) -> frida.core.Device:
    try:
        if args.device_id is not None:
            try:
                return frida.get_device(args.device_id, timeout=2)
            except frida.InvalidArgumentError:
                raise TracerError(f"device '{args.device_id}' not found "
                                  "(frida-ls-devices lists the devices)") from None
        if args.host is not None or args.device_type == "remote":
            options = {k: v for k, v in (("certificate", args.certificate),
                                         ("origin", args.origin), ("token", args.token),
                                         ("keepalive_interval", args.keepalive_interval))
                       if v is not None}
            host = args.host or "127.0.0.1"
            return frida.get_device_manager().add_remote_device(host, **options)
        if args.device_type is not None:
            device = find_device(args.device_type)
            if device is None:
                raise TracerError(f"no {args.device_type.upper()} device connected "
                                  "(frida-ls-devices lists the devices)")
            return device
        return frida.get_local_device()
    except FRIDA_ERRORS as e:
        raise TracerError(f"cannot open device: {describe_frida_error(e)}") from None
