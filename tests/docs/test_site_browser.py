"""The built site in a real browser (Debian's chromium through chromedriver): a newcomer on the home
page reaches any built-in's options in one click. Slow: it builds the site and starts a browser."""

from __future__ import annotations

import functools
import http.server
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from ..headless_browser import CHROMEDRIVER, CHROMIUM, MISSING, chromium
from .pages import ROOT

pytestmark = pytest.mark.slow
pytest.importorskip("mkdocs", reason="the [docs] extra is not installed: pip install -e '.[docs]'")
pytest.importorskip("selenium", reason="selenium is part of the test extra")
if not (CHROMIUM and CHROMEDRIVER):
    pytest.skip(MISSING, allow_module_level=True)


@pytest.fixture(scope="module")
def site_url(tmp_path_factory: pytest.TempPathFactory):
    site = tmp_path_factory.mktemp("site")
    res = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(site),
                          "-f", str(ROOT / "mkdocs.yml")], capture_output=True, text=True,
                         env={"NO_MKDOCS_2_WARNING": "1", "PATH": "/usr/bin:/bin"})
    assert res.returncode == 0, res.stderr
    class Quiet(http.server.SimpleHTTPRequestHandler):
        def log_message(self, *args) -> None:  # one line per request would bury the test's output
            pass

    handler = functools.partial(Quiet, directory=str(site))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/"
    finally:
        server.shutdown()
        thread.join(10)


@pytest.fixture(scope="module")
def browser():
    with chromium() as driver:
        yield driver


def test_any_builtins_options_are_one_click_from_the_home_page(site_url: str, browser, tmp_path: Path) -> None:
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support import expected_conditions as ec
    from selenium.webdriver.support.ui import WebDriverWait

    browser.get(site_url)
    link = browser.find_element(By.LINK_TEXT, "every built-in's options")
    link.click()
    WebDriverWait(browser, 20).until(ec.url_contains("/reference/components/"))
    heading = WebDriverWait(browser, 20).until(ec.visibility_of_element_located((By.ID, "dapo")))
    table = heading.find_element(By.XPATH, "following::table[1]")
    assert table.is_displayed()
    rows = {r.find_elements(By.TAG_NAME, "td")[0].text: r.text for r in table.find_elements(By.CSS_SELECTOR, "tbody tr")}
    assert {"metric", "min_mean", "max_mean", "require_variance"} <= set(rows)
    assert "'acc'" in rows["metric"]  # the default, read from DapoOptions
    browser.save_screenshot(str(tmp_path / "components.png"))


def test_the_navigation_reaches_every_section_and_the_api_reference_renders(site_url: str, browser) -> None:
    from selenium.webdriver.common.by import By

    browser.get(site_url + "reference/api/")
    text = browser.find_element(By.TAG_NAME, "article").text
    for name in ("hookimpl", "RunManager", "RealtimeMonitor", "build_options"):
        assert name in text, name
    sections = [e.get_attribute("textContent").strip() for e in browser.find_elements(By.CSS_SELECTOR, "nav.md-nav--primary > ul > li > label, nav.md-nav--primary > ul > li > a")]
    for section in ("Tutorial", "How-to guides", "Reference", "Explanations"):
        assert any(s.startswith(section) for s in sections), (section, sections)
