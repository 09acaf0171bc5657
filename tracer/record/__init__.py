"""Recording: the host side of `ada trace`.

Data flows one way: the agent's C hook writes each event into its thread's ring
(rings.py: the region shared with the agent, or the RPC mirror of transport.py when the host
cannot map it); the drain thread (drain.py) copies the rings into the ATF writers, handing
detail records to a detail sink (detail_sinks.py: every record, or the flight recorder's
windows); the manifest (manifest.py) describes the session from the facts of the recording and
each part's summary. pipeline.py owns these parts and their state: built whole in one place,
it starts, reports its status and losses, and stops. recorder.py owns the Frida side of one
process: it attaches, loads the agent (agent_code.py joins its files), hooks, handles the
agent's messages (protocol.py names them) and stops it; recording.py runs a Recorder per
traced process (the target, the children it forks, new images after exec). This package
imports frida (the modules named above do not all).
"""
