'use strict';
/*
 * ada agent, the messages: every message the agent and the host exchange over Frida's
 * channel, named once here (the host's side is tracer/record/protocol.py). First of the
 * agent's files (AGENT_SCRIPTS in tracer/record/agent_code.py joins them, in order, into one
 * script), so that every later one can use MESSAGES.
 *
 * Sent by the agent, as send({type, ...payload}, data):
 *   ada:module-loaded    a module loaded after hook() and functions in it were hooked
 *                        (ada_hooking.js): {module, functions, triggers, hooked, failures,
 *                        fallbacks, aliases, breakpoints, late, writesAwaited, hits}
 *   ada:module-unloaded  a module ada had seen went away (ada_hooking.js):
 *                        {path, base, removedNs}
 *   ada:final            the process exits, execs or crashes: the handover (ada_ending.js):
 *                        {reason, crash, heads, exitStatus}, and as data, with the rpc
 *                        transport, the ring bytes not pulled yet
 *   ada:exit-status      exit()'s status, when exit() comes after the handover
 *                        (ada_ending.js): {status}
 *   ada:data             with the rpc transport, new ring bytes (ada_transport.js,
 *                        startPushing): {}, and as data the buffer (_collect)
 * Received by the agent, with recv:
 *   ada:ack              the host has taken the handover (ada_ending.js)
 *   ada:beat             the host is alive, with the rpc transport (ada_transport.js):
 *                        {received, pushes (bytes and count of ada:data taken),
 *                         freed (slots it drained)}
 */

const MESSAGES = Object.freeze({
  moduleLoaded: 'ada:module-loaded',
  moduleUnloaded: 'ada:module-unloaded',
  final: 'ada:final',
  exitStatus: 'ada:exit-status',
  data: 'ada:data',
  ack: 'ada:ack',
  beat: 'ada:beat',
});
