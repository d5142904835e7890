#!/usr/bin/env bash
# Makes sure the system Chromium that the web UI's tests drive (through Playwright, with
# executable_path; Playwright's own browser download is never used) is installed. As root,
# installs Debian's `chromium` when missing; otherwise it only says what to do, and the
# browser tests skip, naming the reason.
set -euo pipefail

browser="${DLSCOPE_CHROMIUM:-/usr/bin/chromium}"
if [ -x "$browser" ]; then
  echo "ensure-browser: $("$browser" --version 2>/dev/null || echo "$browser") is installed"
  exit 0
fi
if [ "$(id -u)" -ne 0 ]; then
  echo "ensure-browser: no Chromium at $browser and this is not root; install Debian's" \
       "'chromium' package (the web UI's browser tests skip without it)." >&2
  exit 0
fi
apt-get update -qq
DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium chromium-driver >/dev/null
echo "ensure-browser: installed $("$browser" --version 2>/dev/null)"
