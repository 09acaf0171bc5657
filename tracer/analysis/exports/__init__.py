"""Exports of a session's calls to the formats people already open (see each module)."""
