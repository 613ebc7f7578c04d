#!/usr/bin/env bash
# Installs everything normlab needs on a Debian 12 machine, idempotently:
#   1. Debian packages (build tools, libraries, the built-in corpus), only the missing ones;
#   2. a project-local Python venv (.venv, or $NORMLAB_VENV) with torch==2.11.0, the LibTorch
#      distribution the build links against and the runtime of tests/reference/;
#   3. with --tests (tools/test.sh), what only tests use: a one-node Slurm (slurm-wlm, munge)
#      and, in the venv, the interop packages (docs/interop.md): transformers, tokenizers (also
#      the tokenizer.json tests), lm-eval, accelerate, protobuf (about 0.8 GB installed). Their
#      tests skip without them, and the demo does not wait for them.
# A second run with everything present takes a second or two.
# Usage: tools/setup.sh [--no-python] [--tests]
# Env:   NORMLAB_VENV  venv folder (default: <repo>/.venv)
set -euo pipefail
# normlab is built and tested on x86-64 only (docs/setup.md, "CPU classes"): say so first.
if [ "$(uname -m)" != x86_64 ] && [ -z "${NORMLAB_ANY_ARCH:-}" ]; then
  echo "setup: normlab is built and tested on x86-64 only; this machine is $(uname -m) (aarch64 is not supported: set NORMLAB_ANY_ARCH=1 to try anyway)" >&2
  exit 1
fi

TORCH_VERSION=2.11.0
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
venv=${NORMLAB_VENV:-$root/.venv}
with_python=1 with_tests=0
for arg in "$@"; do
  case $arg in
    --no-python) with_python=0 ;;
    --tests) with_tests=1 ;;
    -h|--help) sed -n '2,11p' "$0"; exit 0 ;;
    *) echo "setup.sh: unknown argument '$arg'" >&2; exit 2 ;;
  esac
done

# ---- Debian packages ---------------------------------------------------------------------
packages=(
  cmake ninja-build ccache g++ pkg-config make git        # build
  patchelf                                                # relocatable GPU pack (tools/gpu/pack.sh)
  libyaml-cpp-dev                                         # config files
  libspdlog-dev libfmt-dev                                # logging (kept away from torch's fmt)
  libsentencepiece-dev sentencepiece                      # tokenizer library and tools
  libpcre2-dev libutf8proc-dev                            # Hugging Face tokenizer.json (regex, NFC)
  libgtest-dev libgmock-dev                               # tests
  clang                                                   # libFuzzer for the fuzz tests (tests/fuzz/)
  clang-format                                            # the C++ style (tools/format.sh, CTest format)
  libcli11-dev nlohmann-json3-dev                         # CLI, JSON
  zlib1g-dev                                              # gzip input
  libopenmpi-dev openmpi-bin                              # multi-process training on CPU (mpirun)
  bible-kjv                                               # the built-in default corpus
  python3 python3-venv                                    # venv for torch and the references
)
# a one-node Slurm for the sweep tests (tests/slurm/)
((with_tests)) && packages+=(slurm-wlm munge)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
die() { echo "setup: $*" >&2; exit 1; }
if ((${#missing[@]})); then
  command -v apt-get >/dev/null \
    || die "missing Debian packages (${missing[*]}) and no apt-get here: install them with the system's package manager"
  sudo=""
  if [ "$(id -u)" -ne 0 ]; then
    command -v sudo >/dev/null || die "missing Debian packages (${missing[*]}): run tools/setup.sh as root, or install sudo"
    sudo="sudo"
  fi
  echo "setup: installing Debian packages: ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  $sudo apt-get update -qq >/dev/null 2>&1 \
    || die "apt-get update failed: check the network and the package mirror (/etc/apt/sources.list*)"
  $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null \
    || die "apt-get could not install ${missing[*]} (its messages are above)"
fi

# The torch wheel's CMake config needs the CUDA toolkit at configure time (docs/dependencies.md).
if ! command -v nvcc >/dev/null 2>&1 && [ ! -x /usr/local/cuda/bin/nvcc ]; then
  echo "setup: warning: no CUDA toolkit (nvcc) found; the torch==$TORCH_VERSION CMake package" \
       "needs it at configure time. Install CUDA 13.0 (/usr/local/cuda) before building." >&2
fi

# ---- Python venv with torch --------------------------------------------------------------
# venv_install PACKAGE...: installs into the venv with uv, which keeps the unpacked wheels in its
# cache (~/.cache/uv) and links them into each venv, so that another venv of the same packages (a
# second clone, a CI run) is ready in seconds, not the minutes pip takes to unpack 4.7 GB. pip
# installs uv (one wheel) into the venv first. pip's settings carry over (PIP_INDEX_URL,
# PIP_EXTRA_INDEX_URL, PIP_FIND_LINKS, PIP_CERT); where uv cannot be had or fails, pip installs.
UV_VERSION=0.13.9
venv_install() {
  # --compile-bytecode: as pip does, so that no Python start compiles the packages again (and
  # none can where PYTHONDONTWRITEBYTECODE is set; `import torch` took 2.5 s with the bytecode
  # and 3.7 s without on a 2-core Xeon, 2026-12-06).
  local uv_args=(--python "$py" --compile-bytecode) uv_env=() d
  [ -z "${PIP_INDEX_URL:-}" ] || uv_args+=(--index-url "$PIP_INDEX_URL")
  [ -z "${PIP_EXTRA_INDEX_URL:-}" ] || uv_args+=(--extra-index-url "$PIP_EXTRA_INDEX_URL")
  for d in ${PIP_FIND_LINKS:-}; do [ ! -d "$d" ] || uv_args+=(--find-links "$d"); done
  if "$py" -m uv --version >/dev/null 2>&1 \
     || "$py" -m pip install -q --disable-pip-version-check "uv==$UV_VERSION" >/dev/null 2>&1; then
    [ -z "${PIP_CERT:-}" ] || [ -n "${SSL_CERT_FILE:-}" ] || uv_env=(SSL_CERT_FILE="$PIP_CERT")
    env "${uv_env[@]}" "$py" -m uv pip install -q "${uv_args[@]}" "$@" && return 0
    echo "setup: uv could not install $*; trying pip" >&2
  fi
  "$py" -m pip install -q --disable-pip-version-check "$@"
}
if ((with_python)); then
  py=$venv/bin/python
  have=""
  [ -x "$py" ] && have=$("$py" - <<'PY' 2>/dev/null || true
import importlib.metadata as m
try: print(m.version("torch"))
except Exception: pass
PY
)
  if [ "${have%%+*}" != "$TORCH_VERSION" ] || ! "$py" -c "import numpy, safetensors, sentencepiece, matplotlib, tensorboard, pyarrow" 2>/dev/null; then
    # The wheels (about 3.6 GB), their installed form and a build need about 10 GB.
    mkdir -p "$(dirname "$venv")"
    free_kb=$(df -Pk "$(dirname "$venv")" | awk 'NR == 2 { print $4 }')
    [ "${free_kb:-0}" -ge $((10 * 1024 * 1024)) ] \
      || die "only $((free_kb / 1024 / 1024)) GB free on the disk of $venv; the torch venv and a build need about 10 GB: free space, or set NORMLAB_VENV to a folder on a larger disk"
    echo "setup: creating $venv with torch==$TORCH_VERSION (about 3.6 GB of wheels)"
    start=$(date +%s)
    [ -x "$py" ] || python3 -m venv "$venv" || die "python3 -m venv $venv failed (is python3-venv installed?)"
    venv_install "torch==$TORCH_VERSION" numpy safetensors sentencepiece matplotlib tensorboard pyarrow \
      || die "pip could not install torch==$TORCH_VERSION and the reference packages into $venv: check the network and access to PyPI (or PIP_INDEX_URL)"
    echo "setup: venv ready in $(( $(date +%s) - start )) s"
  fi
  # The Hugging Face export and lm-eval tests (docs/interop.md), at the versions they were
  # checked with; importlib.metadata answers in well under a second when they are present.
  interop=("transformers==5.25.0" "tokenizers==0.23.3" "lm-eval==0.4.13" "accelerate==1.16.0" protobuf)
  if ((with_tests)) && ! "$py" - "${interop[@]}" <<'PY' 2>/dev/null; then
import importlib.metadata as m, sys
for spec in sys.argv[1:]:
    name, _, version = spec.partition("==")
    if version and m.version(name) != version or not m.version(name):
        sys.exit(1)
PY
    echo "setup: installing ${interop[*]} into $venv (about 0.8 GB)"
    start=$(date +%s)
    venv_install "${interop[@]}" \
      || die "pip could not install ${interop[*]} into $venv: check the network and access to PyPI (or PIP_INDEX_URL)"
    echo "setup: interop packages ready in $(( $(date +%s) - start )) s"
  fi
fi
echo "setup: ok"
