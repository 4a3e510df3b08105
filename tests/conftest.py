"""Shared fixtures: one app server per test session, started as a real subprocess (`python app.py`),
and one Chromium (driven by Playwright) for every browser test file.

The browser fixtures skip only outside CI when no browser (or no playwright package) is found;
in CI (the CI environment variable set) a missing browser is a failure.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
APP_START_TIMEOUT_S = 120  # ~8 s on an idle machine; generous for a busy CI box
BROWSER_ARGS = [
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
]


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def http_status(url: str) -> int | None:
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))  # never via a proxy
    try:
        with opener.open(url, timeout=3) as response:
            return response.status
    except OSError:
        return None


@pytest.fixture(scope="session")
def app_url(tmp_path_factory) -> str:
    """URL of the app served by `python app.py` on a free port; stopped at the end of the session."""
    port = free_port()
    log_path = tmp_path_factory.mktemp("app") / "app.log"
    env = {
        **os.environ,
        "GRADIO_SERVER_NAME": "127.0.0.1",
        "GRADIO_SERVER_PORT": str(port),
        "GRADIO_ANALYTICS_ENABLED": "False",
        "HF_HUB_OFFLINE": "1",
        "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])),
        "NO_PROXY": "127.0.0.1,localhost",
        "no_proxy": "127.0.0.1,localhost",
    }
    url = f"http://127.0.0.1:{port}/"
    with open(log_path, "w") as log:
        process = subprocess.Popen([sys.executable, str(ROOT / "app.py")], cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT)

    def log_tail() -> str:
        return log_path.read_text(errors="replace")[-4000:]

    try:
        deadline = time.monotonic() + APP_START_TIMEOUT_S
        while http_status(url) != 200:
            if process.poll() is not None:
                pytest.fail(f"the app exited with code {process.returncode} before serving:\n{log_tail()}")
            if time.monotonic() > deadline:
                pytest.fail(f"the app did not answer HTTP 200 within {APP_START_TIMEOUT_S} s:\n{log_tail()}")
            time.sleep(0.5)
        yield url
    finally:
        stop_server(process)


def stop_server(process: subprocess.Popen) -> None:
    """SIGTERM (gradio takes 1-4 s to exit), then SIGKILL if it has not gone in 15 s."""
    process.terminate()
    try:
        process.wait(timeout=15)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


def find_chromium() -> str | None:
    candidates = [os.environ.get("SPECVIZ_CHROMIUM"), "/usr/bin/chromium", "/usr/bin/chromium-browser",
                  shutil.which("chromium"), shutil.which("chromium-browser"), shutil.which("google-chrome")]
    return next((path for path in candidates if path and os.path.exists(path)), None)


def unavailable(reason: str):
    if os.environ.get("CI"):
        pytest.fail(f"{reason}; in CI the browser test must run")
    pytest.skip(f"{reason} (not in CI, so skipping; with CI set this fails)")


@pytest.fixture(scope="session")
def browser():
    """One headless Chromium for the session, shared by every browser test file."""
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        unavailable("the playwright package is not installed")
    executable = find_chromium()
    if executable is None:
        unavailable("no Chromium found (looked at $SPECVIZ_CHROMIUM, /usr/bin/chromium and PATH)")
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=executable, args=BROWSER_ARGS, headless=True)
        yield browser
        browser.close()


@pytest.fixture
def page(browser, app_url):
    """A fresh page on the app, loaded and ready (its Run button drawn)."""
    page = browser.new_page(viewport={"width": 1400, "height": 1000})
    page.set_default_timeout(30_000)
    page.goto(app_url)
    page.wait_for_selector("#run")
    yield page
    page.close()
