#!/bin/bash
# A ROAR grid split over a SLURM job array (docs/roar.md, "Running a grid"), and one ROAR cell of a
# large image folder through written shards ("ImageNet-scale: modified datasets as shards").
#
#   sbatch --array=0-7 docs/roar_slurm.sh configs/roar/cifar10.yaml
#
# Every array task runs `evaluate.py roar --shard i/k` on the same config: the grid's folder
# (<output_dir>/<dataset>-<hash of the config>) is the same for all of them, task i runs cells
# i, i+k, i+2k, ... that are not there yet, each written atomically when finished, and the task
# that finds every cell done writes roar.json, roar.csv and the plots. A task that dies (time
# limit, preemption, a lost node) loses its cell in flight only: resubmit the same array (or
# just that index) and it continues. The maps of each estimator are computed by the first task
# that needs them and cached in <grid>/maps (set cache_dir to share them between grids).
# For several GPUs per task, set trainer.devices and trainer.strategy: ddp in the config and
# --gres/--ntasks-per-node to match; Lightning's SLURM environment then runs each cell's fits
# data-parallel, every rank working through the same cells and rank 0 writing them.
#
# A cell through shards (tools/roar_shards.py; <shards> on a file system every node sees):
#
#   # 1. the modified splits, written once by a CPU array (task i writes shards i, i+k, ...)
#   W=$(sbatch --parsable --array=0-31 --gres=gpu:0 docs/roar_slurm.sh write <data> <shards> --estimator random \
#       --fraction 0.5 --image_size 224)
#   # 2. one model trained on 2 nodes × 4 GPUs, each rank reading its part of every epoch
#   sbatch --dependency=afterok:$W --nodes=2 --ntasks-per-node=4 --gres=gpu:4 docs/roar_slurm.sh fit <data> \
#       <shards> --estimator random --fraction 0.5 --image_size 224 --max_epochs 90 --result cell.json
#
# (srun starts one process per task; Lightning reads SLURM's variables for the ranks. `fit` writes
# any shard still missing first, once per node.)
#SBATCH --job-name=roar
#SBATCH --gres=gpu:1
#SBATCH --cpus-per-task=8
#SBATCH --mem=32G
#SBATCH --time=12:00:00
#SBATCH --output=logs/roar-%A_%a.out

set -euo pipefail
cd "${SLURM_SUBMIT_DIR}"
case "${1:?usage: sbatch --array=0-<k-1> docs/roar_slurm.sh <config.yaml> | write|fit <data> <shards> [options]}" in
  write)
    srun .venv/bin/python tools/roar_shards.py write --root "$2" --out "$3" "${@:4}" \
        --shard "${SLURM_ARRAY_TASK_ID:-0}/${SLURM_ARRAY_TASK_COUNT:-1}"
    ;;
  fit)
    srun .venv/bin/python tools/roar_shards.py fit --root "$2" --out "$3" "${@:4}" --strategy ddp \
        --devices "${SLURM_NTASKS_PER_NODE:-1}" --num_nodes "${SLURM_JOB_NUM_NODES:-1}"
    ;;
  *)
    srun .venv/bin/python evaluate.py roar --config "$1" \
        --shard "${SLURM_ARRAY_TASK_ID}/${SLURM_ARRAY_TASK_COUNT}"
    ;;
esac
