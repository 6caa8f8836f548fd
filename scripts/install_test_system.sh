#!/usr/bin/env bash
# The system packages the test suite needs beyond Python's: Debian's Chromium and its
# driver (the dashboard's browser tests, through Selenium), SQLite's development files
# (the core links the system's SQLite, the library Python's sqlite3 loads) and fish
# (tests/cli/test_completion.py runs the generated fish script). `make test` runs this
# first. As root (CI, a container) what is missing is installed with apt-get; otherwise
# what is missing is named, with the command that installs it, and the run fails: the
# suite never skips a test because a package was absent.
set -euo pipefail

missing=()
command -v chromium >/dev/null || missing+=(chromium)
command -v chromedriver >/dev/null || missing+=(chromium-driver)
pkg-config --exists sqlite3 2>/dev/null || missing+=(libsqlite3-dev pkg-config)
command -v fish >/dev/null || missing+=(fish)

if [ ${#missing[@]} -eq 0 ]; then
  exit 0
fi
if [ "$(id -u)" -ne 0 ] || ! command -v apt-get >/dev/null; then
  echo "make test: missing system packages: ${missing[*]}" >&2
  echo "install them (Debian: sudo apt-get install -y ${missing[*]}) and run make test again" >&2
  exit 2
fi
apt-get update -qq
DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
