"""Open a built dashboard in headless Chromium: the browser tests and the committed screenshot.

Debian's ``chromium`` driven through its ``chromedriver`` with Selenium; the driver's path is
given, so Selenium Manager never downloads a driver or a browser.
``python -m torch_onnx_conformance.reports.html.browser SITE OUT.png`` writes a screenshot of the matrix view.
"""

from __future__ import annotations

import argparse
import dataclasses
import shutil
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

#: Flags for a headless run that reaches nothing outside the machine.
CHROMIUM_FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--hide-scrollbars",
)


def chromium_paths() -> tuple[str, str] | None:
    """(chromium, chromedriver) on PATH, or None when either is missing."""
    browser = shutil.which("chromium") or shutil.which("chromium-browser")
    driver = shutil.which("chromedriver")
    return (browser, driver) if browser and driver else None


def open_browser(profile: str | Path, size: tuple[int, int] = (1400, 900)):
    """A headless Chromium WebDriver with a fresh profile in ``profile``; the caller quits it.
    RuntimeError when chromium or chromedriver is not installed."""
    from selenium import webdriver

    paths = chromium_paths()
    if paths is None:
        raise RuntimeError(
            "no chromium and chromedriver on PATH (Debian: apt-get install chromium "
            "chromium-driver)"
        )
    options = webdriver.ChromeOptions()
    options.binary_location = paths[0]
    for flag in (
        *CHROMIUM_FLAGS,
        f"--user-data-dir={profile}",
        f"--window-size={size[0]},{size[1]}",
    ):
        options.add_argument(flag)
    driver = webdriver.Chrome(
        options=options, service=webdriver.ChromeService(executable_path=paths[1])
    )
    driver.set_page_load_timeout(30)
    return driver


def open_site(driver, site: str | Path, timeout: float = 15) -> None:
    """Load ``site/index.html`` and wait until the matrix has been drawn once."""
    from selenium.webdriver.support.ui import WebDriverWait

    driver.get((Path(site).resolve() / "index.html").as_uri())
    WebDriverWait(driver, timeout).until(
        lambda d: d.execute_script("return window.dashboardRendered || 0") > 0
    )


#: What a browser fetches before it draws the matrix, whatever the run's size.
FIRST_LOAD = ("index.html", "dashboard.js", "dashboard.css", "data/index.js")


@dataclasses.dataclass
class LoadTimes:
    first_load_bytes: int  # the FIRST_LOAD files
    site_bytes: int  # every file of the site
    first_paint_ms: float | None  # the browser's first-contentful-paint entry
    matrix_s: float  # from navigation until the matrix was drawn, measured from here


def measure_load(driver, site: str | Path) -> LoadTimes:
    """Open ``site`` in ``driver`` and measure what the first load costs."""
    site = Path(site)
    first = sum((site / name).stat().st_size for name in FIRST_LOAD)
    total = sum(path.stat().st_size for path in site.rglob("*") if path.is_file())
    started = time.perf_counter()
    open_site(driver, site)
    matrix = time.perf_counter() - started
    paint = driver.execute_script(
        "const p = performance.getEntriesByName('first-contentful-paint')[0];"
        "return p ? p.startTime : null"
    )
    return LoadTimes(first, total, paint, matrix)


def screenshot(site: str | Path, out: str | Path, size: tuple[int, int] = (1400, 900)) -> Path:
    """A PNG of the matrix view of the dashboard in ``site``."""
    with tempfile.TemporaryDirectory(prefix="dashboard-profile-") as profile:
        driver = open_browser(profile, size)
        try:
            open_site(driver, site)
            out = Path(out)
            out.parent.mkdir(parents=True, exist_ok=True)
            if not driver.save_screenshot(str(out)):
                raise RuntimeError(f"chromium could not write {out}")
        finally:
            driver.quit()
    return out


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m torch_onnx_conformance.reports.html.browser", description=__doc__
    )
    parser.add_argument(
        "site",
        type=Path,
        help="a folder python -m torch_onnx_conformance.reports build --html wrote",
    )
    parser.add_argument("out", type=Path, help="the PNG to write")
    parser.add_argument("--size", default="1400x900", help="window size, WIDTHxHEIGHT")
    options = parser.parse_args(argv)
    if not (options.site / "index.html").is_file():
        parser.error(
            f"{options.site}: no index.html (build it with python -m torch_onnx_conformance.reports build --html)"
        )
    width, height = (int(part) for part in options.size.split("x"))
    print(screenshot(options.site, options.out, (width, height)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
