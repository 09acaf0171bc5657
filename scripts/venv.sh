# Sourced by the scripts: make .venv once and install ada (editable) with its test extra.
# Needs python3 with venv and pip, and gcc for the test targets.
VENV="${ADA_VENV:-$PWD/.venv}"
if [ ! -x "$VENV/bin/python" ]; then
    python3 -m venv "$VENV"
fi
stamp="$VENV/.ada-installed"
if [ ! -f "$stamp" ] || [ pyproject.toml -nt "$stamp" ]; then
    "$VENV/bin/python" -m pip install --quiet --upgrade pip
    "$VENV/bin/python" -m pip install --quiet -e '.[test]'
    touch "$stamp"
fi
