"""The compute floor of a gradient explainer bench: the model's forward and backward passes
alone on as many rows as the explanations take, in passes of the batched way's size. No way
that computes those rows can be faster on the same device, so (naive time) / floor bounds
any batched way's ratio; on a CPU, where one image's rows already fill the cores, the bound
sits near 1. Shared by ``image_explainers.py`` and ``optimised_aggregation.py``; not a bench."""

from __future__ import annotations

import time

import torch


def rows_per_image(explainers: dict) -> int:
    """Rows of forward and backward passes that one image's maps take: one per gradient, two
    for DeepLift (input and baseline in one pass), ``n_steps`` for IG, ``nt_samples`` for the
    noise tunnels (explainer name -> its options)."""
    return sum(2 if name == "deeplift" else (options or {}).get("n_steps", (options or {}).get("nt_samples", 1))
               for name, options in explainers.items())  # fmt: skip


def seconds_per_row(model, x: torch.Tensor, rows_per_pass: int, passes: int = 2) -> float:
    """The model's forward pass and the input gradient of one logit, per row, timed on
    ``passes`` batches of ``rows_per_pass`` copies of x[0] after one untimed pass."""
    rows = x[:1].expand(rows_per_pass, *x.shape[1:]).clone().requires_grad_(True)
    torch.autograd.grad(model(rows)[:, 0].sum(), rows)
    if x.device.type == "cuda":
        torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(passes):
        torch.autograd.grad(model(rows)[:, 0].sum(), rows)
    if x.device.type == "cuda":
        torch.cuda.synchronize()
    return (time.perf_counter() - start) / (passes * rows_per_pass)
