"""Benchmark: `nodeforge report html`'s pages, made and loaded in a headless browser, as the data grows.

Inputs, made by nodeforge's own writers (tests/report/factory.py), one run
directory each:

* enrollment batches of ``--nodes`` (50 and 500) nodes: states and failures
  mixed, each node with 20 events of history in Ironic (what an enroll report
  keeps), so the rack page carries every node's details;
* image catalogs of ``--images`` (20 and 200) rows (``image list -o json``),
  over seven Kubernetes minors and three states.

Measured ``--rounds`` times each, the small and the big input of a kind
taking turns (so both see the same load on a shared machine), median printed:

1. generation: what ``report html`` does after its start-up
   (``documents.find`` reads and scrubs the documents, ``site.write`` renders
   and writes the pages), in this process;
2. load: the page opened from its file in headless Chromium (Debian's
   chromium through /usr/bin/chromedriver, one browser for the run; the same
   helper as tests/report/test_browser.py): from the navigation's start to
   the page laid out and painted (two animation frames after the load event,
   WebDriver's round trip included), the load event's own time printed
   beside it; the first load of each page is a warm-up, not counted.

Printed: per input its size, page size, generation and load medians; the
growth ratios from the small to the big input of each kind (goal: 10x the
data takes at most 12x the time, for generation and for load); the 500-node
page's load (goal: under 2 s). Every goal prints "met" or "NOT met"; the script
prints FAILED and exits 1 when one is missed. The machine's load average ends
the output.

Run: .venv/bin/python bench/bench_report.py [--nodes 50,500] [--images 20,200] [--rounds 7] [--dry-run]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.report import browser as browser_mod, factory  # noqa: E402

GROWTH_GOAL = 12.0          # 10x the data: at most 12x the time
LOAD_GOAL_SECONDS = 2.0     # the 500-node page in the browser


def _sizes(text: str) -> list[int]:
    sizes = [int(s) for s in text.split(",") if s.strip()]
    if len(sizes) != 2 or not 0 < sizes[0] < sizes[1]:
        raise argparse.ArgumentTypeError(f"two sizes, small then big, such as 50,500: not {text!r}")
    return sizes


def make_inputs(root: Path, nodes: list[int], images: list[int]) -> list[dict]:
    """One run directory per input; each case: kind, size, directory, the page it makes."""
    cases = []
    for n in nodes:
        d = root / f"batch-{n}"
        d.mkdir()
        (d / "enroll.json").write_text(json.dumps(factory.big_batch(n)))
        cases.append({"kind": "batch", "size": n, "dir": d, "page": "batch-enroll.html"})
    for n in images:
        d = root / f"catalog-{n}"
        d.mkdir()
        (d / "catalog.json").write_text(json.dumps(factory.catalog_rows(n)))
        cases.append({"kind": "catalog", "size": n, "dir": d, "page": "catalog.html"})
    return cases


def generate(case: dict) -> float:
    """One generation of the case's site (into a directory of its own); its seconds."""
    from nodeforge.report import documents, site

    dest = case["dir"] / f"site-{len(case.setdefault('gens', []))}"
    t0 = time.perf_counter()
    site.write(documents.find(case["dir"]), dest)
    case["gens"].append(time.perf_counter() - t0)
    case["site"] = dest
    case["bytes"] = (dest / case["page"]).stat().st_size
    return case["gens"][-1]


def load(browser, case: dict) -> None:
    """One load of the case's page: until painted and until the load event, kept in the case."""
    page = case["site"] / case["page"]
    case.setdefault("loaded", []).append(browser.open(page))
    case.setdefault("painted", []).append(browser.rendered())
    errors = browser.console()
    if errors:
        raise SystemExit(f"{page}: console errors in the browser: {errors}")


def measure(cases: list[dict], rounds: int) -> None:
    """Every case generated, then loaded, ``rounds`` times, the cases taking turns; the medians
    kept in each case (``gen``, ``load``, ``load_event``)."""
    for _ in range(rounds):
        for c in cases:
            generate(c)
    browser = browser_mod.Browser(requests=False)
    try:
        for c in cases:                     # warm-up: the browser's caches and the page's first parse
            browser.open(c["site"] / c["page"])
        for _ in range(rounds):
            for c in cases:
                load(browser, c)
    finally:
        browser.quit()
    for c in cases:
        c["gen"], c["load"], c["load_event"] = (statistics.median(c[k]) for k in ("gens", "painted", "loaded"))


def verdict(ok: bool) -> str:
    return "met" if ok else "NOT met"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nodes", type=_sizes, default=[50, 500], help="batch sizes, small and big (50,500)")
    ap.add_argument("--images", type=_sizes, default=[20, 200], help="catalog sizes, small and big (20,200)")
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--dry-run", action="store_true",
                    help="make the inputs and the pages once, print the plan; no timing, no browser")
    args = ap.parse_args()

    with tempfile.TemporaryDirectory(prefix="nf-bench-report-") as tmp:
        cases = make_inputs(Path(tmp), args.nodes, args.images)
        if args.dry_run:
            for c in cases:
                generate(c)
                print(f"{c['kind']} of {c['size']}: {c['page']} ({c['bytes'] / 1024:.0f} KiB); would time "
                      f"generation and load, {args.rounds} rounds each")
            why = browser_mod.missing()
            print(f"browser: {why or f'{browser_mod.CHROMIUM} through {browser_mod.CHROMEDRIVER}'}")
            return 0
        measure(cases, args.rounds)
        return report(cases)


def report(cases: list[dict]) -> int:
    for c in cases:
        print(f"{c['kind']} of {c['size']:>4}: page {c['bytes'] / 1024:7.0f} KiB, generation {c['gen'] * 1000:7.1f} ms "
              f"(min {min(c['gens']) * 1000:.1f}), "
              f"load in the browser {c['load'] * 1000:7.1f} ms "
              f"(load event {c['load_event'] * 1000:.1f} ms)", flush=True)
    failed = []
    for kind in ("batch", "catalog"):
        small, big = [c for c in cases if c["kind"] == kind]
        data = big["size"] / small["size"]
        for what in ("gen", "load"):
            ratio = big[what] / small[what]
            ok = ratio <= GROWTH_GOAL * data / 10
            label = "generation" if what == "gen" else "load"
            print(f"growth, {kind} {label}: {data:.0f}x the data took {ratio:.2f}x the time "
                  f"(goal: at most {GROWTH_GOAL * data / 10:.0f}x): {verdict(ok)}")
            if not ok:
                failed.append(f"{kind} {label} grew {ratio:.2f}x")
    big_batch = max((c for c in cases if c["kind"] == "batch"), key=lambda c: c["size"])
    ok = big_batch["load"] < LOAD_GOAL_SECONDS
    print(f"{big_batch['size']}-node page load in headless Chromium: {big_batch['load']:.3f} s "
          f"(goal: under {LOAD_GOAL_SECONDS:.0f} s): {verdict(ok)}")
    if not ok:
        failed.append(f"the {big_batch['size']}-node page loaded in {big_batch['load']:.2f} s")
    print(f"load average {os.getloadavg()[0]:.1f}")
    if failed:
        print(f"FAILED: {'; '.join(failed)}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
