"""Train and test accuracy of a population's members, mean ± std, as Ley et al.'s Table 3
reports them (an ablation aid for docs/table1.md, not part of the protocol).

    python tools/member_accuracy.py --config configs/consistency/german.yaml \\
        --population runs/ablation/refloss/german/german-population/population.pt

Table 3 (``../shared/papers/ley2023-consistent-explanations-ensembling.txt``, lines
304-309) gives each dataset's train accuracy beside its test accuracy. Train accuracy
says how far the members fit their training rows, which the training loss decides (a
cross-entropy of the logits fits German Credit's 800 rows completely; the reference
code's cross-entropy of softmax probabilities does not), so it tells which loss made a
population. The members are the population file's (after its accuracy filter); the
data are the config's, split as the protocol splits them.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # run as a script from the checkout
from evaluators.inputs.config import load_config  # noqa: E402
from evaluators.protocols.consistency import ConsistencyConfig  # noqa: E402
from foundation.errors import InputError, run_entry_point  # noqa: E402
from foundation.files import write_json  # noqa: E402
from lightning_modules.ensembles import PREDICT_BLOCK_FLOATS  # noqa: E402
from lightning_modules.population import PopulationMLP  # noqa: E402
from lightning_modules.stacked import rows_per_pass  # noqa: E402


@torch.no_grad()
def member_accuracies(population: PopulationMLP, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """Accuracy of every member on (x, y), shape (M,), the rows in pieces whose widest
    activations (members x rows x width) hold at most ``PREDICT_BLOCK_FLOATS`` values."""
    rows = rows_per_pass(population.size, max(w.shape[1] for w in population.weights), PREDICT_BLOCK_FLOATS)
    correct = sum((population(xs).argmax(-1) == ys).sum(1) for xs, ys in zip(x.split(rows), y.split(rows)))
    return correct.double() / len(y)


def spread(accuracy: torch.Tensor) -> dict[str, float]:
    """Mean and sample standard deviation over members, in percent (Table 3's form)."""
    return {"mean": round(100 * accuracy.mean().item(), 2), "std": round(100 * accuracy.std().item(), 2)}


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", type=Path, required=True, help="a configs/consistency/<dataset>.yaml")
    parser.add_argument("--population", help="override the config's population file")
    parser.add_argument("--data_dir", default="../shared/data")
    parser.add_argument("--out", type=Path, help="also write the result here as JSON (never overwritten)")
    args = parser.parse_args(argv)
    if args.out is not None and args.out.exists():
        raise InputError(f"--out {args.out}: already exists; choose a new file name")
    cfg = load_config(args.config, ConsistencyConfig, {"data_dir": args.data_dir, "population": args.population})
    population, _, data = cfg.load()
    result = {"config": str(args.config), "population": cfg.population, "members": population.size}
    for split, (x, y) in (("train", data.train_tensors), ("test", data.test_tensors)):
        result[split] = spread(member_accuracies(population, x, y))
    print(f"{population.size} members: train {result['train']['mean']:.2f} ± {result['train']['std']:.2f} %, "
          f"test {result['test']['mean']:.2f} ± {result['test']['std']:.2f} %")  # fmt: skip
    if args.out is not None:
        write_json(args.out, result)
    return result


if __name__ == "__main__":
    run_entry_point(main)
