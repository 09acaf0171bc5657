"""tracer/record/shield.py: Frida's injection is not cut short by the first Ctrl-C (no Frida
here: a Python process sends itself SIGINT inside the shielded block)."""

import subprocess
import sys

PROGRAM = """
import os, signal, sys, time
from ada.tracer.record.shield import shielded
said = []
try:
    with shielded(said.append):
        for _ in range(int(sys.argv[1])):
            os.kill(os.getpid(), signal.SIGINT)
            time.sleep(0.2)
        print("the block finished")
except KeyboardInterrupt:
    print("interrupted")
print("handler restored:", signal.getsignal(signal.SIGINT) is signal.default_int_handler)
print("said:", said)
"""


def run(sigints: int) -> list[str]:
    out = subprocess.run([sys.executable, "-c", PROGRAM, str(sigints)], capture_output=True,
                         text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    return out.stdout.splitlines()


def test_the_first_ctrl_c_waits_for_the_block_then_interrupts():
    lines = run(1)
    assert lines[:3] == ["the block finished", "interrupted", "handler restored: True"]
    assert "Frida's injection finishes first (Ctrl-C again quits at once)" in lines[3]


def test_a_second_ctrl_c_interrupts_the_block_at_once():
    lines = run(2)
    assert lines[:2] == ["interrupted", "handler restored: True"]


def test_no_ctrl_c_no_interruption():
    assert run(0)[:3] == ["the block finished", "handler restored: True", "said: []"]


def test_ctrl_c_wrapped_by_an_import_is_still_ctrl_c():
    """dataclasses wrap a KeyboardInterrupt in a class's creation in a RuntimeError (seen in
    the emulated arm64 machine's slow imports): the command exits 130 for it, not 1."""
    from ada.tracer.cli import _interrupted

    try:
        try:
            raise KeyboardInterrupt
        except KeyboardInterrupt as e:
            raise RuntimeError("Error calling __set_name__") from e
    except RuntimeError as wrapped:
        assert _interrupted(wrapped)
    assert not _interrupted(RuntimeError("a real error"))
