#!/bin/bash
# A ROAR grid split over a SLURM job array (docs/roar.md, "Running a grid").
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
#SBATCH --job-name=roar
#SBATCH --gres=gpu:1
#SBATCH --cpus-per-task=8
#SBATCH --mem=32G
#SBATCH --time=12:00:00
#SBATCH --output=logs/roar-%A_%a.out

set -euo pipefail
CONFIG=${1:?usage: sbatch --array=0-<k-1> docs/roar_slurm.sh <config.yaml>}
cd "${SLURM_SUBMIT_DIR}"
srun .venv/bin/python evaluate.py roar --config "${CONFIG}" \
    --shard "${SLURM_ARRAY_TASK_ID}/${SLURM_ARRAY_TASK_COUNT}"
