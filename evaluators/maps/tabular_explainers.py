"""String-keyed explainers of tabular models over Captum: one ``explain_tabular(model, x, method)`` call per method.

Every explanation is of the positive class (label 1): the model's
``explained_output`` (positive-class logit or probability for an ``MLPClassifier``
or a population member, the ensemble's mean positive-class output for an
``MLPEnsemble``). Populations are explained in one batched Captum call: member i's
copy of the inputs is stacked as rows i*N .. i*N+N-1 of one large batch, each row
reaching only its own member, so per-row methods (gradients, ablations, sampling)
give exactly each member's own attributions.

Captum splits some methods into one backward pass per input row, which is slow on
large batches; ``internal_batch_size`` and ``nt_samples_batch_size`` bound the
rows per pass (see Captum's docs).
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from captum import attr
from torch import nn

from datamodules.errors import InputError
from evaluators.maps.seeds import seeded_generators
from lightning_modules.ensembles import MLPEnsemble
from lightning_modules.population import PopulationMLP
from lightning_modules.stacked import stacked_forward


class ExplainedOutput(nn.Module):
    """Wraps a model so that ``forward`` returns its positive-class scalar, shape (N,)."""

    def __init__(self, model: nn.Module) -> None:
        super().__init__()
        self.model = model

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.model.explained_output(x)


class PopulationAsBatch(nn.Module):
    """M members as one model over M*N rows: row r is member r // N's input.

    Captum may evaluate ``copies`` stacked versions of such a batch in one forward
    (DeepLift runs inputs and baselines together): each copy is member-major.
    """

    def __init__(self, population: PopulationMLP, copies: int = 1) -> None:
        super().__init__()
        self.population, self.copies = population, copies
        self.relus = nn.ModuleList([nn.ReLU() for _ in range(len(population.weights) - 1)])

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        pop, c = self.population, self.copies
        per_member = x.reshape(c, pop.size, -1, x.shape[-1]).transpose(0, 1).reshape(pop.size, -1, x.shape[-1])
        logits = stacked_forward(pop.weights, pop.biases, per_member, activations=list(self.relus))
        out = logits.softmax(-1)[..., 1] if pop.hparams.explain_output == "probability" else logits[..., 1]
        return out.reshape(pop.size, c, -1).transpose(0, 1).reshape(-1)


def _baselines(x: torch.Tensor, options: dict) -> torch.Tensor:
    return options.pop("baselines", torch.zeros_like(x[:1]))


def _gradient(cls) -> Callable:
    def run(model: nn.Module, x: torch.Tensor, **options) -> torch.Tensor:
        return cls(model).attribute(x, **options)

    return run


def _saliency(model: nn.Module, x: torch.Tensor) -> torch.Tensor:
    """Saliency (Simonyan et al.), the signed input gradient as Captum's ``Saliency(abs=False)``:
    ∂f(x_r)/∂x_r for every row r, as one backward pass of Σ_r f(x_r) (rows do not
    interact: MLPs, and models in eval mode). Written in torch because speed is the
    reason: Captum's Saliency differentiates every row's output separately
    (``torch.unbind``), which on a SmoothGrad batch of 50,000 rows is seconds of
    per-row bookkeeping around milliseconds of arithmetic."""
    x = x.detach().requires_grad_(True)
    with torch.enable_grad():
        (grad,) = torch.autograd.grad(model(x).sum(), x)
    return grad


def _noise_tunnel(nt_type: str) -> Callable:
    def run(model: nn.Module, x: torch.Tensor, nt_samples: int = 50, stdevs: float = 0.1) -> torch.Tensor:
        """SmoothGrad (Smilkov et al.) and its variants over input gradients at x + ε,
        ε ~ N(0, stdevs²) (Ley et al.: 50 samples, σ = 0.1 on standardised features):
        the mean (``smoothgrad``), the mean square (``smoothgrad_sq``) or the variance
        (``vargrad``) over the samples. The noise is drawn as Captum's ``NoiseTunnel``
        draws it, so both give the same attributions for the same generator state."""
        n, shape = len(x), tuple(x.shape[1:])
        noise = torch.normal(0, torch.tensor(stdevs, device=x.device).repeat((n * nt_samples, *shape)))
        grads = _saliency(model, x.repeat_interleave(nt_samples, dim=0) + noise).view(n, nt_samples, *shape)
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


TABULAR_EXPLAINERS: dict[str, Callable[..., torch.Tensor]] = {
    "saliency": _saliency,
    "smoothgrad": _noise_tunnel("smoothgrad"),
    "smoothgrad_sq": _noise_tunnel("smoothgrad_sq"),
    "vargrad": _noise_tunnel("vargrad"),
    "deepshap": _deepshap,
    "gradient_shap": _with_baselines(attr.GradientShap, n_samples=50, stdevs=0.0),
    "integrated_gradients": _with_baselines(attr.IntegratedGradients, n_steps=50),
    "input_x_gradient": _gradient(attr.InputXGradient),
    "guided_backprop": _gradient(attr.GuidedBackprop),
    "deeplift": _with_baselines(attr.DeepLift),
    "lime": _perturbation(attr.Lime, n_samples=200),
    "kernel_shap": _perturbation(attr.KernelShap, n_samples=200),
    "feature_ablation": _perturbation(attr.FeatureAblation),
    "shapley_value_sampling": _perturbation(attr.ShapleyValueSampling, n_samples=25),
}


# Methods whose Captum implementation keeps each forward batch member-major (each
# row's copies consecutive, as NoiseTunnel's; or whole member-major copies stacked,
# as DeepLift's inputs-then-baselines): their population explanation is one call.
# Lime and KernelShap explain one input row per forward batch and
# GradientShap draws baselines per expanded row, so populations loop over members.
BATCHED = {
    "saliency", "smoothgrad", "smoothgrad_sq", "vargrad", "integrated_gradients", "input_x_gradient",
    "guided_backprop", "deeplift", "deepshap", "feature_ablation", "shapley_value_sampling",
}  # fmt: skip


# Attributions that are linear in the explained function: for an ensemble, which
# explains its members' mean output f = (1/M) Σ f_i, they are the weighted sum over
# any split of the members. SmoothGrad too, provided every part sees the same noisy
# inputs: the noise comes from the generator of the inputs' device, so each chunk
# restarts that generator from the same state. DeepLift(Shap) too: its multipliers act elementwise on each
# member's own activations, and the members' outputs meet only in the final mean.
LINEAR_IN_MODEL = {"saliency", "input_x_gradient", "integrated_gradients", "smoothgrad", "deepshap"}
# One chunk's activations, in floats: on a CPU small enough to stay near the cache; on a
# GPU as large as memory allows comfortably (1 GiB of float32 per chunk), since a GPU is
# fast only on large kernels (a combine ensemble in CPU-sized chunks is 2,500 calls).
ACTIVATION_FLOATS_PER_CHUNK = {"cpu": 2**22, "cuda": 2**28}


def _activation_floats(device: torch.device) -> int:
    return ACTIVATION_FLOATS_PER_CHUNK[device.type]


def _rows_per_input(method: str, options: dict) -> int:
    """Rows one input becomes in the explainer's forward passes."""
    if method == "smoothgrad":
        return options.get("nt_samples", 50)
    if method == "integrated_gradients":
        return options.get("n_steps", 50)
    if method == "deepshap":
        return 2 * len(options["baselines"])  # every (input, background row) pair, and its reference
    return 1


def _generator_state(device: torch.device) -> torch.Tensor:
    return torch.cuda.get_rng_state(device) if device.type == "cuda" else torch.get_rng_state()


def _set_generator_state(device: torch.device, state: torch.Tensor) -> None:
    if device.type == "cuda":
        torch.cuda.set_rng_state(state, device)
    else:
        torch.set_rng_state(state)


def _explain_in_chunks(ensemble: MLPEnsemble, x: torch.Tensor, method: str, **options) -> torch.Tensor:
    """Explain an ensemble a chunk of members at a time (forward and backward per
    chunk), so that one chunk's activations stay near the cache: all 2,500 members of a
    ``combine`` ensemble at once stream gigabytes of activations through memory."""
    widths = sum(w.shape[1] for w in ensemble.stacked[0])
    rows = len(x) * _rows_per_input(method, options)
    step = max(1, _activation_floats(x.device) // (rows * widths))
    total = torch.zeros_like(x)
    rng = _generator_state(x.device)
    for start in range(0, ensemble.size, step):
        _set_generator_state(x.device, rng)
        part = ensemble.subset(start, min(start + step, ensemble.size))
        total += TABULAR_EXPLAINERS[method](ExplainedOutput(part), x, **options) * (part.size / ensemble.size)
    return total


DEEPLIFT_EPS = 1e-10  # Captum's DeepLift default: below it a ReLU keeps its plain gradient
SHAP_NONLINEAR_EPS = 1e-6  # shap's DeepExplainer: below it a nonlinearity keeps its plain gradient
# DeepSHAP of a probability: "gradient" differentiates the softmax (Captum through a
# functional softmax); "rescale" applies the rescale rule to it element-wise (shap's
# DeepExplainer on a final nn.Softmax, Ley et al.'s reference pipeline).
SOFTMAX_RULES = ("gradient", "rescale")


def deeplift_shap_of_ensemble(
    ensemble: MLPEnsemble, x: torch.Tensor, baselines: torch.Tensor, softmax_rescale: bool = False
) -> torch.Tensor:
    """DeepLiftShap (Lundberg & Lee's DeepSHAP as Captum's ``DeepLiftShap``) of an
    ensemble's mean positive-class logit, for (N, d) inputs and a (K, d) background.
    With ``softmax_rescale``: of its mean positive-class probability p₁ = softmax(z)₁
    instead, the softmax taken element-wise by the rescale rule as ``shap``'s
    ``DeepExplainer`` takes a model's final ``nn.Softmax`` (Ley et al.'s reference
    pipeline): p₁'s multiplier is Δp₁/Δz₁ on z₁ and none on z₀ (where |Δz₁| < 1e-6, the
    plain derivative ∂p₁/∂z at x_i).

    For every pair (x_i, b_k): DeepLIFT with the rescale rule, i.e. the chain rule with
    each ReLU's derivative replaced by the multiplier Δrelu(z)/Δz between the pair's
    pre-activations (the plain derivative at x_i where |Δz| < 1e-10), times x_i - b_k;
    then the mean over the K background rows. The ensemble's output is its members'
    mean logit, so the multipliers stay per member and the attribution is the mean of
    the members' own. Written in torch because speed is the reason: Captum
    differentiates each of the N·K rows' outputs separately, about 10 s for 100 inputs
    and 100 background rows whatever the model, and the protocol's chunked ``combine``
    ensembles would make thousands of such calls (tested equal to Captum)."""
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
        g = w_part[-1][:, 1:2, :].expand(-1, n * k, -1)  # d logit_1 / d last hidden layer, per member
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


def explain_tabular(model: nn.Module, x: torch.Tensor, method: str, seed: int = 0, **options) -> torch.Tensor:
    """Attributions of the positive-class output.

    ``model``: an ``MLPClassifier`` or ``MLPEnsemble`` -> (N, d); a ``PopulationMLP`` ->
    (M, N, d), all members in one Captum call where the method allows (``BATCHED``).
    Methods that sample (SmoothGrad and its variants, GradientShap, LIME, KernelSHAP,
    Shapley value sampling) draw from the global generators as Captum does; the call runs
    within :func:`seeded_generators` of ``seed`` (a non-negative integer), so the same seed
    gives the same attributions and the caller's generators are left as they were.
    """
    if method not in TABULAR_EXPLAINERS:
        raise InputError(f"unknown explainer {method!r}; expected one of {sorted(TABULAR_EXPLAINERS)}")
    with seeded_generators(seed, x.device):
        return _explain_tabular(model, x, method, **options)


def _explain_tabular(model: nn.Module, x: torch.Tensor, method: str, **options) -> torch.Tensor:
    softmax_rule = options.pop("softmax_rule", "gradient") if method == "deepshap" else "gradient"
    if softmax_rule not in SOFTMAX_RULES:
        raise InputError(f"option softmax_rule={softmax_rule!r}; expected one of {list(SOFTMAX_RULES)}")
    if softmax_rule == "rescale" and not (isinstance(model, MLPEnsemble) and model.explain_output == "probability"):
        raise InputError("option softmax_rule='rescale' explains an MLPEnsemble's probability; expected "
                         "explain_output='probability' and an MLPEnsemble")  # fmt: skip
    if isinstance(model, MLPEnsemble) and method == "deepshap" and (
        model.explain_output == "logit" or softmax_rule == "rescale"
    ):
        rescale = softmax_rule == "rescale"
        return deeplift_shap_of_ensemble(model, x, _background(options.get("baselines")), softmax_rescale=rescale)
    if isinstance(model, MLPEnsemble) and method in LINEAR_IN_MODEL:
        return _explain_in_chunks(model, x, method, **options)
    if not isinstance(model, PopulationMLP):
        return TABULAR_EXPLAINERS[method](ExplainedOutput(model), x, **options)
    if method not in BATCHED:
        return torch.stack([_explain_tabular(model.member(i), x, method, **options) for i in range(model.size)])
    rows = x.repeat(model.size, 1)
    if method == "integrated_gradients":
        # IG stacks its n_steps scaled copies of the batch step after step: one step per
        # forward keeps every forward batch member-major.
        options.setdefault("internal_batch_size", len(rows))
    if "baselines" in options and method != "deepshap":
        options["baselines"] = options["baselines"].repeat(model.size, 1)
    wrapped = PopulationAsBatch(model, copies=2 if method in ("deeplift", "deepshap") else 1)
    return TABULAR_EXPLAINERS[method](wrapped, rows, **options).reshape(model.size, len(x), -1)
