"""What a person looks at, checked in a real browser (headless Chromium through the DevTools
protocol, tests/browser.py): the flame graph page of `ada export -f html`, on a recorded
session, against a plain stack pairing of the session's events."""

from __future__ import annotations

from collections import Counter

from ada.atf import format as F
from browser import Browser
from helpers import run_ada, trace_session as trace

FUNCTIONS = ("leaf", "middle", "outer", "fact", "side")


def pair(session, threads=None):
    """The oracle: per call stack (names from the outermost call, ';' between), its calls and
    total time, by pairing each thread's CALLs and RETURNs on a plain stack."""
    names = session.symbol_names()
    calls, total = Counter(), Counter()
    for t in session.threads:
        if threads is not None and t.id not in threads:
            continue
        stack = []
        for ts, fid, kind in zip(t.index.events["timestamp_ns"].tolist(),
                                 t.index.events["function_id"].tolist(),
                                 t.index.events["event_kind"].tolist()):
            if kind == F.EVENT_CALL:
                stack.append((names[fid], ts))
            elif kind == F.EVENT_RETURN:
                key = ";".join(n for n, _ in stack)
                name, start = stack.pop()
                assert name == names[fid]
                calls[key] += 1
                total[key] += ts - start
        assert stack == []
    return calls, total


FRAMES = ("[...document.querySelectorAll('g.frame')].map(g => [g.dataset.stack, "
          "Number(g.dataset.calls), Number(g.dataset.total), g.getBoundingClientRect().width])")


def drawn(page):
    """{stack: (calls, total, width in px)} of the frames on the page, but the 'all' root."""
    return {s: (c, t, w) for s, c, t, w in page.evaluate(FRAMES) if s}


def assert_frames_match(page, calls, total):
    frames = drawn(page)
    whole = sum(t for s, t in total.items() if ";" not in s)
    width = page.evaluate("document.getElementById('chart').clientWidth")
    for stack, (c, t, _) in frames.items():
        assert (c, t) == (calls[stack], total[stack]), stack
    big = {s for s, t in total.items() if t / whole * width >= 2}
    assert big <= set(frames), big - set(frames)
    return frames


def test_the_flame_graph_page_shows_what_was_recorded(tmp_path, target_bin):
    """The page's frames are the session's call stacks with their calls and total times (the
    oracle pairs the events itself), for all threads and for one; a click zooms on a frame,
    the search marks frames and says their share, a right-click shows a function's callers,
    and --callers opens on them."""
    selection = [a for f in FUNCTIONS for a in ("-i", f"nested!{f}")]
    s, _ = trace(tmp_path, "-f", target_bin("nested"), "20", *selection)
    page_path = tmp_path / "flame.html"
    out = run_ada("export", s.path, "-f", "html", "-o", page_path)
    assert out.returncode == 0, out.stderr
    calls, total = pair(s)
    with Browser() as browser:
        page = browser.page()
        page.open(page_path.as_uri())
        frames = assert_frames_match(page, calls, total)
        assert {"outer;middle;leaf", "outer;leaf", "side;leaf", "fact;fact;fact;fact"} <= set(frames)
        assert page.evaluate("document.title").startswith("ada: nested")

        # one thread: the second, whose rounds call side()
        second = [t.id for t in s.threads if any(
            s.symbol_names()[int(f)] == "side" for f in t.index.events["function_id"][:200])]
        (sid,) = second
        index = 1 + [t.id for t in sorted(s.threads, key=lambda t: t.id)].index(sid)
        page.evaluate(f"(() => {{ const v = document.getElementById('view'); v.value = '{index}';"
                      "v.dispatchEvent(new Event('change')); })()")
        assert_frames_match(page, *pair(s, threads=[sid]))
        page.evaluate("(() => { const v = document.getElementById('view'); v.value = '0';"
                      "v.dispatchEvent(new Event('change')); })()")

        # a click on outer zooms on it: it spans the chart, only it and what it called remain
        x, y, w = page.evaluate(
            "(() => { const r = [...document.querySelectorAll('g.frame')].find(g => "
            "g.dataset.stack === 'outer').querySelector('rect').getBoundingClientRect();"
            " return [r.x + r.width / 2, r.y + r.height / 2, r.width]; })()")
        width = page.evaluate("document.getElementById('chart').getBoundingClientRect().width")
        assert w < 0.9 * width
        page.click(x, y)
        zoomed = drawn(page)
        assert zoomed["outer"][2] >= width - 1
        assert set(zoomed) == {k for k in frames if k == "outer" or k.startswith("outer;")}
        assert "zoomed on outer" in page.evaluate("document.getElementById('status').textContent")
        page.evaluate("document.getElementById('reset').click()")
        assert set(drawn(page)) == set(frames)

        # the search marks every leaf frame and says the time under them
        page.evaluate("(() => { const i = document.getElementById('search'); i.value = 'leaf';"
                      "i.dispatchEvent(new Event('input')); })()")
        marked = page.evaluate("[...document.querySelectorAll('g.frame.match')]"
                               ".map(g => g.dataset.stack)")
        assert sorted(marked) == sorted(k for k in frames if k.endswith("leaf"))
        whole = sum(t for k, t in total.items() if ";" not in k)
        share = sum(t for k, t in total.items() if k.split(";")[-1] == "leaf") / whole
        assert f"matches {100 * share:.1f}% of the time" in \
            page.evaluate("document.getElementById('status').textContent")

        # a right-click on leaf: its callers, each as wide as leaf's time through it
        x, y = page.evaluate(
            "(() => { const r = [...document.querySelectorAll('g.frame')].find(g => "
            "g.dataset.stack === 'outer;middle;leaf').querySelector('rect')"
            ".getBoundingClientRect(); return [r.x + 2, r.y + r.height / 2]; })()")
        page.click(x, y, button="right")
        assert page.wait_for("window.flame.callers !== null")
        callers = drawn(page)
        expected = Counter()  # leaf, then its callers outwards: each prefix of the chain
        for k, t in total.items():
            chain = k.split(";")[::-1]
            if chain[0] == "leaf":
                for n in range(1, len(chain) + 1):
                    expected[";".join(chain[:n])] += t
        assert {k: v[1] for k, v in callers.items()} == dict(expected)
        assert {k.split(";")[1] for k in callers if k.count(";") == 1} == {"middle", "outer", "side"}
        page.screenshot(tmp_path / "callers.png")
        assert (tmp_path / "callers.png").stat().st_size > 5000

    callers_page = tmp_path / "callers.html"
    out = run_ada("export", s.path, "-f", "html", "--callers", "lea*", "-o", callers_page)
    assert out.returncode == 0, out.stderr
    with Browser() as browser:
        page = browser.page()
        page.open(callers_page.as_uri())
        assert "callers of leaf" in page.evaluate("document.getElementById('status').textContent")
    bad = run_ada("export", s.path, "-f", "html", "--callers", "nothing*", "-o", callers_page)
    assert bad.returncode != 0 and bad.stderr.count("\n") == 1
    assert "no function of the session matches it" in bad.stderr
