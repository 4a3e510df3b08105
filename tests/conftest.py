"""Shared fixtures: one app server per test session, started as a real subprocess (`python app.py`)."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
APP_START_TIMEOUT_S = 120  # ~8 s on an idle machine; generous for a busy CI box


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
        process.terminate()
        try:
            process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
