"""The messages the agent and the host exchange over Frida's channel: the host's side.

Named once here, as the agent names them once in agent/ada_messages.js (a test holds the two
lists equal). The agent's RPC exports (init, resolve, hook, pull, stop...) are called where
they are used; these are the messages it sends unasked, and the host's two.

    MODULE_LOADED    a module loaded after hook() and functions in it were hooked:
                     {module, functions, triggers, hooked, failures, fallbacks, aliases,
                     breakpoints, late, writesAwaited, hits}
    MODULE_UNLOADED  a module ada had seen went away: {path, base, removedNs}
    FINAL            the process exits, execs or crashes (the handover): {reason, crash, heads,
                     exitStatus, children (pids forked since noteChildren, still alive),
                     forks (children forked since noteChildren, where counted, else null),
                     unrecordedThreads (the program's, started as Frida prepared the exit)}, and
                     as data, with the rpc transport, the ring bytes not pulled
    EXIT_STATUS      exit()'s status, when exit() comes after the handover: {status}
    DATA             with the rpc transport, new ring bytes (transport.RpcMirror): {}, and as
                     data the buffer
    ACK              host -> agent: the handover was taken, the process may go on
    BEAT             host -> agent: the host is alive (the rpc transport's heartbeat), with
                     the bytes and the count of DATA it has taken, and the slots it has freed
                     since the last
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

MODULE_LOADED = "ada:module-loaded"
MODULE_UNLOADED = "ada:module-unloaded"
FINAL = "ada:final"
EXIT_STATUS = "ada:exit-status"
DATA = "ada:data"
ACK = "ada:ack"
BEAT = "ada:beat"

FROM_AGENT = (MODULE_LOADED, MODULE_UNLOADED, FINAL, EXIT_STATUS, DATA)
TO_AGENT = (ACK, BEAT)


@dataclass(frozen=True)
class AgentMessage:
    """One message from the agent: `kind` one of FROM_AGENT, or "error" for an exception the
    agent's JavaScript did not catch (its description in payload["description"])."""

    kind: str
    payload: dict[str, Any]
    data: bytes | None = None


def read_message(message: dict[str, Any], data: bytes | None) -> AgentMessage | None:
    """Frida's message as an AgentMessage; None for one this host does not know (a newer
    agent's), which is ignored rather than failing the recording."""
    if message.get("type") == "error":
        return AgentMessage("error", {"description": message.get("description")})
    payload = message.get("payload") if message.get("type") == "send" else None
    kind = payload.get("type") if isinstance(payload, dict) else None
    if kind not in FROM_AGENT:
        return None
    assert isinstance(payload, dict)
    return AgentMessage(kind, payload, data)


def ack() -> dict[str, str]:
    return {"type": ACK}


def beat(received: int | None = None, pushes: int | None = None,
         freed: list[int] | None = None) -> dict[str, Any]:
    message: dict[str, Any] = {"type": BEAT}
    if received is not None:
        message["received"] = received
    if pushes is not None:
        message["pushes"] = pushes
    if freed:
        message["freed"] = freed
    return message
