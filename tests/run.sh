#!/usr/bin/env bash
# Set up (once) and run the test suite: `bash tests/run.sh [pytest args]`.
set -euo pipefail
cd "$(dirname "$0")/.."

# Debian's Chromium drives the browser tests; Playwright must never download a browser of its own.
if ! command -v chromium >/dev/null 2>&1 && command -v apt-get >/dev/null 2>&1 && [ "$(id -u)" = 0 ]; then
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null
fi

if [ ! -x .venv/bin/python ]; then
  python3 -m venv .venv
fi
.venv/bin/python -m pip install -q -r tests/requirements.txt
export GRADIO_ANALYTICS_ENABLED=False HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1
exec .venv/bin/python -m pytest tests -q "$@"
