#!/bin/bash
# ROAR end to end on the ImageNet-style stand-in (docs/roar.md, "ImageNet-scale: one cell end to end"):
# the 1,000 validation images of ../shared/data/images/imagenet-samples-val.tar.gz at 224 x 224,
# served from files (in_memory: false), a torchvision ResNet-18 (1,000 classes) trained for 2 steps
# as the "clean" model, the saliency rankings of both splits by two processes (--rankings_only,
# --shard 0/2 and 1/2), then the grid {clean t = 0, saliency t = 0.5} with each cell's modified
# splits written as shards and its retraining run by two gloo processes (torchrun, DDP) for 4 steps.
# The folder has only val/: the stand-in's train/ and val/ both link to its class folders (the same
# 1,000 images in both splits: a measurement of throughput, bytes and memory, not of accuracy).
#
#     bash tools/roar_imagenet_standin.sh [WORK]        # WORK default /tmp/roar-standin
set -euo pipefail
WORK=${1:-/tmp/roar-standin}
PY=${PYTHON:-.venv/bin/python}
DATA=${RELIABLE_EXPLANATIONS_DATA:-../shared/data}
export OMP_NUM_THREADS=1
mkdir -p "$WORK"
TIME=(/usr/bin/time -f "%e s wall, %U s user, %M KB max RSS")

# 1. the stand-in folder: the archive unpacked once (into WORK/cache), train/ and val/ linking its classes
"$PY" - "$DATA/images/imagenet-samples-val.tar.gz" "$WORK" <<'PYTHON'
import sys
from pathlib import Path
from datamodules.images import ImageFolderDataModule
archive, work = sys.argv[1], Path(sys.argv[2])
data = ImageFolderDataModule(root=archive, cache_dir=str(work / "cache"))
data.prepare_data()
for split in ("train", "val"):
    (work / "standin" / split).mkdir(parents=True, exist_ok=True)
    for folder in sorted((data.data_root / "val").iterdir()):
        link = work / "standin" / split / folder.name
        if not link.exists():
            link.symlink_to(folder.resolve(), target_is_directory=True)
PYTHON

# 2. the clean model: 2 steps of a ResNet-18 at 224 px (a train.py run)
if [ ! -e "$WORK/runs/standin/resnet18/metrics.json" ]; then
  "${TIME[@]}" "$PY" train.py --data ImageFolderDataModule --data.root "$WORK/standin" --data.image_size 224 \
    --data.in_memory false --data.cache_dir "$WORK/cache" --data.batch_size 16 --data.eval_batch_size 50 \
    --model lightning_modules.ImageClassifier --model.arch resnet18 --model.optimizer adamw --model.lr 1e-3 \
    --model.schedule none --trainer.max_steps 2 --trainer.max_epochs 1 --trainer.limit_test_batches 2 \
    --log_to none --output_dir "$WORK/runs" --run_name resnet18 2>&1 | tail -1
fi

cat > "$WORK/roar.yaml" <<YAML
run: $WORK/runs/standin/resnet18
estimators: {saliency: {}}
fractions: [0.0, 0.5]
retrainings: 1
trainer: {accelerator: cpu, devices: 2, strategy: ddp, max_steps: 4, max_epochs: 1}
log_to: none
device: cpu
output_dir: $WORK/roar
YAML

# 3. the rankings of both splits by two processes, one shard file (256 images) after another
for i in 0 1; do
  "${TIME[@]}" "$PY" evaluate.py roar --config "$WORK/roar.yaml" --rankings_only --shard "$i/2" \
    > "$WORK/rankings-$i.log" 2>&1 &
done
wait
tail -n 3 "$WORK"/rankings-*.log

# 4. the grid: each cell's splits written as shards, one retraining by two gloo processes
"${TIME[@]}" env NPROC=2 bash docs/roar_torchrun.sh grid "$WORK/roar.yaml" > "$WORK/grid.log" 2>&1
tail -n 3 "$WORK/grid.log"
du -sb "$WORK"/roar/*/rankings/* "$WORK"/roar/*/shards/*
