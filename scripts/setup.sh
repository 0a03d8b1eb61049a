#!/usr/bin/env bash
# Installs the Debian 12 packages lumen needs to build and test, if any are missing.
# Safe to run repeatedly; does nothing when everything is present.
set -euo pipefail

PACKAGES=(
  g++ cmake ninja-build pkg-config make git
  nlohmann-json3-dev libpcre2-dev libgtest-dev libbenchmark-dev libcpp-httplib-dev
  # test references: chat templates rendered by jinja2 (tests/data/chat_templates),
  # numpy forward passes (tests/ref)
  python3 python3-jinja2 python3-numpy
)

missing=()
for p in "${PACKAGES[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

if [ ${#missing[@]} -eq 0 ]; then
  exit 0
fi

echo "lumen setup: installing missing Debian packages: ${missing[*]}"
SUDO=""
if [ "$(id -u)" -ne 0 ]; then
  if command -v sudo >/dev/null 2>&1; then
    SUDO="sudo"
  else
    echo "lumen setup: not root and no sudo; please install: ${missing[*]}" >&2
    exit 1
  fi
fi
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
