# Sourced by scripts/test and scripts/up: make .venv with callboard and its dev tools, at
# the versions pinned in requirements.lock, once (again when pyproject.toml or the lock
# changes). Says what it is doing: the first install takes about half a minute.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
PY="${PYTHON:-python3}"
if [ ! -x .venv/bin/python ] || [ pyproject.toml -nt .venv/.installed ] \
    || [ requirements.lock -nt .venv/.installed ]; then
  started=$SECONDS
  if [ ! -x .venv/bin/python ]; then
    echo "callboard: creating .venv with $("$PY" --version 2>&1) (first run only) ..." >&2
  fi
  "$PY" -m venv .venv
  echo "callboard: installing callboard and the versions in requirements.lock into .venv" \
    "(about half a minute the first time) ..." >&2
  .venv/bin/python -m pip install -q --upgrade pip >/dev/null
  .venv/bin/python -m pip install -q -c requirements.lock -e '.[dev]'
  touch .venv/.installed
  echo "callboard: .venv ready in $((SECONDS - started)) s" >&2
fi
export PATH="$PWD/.venv/bin:$PATH"
