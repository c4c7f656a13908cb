"""A headless Chromium for the report's pages: Debian's ``chromium`` driven through Debian's
``chromium-driver`` (``/usr/bin/chromedriver``) by Selenium. The driver's path is given, so
Selenium Manager is never asked for (it would download a driver). Each browser has a directory
of its own (profile, configuration, crash database, the driver's log); :meth:`Browser.quit`
checks that no process of it is left, by that directory in their command lines.

Used by tests/report/test_browser.py and bench/bench_report.py."""

from __future__ import annotations

import base64
import io
import os
import shutil
import signal
import tempfile
import time
from pathlib import Path

CHROMIUM = Path("/usr/bin/chromium")
CHROMEDRIVER = Path("/usr/bin/chromedriver")
MISSING = ("headless browser missing: {path} (Debian packages chromium and chromium-driver, listed in "
           "manifests/host-packages.txt; 'make setup' installs them)")


class BrowserMissing(RuntimeError):
    pass


def missing() -> str | None:
    """Why no browser can be started here, or None."""
    for path in (CHROMIUM, CHROMEDRIVER):
        if not os.access(path, os.X_OK):
            return MISSING.format(path=path)
    try:
        import selenium  # noqa: F401
    except ImportError as exc:
        return f"selenium not importable ({exc}): the project's dev dependencies ('make setup')"
    return None


class Browser:
    """One headless Chromium session (``width`` x ``height`` window), its console log kept and,
    with ``requests``, every request a page makes (Chromium's performance log: file URLs too)."""

    def __init__(self, width: int = 1280, height: int = 900, *, requests: bool = True):
        why = missing()
        if why:
            raise BrowserMissing(why)
        from selenium import webdriver
        from selenium.webdriver.chrome.service import Service

        self.home = Path(tempfile.mkdtemp(prefix="nodeforge-chromium-"))
        options = webdriver.ChromeOptions()
        options.binary_location = str(CHROMIUM)
        for arg in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu",
                    f"--user-data-dir={self.home / 'profile'}", f"--window-size={width},{height}",
                    "--no-first-run", "--disable-background-networking", "--disable-component-update",
                    "--disable-sync", "--disable-default-apps", "--disable-extensions",
                    # Nothing is looked up by name: a page that fetched anything could not reach it.
                    "--host-resolver-rules=MAP * ~NOTFOUND"):
            options.add_argument(arg)
        options.set_capability("goog:loggingPrefs", {"browser": "ALL"} | ({"performance": "ALL"} if requests else {}))
        # The crash handler's database and any configuration go under self.home too (XDG dirs).
        env = dict(os.environ, HOME=str(self.home), XDG_CONFIG_HOME=str(self.home / "config"),
                   XDG_CACHE_HOME=str(self.home / "cache"))
        service = Service(str(CHROMEDRIVER), env=env, log_output=str(self.home / "chromedriver.log"))
        try:
            self.driver = webdriver.Chrome(service=service, options=options)
        except Exception:
            self._reap(10)
            shutil.rmtree(self.home, ignore_errors=True)
            raise
        self.driver_path = service.path
        self.requests = requests
        self.url = None

    def open(self, path: Path) -> float:
        """Load a page from its file (waits for the load event); the seconds it took, as the page's
        own navigation timing says (from navigation start to the end of the load event)."""
        self.url = Path(path).resolve().as_uri()
        if self.requests:
            self.driver.get_log("performance")           # what came before this page
        self.driver.get(self.url)
        ms = self.driver.execute_script(
            "const n = performance.getEntriesByType('navigation')[0]; return n ? n.loadEventEnd : null")
        return (ms or 0) / 1000

    def rendered(self) -> float:
        """Seconds from the current page's navigation start until the browser has laid it out and
        painted it (two animation frames later; WebDriver's round trip after the load counts too)."""
        ms = self.driver.execute_async_script(
            "const done = arguments[arguments.length - 1];"
            "requestAnimationFrame(() => requestAnimationFrame(() => done(performance.now())))")
        return ms / 1000

    def console(self, level: str = "SEVERE") -> list[dict]:
        """The console entries at ``level`` since the last call (reading them clears them)."""
        return [e for e in self.driver.get_log("browser") if e.get("level") == level]

    def fetched(self) -> list[str]:
        """The URLs the page last opened asked for besides itself (images, styles, scripts, fonts,
        from anywhere: another file as much as the network), from the browser's own log."""
        import json

        assert self.requests, "Browser(requests=False) does not record requests"
        out = []
        for entry in self.driver.get_log("performance"):
            message = json.loads(entry["message"])["message"]
            if message.get("method") == "Network.requestWillBeSent":
                params = message["params"]
                url = params["request"]["url"]
                if params.get("documentURL") == self.url and url != self.url:
                    out.append(url)
        return out

    def screenshot(self, dest: Path) -> Path:
        """The whole page (beyond the window) as a PNG."""
        shot = self.driver.execute_cdp_cmd("Page.captureScreenshot", {"format": "png", "captureBeyondViewport": True})
        dest.write_bytes(base64.b64decode(shot["data"]))
        return dest

    def pdf(self, dest: Path) -> tuple[Path, str]:
        """The page printed to PDF (Selenium's print_page: Chromium's print, the print CSS
        applied) and the text pypdf extracts from it."""
        import pypdf
        from selenium.webdriver.common.print_page_options import PrintOptions

        options = PrintOptions()
        options.background = True
        data = base64.b64decode(self.driver.print_page(options))
        dest.write_bytes(data)
        text = "\n".join(page.extract_text() or "" for page in pypdf.PdfReader(io.BytesIO(data)).pages)
        return dest, text

    def processes(self) -> list[int]:
        """The PIDs of this browser's processes (driver, browser, its helpers): every process whose
        command line names this browser's directory."""
        mark = str(self.home).encode()
        out = []
        for entry in os.listdir("/proc"):
            if entry.isdigit():
                try:
                    with open(f"/proc/{entry}/cmdline", "rb") as fh:
                        if mark in fh.read():
                            out.append(int(entry))
                except OSError:
                    continue
        return out

    def _reap(self, timeout: float) -> list[int]:
        """Wait up to ``timeout`` s for this browser's processes to end; the ones left are killed
        (by PID: only this browser's) and returned."""
        deadline = time.monotonic() + timeout
        while (left := self.processes()) and time.monotonic() < deadline:
            time.sleep(0.1)
        for pid in left:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        return left

    def quit(self, timeout: float = 15) -> None:
        """End the session; raises when a process of it is still there ``timeout`` s later (it is
        killed then, so nothing is left either way)."""
        try:
            self.driver.quit()
        finally:
            left = self._reap(timeout)
            shutil.rmtree(self.home, ignore_errors=True)
        if left:
            raise AssertionError(f"chromium left {len(left)} process(es) running after quit: {left}")
