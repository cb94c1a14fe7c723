#!/usr/bin/env bash
# Headless Chromium and ChromeDriver for the memory console's browser tests
# (tests/e2e/test_console_browser.py): Debian's chromium and chromium-driver, which
# scripts/test.sh installs where apt-get runs as root. Nothing else is downloaded:
# the tests drive /usr/bin/chromium through /usr/bin/chromedriver with Selenium.
set -euo pipefail
if [ -x /usr/bin/chromium ] && [ -x /usr/bin/chromedriver ]; then
    exit 0
fi
if command -v apt-get >/dev/null 2>&1 && [ "$(id -u)" = 0 ]; then
    echo "==> installing chromium and chromium-driver (Debian) for the browser tests"
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium chromium-driver >/dev/null
else
    echo "WARNING: no /usr/bin/chromium and /usr/bin/chromedriver, and no apt-get as root:" \
        "the console's browser tests will be skipped" >&2
fi
