"""The build's step runner: names and times each step, and on a failure undoes the finished
steps in reverse order (not the failed one, nor those never run), then raises the failure."""

from __future__ import annotations

import pytest

from nodeforge.imagebuild.steps import Step, Together, run_steps


def _steps(events: list[str], fail_at: str | None = None, undo_fails: str | None = None):
    def run(name):
        def go(state):
            events.append(f"run {name}")
            state[name] = True
            if name == fail_at:
                raise RuntimeError(f"{name} broke")
        return go

    def undo(name):
        def back(state):
            events.append(f"undo {name}")
            if name == undo_fails:
                raise OSError("cannot undo")
        return back

    return [Step("a", run("a"), undo("a")), Step("b", run("b")), Step("c", run("c"), undo("c")),
            Step("d", run("d"), undo("d"))]


def test_each_step_runs_in_order_and_is_timed_under_its_name():
    events, seconds = [], {}
    run_steps(_steps(events), {}, seconds)
    assert events == ["run a", "run b", "run c", "run d"] and set(seconds) == {"a", "b", "c", "d"}
    assert all(v >= 0 for v in seconds.values())


def test_a_failure_undoes_the_finished_steps_in_reverse_and_raises():
    events, seconds, notes = [], {}, []
    with pytest.raises(RuntimeError, match="c broke"):
        run_steps(_steps(events, fail_at="c"), {}, seconds, note=notes.append)
    assert events == ["run a", "run b", "run c", "undo a"]         # b has no undo; c failed; d never ran
    assert set(seconds) == {"a", "b"} and notes == ["undone: a"]


def test_an_undo_that_fails_does_not_hide_the_failure():
    events, notes = [], []
    with pytest.raises(RuntimeError, match="d broke"):
        run_steps(_steps(events, fail_at="d", undo_fails="c"), {}, {}, note=notes.append)
    assert events[-2:] == ["undo c", "undo a"]
    assert notes == ["undoing c failed: cannot undo", "undone: a"]


def test_ctrl_c_undoes_too():
    def interrupted(_state):
        raise KeyboardInterrupt

    undone = []
    with pytest.raises(KeyboardInterrupt):
        run_steps([Step("made", lambda s: None, lambda s: undone.append("made")), Step("stop", interrupted)],
                  {}, {})
    assert undone == ["made"]


def test_steps_together_run_side_by_side_each_timed_under_its_name():
    import threading
    barrier = threading.Barrier(2, timeout=10)      # both must be running at once to get past it
    events, seconds = [], {}

    def meet(name):
        def go(_state):
            barrier.wait()
            events.append(name)
        return go

    run_steps([Step("a", lambda s: events.append("a")),
               Together((Step("x", meet("x")), Step("y", meet("y"))), workers=2),
               Step("z", lambda s: events.append("z"))], {}, seconds)
    assert events[0] == "a" and sorted(events[1:3]) == ["x", "y"] and events[3] == "z"
    assert set(seconds) == {"a", "x", "y", "z"}


def test_one_step_of_a_group_failing_lets_the_others_finish_then_undoes_them_with_the_earlier_steps():
    import threading
    events, notes = [], []
    lock = threading.Lock()
    started = threading.Event()

    def log(text):
        with lock:
            events.append(text)

    def slow(_state):
        started.wait(10)
        log("run y")

    def broken(_state):
        started.set()
        raise RuntimeError("x broke")

    with pytest.raises(RuntimeError, match="x broke"):
        run_steps([Step("a", lambda s: log("run a"), lambda s: log("undo a")),
                   Together((Step("x", broken, lambda s: log("undo x")),
                             Step("y", slow, lambda s: log("undo y"))), workers=2),
                   Step("z", lambda s: log("run z"))], {}, {}, note=notes.append)
    assert events == ["run a", "run y", "undo y", "undo a"]     # x failed: not undone; z never ran
    assert notes == ["undone: y", "undone: a"]


def test_a_group_of_width_one_runs_in_order():
    events = []
    run_steps([Together((Step("x", lambda s: events.append("x")), Step("y", lambda s: events.append("y"))),
                        workers=1)], {}, {})
    assert events == ["x", "y"]
