"""The report's pages in a real headless browser (Debian's chromium and chromium-driver, driven by
Selenium through /usr/bin/chromedriver: nothing downloaded), one browser for the module.

Every page renders without a console error and fetches nothing; the rack shows one tile per node
with its state as text; the run's timeline has one bar per stage, as long as the record's seconds
say; a node's tile opens to its history by mouse and by keyboard (Tab, then Enter or Space). A
screenshot and the PDF of each page are kept (tests/report/conftest.py says where), and the PDF
holds every state the page shows, a node's history included (the print CSS opens ``<details>``).
A missing browser fails these tests (``make setup`` installs it); it never skips them."""

from __future__ import annotations

import re
import struct
import unicodedata
from pathlib import Path

import pytest

from nodeforge.cli import main
from nodeforge.redact import register as register_secret
from tests.report import browser as browser_mod, factory
from tests.report.conftest import artifacts_dir

pytestmark = pytest.mark.slow

PAGES = ("index.html", "run.html", "batch-enroll-report.html", "catalog.html", "audit-template-audit.html",
         "hardware-hardware-audit.html")
RACK = {"rf-001": "available", "rf-002": "failed", "rf-003": "inspecting", "ipmi-01": "enrolled"}
STATES_JS = "return [...document.querySelectorAll('.state')].map(e => e.textContent)"
# What a closed <details> holds (a node's provision state, last error, history): on paper too.
DETAILS_JS = "return [...document.querySelectorAll('details dd, details li')].map(e => e.textContent)"


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    register_secret(factory.SECRET)
    root = tmp_path_factory.mktemp("report-run")
    docs = factory.run_dir(root)
    dest = tmp_path_factory.mktemp("report-site")
    assert main(["report", "html", str(root), "--dest", str(dest)]) == 0
    return {"dest": dest, **docs}


@pytest.fixture(scope="module")
def browser():
    why = browser_mod.missing()
    if why:
        pytest.fail(why, pytrace=False)
    b = browser_mod.Browser()
    yield b
    b.quit()              # raises if a process of it is left


@pytest.fixture(scope="module")
def artefacts():
    where = artifacts_dir()
    where.mkdir(parents=True, exist_ok=True)
    for old in where.glob("*"):
        if old.suffix in (".png", ".pdf"):
            old.unlink()
    print(f"report pages' screenshots and PDFs: {where}")
    return where


def _words(text: str) -> str:
    """Text with its whitespace collapsed and ligatures undone (a PDF's "ﬁ" is "fi")."""
    return re.sub(r"\s+", " ", unicodedata.normalize("NFKC", text)).strip()


def _bare(text: str) -> str:
    return re.sub(r"\s+", "", unicodedata.normalize("NFKC", text))


def _png_size(path: Path) -> tuple[int, int]:
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and data[12:16] == b"IHDR", f"{path}: not a PNG"
    return struct.unpack(">II", data[16:24])


def test_the_browser_is_debians_and_the_site_has_every_page(browser, site):
    assert browser.driver_path == str(browser_mod.CHROMEDRIVER)        # the system driver, never a download
    assert browser.driver.capabilities["browserName"] == "chrome"
    assert sorted(p.name for p in site["dest"].iterdir()) == sorted(PAGES)


@pytest.mark.parametrize("name", PAGES)
def test_each_page_renders_without_console_errors_fetches_nothing_and_prints_its_states(browser, site, artefacts,
                                                                                        name):
    browser.console("ALL")                                      # drop what came before this page
    browser.open(site["dest"] / name)
    assert browser.console() == [], f"{name}: console errors"
    assert browser.fetched() == [], f"{name}: fetched something"
    assert browser.driver.title and factory.SECRET not in browser.driver.page_source
    states = [_words(s) for s in browser.driver.execute_script(STATES_JS)]
    assert all(states), f"{name}: a state without text"             # readable without colour
    width, height = _png_size(browser.screenshot(artefacts / f"{Path(name).stem}.png"))
    assert width >= 1000 and height >= 300, (name, width, height)
    pdf, text = browser.pdf(artefacts / f"{Path(name).stem}.pdf")
    text = _words(text)
    assert pdf.stat().st_size > 1000 and _words(browser.driver.title) in text
    missing = [s for s in states if s not in text]
    assert not missing, f"{name}: states on the page but not in its PDF: {missing}"
    # A line may break anywhere in a long value (after a hyphen too): compared without whitespace.
    closed = [d for d in browser.driver.execute_script(DETAILS_JS) if _bare(d)]
    assert bool(closed) == (name == "batch-enroll-report.html"), name
    missing = [d for d in closed if _bare(d) not in _bare(text)]
    assert not missing, f"{name}: details not in its PDF: {missing}"


def test_the_detector_sees_a_console_error_and_a_fetch(browser, tmp_path):
    """The checks above can fail: a page with a broken script, an image it cannot load and one it
    fetches."""
    (tmp_path / "dot.png").write_bytes(browser.driver.get_screenshot_as_png())
    page = tmp_path / "bad.html"
    page.write_text('<!DOCTYPE html><title>bad</title><img src="dot.png" alt=""><img src="missing.png" alt="">'
                    '<script>throw new Error("broken page")</script>')
    browser.console("ALL")
    browser.open(page)
    errors = " ".join(e["message"] for e in browser.console())
    assert "broken page" in errors and "missing.png" in errors
    assert [u for u in browser.fetched() if u.endswith("/dot.png")]


def test_the_rack_has_one_tile_per_node_with_its_state_as_text(browser, site):
    from selenium.webdriver.common.by import By

    browser.open(site["dest"] / "batch-enroll-report.html")
    tiles = browser.driver.find_elements(By.CSS_SELECTOR, "ul.rack > li.tile")
    assert len(tiles) == len(site["batch"]["nodes"]) == len(RACK)
    shown = {}
    for tile in tiles:
        summary = tile.find_element(By.TAG_NAME, "summary")
        assert summary.is_displayed()
        name, _, state = summary.text.partition(": ")
        shown[name] = state
        assert not tile.find_element(By.TAG_NAME, "dl").is_displayed()      # closed until opened
    assert shown == RACK
    counts = browser.driver.find_element(By.XPATH, "//p[starts-with(., 'By state:')]").text
    assert "failed 1" in counts and "available 1" in counts


def test_the_timeline_has_one_bar_per_stage_as_long_as_recorded(browser, site):
    from selenium.webdriver.common.by import By

    browser.open(site["dest"] / "run.html")
    stages = site["run"]["stages"]
    bars = browser.driver.find_elements(By.CSS_SELECTOR, "svg g.stage")
    assert len(bars) == len(stages) == len(factory.STAGES)
    boxes = []
    for bar, stage in zip(bars, stages):
        assert float(bar.get_attribute("data-seconds")) == stage["seconds"]
        label = bar.find_element(By.TAG_NAME, "text").text
        assert label.endswith(f"{stage['status']}, {stage['seconds']:.1f} s"), label
        boxes.append(browser.driver.execute_script("const r = arguments[0].getBoundingClientRect(); "
                                                   "return [r.x, r.width]", bar.find_element(By.TAG_NAME, "rect")))
    # As drawn: each bar as wide as its seconds (the short ones have a 2 px minimum), one after the other.
    scale = boxes[-1][1] / stages[-1]["seconds"]
    for (x, width), stage in zip(boxes, stages):
        assert abs(width - max(stage["seconds"] * scale, 2)) <= 1.0, (stage["name"], width)
    for (x0, w0), (x1, _), stage in zip(boxes, boxes[1:], stages):
        assert abs(x1 - (x0 + stage["seconds"] * scale)) <= 1.0, (stage["name"], x0, w0, x1)


def _details_of(browser, node: str):
    from selenium.webdriver.common.by import By

    tile = browser.driver.find_element(By.CSS_SELECTOR, f"li.tile[data-node='{node}']")
    return tile.find_element(By.TAG_NAME, "details"), tile.find_element(By.TAG_NAME, "summary")


def test_clicking_a_tile_opens_the_nodes_history(browser, site, artefacts):
    from selenium.webdriver.common.by import By

    browser.open(site["dest"] / "batch-enroll-report.html")
    details, summary = _details_of(browser, "rf-002")
    assert details.get_attribute("open") is None
    summary.click()
    assert details.get_attribute("open") is not None
    history = details.find_element(By.CSS_SELECTOR, "ol.history")
    assert history.is_displayed() and "ERROR cleaning: Failed to clean: BMC password" in history.text
    browser.screenshot(artefacts / "batch-enroll-report-rf-002-open.png")
    assert "cleaning failed" in details.text and factory.SECRET not in details.text
    summary.click()
    assert details.get_attribute("open") is None and not history.is_displayed()


def test_the_keyboard_reaches_each_tile_and_opens_it_with_enter_or_space(browser, site):
    from selenium.webdriver.common.action_chains import ActionChains
    from selenium.webdriver.common.keys import Keys

    browser.open(site["dest"] / "batch-enroll-report.html")
    driver = browser.driver

    def tab_to(node: str, limit: int = 30) -> int:
        _, summary = _details_of(browser, node)
        for presses in range(1, limit + 1):
            ActionChains(driver).send_keys(Keys.TAB).perform()
            if driver.switch_to.active_element == summary:
                return presses
        raise AssertionError(f"Tab never reached {node}'s tile")

    tab_to("rf-001")
    ActionChains(driver).send_keys(Keys.ENTER).perform()
    first, _ = _details_of(browser, "rf-001")
    assert first.get_attribute("open") is not None and "No events recorded." in first.text
    assert tab_to("rf-002") == 1                                     # the next tile is the next stop
    ActionChains(driver).send_keys(Keys.SPACE).perform()
    second, _ = _details_of(browser, "rf-002")
    assert second.get_attribute("open") is not None and "Failed to clean" in second.text
    ActionChains(driver).send_keys(Keys.ENTER).perform()             # and closes it again
    assert second.get_attribute("open") is None


def test_the_audit_pages_show_each_state_as_text(browser, site):
    from selenium.webdriver.common.by import By

    browser.open(site["dest"] / "audit-template-audit.html")
    heads = [h.text for h in browser.driver.find_elements(By.CSS_SELECTOR, "section.template h2")]
    assert heads == ["k8s-1.36-baremetal: ok", "k8s-1.36-old: warning: 1 finding",
                     "k8s-1.36-storage: error: 2 findings"]
    legacy = browser.driver.find_element(By.CSS_SELECTOR, "tr[data-cluster='legacy']")
    assert legacy.is_displayed() and "warning: 1 finding" in legacy.text and "cluster_image (warning)" in legacy.text
    browser.open(site["dest"] / "hardware-hardware-audit.html")
    rows = {r.get_attribute("data-node"): r.find_element(By.CSS_SELECTOR, "td.state").text
            for r in browser.driver.find_elements(By.CSS_SELECTOR, "table.nodes tbody tr")}
    assert rows == {"st-01": "ok", "st-02": "drift", "st-03": "unreadable"}


def test_a_browser_leaves_no_process_behind():
    b = browser_mod.Browser(800, 600)
    running = b.processes()
    assert len(running) >= 2, running            # the driver and the browser, found by their directory
    b.quit()
    assert b.processes() == [] and not b.home.exists()
