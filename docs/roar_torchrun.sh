#!/bin/bash
# ROAR on several GPUs and machines with torchrun (docs/roar.md, "ImageNet-scale: modified datasets
# as shards"). Two modes:
#
# cell (default): one ROAR cell of an image folder through written shards. The modified splits are
#   written once (NPROC writer processes per node, shard i/k each; a rerun skips finished shards),
#   then one model is trained by torchrun's NPROC × NNODES processes under Lightning DDP, each rank
#   reading its part of every epoch from the shards (tools/roar_shards.py):
#
#     NPROC=4 bash docs/roar_torchrun.sh cell <data> <shards> --estimator random --fraction 0.5 \
#         --image_size 224 --max_epochs 90 --result cell.json
#     # two machines sharing <shards>: on each, with its NODE_RANK (0 on the MASTER_ADDR machine)
#     NNODES=2 NODE_RANK=0 MASTER_ADDR=host0 NPROC=4 bash docs/roar_torchrun.sh cell <data> <shards> ...
#
# grid: a ROAR grid config (evaluate.py roar) split over NNODES machines, node r running cells
#   r, r + NNODES, ... (--shard r/NNODES) as its own process group, each cell's fits data-parallel
#   over the node's NPROC GPUs (the config's trainer needs devices: NPROC and strategy: ddp; MASTER_ADDR
#   is not used); the node that finds every cell done writes the report:
#
#     NNODES=4 NODE_RANK=<r> NPROC=8 bash docs/roar_torchrun.sh grid configs/roar/cifar10.yaml
#
# On the CPU (what tests/datamodules/test_roar_shards.py runs): NPROC=2 and --accelerator cpu train two gloo
# processes. PYTHON (default .venv/bin/python) and MASTER_PORT (default 29500) may be set too.
set -euo pipefail
MODE=${1:?usage: bash docs/roar_torchrun.sh cell <data> <shards> [options] | grid <config.yaml>}
shift
PY=${PYTHON:-.venv/bin/python}
NPROC=${NPROC:-1}
NNODES=${NNODES:-1}
NODE_RANK=${NODE_RANK:-0}
RUN=("$PY" -m torch.distributed.run --nnodes="$NNODES" --node_rank="$NODE_RANK" --nproc_per_node="$NPROC"
     --master_addr="${MASTER_ADDR:-127.0.0.1}" --master_port="${MASTER_PORT:-29500}")

case "$MODE" in
  cell)
    DATA=${1:?cell: expected <data> <shards>}
    SHARDS=${2:?cell: expected <data> <shards>}
    shift 2
    WORLD=$((NNODES * NPROC))
    pids=()
    for i in $(seq 0 $((NPROC - 1))); do
      "$PY" tools/roar_shards.py write --root "$DATA" --out "$SHARDS" --shard "$((NODE_RANK * NPROC + i))/$WORLD" \
        "$@" >/dev/null &
      pids+=($!)
    done
    for pid in "${pids[@]}"; do wait "$pid"; done  # a failed writer stops the recipe (set -e)
    # fit writes what other nodes have not finished yet (once per node), then trains
    "${RUN[@]}" tools/roar_shards.py fit --root "$DATA" --out "$SHARDS" --devices "$NPROC" \
      --num_nodes "$NNODES" --strategy ddp "$@"
    ;;
  grid)
    # each node is its own process group (--standalone): its NPROC ranks train its cells together
    CONFIG=${1:?grid: expected <config.yaml>}
    "$PY" -m torch.distributed.run --standalone --nproc_per_node="$NPROC" evaluate.py roar --config "$CONFIG" \
      --shard "$NODE_RANK/$NNODES"
    ;;
  *)
    echo "error: mode $MODE; expected cell or grid" >&2
    exit 2
    ;;
esac
