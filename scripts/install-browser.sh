#!/usr/bin/env bash
# Headless Chromium for the dashboard's browser tests (tests/test_dashboard_browser.py), from Debian's package.
# Idempotent: does nothing when /usr/bin/chromium is already there. Never runs `playwright install`: Playwright
# drives this system Chromium through executable_path.
set -euo pipefail
if [ -x /usr/bin/chromium ]; then
    echo "chromium already installed: $(/usr/bin/chromium --version 2>/dev/null || echo /usr/bin/chromium)"
    exit 0
fi
SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update
$SUDO apt-get install -y --no-install-recommends chromium
/usr/bin/chromium --version
