"""Turning ATF sessions into calls, statistics and trees. Never imports frida or tracer.record."""
