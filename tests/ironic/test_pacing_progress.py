"""Progress of an enroll (nodeforge/ironic/progress.py): per-state counts, plain lines off a terminal."""

from __future__ import annotations

import io

from nodeforge.ironic import lifecycle as lc
from nodeforge.ironic.inventory import Bmc, BmcKind, Location, NodeSpec
from nodeforge.ironic.progress import Progress, state_counts
from tests.support.clock import Clock



def work(name, state, result=None, error=None):
    bmc = Bmc(BmcKind.FAKE, f"fake://{name}", name, None, None, None)
    w = lc.Work(spec=NodeSpec(name=name, bmc=bmc, location=Location("t.yaml", 1)), uuid=name,
                node={"provision_state": state})
    w.result, w.error_type = result, error
    return w


def test_counts_per_state():
    works = [work("a", "cleaning"), work("b", "cleaning"), work("c", "available", lc.NodeState.AVAILABLE),
             work("d", "enroll", error="power-credentials"), work("e", None)]
    assert state_counts(works) == {"?": 1, "available": 1, "cleaning": 2, "failed": 1}


def test_plain_lines_when_not_a_terminal_rate_limited_and_last_one_kept():
    out, clock = io.StringIO(), Clock()
    p = Progress(stream=out, live=False, every=5.0, clock=clock)
    p.created(1, 2)
    p.created(2, 2)                      # the last of the creates is always shown
    works = [work("a", "enroll"), work("b", "enroll")]
    p.update(works)
    works[0].node["provision_state"] = "manageable"
    clock.t += 1
    p.update(works)                      # within 5 s of the last line: held back
    p.update(works)
    clock.t += 1
    works[0].result = lc.NodeState.AVAILABLE
    p.update(works)
    p.close()                            # ... but the newest is written at the end
    lines = out.getvalue().splitlines()
    assert lines == ["enroll: 1/2 nodes created or updated", "enroll: 2/2 nodes created or updated",
                     "lifecycle: enroll: 2", "lifecycle: available: 1  enroll: 1"]
    assert "\r" not in out.getvalue() and "\x1b" not in out.getvalue()


def test_live_on_a_terminal_updates_in_place():
    class Tty(io.StringIO):
        def isatty(self):
            return True

    out = Tty()
    with Progress(stream=out) as p:
        assert p.live
        p.update([work("a", "cleaning"), work("b", "available", lc.NodeState.AVAILABLE)])
    text = out.getvalue()
    assert "cleaning: 1" in text and "1/2" in text
