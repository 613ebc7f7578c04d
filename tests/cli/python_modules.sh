#!/usr/bin/env bash
# Sourced by the CLI tests that run Python packages which only `tools/setup.sh --tests` installs.
#   require_python_modules PYTHON MODULE...
#       fails the test (prints FAIL and exits 1) naming each MODULE that PYTHON cannot find, with
#       the command that installs them. It looks the modules up without importing them: importing
#       torch, transformers or lm_eval takes 1 to 5 s, paid again by every pass of .ci/run. A
#       module that is found but does not import fails later, where the test uses it.
require_python_modules() {
  local python=$1 missing
  shift
  missing=$("$python" -c 'import importlib.util, sys
print(" ".join(m for m in sys.argv[1:] if importlib.util.find_spec(m) is None))' "$@" 2>&1) \
    || { echo "FAIL: $python does not run: $missing"; exit 1; }
  [ -z "$missing" ] || { echo "FAIL: $python cannot import $missing (run tools/setup.sh --tests)"; exit 1; }
}
