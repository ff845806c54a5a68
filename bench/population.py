"""Training K seed-varied MLPs: one by one under Lightning, one by one in plain PyTorch,
and as one PopulationMLP (issue: underspecification sets at scale).

    python bench/population.py                       # Adult (batch 128) and German (batch 32), K = 200
    python bench/population.py --naive_members 200   # (a) and (b) on all 200 seeds too (about 30 min)
    python bench/population.py --portable            # the same in portable mode (portable.py), for its cost

(a) what a user would do: ``Trainer.fit`` on ``MLPClassifier`` per seed;
(b) a plain PyTorch loop per seed (same model, batches and optimiser);
(a) and (b) train the first ``K_NAIVE`` (20) seeds only: each model is trained on its own, so
their member-epochs/s do not depend on how many are trained (the first call's set-up is spread
over 20), and the bench takes minutes instead of the half hour of 200 seeds in every way;
(c) ``fit_population``: the members in cache-sized chunks, each a ``PopulationMLP``
    under its own ``Trainer``, test pass and chunk files included (median of 3 runs).
Prints member-epochs/s, the ratios c/a and c/b, the effective GFLOP/s of (c) next
to a same-run sgemm peak, peak memory, and how many members end with identical test
accuracies in the three ways (over the first ``K_NAIVE`` seeds). The last line is one JSON object.

Check (``check``): at least ``MIN_IDENTICAL`` (half) of the members end with the same test
accuracy in (a), (b) and (c). Members are bit-exact on the CPUs measured (200 of 200 on
both settings), but that rests on the population's products rounding as ``nn.Linear``'s
do, which another CPU's kernels need not; there the rounding grows through training (with
one product reordered, 40 of 200 Adult members ended with another accuracy after two
epochs, docs/performance.md), so equality of all is not asked. A member trained from another seed
matches its partner's accuracy only by chance (``identical_other_seeds``: member i of (c)
against model i + 1 of (a): 8 and 17 of 200 on Adult and German, measured), so seeds
shifted or members mixed up fail.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
import portable  # noqa: E402

PORTABLE = portable.enable_if_asked(sys.argv)  # before torch is imported, as train.py does

import pytorch_lightning as pl  # noqa: E402
import torch  # noqa: E402
from torch.nn import functional as F  # noqa: E402

from datamodules import FinancialDataModule  # noqa: E402
from foundation.files import json_text  # noqa: E402
from lightning_modules import MLPClassifier, PopulationMLP  # noqa: E402
from lightning_modules.population_fit import auto_chunk_size, fit_population  # noqa: E402

K = 200
K_NAIVE = 20
MIN_IDENTICAL = 0.5
SETTINGS = [  # (dataset, batch size, learning rate, epochs): the paper's batch sizes and rates
    ("adult", 128, 4e-3, 2),
    ("german", 32, 4e-3, 4),
]


def lean_trainer(epochs: int, **kwargs) -> pl.Trainer:
    return pl.Trainer(
        max_epochs=epochs, logger=False, enable_checkpointing=False, enable_progress_bar=False,
        enable_model_summary=False, accelerator="cpu", **kwargs,
    )  # fmt: skip


def sgemm_peak_gflops() -> float:
    best = 0.0
    for n in (2048, 3072):
        a, b = torch.randn(n, n), torch.randn(n, n)
        a @ b
        for _ in range(3):
            start = time.perf_counter()
            a @ b
            best = max(best, 2 * n**3 / (time.perf_counter() - start) / 1e9)
    return best


def reset_peak_rss() -> None:
    Path("/proc/self/clear_refs").write_text("5")  # Linux: resets VmHWM


def peak_rss_mib() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def accuracy(model: torch.nn.Module, x: torch.Tensor, y: torch.Tensor) -> float:
    with torch.no_grad():
        return (model(x).argmax(-1) == y).float().mean().item()


def useful_flops_per_row(widths: list[int]) -> int:
    """Forward (2·in·out per layer) + weight gradients (same) + input gradients of
    layers 2..L (layer 1's input needs none); biases, ReLU, loss and Adam not counted."""
    products = [a * b for a, b in zip(widths[:-1], widths[1:])]
    return 2 * sum(products) + 2 * sum(products) + 2 * sum(products[1:])


def one_by_one_lightning(dataset, batch, lr, epochs, x_test, y_test, d) -> tuple[float, list[float]]:
    accs, start = [], time.perf_counter()
    for seed in range(K_NAIVE):
        model = MLPClassifier(in_features=d, seed=seed, lr=lr)
        lean_trainer(epochs).fit(model, datamodule=FinancialDataModule(dataset=dataset, batch_size=batch))
        accs.append(accuracy(model, x_test, y_test))
    return time.perf_counter() - start, accs


def one_by_one_plain(data, batch, lr, epochs, x_test, y_test, d) -> tuple[float, list[float]]:
    # The datamodule's own (unshuffled) batches, gathered once: the same tensors (a) and (c)
    # get. Slices x[i : i + batch] would be the same numbers at other memory offsets, and
    # MKL's small-matrix kernels round differently with the alignment (measured on Adult).
    batches = list(data.train_dataloader())
    accs, start = [], time.perf_counter()
    for seed in range(K_NAIVE):
        model = MLPClassifier(in_features=d, seed=seed, lr=lr)
        opt = model.configure_optimizers()
        for _ in range(epochs):
            for xb, yb in batches:
                loss = F.cross_entropy(model(xb), yb)
                opt.zero_grad(set_to_none=True)
                loss.backward()
                opt.step()
        accs.append(accuracy(model, x_test, y_test))
    return time.perf_counter() - start, accs


def as_population(dataset, batch, lr, epochs, d, x_test, y_test) -> tuple[float, list[float], int]:
    data = FinancialDataModule(dataset=dataset, batch_size=batch)
    population = PopulationMLP(in_features=d, size=K, lr=lr)
    chunk = auto_chunk_size(population, batch, torch.device("cpu"))
    with tempfile.TemporaryDirectory() as tmp:
        start = time.perf_counter()
        trained, _ = fit_population(population, data, lambda chunk_dir: lean_trainer(epochs), Path(tmp), chunk)
        seconds = time.perf_counter() - start
    # Scored like (a) and (b): each member as a plain MLPClassifier on the whole test set.
    return seconds, [accuracy(trained.member(i), x_test, y_test) for i in range(K)], chunk


def check(acc_a: list[float], acc_b: list[float], acc_c: list[float], label: str) -> dict:
    """The module docstring's check of the members' test accuracies in the three ways (member i
    of each from seed i); AssertionError where it fails, else the counts."""
    if not len(acc_a) == len(acc_b) == len(acc_c) >= 2:
        raise AssertionError(f"{label}: {len(acc_a)}, {len(acc_b)} and {len(acc_c)} members (expected K >= 2 each)")
    same = sum(a == b == c for a, b, c in zip(acc_a, acc_b, acc_c))
    other = sum(a == c for a, c in zip(acc_a[1:] + acc_a[:1], acc_c))
    if not same >= MIN_IDENTICAL * len(acc_a):
        raise AssertionError(f"{label}: {same} of {len(acc_a)} members end with the same test accuracy in the three "
                             f"ways (expected at least {MIN_IDENTICAL:.0%}; other seeds' models: {other})")  # fmt: skip
    worst = max(max(abs(a - c), abs(b - c)) for a, b, c in zip(acc_a, acc_b, acc_c))
    return {"identical_member_accuracies": f"{same}/{len(acc_a)}", "identical_other_seeds": f"{other}/{len(acc_a)}",
            "max_accuracy_difference": worst}  # fmt: skip


def main(argv: list[str] | None = None) -> None:
    global K_NAIVE
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--naive_members", type=int, default=K_NAIVE,
                        help=f"seeds trained one by one in (a) and (b), 2 to {K} (default {K_NAIVE})")  # fmt: skip
    K_NAIVE = parser.parse_args(argv or []).naive_members
    if not 2 <= K_NAIVE <= K:
        parser.error(f"--naive_members {K_NAIVE}: expected 2 to {K}")
    if PORTABLE:
        portable.configure_torch()
    torch.set_num_threads(torch.get_num_threads())
    peak = sgemm_peak_gflops()
    print(f"sgemm peak: {peak:.1f} GFLOP/s on {torch.get_num_threads()} threads")
    results = {}
    for dataset, batch, lr, epochs in SETTINGS:
        data = FinancialDataModule(dataset=dataset, batch_size=batch)
        d, rows = data.num_features, len(data.train_tensors[1])
        x_test, y_test = data.test_tensors
        member_epochs, naive_member_epochs = K * epochs, K_NAIVE * epochs
        reset_peak_rss()
        t_a, acc_a = one_by_one_lightning(dataset, batch, lr, epochs, x_test, y_test, d)
        mem_a = peak_rss_mib()
        reset_peak_rss()
        t_b, acc_b = one_by_one_plain(data, batch, lr, epochs, x_test, y_test, d)
        mem_b = peak_rss_mib()
        reset_peak_rss()
        runs = [as_population(dataset, batch, lr, epochs, d, x_test, y_test) for _ in range(3)]
        mem_c = peak_rss_mib()
        t_c = statistics.median(r[0] for r in runs)
        acc_c, chunk = runs[0][1], runs[0][2]
        flops = member_epochs * rows * useful_flops_per_row([d, 128, 64, 16, 2])
        checked = check(acc_a, acc_b, acc_c[:K_NAIVE], dataset)
        res = {
            "members": K, "naive_members": K_NAIVE, "epochs": epochs, "rows": rows, "batch": batch, "chunk": chunk,
            "a_member_epochs_per_s": naive_member_epochs / t_a, "b_member_epochs_per_s": naive_member_epochs / t_b,
            "c_member_epochs_per_s": member_epochs / t_c,
            "c_effective_gflops": flops / t_c / 1e9, "c_fraction_of_peak": flops / t_c / 1e9 / peak,
            "peak_rss_mib": {"a": mem_a, "b": mem_b, "c": mem_c},
            **checked,
            "mean_test_acc": {"a": statistics.fmean(acc_a), "b": statistics.fmean(acc_b), "c": statistics.fmean(acc_c)},
        }  # fmt: skip
        res["ratio_c_a"] = res["c_member_epochs_per_s"] / res["a_member_epochs_per_s"]
        res["ratio_c_b"] = res["c_member_epochs_per_s"] / res["b_member_epochs_per_s"]
        results[dataset] = res
        print(
            f"{dataset}: K={K} ((a), (b): {K_NAIVE}) x {epochs} epoch(s), batch {batch}, chunk {chunk}: "
            f"member-epochs/s "
            f"a={res['a_member_epochs_per_s']:.2f} b={res['b_member_epochs_per_s']:.2f} "
            f"c={res['c_member_epochs_per_s']:.1f}; c/a={res['ratio_c_a']:.1f} c/b={res['ratio_c_b']:.1f}; "
            f"c at {res['c_effective_gflops']:.1f} GFLOP/s = {100 * res['c_fraction_of_peak']:.0f} % of peak; "
            f"peak RSS MiB a={mem_a:.0f} b={mem_b:.0f} c={mem_c:.0f}; identical accuracies "
            f"{checked['identical_member_accuracies']} (other seeds {checked['identical_other_seeds']}; max diff "
            f"{checked['max_accuracy_difference']:.4f})"
        )
    print(
        json_text(
            {
                "ratio": min(r["ratio_c_a"] for r in results.values()),
                "ratio_vs_plain": min(r["ratio_c_b"] for r in results.values()),
                "effective_gflops": results["adult"]["c_effective_gflops"],
                "sgemm_peak_gflops": peak,
                "portable": PORTABLE,
                "fraction_of_peak_adult": results["adult"]["c_fraction_of_peak"],
                "settings": results,
            }
        )
    )


if __name__ == "__main__":
    main(sys.argv[1:])
