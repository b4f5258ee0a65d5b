#!/usr/bin/env bash
# The oldest Python that pyproject's requires-python admits, run for real: every module imported and
# the main commands run on a fixture. The static checks in tests/hardening cannot see what fails only
# when a module is imported (a `A | B` alias, a call added in a later Python).
set -euo pipefail
cd "$(dirname "$0")/.."
want="$(sed -n 's/^requires-python *= *">= *\([0-9.]*\)".*/\1/p' pyproject.toml)"
py=""
for c in "python$want" "$HOME/.pyenv/versions/$want"*/bin/python /usr/bin/"python$want" /usr/local/bin/"python$want"; do
    if command -v "$c" >/dev/null 2>&1 && "$c" -c "import sys; assert sys.version_info[:2] == tuple(map(int, '$want'.split('.')))" 2>/dev/null; then
        py="$c"; break
    fi
done
if [ -z "$py" ]; then
    echo "no Python $want interpreter on this machine: the oldest-Python check did not run" >&2
    exit 0
fi
start=$(date +%s)
venv="$(mktemp -d)/venv"
"$py" -m venv "$venv"
# with the load test's extra, so that its modules (they import aiohttp) are imported too, not skipped
"$venv/bin/pip" install -q -e '.[loadtest]' 2>&1 | grep -v "^WARNING: Location" || true
"$venv/bin/python" - <<'PY'
import importlib, pkgutil, sys
import perfstack
bad, n = [], 0
for m in pkgutil.walk_packages(perfstack.__path__, "perfstack."):
    if m.name.endswith("__main__"):
        continue
    try:
        importlib.import_module(m.name)
        n += 1
    except Exception as e:
        bad.append(f"{m.name}: {type(e).__name__}: {e}")
print(f"Python {sys.version.split()[0]}: imported {n} of perfstack's modules, {len(bad)} failed")
for b in bad:
    print("  " + b)
sys.exit(1 if bad else 0)
PY
ps="$venv/bin/perfstack"
out="$(mktemp -d)"
"$ps" --version
# the machine's own findings are not this check's business: --fail-on never, so that only a crash fails it
"$ps" -q doctor --fail-on never -o "$out/doctor.json" >/dev/null
"$ps" -q profile --trace tests/fixtures/traces/h100/control.pt.trace.json.gz >/dev/null
"$ps" -q report tests/fixtures/runs/h100-doctor.json -f md >/dev/null
"$ps" -q report "$out/doctor.json" >/dev/null
"$ps" -q estimate infer --model llama-3-8b --gpu h100-sxm >/dev/null
rm -rf "$out" "$(dirname "$venv")"
echo "oldest Python ($("$py" -c 'import platform; print(platform.python_version())')): the main commands ran, $(( $(date +%s) - start )) s"
