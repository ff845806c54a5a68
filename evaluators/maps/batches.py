"""How the explainers split their inputs into forward passes and draw each input's samples
(``evaluators.maps``; docs/explainers.md: "Memory bound" and "Random draws").

An explainer sees at most ``max_batch`` rows per forward pass: the inputs go in chunks of
``max(1, max_batch // rows_per_input)``; a sampling method draws input i's samples from a
generator seeded with its own ``seeds[i]`` (:func:`sampled`), so no map depends on the chunking
or on the other inputs of a call.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Callable

import torch

from foundation.errors import InputError


# One pass's activations of a stacked table model, in floats: on a CPU small enough to stay near
# the cache; on a GPU as large as memory allows comfortably (1 GiB of float32), since a GPU is
# fast only on large kernels (a combine ensemble in CPU-sized chunks is 2,500 calls).
# A stacked population's pass on a CPU (``"population_cpu"``) splits its rows into M member
# blocks, each its own small matrix product: 16 MB over Ley et al.'s 20 members is ~1,000 rows a
# member, slower per row than larger blocks (SmoothGrad of 200 rows: 11 passes, 1.2-2× one pass
# of 200,000 rows); 128 MiB keeps it to 2 passes (docs/performance.md).
ACTIVATION_FLOATS_PER_CHUNK = {"cpu": 2**22, "accelerator": 2**28, "population_cpu": 2**25}


def activation_floats(device: torch.device, population: bool = False) -> int:
    """``ACTIVATION_FLOATS_PER_CHUNK`` of ``device``'s kind (``population``: of a stacked population)."""
    if device.type != "cpu":
        return ACTIVATION_FLOATS_PER_CHUNK["accelerator"]
    return ACTIVATION_FLOATS_PER_CHUNK["population_cpu" if population else "cpu"]


def chunks(n: int, size: int):
    """Slices of 0 … n − 1 of at most ``size`` each."""
    for start in range(0, n, size):
        yield slice(start, min(start + size, n))


def inputs_per_chunk(max_batch: int, rows_per_input: int) -> int:
    """Inputs per call such that their ``rows_per_input`` rows each fit ``max_batch``; at least 1."""
    return max(1, max_batch // max(1, rows_per_input))


def per_input_chunk(run: Callable, x: torch.Tensor, target: torch.Tensor, inputs: int) -> torch.Tensor:
    """``run(xs, ts)`` over chunks of ``inputs`` inputs, concatenated."""
    return torch.cat([run(x[s], target[s]) for s in chunks(len(x), inputs)])


def per_input_options(options: dict, x: torch.Tensor) -> tuple[dict, dict]:
    """``options`` split into those that go whole and a ``baselines`` tensor with one reference
    per input, (N, ...) like ``x``, which goes with its inputs; any other (one shared reference
    (1, ...), a scalar) goes whole."""
    baselines = options.get("baselines")
    if isinstance(baselines, torch.Tensor) and baselines.dim() == x.dim() and len(baselines) == len(x) > 1:
        return {k: v for k, v in options.items() if k != "baselines"}, {"baselines": baselines.to(x.device)}
    return options, {}


def chunked(run: Callable, x: torch.Tensor, target: torch.Tensor, inputs: int, options: dict) -> torch.Tensor:
    """``run(xs, ts, **chunk_options)`` over chunks of ``inputs`` inputs, per-input baselines
    (:func:`per_input_options`) going with their inputs."""
    whole, per_input = per_input_options(options, x)
    return torch.cat([run(x[s], target[s], **whole, **{k: v[s] for k, v in per_input.items()})
                      for s in chunks(len(x), inputs)])  # fmt: skip


def gradient(model: Callable, x: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """∂f_{t_r}(x_r)/∂x_r for every row r, ``f`` = ``model`` (N, K) and t = ``target`` (N,): one
    backward pass of Σ_r f_{t_r}(x_r) (rows do not interact in eval mode), the numbers of
    Captum's ``Saliency(abs=False)``, which differentiates every row's output separately
    (``torch.unbind``: seconds of bookkeeping on the 50,000 rows of a SmoothGrad batch)."""
    x = x.detach().requires_grad_(True)
    with torch.enable_grad():
        out = model(x).gather(1, target.view(-1, 1))
        (grad,) = torch.autograd.grad(out.sum(), x)
    return grad


def normal(shape: tuple, stdevs: float, seed: int, device: torch.device) -> torch.Tensor:
    """N(0, stdevs²) noise of ``shape``, drawn as Captum's NoiseTunnel draws it
    (``torch.normal(0, tensor(stdevs).repeat(shape))``) from a generator on ``device`` seeded with ``seed``."""
    generator = torch.Generator(device=device).manual_seed(seed)
    return torch.normal(0, torch.tensor(stdevs, device=device).repeat(shape), generator=generator)


def check_sampling(name: str, samples, stdevs) -> float:
    """``stdevs`` as a float, after checking it and the sample count ``name=samples``."""
    if isinstance(samples, bool) or not isinstance(samples, numbers.Integral) or samples < 1:
        raise InputError(f"option {name}={samples!r}; expected a positive integer (samples per input)")
    if isinstance(stdevs, bool) or not isinstance(stdevs, numbers.Real) or not stdevs >= 0 or math.isinf(stdevs):
        raise InputError(f"option stdevs={stdevs!r}; expected a non-negative number (the noise's std)")
    return float(stdevs)


def sampled(x, target, max_batch, seeds, n, draw, attribute, nt_type: str, per_input: dict) -> torch.Tensor:
    """Captum's NoiseTunnel written out so that each input's draws depend only on its own seed.

    Input i's n samples come from ``draw(seeds[i])``: a tuple of per-sample tensors (n, ...),
    the noise first (the samples are x_i + noise), drawn once per distinct seed of a chunk (a
    population's copies of an input share its seed and its draws); ``per_input`` tensors (one
    row per input, e.g. per-input baselines) are repeated for its n samples. ``attribute(*sample_rows, targets,
    **rows_of_per_input)`` explains at most ``max_batch`` sample rows at a time (input i's
    samples consecutive); then per input the mean over its samples (``smoothgrad``), the mean
    square (``smoothgrad_sq``) or mean square − square mean (``vargrad``), summed and scaled by
    1/n as Captum does."""
    out = []
    for s in chunks(len(x), inputs_per_chunk(max_batch, n)):
        drawn = {seed: draw(seed) for seed in dict.fromkeys(seeds[s])}
        inputs = [(x[i][None] + drawn[seeds[i]][0], *drawn[seeds[i]][1:]) for i in range(s.start, s.stop)]
        samples = [torch.cat(parts) for parts in zip(*inputs)]
        rows_target = target[s].repeat_interleave(n)
        extra = {k: v[s].repeat_interleave(n, dim=0) for k, v in per_input.items()}
        a = torch.cat([attribute(*(t[p] for t in samples), rows_target[p], **{k: v[p] for k, v in extra.items()})
                       for p in chunks(len(rows_target), max_batch)])  # fmt: skip
        a = a.view(s.stop - s.start, n, *x.shape[1:])
        mean = a.sum(1) * (1 / n)
        if nt_type == "smoothgrad":
            out.append(mean)
            continue
        mean_sq = a.pow(2).sum(1) * (1 / n)
        out.append(mean_sq if nt_type == "smoothgrad_sq" else mean_sq - mean * mean)
    return torch.cat(out)


__all__ = ["ACTIVATION_FLOATS_PER_CHUNK", "activation_floats", "check_sampling", "chunked", "chunks", "gradient",
           "inputs_per_chunk", "normal", "per_input_chunk", "per_input_options", "sampled"]  # fmt: skip
