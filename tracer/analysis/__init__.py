"""Turning ATF sessions into calls, statistics and trees. Never imports frida or tracer.record;
debug information and names come from the symbols layer (ada.tracer.symbols)."""
