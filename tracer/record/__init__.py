"""Recording: the host side of `ada trace`.

Data flows one way: the agent's C hook writes each event into its thread's ring
(rings.py: the region shared with the agent, or the RPC mirror of transport.py when the host
cannot map it); the drain thread (drain.py) copies the rings into the ATF writers, handing
detail records to a detail sink (detail_sinks.py: every record, or the flight recorder's
windows); the manifest (manifest.py) describes the session from the facts of the recording and
each part's summary. pipeline.py builds these parts from the options; recorder.py attaches to
one process, hooks, records and stops it; recording.py runs a Recorder per traced process (the
target, the children it forks, new images after exec). This package imports frida (the modules
named above do not all).
"""
