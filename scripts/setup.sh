#!/usr/bin/env bash
# Creates ./.venv with nascli installed (editable) using uv, which installs the TensorFlow stack
# several times faster than plain pip. `--test` adds the test extras. Safe to re-run.
set -euo pipefail

cd "$(dirname "$0")/.."
extras=""
if [[ "${1:-}" == "--test" ]]; then
  extras="[test]"
elif [[ $# -gt 0 ]]; then
  echo "usage: bash scripts/setup.sh [--test]" >&2
  exit 1
fi

python="${PYTHON:-}"
if [[ -z "$python" ]]; then
  for candidate in python3.11 python3 python; do
    if command -v "$candidate" >/dev/null 2>&1 \
        && "$candidate" -c 'import sys; sys.exit(sys.version_info[:2] != (3, 11))'; then
      python="$candidate"
      break
    fi
  done
fi
if [[ -z "$python" ]]; then
  echo "error: Python 3.11 is required (set PYTHON=/path/to/python3.11)" >&2
  exit 1
fi

if [[ ! -x .venv/bin/python ]]; then
  "$python" -m venv .venv
fi
if [[ ! -x .venv/bin/uv ]]; then
  .venv/bin/python -m pip install --quiet --disable-pip-version-check uv
fi
.venv/bin/uv pip install --quiet --python .venv/bin/python -e ".${extras}"
if [[ -n "$extras" ]] && ! command -v chromium >/dev/null 2>&1 \
    && [[ -z "${NASCLI_CHROMIUM:-}" ]] && [[ "${NASCLI_SKIP_BROWSER:-}" != "1" ]]; then
  # The report's browser test drives Debian's Chromium (Playwright's own browser download is
  # not a package registry). Needs root, or sudo without a password.
  sudo=""
  [[ "$(id -u)" == "0" ]] || sudo="sudo -n"
  if command -v apt-get >/dev/null 2>&1; then
    echo "installing Debian's chromium for the browser test (apt-get)" >&2
    $sudo apt-get install -y -qq chromium >/dev/null 2>&1 \
      || { $sudo apt-get update -qq >/dev/null 2>&1 \
           && $sudo apt-get install -y -qq chromium >/dev/null; } \
      || echo "warning: could not install chromium; tests/test_report_browser.py will fail" \
              "(install it, set NASCLI_CHROMIUM=/path/to/chromium, or NASCLI_SKIP_BROWSER=1)" >&2
  else
    echo "warning: no apt-get to install chromium; set NASCLI_CHROMIUM=/path/to/chromium or" \
         "NASCLI_SKIP_BROWSER=1" >&2
  fi
fi
echo "nascli installed in .venv ($(.venv/bin/nascli --help >/dev/null && echo ok))" >&2
