#!/usr/bin/env bash
# CI: the oracle suite (tests/oracle) in its own venvs, so the main environment stays light.
# Megatron Bridge's own code judges what packcfg lints and renders, on both Bridge lines:
#   0.3.1: megatron-bridge 0.3.1 + megatron-core 0.16.1 + torch 2.13 CPU   (ORACLE_VENV,    default .venv-oracle)
#   0.6.x: megatron-bridge 0.6.2 + megatron-core 0.19.2 + torch 2.13 CPU   (ORACLE_VENV_06, default .venv-oracle-0.6)
#          forced onto Python 3.11 (both declare >=3.12): --no-deps --ignore-requires-python, the
#          dependencies its import and data path need, typing.override from typing_extensions (sitecustomize).
# Each venv is built once per key (a hash of this script and the pinned sets below), stamped with that key;
# a venv whose stamp matches is reused, so a CI cache keyed on `bash .ci/oracle.sh key` restores it and no
# run builds a version twice. A failing install fails the job (exit 1); test failures exit with pytest's code.
#   bash .ci/oracle.sh                 # build what is missing or stale, run tests/oracle in each venv
#   bash .ci/oracle.sh build           # build only
#   bash .ci/oracle.sh key             # the cache key (one line), for a CI cache step
#   ORACLE_LINES=0.3.1 bash .ci/oracle.sh   # one line only (default: "0.3.1 0.6")
#   ORACLE_FRESH=1 bash .ci/oracle.sh  # rebuild the venvs first
#   ORACLE_CACHE=/ci/cache bash .ci/oracle.sh   # venvs at $ORACLE_CACHE/venv-<line>-<key> (a CI cache folder:
#                                               # a new key is a new folder, an old one is reused as is)
set -uo pipefail
SELF="$(cd "$(dirname "$0")" && pwd)/$(basename "$0")"
cd "$(dirname "$0")/.."
export CI="${CI:-true}"
export PACKCFG_ORACLE=1           # tests/oracle/conftest.py: a missing Bridge is an error, not a skip
VENV_031="${ORACLE_VENV:-.venv-oracle}"
VENV_06="${ORACLE_VENV_06:-.venv-oracle-0.6}"
LINES="${ORACLE_LINES:-0.3.1 0.6}"
PY="${PYTHON:-python3.11}"
command -v "$PY" >/dev/null 2>&1 || PY=python
ACTION="${1:-all}"

# The 0.6.x line's runtime dependencies (measured: what `import megatron.bridge.recipes`, the config layer,
# build_tokenizer and the packed SFT dataset import on 0.6.2). Bridge 0.6.2 asks transformers>=5.8,<=5.12.1.
DEPS_06=(numpy packaging "omegaconf==2.3.0" "hydra-core==1.3.4" "transformers==5.12.1" "huggingface-hub>=1.0,<2"
  "datasets==4.1.1" "megatron-energon==7.4.1" "einops==0.8.2" "PyYAML>=6.0" "rich>=13" "tqdm>=4.67"
  "regex>=2024.11.6" "six>=1.17.0" "typing-extensions>=4.12" "pytest>=8" "nvidia-modelopt==0.44.0"
  "diffusers>=0.36" "tensorboard>=2.19" "accelerate" "safetensors" "tokenizers" pyarrow jinja2 pydantic
  "ruamel.yaml" "triton==3.9.0")

# 0.3.1: what `megatron.bridge.training.pretrain` imports unguarded beyond the config layer (measured: the
# end-to-end test's imports).
DEPS_TRAIN=("nvidia-resiliency-ext==0.4.1" "nvidia-modelopt==0.44.0" "tensorboard>=2.19")

fail() { echo "oracle: $1"; exit 1; }

key() {  # $1 = line: a hash of this script and the pyproject oracle extra
  { cat "$SELF"; sed -n '/^oracle = \[/,/^\]/p' pyproject.toml; echo "$1"; } | sha256sum | cut -c1-16
}
venv_of() {
  if [ -n "${ORACLE_CACHE:-}" ]; then echo "$ORACLE_CACHE/venv-$1-$(key "$1")"
  elif [ "$1" = "0.3.1" ]; then echo "$VENV_031"; else echo "$VENV_06"; fi
}

if [ "$ACTION" = "key" ]; then
  for line in $LINES; do printf '%s-%s ' "$line" "$(key "$line")"; done; echo; exit 0
fi

# megatron.bridge cannot be imported bare on CPU (its peft modules import transformer_engine unguarded):
# after a build, import its recipes through the suite's own CPU stand-ins.
smoke() {
  "$1/bin/python" -c "import transformer_engine" >/dev/null 2>&1 && fail "transformer_engine is installed in $1"
  "$1/bin/python" - <<'PY' || fail "megatron.bridge recipes do not import in $1 (with the CPU stand-ins)"
import sys, tempfile
sys.path.insert(0, "scripts/bridge_data")
import cpu_env
cpu_env.setup(tempfile.mkdtemp())
import megatron.bridge.recipes  # noqa: F401
from megatron.bridge.training.tokenizers.tokenizer import build_tokenizer  # noqa: F401
PY
}

build() {  # $1 = line
  local line="$1" venv k start
  venv="$(venv_of "$line")"
  k="$(key "$line")"
  if [ "${ORACLE_FRESH:-0}" = "1" ]; then rm -rf "$venv"; fi
  if [ -x "$venv/bin/python" ] && [ "$(cat "$venv/.oracle-key" 2>/dev/null)" = "$k" ]; then
    echo "== oracle venv $line: $venv (key $k, reused)"
    return 0
  fi
  echo "== oracle venv $line: $venv (key $k, building)"
  start=$(date +%s)
  rm -rf "$venv"
  "$PY" -m venv "$venv" || fail "could not create $venv"
  pip_() { "$venv/bin/python" -m pip install --disable-pip-version-check -q "$@"; }
  # torch first and pinned: anything else pulls a multi-GB CUDA build.
  pip_ torch==2.13.0 || fail "torch install failed ($line)"
  if [ "$line" = "0.3.1" ]; then
    # Bridge's declared requirements pull transformer-engine, which breaks megatron.core on CPU: --no-deps.
    pip_ --no-deps megatron-core==0.16.1 megatron-bridge==0.3.1 || fail "megatron-core/megatron-bridge install failed"
    # The config layer's dependencies (pinned in pyproject's `oracle` extra) and packcfg itself.
    pip_ -e '.[oracle]' || fail "oracle extra install failed"
    # What Bridge's training entry (run_recipe.py -> finetune/pretrain) imports beyond the config layer, and
    # packcfg's render/pack dependencies (the end-to-end test renders and packs in this venv).
    pip_ "${DEPS_TRAIN[@]}" pyarrow jinja2 pydantic ruamel.yaml tokenizers || fail "training-entry dependencies failed"
  else
    pip_ "${DEPS_06[@]}" || fail "0.6 dependencies install failed"
    pip_ --no-deps --ignore-requires-python megatron-core==0.19.2 megatron-bridge==0.6.2 \
      || fail "megatron-core 0.19.2/megatron-bridge 0.6.2 install failed"
    pip_ --no-deps -e . || fail "packcfg install failed"
    # Python 3.11 has no typing.override (3.12): Bridge 0.6 imports it. A sitecustomize gives typing the
    # typing_extensions one, before anything imports Bridge; nothing else is changed.
    # (No nvidia-resiliency-ext here: 0.4.1, the newest with a cp311 wheel, fails megatron-core 0.19.2's
    # import-time check for >= 0.6.0; the end-to-end test stands in for the one name 0.6's pretrain.py
    # imports unguarded, see scripts/bridge_data/cpu_env.py.)
    local site
    site="$("$venv/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')"
    printf '%s\n' "import typing" "if not hasattr(typing, 'override'):" \
      "    import typing_extensions" "    typing.override = typing_extensions.override" > "$site/sitecustomize.py"
  fi
  smoke "$venv"
  echo "$k" > "$venv/.oracle-key"
  echo "oracle venv $line ready in $(( $(date +%s) - start )) s, $(du -sh "$venv" | cut -f1)"
}

for line in $LINES; do build "$line"; done
[ "$ACTION" = "build" ] && exit 0

rc=0
for line in $LINES; do
  venv="$(venv_of "$line")"
  echo "== oracle tests, Bridge $line ($venv)"
  start=$(date +%s)
  "$venv/bin/python" -m pytest tests/oracle -q -p no:cacheprovider
  r=$?
  echo "oracle tests, Bridge $line: exit $r in $(( $(date +%s) - start )) s"
  if [ "$r" -eq 5 ]; then echo "oracle: pytest collected no tests ($line): treating as a failure"; r=1; fi
  [ "$r" -ne 0 ] && rc=$r
done
exit "$rc"
