"""Explainers of Ley et al.'s tabular models, which have a default class (``explained_class``):
the registry's overrides for them (``Explainer.fixed``), chosen by :func:`explain_fixed` per model kind.

Every explanation is of the model's explained output (``lightning_modules.interface.explained_output``)
of a class per input: one class for all (by default a binary model's positive class, label 1)
through a scalar output, or one class each (by default a multi-class model's predicted class)
through Captum's ``target`` on the (N, K) outputs (``interface.class_scores``). Populations are explained in one batched
Captum call: member i's copy of the inputs is rows i*N .. i*N+N-1 of one batch, each row
reaching only its own member (docs/explainers.md: the fast paths and why).
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from captum import attr
from torch import nn

from foundation.errors import InputError
from foundation.seeds import seeded_generators
from lightning_modules.ensembles import MLPEnsemble
from lightning_modules.interface import (
    POSITIVE_CLASS, check_classes, class_scores, explained_output, output_kind, uniform,
)  # fmt: skip
from lightning_modules.population import PopulationMLP
from lightning_modules.stacked import stacked_forward


class ExplainedOutput(nn.Module):
    """Wraps a model so that ``forward`` returns its explained output of class ``target`` (by
    default the positive class), shape (N,), or with ``target=None`` of every class, (N, K), for
    the explainer's ``target`` to pick; ``output``: ``"logit"`` or ``"probability"`` (None: the
    model's own, ``interface.output_kind``)."""

    def __init__(self, model: nn.Module, target: int | None = POSITIVE_CLASS, output: str | None = None) -> None:
        super().__init__()
        self.model, self.target, self.output = model, target, output or output_kind(model)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.target is None:
            return class_scores(self.model, x, self.output)
        return explained_output(self.model, x, self.target, self.output)


class PopulationAsBatch(nn.Module):
    """M members as one model over M*N rows: row r is member r // N's input.

    Captum may evaluate ``copies`` stacked versions of such a batch in one forward
    (DeepLift runs inputs and baselines together): each copy is member-major. The output:
    class ``target``'s, or with ``target=None`` every class's, (rows, K).
    """

    def __init__(self, population: PopulationMLP, target: int | None, copies: int = 1) -> None:
        super().__init__()
        self.population, self.target, self.copies = population, target, copies
        self.relus = nn.ModuleList([nn.ReLU() for _ in range(len(population.weights) - 1)])

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        pop, c = self.population, self.copies
        per_member = x.reshape(c, pop.size, -1, x.shape[-1]).transpose(0, 1).reshape(pop.size, -1, x.shape[-1])
        logits = stacked_forward(pop.weights, pop.biases, per_member, activations=list(self.relus))
        out = logits.softmax(-1) if pop.hparams.explain_output == "probability" else logits
        if self.target is not None:
            return out[..., self.target].reshape(pop.size, c, -1).transpose(0, 1).reshape(-1)
        return out.reshape(pop.size, c, -1, out.shape[-1]).transpose(0, 1).reshape(-1, out.shape[-1])


def _baselines(x: torch.Tensor, options: dict) -> torch.Tensor:
    return options.pop("baselines", torch.zeros_like(x[:1]))


def _gradient(cls) -> Callable:
    def run(model: nn.Module, x: torch.Tensor, **options) -> torch.Tensor:
        return cls(model).attribute(x, **options)

    return run


def _saliency(model: nn.Module, x: torch.Tensor, target: torch.Tensor | None = None) -> torch.Tensor:
    """Saliency (Simonyan et al.), the signed input gradient as Captum's ``Saliency(abs=False)``:
    ∂f(x_r)/∂x_r for every row r, as one backward pass of Σ_r f(x_r) (rows do not
    interact: MLPs, and models in eval mode); in torch for speed (docs/explainers.md).
    ``target`` (N,): the column of a model's (N, K) output each row's f is."""
    x = x.detach().requires_grad_(True)
    with torch.enable_grad():
        out = model(x)
        out = out if target is None else out.gather(1, target.view(-1, 1))
        (grad,) = torch.autograd.grad(out.sum(), x)
    return grad


def _noise_tunnel(nt_type: str) -> Callable:
    def run(model: nn.Module, x: torch.Tensor, nt_samples: int = 50, stdevs: float = 0.1,
            target: torch.Tensor | None = None) -> torch.Tensor:  # fmt: skip
        """SmoothGrad (Smilkov et al.) and its variants over input gradients at x + ε,
        ε ~ N(0, stdevs²) (Ley et al.: 50 samples, σ = 0.1 on standardised features):
        the mean (``smoothgrad``), the mean square (``smoothgrad_sq``) or the variance
        (``vargrad``) over the samples. The noise is drawn as Captum's ``NoiseTunnel``
        draws it, so both give the same attributions for the same generator state."""
        n, shape = len(x), tuple(x.shape[1:])
        noise = torch.normal(0, torch.tensor(stdevs, device=x.device).repeat((n * nt_samples, *shape)))
        target = None if target is None else target.repeat_interleave(nt_samples)
        grads = _saliency(model, x.repeat_interleave(nt_samples, dim=0) + noise, target).view(n, nt_samples, *shape)
        mean = grads.sum(dim=1) * (1 / nt_samples)
        if nt_type == "smoothgrad":
            return mean
        mean_sq = grads.pow(2).sum(dim=1) * (1 / nt_samples)
        return mean_sq if nt_type == "smoothgrad_sq" else mean_sq - mean * mean

    return run


def _with_baselines(cls, **defaults) -> Callable:
    def run(model: nn.Module, x: torch.Tensor, **options) -> torch.Tensor:
        options = {**defaults, **options}
        return cls(model).attribute(x, baselines=_baselines(x, options), **options)

    return run


def _background(baselines: torch.Tensor | None) -> torch.Tensor:
    if baselines is None:
        raise InputError("explainer 'deepshap' needs option baselines: a background sample of inputs (B, d)")
    return baselines


def _deepshap(model: nn.Module, x: torch.Tensor, baselines: torch.Tensor | None = None, **options) -> torch.Tensor:
    """DeepLiftShap over a background sample (Ley et al. use DeepSHAP); ``baselines`` is required."""
    return attr.DeepLiftShap(model).attribute(x, baselines=_background(baselines), **options)


def _perturbation(cls, **defaults) -> Callable:
    def run(model: nn.Module, x: torch.Tensor, **options) -> torch.Tensor:
        return cls(model).attribute(x, **{**defaults, **options})

    return run


# One chunk's activations, in floats: on a CPU small enough to stay near the cache; on a
# GPU as large as memory allows comfortably (1 GiB of float32 per chunk), since a GPU is
# fast only on large kernels (a combine ensemble in CPU-sized chunks is 2,500 calls).
ACTIVATION_FLOATS_PER_CHUNK = {"cpu": 2**22, "cuda": 2**28}


def _activation_floats(device: torch.device) -> int:
    return ACTIVATION_FLOATS_PER_CHUNK[device.type]


def _generator_state(device: torch.device) -> torch.Tensor:
    return torch.cuda.get_rng_state(device) if device.type == "cuda" else torch.get_rng_state()


def _set_generator_state(device: torch.device, state: torch.Tensor) -> None:
    if device.type == "cuda":
        torch.cuda.set_rng_state(state, device)
    else:
        torch.set_rng_state(state)


def _explain_in_chunks(ensemble: MLPEnsemble, x: torch.Tensor, spec, one: int | None, **options) -> torch.Tensor:
    """Explain an ensemble a chunk of members at a time (forward and backward per
    chunk), so that one chunk's activations stay near the cache: all 2,500 members of a
    ``combine`` ensemble at once stream gigabytes of activations through memory. A method
    linear in the explained function (``spec.linear``) gives the weighted sum of the chunks'
    attributions; SmoothGrad too, each chunk restarting the generator of the inputs' device
    from the same state, so that every chunk sees the same noisy inputs."""
    widths = sum(w.shape[1] for w in ensemble.stacked[0])
    rows = len(x) * spec.rows_per_input(options)
    step = max(1, _activation_floats(x.device) // (rows * widths))
    total = torch.zeros_like(x)
    rng = _generator_state(x.device)
    for start in range(0, ensemble.size, step):
        _set_generator_state(x.device, rng)
        part = ensemble.subset(start, min(start + step, ensemble.size))
        total += spec.fixed(ExplainedOutput(part, one), x, **options) * (part.size / ensemble.size)
    return total


DEEPLIFT_EPS = 1e-10  # Captum's DeepLift default: below it a ReLU keeps its plain gradient
SHAP_NONLINEAR_EPS = 1e-6  # shap's DeepExplainer: below it a nonlinearity keeps its plain gradient
# DeepSHAP of a probability: "gradient" differentiates the softmax (Captum through a
# functional softmax); "rescale" applies the rescale rule to it element-wise (shap's
# DeepExplainer on a final nn.Softmax, Ley et al.'s reference pipeline).
SOFTMAX_RULES = ("gradient", "rescale")


def deeplift_shap_of_ensemble(
    ensemble: MLPEnsemble, x: torch.Tensor, baselines: torch.Tensor, softmax_rescale: bool = False,
    target: int | torch.Tensor = POSITIVE_CLASS,
) -> torch.Tensor:
    """DeepLiftShap (Lundberg & Lee's DeepSHAP as Captum's ``DeepLiftShap``) of an
    ensemble's mean logit of class ``target`` (an int, or one per input: (N,)), for (N, d)
    inputs and a (K, d) background (``softmax_rescale``: of a binary ensemble's positive class).
    With ``softmax_rescale``: of its mean positive-class probability p₁ = softmax(z)₁
    instead, the softmax taken element-wise by the rescale rule as ``shap``'s
    ``DeepExplainer`` takes a model's final ``nn.Softmax`` (Ley et al.'s reference
    pipeline): p₁'s multiplier is Δp₁/Δz₁ on z₁ and none on z₀ (where |Δz₁| < 1e-6, the
    plain derivative ∂p₁/∂z at x_i).

    For every pair (x_i, b_k): DeepLIFT with the rescale rule, i.e. the chain rule with
    each ReLU's derivative replaced by the multiplier Δrelu(z)/Δz between the pair's
    pre-activations (the plain derivative at x_i where |Δz| < 1e-10), times x_i - b_k;
    then the mean over the K background rows, per member, and the members' mean; in torch
    for speed (docs/explainers.md; tested equal to Captum)."""
    weights, biases = ensemble.stacked
    n, k = len(x), len(baselines)
    pairs = torch.cat([x.repeat_interleave(k, dim=0), baselines.repeat(n, 1)])  # inputs, then references
    widths = sum(w.shape[1] for w in weights)
    step = max(1, 4 * _activation_floats(x.device) // (len(pairs) * widths))
    grad = torch.zeros(n * k, x.shape[1], dtype=x.dtype, device=x.device)
    for start in range(0, ensemble.size, step):
        w_part = [w[start : start + step] for w in weights]
        b_part = [b[start : start + step] for b in biases]
        h, multipliers = pairs.expand(len(w_part[0]), *pairs.shape), []
        for w, b in zip(w_part[:-1], b_part[:-1]):
            z = torch.baddbmm(b, h, w.transpose(1, 2))
            z_in, z_ref = z.split(n * k, dim=1)
            dz = z_in - z_ref
            rescale = (z_in.relu() - z_ref.relu()) / dz
            multipliers.append(torch.where(dz.abs() < DEEPLIFT_EPS, (z_in > 0).to(z.dtype), rescale))
            h = z.relu()
        # d logit_target / d last hidden layer, per member
        if isinstance(target, int):
            g = w_part[-1][:, target : target + 1, :].expand(-1, n * k, -1)
        else:
            g = w_part[-1][:, target.repeat_interleave(k), :]
        if softmax_rescale:
            g = _softmax_rescaled(g, torch.baddbmm(b_part[-1], h, w_part[-1].transpose(1, 2)), w_part[-1], n * k)
        for w, m in zip(reversed(w_part[:-1]), reversed(multipliers)):
            g = torch.bmm(g * m, w)
        grad += g.sum(0)
    return ((pairs[: n * k] - pairs[n * k :]) * grad / ensemble.size).view(n, k, -1).mean(1)


def _softmax_rescaled(g: torch.Tensor, logits: torch.Tensor, w_last: torch.Tensor, pairs: int) -> torch.Tensor:
    """``g`` (d z₁ / d last hidden layer) turned into p₁'s multipliers by the element-wise
    rescale rule, per member and (input, reference) pair; ``logits`` (M, 2·pairs, 2) of
    the inputs, then of the references."""
    z_in, z_ref = logits.split(pairs, dim=1)
    p_in, p_ref = z_in.softmax(-1)[..., 1:], z_ref.softmax(-1)[..., 1:]
    dz = z_in[..., 1:] - z_ref[..., 1:]
    plain = p_in * (1 - p_in) * (w_last[:, 1:2, :] - w_last[:, 0:1, :])  # ∂p₁/∂z · ∂z/∂h at x_i
    return torch.where(dz.abs() < SHAP_NONLINEAR_EPS, plain, g * (p_in - p_ref) / dz)


def model_kind(model: nn.Module) -> str:
    """Which overrides explain ``model``: ``"population"`` (stacked members, one map each),
    ``"ensemble"`` (stacked members, one map of their mean output) or ``"model"``."""
    kinds = ((PopulationMLP, "population"), (MLPEnsemble, "ensemble"))
    return next((kind for cls, kind in kinds if isinstance(model, cls)), "model")


def explain_fixed(model: nn.Module, x: torch.Tensor, method: str, spec, target: torch.Tensor, seed: int = 0,
                  **options) -> torch.Tensor:  # fmt: skip
    """Attributions of the output of class ``target`` (N,) (``interface.default_targets``) by the
    registry's ``spec`` of ``method``: (N, d) for an ``MLPClassifier`` or ``MLPEnsemble``,
    (M, N, d) for a ``PopulationMLP``. Sampling methods draw from the global generators as
    Captum does, within :func:`seeded_generators` of ``seed`` (the caller's generators are left
    as they were)."""
    if len(target):
        with torch.no_grad():
            check_classes(target, model(x[:1]).shape[-1])
    with seeded_generators(seed, x.device):
        return _explain_fixed(model, model_kind(model), x, method, spec, uniform(target), **options)


def _explain_fixed(model: nn.Module, kind: str, x: torch.Tensor, method: str, spec, target: int | torch.Tensor,
                   **options) -> torch.Tensor:  # fmt: skip
    """``explain_fixed`` of a ``kind`` of model; ``target``: an int, or one class per input."""
    softmax_rule = options.pop("softmax_rule", "gradient") if method == "deepshap" else "gradient"
    if softmax_rule not in SOFTMAX_RULES:
        raise InputError(f"option softmax_rule={softmax_rule!r}; expected one of {list(SOFTMAX_RULES)}")
    if softmax_rule == "rescale" and not (kind == "ensemble" and model.explain_output == "probability"
                                          and model.num_classes == 2 and uniform(target) == POSITIVE_CLASS):
        raise InputError("option softmax_rule='rescale' explains a binary MLPEnsemble's positive-class probability "
                         "(Ley et al.'s reference pipeline); expected explain_output='probability', an MLPEnsemble "
                         "of two classes and its default target")  # fmt: skip
    if kind == "ensemble" and method == "deepshap" and (model.explain_output == "logit" or softmax_rule == "rescale"):
        rescale = softmax_rule == "rescale"
        return deeplift_shap_of_ensemble(model, x, _background(options.get("baselines")), rescale, target)
    one = target if isinstance(target, int) else None  # one class for all: a scalar output
    if one is None:
        options["target"] = target if kind != "population" or not spec.batched else target.repeat(model.size)
    if kind == "ensemble" and spec.linear:
        return _explain_in_chunks(model, x, spec, one, **options)
    if kind != "population":
        return spec.fixed(ExplainedOutput(model, one), x, **options)
    if not spec.batched:
        options.pop("target", None)
        return torch.stack([_explain_fixed(model.member(i), "model", x, method, spec, target, **options)
                            for i in range(model.size)])  # fmt: skip
    rows = x.repeat(model.size, 1)
    if method == "integrated_gradients":
        # IG stacks its n_steps scaled copies of the batch step after step: one step per
        # forward keeps every forward batch member-major.
        options.setdefault("internal_batch_size", len(rows))
    if "baselines" in options and method != "deepshap":
        options["baselines"] = options["baselines"].repeat(model.size, 1)
    wrapped = PopulationAsBatch(model, one, copies=2 if method in ("deeplift", "deepshap") else 1)
    return spec.fixed(wrapped, rows, **options).reshape(model.size, len(x), -1)
