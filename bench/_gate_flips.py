"""How ``image_explainers.py``'s check fares where other kernels flip ReLU gates; not a bench.

    python bench/_gate_flips.py [--perturb ulp] [--n_224 4]
    ATEN_CPU_CAPABILITY=default python bench/_gate_flips.py     # torch's scalar kernels

The bench's (i) and (ii) for its deterministic methods on its inputs (a random ResNet-8 on
64 CIFAR-10 test images, ``STEPS`` IG steps; a random ResNet-18 on ``--n_224`` images at 224 x
224, ``STEPS_224``), with (i) run on the images themselves or, with ``--perturb ulp``, on the
images moved by one unit in the last place (``nextafter``): a last-bit difference at the
input, as other convolution kernels make one inside the network. Per method, one line: the
old check's count (``assert_close(rtol=1e-3, atol=1e-5)``, the check that stopped the bench on
an AVX-512/AMX machine) and whether it passed, and the bench's ``check`` (the share of
values outside its float32 tolerance, the float64 difference) and whether it passed.
"""

from __future__ import annotations

import argparse
import os
import sys
import warnings
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from bench import image_explainers as bench  # noqa: E402
from foundation.batching import resolve_max_batch  # noqa: E402
from lightning_modules.image_classifier import create_image_model  # noqa: E402
from lightning_modules.interface import default_classes  # noqa: E402


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--perturb", choices=["none", "ulp"], default="none", help="(i)'s input: as is or 1 ulp away")
    parser.add_argument("--n_224", type=int, default=4, help="images at 224 x 224 (the bench's 16 take long)")
    args = parser.parse_args(argv if argv is not None else sys.argv[1:])
    warnings.filterwarnings("ignore", module="captum")
    print(f"torch {torch.__version__}, CPU capability {torch.backends.cpu.get_cpu_capability()}, "
          f"ATEN_CPU_CAPABILITY={os.environ.get('ATEN_CPU_CAPABILITY', '(unset)')}, threads {torch.get_num_threads()}, "
          f"(i) on {'inputs 1 ulp away' if args.perturb == 'ulp' else 'the inputs'}", flush=True)  # fmt: skip
    torch.manual_seed(0)
    settings = [("cifar10", create_image_model("resnet8", num_classes=10, in_channels=3),
                 bench.images("cifar10-jpeg.tar.gz", bench.N_CIFAR, None, (3, 32, 32))[0], bench.STEPS, bench.N_CHECK),
                ("224", create_image_model("resnet18", num_classes=1000, in_channels=3),
                 bench.images("imagenet-samples-val.tar.gz", args.n_224, 224, (3, 224, 224))[0], bench.STEPS_224,
                 bench.N_CHECK_224)]  # fmt: skip
    for label, model, x, steps, n_check in settings:
        model.eval()
        target, max_batch = default_classes(model, x), resolve_max_batch(None, x)
        x_naive = x.nextafter(torch.tensor(float("inf"))) if args.perturb == "ulp" else x
        for method in bench.METHODS:
            if method not in bench.DETERMINISTIC:
                continue
            naive = bench.one_per_call(model, x_naive, target, method, steps)
            ours = bench.batched(model, x, target, method, steps, max_batch)
            old = int((~torch.isclose(ours, naive, rtol=1e-3, atol=1e-5)).sum())
            try:
                new, verdict = bench.check(model, x, target, method, steps, naive, ours, n_check, label), "passes"
            except AssertionError as error:
                new, verdict = {}, f"FAILS ({error})"
            print(f"{label:8s} {method:22s} old check: {old:5d} of {naive.numel()} values outside, "
                  f"{'FAILS' if old else 'passes'}; new check: share outside {new.get('share_outside', '-')}, "
                  f"float64 {new.get('float64_max_diff_relative', '-')}, {verdict}", flush=True)  # fmt: skip


if __name__ == "__main__":
    main()
