#!/usr/bin/env bash
# The documented image results that use Expected Gradients (issue 28: rerun after it became
# seeded), on a machine with a CUDA GPU, within 9 minutes (TOTAL_S):
#   bash tools/gpu_results.sh               # Fashion-MNIST: the reference small CNN (b)
#     (configs/images/fashion_mnist_cnn.yaml, seed 0, 5 epochs), Mahlau & Nolde's Table 1 on it
#     (configs/aggregation/fashion_mnist.yaml, 500 images) and the CPU-sized ROAR grid
#     (configs/roar/fashion_mnist_cpu.yaml); carry .whl and .fm (tools/gpu_check.sh's header)
#   bash tools/gpu_results.sh cifar10       # CIFAR-10: the reference ResNet-8 (a), then Decker et
#     al.'s Table 1 on it (configs/optimised/cifar10.yaml, 200 images); carry .whl and .cifar
#     (a copy of cifar10-jpeg.tar.gz: .whl and .fm together leave no room for it)
#   bash tools/gpu_results.sh cifar10-aggregation   # then Mahlau & Nolde's on it (500 images)
# From the repository root; reports under ${OUT:-gpu_out}/. The GPU trains another model than
# this CPU does from the same seed, so these are the GPU's figures (docs/aggregation.md and
# docs/roar.md say which machine made each). W&B is off (the lent machine's Python lacks it).
set -u
cd "$(dirname "$0")/.."
TOTAL_S=${TOTAL_S:-540}
. tools/gpu_env.sh

run environment 45 "$PYTHON" -c "import torch; print(torch.__version__, torch.cuda.get_device_name())"
QUIET="--log_to none --trainer.enable_progress_bar false"
case "${1:-fashion_mnist}" in
  fashion_mnist)
    run train_cnn 150 "$PYTHON" train.py --config configs/images/fashion_mnist_cnn.yaml --output_dir runs \
      --run_name cnn-seed0 $QUIET
    run aggregation 200 "$PYTHON" evaluate.py aggregation --config configs/aggregation/fashion_mnist.yaml --log_to none
    run roar 300 "$PYTHON" evaluate.py roar --config configs/roar/fashion_mnist_cpu.yaml --log_to none ;;
  cifar10|cifar10-aggregation)
    [ -f runs/cifar10-jpeg/resnet8-seed0/metrics.json ] || run train_resnet8 300 "$PYTHON" train.py \
      --config configs/images/cifar10_resnet8.yaml --data.root .cifar/cifar10-jpeg.tar.gz --output_dir runs \
      --run_name resnet8-seed0 $QUIET
    if [ "$1" = cifar10 ]; then
      run optimised 240 "$PYTHON" evaluate.py optimised --config configs/optimised/cifar10.yaml --log_to none
    else
      run aggregation 400 "$PYTHON" evaluate.py aggregation --config configs/aggregation/cifar10.yaml --log_to none
    fi ;;
  *) echo "error: expected fashion_mnist, cifar10 or cifar10-aggregation; got $1" >&2; exit 2 ;;
esac
# the reports' text and figures, as one file (a call brings back a few files; maps and cells stay)
find runs/aggregation runs/roar runs/optimised -maxdepth 2 \( -name '*.json' -o -name '*.md' -o -name '*.csv' \
  -o -name '*.png' -o -name 'config.yaml' \) 2>/dev/null | tar czf "$OUT_DIR/reports.tgz" -T -
write_summary
