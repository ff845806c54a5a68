#!/usr/bin/env bash
# Portable mode on other CPUs than this one, without another machine: `python train.py`
# (German Credit, seed 0) run under QEMU's user-mode emulator with other x86-64 CPU models,
# whose CPUID makes MKL, ATen and OpenBLAS dispatch as they would on that CPU (Nehalem: SSE4.2
# only, so no AVX2 branch anywhere; Haswell: AVX2 without AVX-512, Intel's vendor string, which
# MKL treats differently from this AMD host). Portable mode must print the README's digest under
# every model; the default mode under Nehalem is run too, to show that the emulated CPU does
# change the kernels (its digest differs from the host's default one).
#
#   bash tools/portable_check_emulated.sh [OUT_DIR]       # about 10-20 minutes per emulated run
#
# Needs qemu-x86_64 (Debian: `apt-get install qemu-user`); nothing else. Each run is one line of
# OUT_DIR/results.tsv: cpu model, mode, test accuracy, weights SHA-256, seconds.
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${1:-/tmp/portable-emulated}
CPUS=${CPUS:-"Nehalem Haswell-noTSX"}
PYTHON=${PYTHON:-.venv/bin/python}
command -v qemu-x86_64 >/dev/null || { echo "error: qemu-x86_64 not found (apt-get install qemu-user)" >&2; exit 2; }
mkdir -p "$OUT"
RESULTS="$OUT/results.tsv"
[ -f "$RESULTS" ] || printf 'cpu\tmode\ttest_accuracy\tweights_sha256\tseconds\n' > "$RESULTS"

one_run() {  # one_run <cpu model or "host"> <portable|default>
    local cpu=$1 mode=$2 name="$1-$2" flags=() runner=()
    [ "$mode" = portable ] && flags=(--portable)
    [ "$cpu" = host ] || runner=(qemu-x86_64 -cpu "$cpu")
    if grep -q "^$cpu	$mode	" "$RESULTS"; then echo "$name: done already"; return; fi
    local start=$SECONDS
    "${runner[@]}" "$PYTHON" train.py "${flags[@]}" --output_dir "$OUT/runs" --run_name "$name" \
        --log_to none > "$OUT/$name.log" 2>&1
    local acc digest
    acc=$(sed -n 's/^test accuracy: \([0-9.]*\).*/\1/p' "$OUT/$name.log" | tail -1)
    digest=$("$PYTHON" tools/weights_sha256.py "$OUT/runs/german/$name" | awk '{print $1}')
    printf '%s\t%s\t%s\t%s\t%s\n' "$cpu" "$mode" "$acc" "$digest" $((SECONDS - start)) | tee -a "$RESULTS"
}

one_run host portable
one_run host default
for cpu in $CPUS; do one_run "$cpu" portable; done
one_run "${CPUS%% *}" default
column -t "$RESULTS"
