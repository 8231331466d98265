#!/usr/bin/env bash
# Install the real tools for the optional tests (tests/test_compare.py
# -k installed_tool) in venvs of their own, and print the variables to export.
#   bash tests/data/compare_tools/install_tools.sh [DIR]     (default DIR=/tmp/numlab-tools)
# mindstudio-probe 26.2.0 also installs into numlab's own venv (numpy 2 and
# torch 2.13.0 unchanged); msit 8.2.0 pins numpy<2, so it gets its own venv,
# and so does mindstudio-probe 8.3.3 (numpy 1.26).  torch is always pinned.
set -euo pipefail
DIR=${1:-/tmp/numlab-tools}
PY=${PYTHON:-python3}
mkdir -p "$DIR"
echo 'numpy<2' > "$DIR/numpy1.txt"
if [ ! -x "$DIR/msp83/bin/msprobe" ]; then
  "$PY" -m venv "$DIR/msp83"
  "$DIR/msp83/bin/pip" install -q -c "$DIR/numpy1.txt" torch==2.13.0 mindstudio-probe==8.3.3
fi
if [ ! -x "$DIR/msp26/bin/msprobe" ]; then
  "$PY" -m venv "$DIR/msp26"
  "$DIR/msp26/bin/pip" install -q torch==2.13.0 mindstudio-probe==26.2.0
fi
if [ ! -x "$DIR/msit/bin/msit" ] || ! "$DIR/msit/bin/msit" llm compare -h >/dev/null 2>&1; then
  "$PY" -m venv "$DIR/msit"
  "$DIR/msit/bin/pip" install -q -c "$DIR/numpy1.txt" torch==2.13.0 msit==8.2.0 "pandas<3" openpyxl tqdm \
      safetensors tabulate onnx libclang
  # pandas 3 breaks msit's report writer (fillna("") on float columns): pandas<3
  # `msit install llm` fails here (its setup.py reads ../config/config.ini relative to the
  # working directory): install the llm component from its own folder
  LLM=$("$DIR/msit/bin/python" -c 'import components, os; print(os.path.dirname(components.__file__))')/llm
  (cd "$LLM" && "$DIR/msit/bin/pip" install -q --no-deps --no-build-isolation .)
fi
"$DIR/msit/bin/msit" llm compare -h >/dev/null
echo "export NUMLAB_MSPROBE83=$DIR/msp83/bin/msprobe NUMLAB_MSPROBE26=$DIR/msp26/bin/msprobe NUMLAB_MSIT=$DIR/msit/bin/msit"
