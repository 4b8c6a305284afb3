"""How fast the dashboard builds and opens at a large run: ``python bench/dashboard_load.py``.

Builds sites from synthetic runs (``--cases 50000 200000``: 40 op families, 40 cases per op, one
case in 20 failing with a long message), opens each in headless Chromium (Debian's, see
``reports.html.browser``) and prints the build time, what the first load fetches, the whole site's
size, the first contentful paint and the time until the matrix is drawn, then until one family's
cases are drawn after a click.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.reports.dashboard_rows import synthetic_run  # noqa: E402
from torch_onnx_conformance.reports.html import build_site  # noqa: E402
from torch_onnx_conformance.reports.html.browser import measure_load, open_browser  # noqa: E402


def measure(count: int, driver, folder: Path) -> str:
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    site = folder / f"site-{count}"
    rows = synthetic_run(count)
    started = time.perf_counter()
    build_site(rows, site)
    built = time.perf_counter() - started
    load = measure_load(driver, site)
    started = time.perf_counter()
    driver.find_element(By.CSS_SELECTOR, "tr.family th").click()
    WebDriverWait(driver, 30).until(lambda d: d.find_elements(By.CSS_SELECTOR, "tr.subject-row"))
    family = time.perf_counter() - started
    return (
        f"{count:>7} cases: build {built:5.1f} s · first load "
        f"{load.first_load_bytes / 1024:6.0f} KiB · site {load.site_bytes / 2**20:6.1f} MiB · "
        f"first paint {load.first_paint_ms or 0:6.0f} ms · matrix {load.matrix_s * 1000:6.0f} ms · "
        f"one family opened {family * 1000:6.0f} ms"
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--cases", type=int, nargs="+", default=[50_000])
    options = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="dashboard-bench-") as folder:
        driver = open_browser(Path(folder) / "profile")
        try:
            for count in options.cases:
                print(measure(count, driver, Path(folder)), flush=True)
        finally:
            driver.quit()
    return 0


if __name__ == "__main__":
    sys.exit(main())
