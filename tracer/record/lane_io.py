"""--detail-io and --index-io: when a thread's detail.atf or index.atf leaves the page cache
for O_DIRECT writes.

Why: `ada trace --detail` writes about 1 GB/s, and the index lane of a hot function over 1 GB/s
too (32 bytes an event). The page cache takes that at memory speed until the kernel's dirty
limits, then the kernel throttles the writer to the speed of its writeback, which can be far
below what the disk takes directly (on the development VM 0.25-0.3 GB/s buffered against
1.3-1.4 GB/s with O_DIRECT). Below those limits buffered writes are the cheaper ones (the disk
work happens after the recording), so under `auto` a lane writes through the page cache until
it is big enough to matter and the kernel has started writing back, then switches to the atf
writer's O_DIRECT stream (ada.atf.direct) for the rest of the file.

The writer asks the policy's callable with the bytes the lane has written so far (at its first
append, then every 32 MiB); the first True switches the lane.
"""

from __future__ import annotations

from pathlib import Path
from typing import Callable

VMSTAT = Path("/proc/vmstat")
MIN_DIRECT_LANE = 32 << 20  # below this a lane stays in the page cache under auto


def go_direct_policy(choice: str) -> Callable[[int], bool] | None:
    """The writer's go_direct callable for a --detail-io or --index-io value (None: never leave
    the cache)."""
    if choice == "auto":
        return worth_going_direct
    if choice == "direct":
        return lambda lane_bytes: True
    if choice == "cached":
        return None
    raise ValueError(f"unknown lane io {choice!r}")


def worth_going_direct(lane_bytes: int) -> bool:
    """auto: a lane that has written MIN_DIRECT_LANE goes direct once the page cache is under
    pressure. Small lanes never do: a staging ring and a thread each would cost more than they
    save."""
    return lane_bytes >= MIN_DIRECT_LANE and dirty_pressure()


def dirty_pressure(vmstat: Path = VMSTAT) -> bool:
    """True when the system's dirty and writeback pages have reached the kernel's background
    threshold: it writes back from now on, and throttles every writer not much later."""
    try:
        text = vmstat.read_text()
    except OSError:
        return False
    values = {}
    for line in text.splitlines():
        name, _, value = line.partition(" ")
        if name in ("nr_dirty", "nr_writeback", "nr_dirty_background_threshold"):
            values[name] = int(value)
    if len(values) < 3:
        return False
    return values["nr_dirty"] + values["nr_writeback"] >= values["nr_dirty_background_threshold"]
