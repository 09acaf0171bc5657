"""`ada verify SESSION`: exit 0 when clean or cleanly recovered, 1 with the problems."""

from __future__ import annotations

import argparse
import json

import ada.atf as atf


def configure(p: argparse.ArgumentParser) -> None:
    """`ada verify`'s text and arguments: imported for it alone (cli/__init__.py)."""
    p.description = ("Check magic, sizes, counts, checksums, timestamp order, links between the "
                     "lanes and the manifest. Exit 0 when clean or cleanly recovered, 1 when "
                     "there are problems.")
    p.add_argument("session", help="session directory, thread_N directory or .atf file")
    p.add_argument("--json", action="store_true", help="print the report as JSON")
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    report = atf.verify(args.session)
    if args.json:
        print(json.dumps(report.to_dict(), indent=2))
        return 0 if report.ok else 1
    for f in report.files:
        line = f"{f.state:<10} {f.events:>12} events  {f.path}"
        if f.note:
            line += f"  ({f.note})"
        print(line)
    if report.ok:
        print("OK: " + ("recovered cleanly" if report.recovered else "clean"))
        return 0
    print(f"{len(report.problems)} problem(s):")
    for p in report.problems:
        print(f"  {p}")
    return 1
