# Sourced by scripts/test and scripts/up: make .venv with callboard and its dev tools once.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
PY="${PYTHON:-python3}"
if [ ! -x .venv/bin/python ] || [ pyproject.toml -nt .venv/.installed ]; then
  "$PY" -m venv .venv
  .venv/bin/python -m pip install -q --upgrade pip >/dev/null
  .venv/bin/python -m pip install -q -e '.[dev]'
  touch .venv/.installed
fi
export PATH="$PWD/.venv/bin:$PATH"
