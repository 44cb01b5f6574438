#!/usr/bin/env bash
# Installs Debian's chromium (and chromium-driver) for the dashboard's browser tests, if it is
# not installed yet, and prints the browser's path. Idempotent.
set -euo pipefail

# Only the path goes to stdout (callers capture it); everything apt prints goes to stderr.
exec 3>&1 1>&2

if ! command -v chromium >/dev/null 2>&1; then
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq >/dev/null
  apt-get install -y -qq --no-install-recommends chromium chromium-driver fonts-dejavu-core >/dev/null
fi
command -v chromium >&3
