"""Model adapters: every model kind seen as the one function the explainers take, inputs (N, ...)
to class scores (N, K) (``maps.registry``), so that each method has one definition for all
(docs/explainers.md, "Model adapters").

* any classifier: itself (its logits);
* a model with a default class (``explained_class``: ``MLPClassifier``, ``MLPEnsemble``, a table's
  populations and ensembles): its class scores, :class:`ExplainedOutput` (logits or
  probabilities of every class, as its ``explain_output`` says; an ensemble's: its members' mean);
* a ``PopulationMLP`` (stacked members, output (M, N, K)): for a method whose passes keep
  member-major blocks (trait ``members="batch"``), the M members as one model over M·n rows
  (:class:`PopulationAsBatch`), the inputs in chunks of n so that every call holds whole blocks;
  member m's copy of input i gets input i's seed and class, so its map is member m's alone;
  other methods member by member;
* any other population (``Population``: a ``ModulePopulation``, an ``ImagePopulation``): member by
  member, (M, N, ...);
* an ``MLPEnsemble``: for a method linear in the explained function (trait ``linear``), the
  weighted sum of its maps of chunks of members (each input's draws come from its own seed, so
  every chunk sees the same noise); DeepSHAP of its logit (and the ``softmax_rule="rescale"``
  variant) by ``stacked_deepshap.deeplift_shap_of_ensemble``, the same definition computed in
  torch (tested equal to the generic path).
"""

from __future__ import annotations

import torch
from torch import nn

from evaluators.maps.batches import activation_floats, chunks, per_input_options
from evaluators.maps.registry import trait
from evaluators.maps.stacked_deepshap import SOFTMAX_RULES, deeplift_shap_of_ensemble
from foundation.batching import MAX_BATCH, resolve_max_batch
from foundation.devices import model_device
from foundation.errors import InputError
from foundation.modality import ROWS
from lightning_modules.ensembles import MLPEnsemble
from lightning_modules.interface import (
    POSITIVE_CLASS, check_classes, class_scores, default_class, default_targets, eval_mode, output_kind, uniform,
)  # fmt: skip
from lightning_modules.population import PopulationMLP
from lightning_modules.population_base import Population
from lightning_modules.stacked import stacked_forward

LINEAR_BASES = ("saliency", "integrated_gradients", "input_x_gradient")  # a noise tunnel is linear over these


class ExplainedOutput(nn.Module):
    """A model with a default class as the explainers see it: ``forward`` returns its class
    scores (N, K), ``interface.class_scores`` of ``output`` (``"logit"`` or ``"probability"``;
    None: the model's own, ``interface.output_kind``)."""

    def __init__(self, model: nn.Module, output: str | None = None) -> None:
        super().__init__()
        self.model, self.output = model, output or output_kind(model)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return class_scores(self.model, x, self.output)


class PopulationAsBatch(nn.Module):
    """A ``PopulationMLP``'s M members as one model over rows: in a batch of whole member-major
    blocks of ``block`` rows (possibly several such batches stacked, as DeepLift stacks inputs
    and references and Integrated Gradients its steps), row r goes to member (r // block) mod M;
    the output: each row's class scores of ``output`` (``"logit"`` or ``"probability"``), (rows, K)."""

    def __init__(self, population: PopulationMLP, block: int, output: str) -> None:
        super().__init__()
        self.population, self.block, self.output = population, block, output
        self.relus = nn.ModuleList([nn.ReLU() for _ in range(len(population.weights) - 1)])

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        pop, m, block = self.population, self.population.size, self.block
        if len(x) % (m * block):  # a probe of a few rows (hooks.hookable): row by row
            members = (torch.arange(len(x), device=x.device) // block) % m
            weights = [w[members] for w in pop.weights]
            biases = [b[members] for b in pop.biases]
            logits = stacked_forward(weights, biases, x[:, None], activations=list(self.relus))[:, 0]
        else:
            copies = len(x) // (m * block)
            per_member = x.reshape(copies, m, block, -1).transpose(0, 1).reshape(m, copies * block, -1)
            logits = stacked_forward(pop.weights, pop.biases, per_member, activations=list(self.relus))
            logits = logits.reshape(m, copies, block, -1).transpose(0, 1).reshape(len(x), -1)
        return logits.softmax(-1) if self.output == "probability" else logits


def _draws(entry, seeds: list[int], seed: int) -> dict:
    """The random draws an explainer takes (trait ``draws``): a seed per input, one seed, or none."""
    return {"per_input": {"seeds": seeds}, "seed": {"seed": seed}}.get(trait(entry, "draws"), {})


def _scores(model: nn.Module, output: str | None) -> nn.Module:
    return model if output is None else ExplainedOutput(model, output)


def _run(model, x, entry, targets, seeds, seed, max_batch, options) -> torch.Tensor:
    return entry.obj(model, x, targets, max_batch, **_draws(entry, seeds, seed), **options)


def _linear(entry, options: dict) -> bool:
    return trait(entry, "linear") and options.get("base", "saliency") in LINEAR_BASES


def _population_as_batch(pop: PopulationMLP, x, entry, targets, seeds, seed, max_batch, options,
                         output: str) -> torch.Tensor:  # fmt: skip
    """Explanations of every member (M, N, ...) in calls over whole member-major blocks."""
    size, per_input, interleave = pop.size, trait(entry, "rows_per_input")(options), trait(entry, "interleave")(options)
    whole, per = (options, {}) if entry.needs else per_input_options(options, x)  # a background sample goes whole
    out = []
    for s in chunks(len(x), max(1, max_batch // (size * per_input))):
        n = s.stop - s.start
        rows = {k: v[s].repeat(size, *[1] * (v.dim() - 1)) for k, v in per.items()}
        maps = _run(PopulationAsBatch(pop, n * interleave, output), x[s].repeat(size, *[1] * (x.dim() - 1)), entry,
                    targets[s].repeat(size), seeds[s] * size, seed, size * n * per_input, {**whole, **rows})
        out.append(maps.view(size, n, *x.shape[1:]))
    return torch.cat(out, 1)


def _ensemble_in_chunks(ensemble: MLPEnsemble, x, entry, targets, seeds, seed, max_batch, options,
                        output: str) -> torch.Tensor:  # fmt: skip
    """A linear method's maps of an ensemble: Σ over chunks of members of the chunk's maps times its
    share of the members, each chunk's passes holding at most ``activation_floats`` activations."""
    widths = sum(w.shape[1] for w in ensemble.stacked[0])
    step = max(1, activation_floats(x.device) // (max_batch * widths))
    total = torch.zeros_like(x)
    for start in range(0, ensemble.size, step):
        part = ensemble.subset(start, min(start + step, ensemble.size))
        total += _run(ExplainedOutput(part, output), x, entry, targets, seeds, seed, max_batch, options) * (
            part.size / ensemble.size)  # fmt: skip
    return total


def check_softmax_rule(model: nn.Module, rule: str, targets: torch.Tensor) -> None:
    """An ``InputError`` unless ``rule`` is one of ``SOFTMAX_RULES`` and, for ``"rescale"``, the model
    is a binary ``MLPEnsemble`` explaining its positive class's probability."""
    if rule not in SOFTMAX_RULES:
        raise InputError(f"option softmax_rule={rule!r}; expected one of {list(SOFTMAX_RULES)}")
    if rule == "rescale" and not (isinstance(model, MLPEnsemble) and output_kind(model) == "probability"
                                  and model.num_classes == 2 and uniform(targets) == POSITIVE_CLASS):  # fmt: skip
        raise InputError("option softmax_rule='rescale' explains a binary MLPEnsemble's positive-class probability "
                         "(Ley et al.'s reference pipeline); expected explain_output='probability', an MLPEnsemble "
                         "of two classes and its default target")  # fmt: skip


def _explain(model, x, method, entry, targets, seeds, seed, max_batch, options, output, rule) -> torch.Tensor:
    """The maps of ``model`` (already on x's device, in eval mode) by the model kind's adapter;
    ``rule``: DeepSHAP's softmax rule."""
    if isinstance(model, PopulationMLP) and trait(entry, "members") == "batch":
        return _population_as_batch(model, x, entry, targets, seeds, seed, max_batch, options, output)
    if isinstance(model, Population):
        return torch.stack([_explain(model.member(i).to(x.device).eval(), x, method, entry, targets, seeds, seed,
                                     max_batch, options, output, rule) for i in range(model.size)])  # fmt: skip
    if isinstance(model, MLPEnsemble):
        if method == "deepshap" and (output == "logit" or rule == "rescale"):
            target = uniform(targets)
            return deeplift_shap_of_ensemble(model, x, options["baselines"].to(x), rule == "rescale", target)
        if _linear(entry, options):
            return _ensemble_in_chunks(model, x, entry, targets, seeds, seed, max_batch, options, output)
    return _run(_scores(model, output), x, entry, targets, seeds, seed, max_batch, options)


def _widths(model: nn.Module) -> int:
    """The activations one row makes in one member of a table model: the widths of its layers
    (stacked members': one member's; else its ``nn.Linear`` modules' outputs; 0 where it has none)."""
    if isinstance(model, (PopulationMLP, MLPEnsemble)):
        return sum(w.shape[1] for w in (model.weights if isinstance(model, PopulationMLP) else model.stacked[0]))
    return sum(m.out_features for m in model.modules() if isinstance(m, nn.Linear))


def default_rows(model: nn.Module, x: torch.Tensor, max_batch: int | None) -> int:
    """Rows per forward pass: ``max_batch`` where given; for rows (N, d) through a model of
    ``nn.Linear`` layers or stacked members, as many as keep one member's activations of a pass
    within ``batches.activation_floats`` (a table MLP's passes are cheap: 256 rows a pass, the
    images' bound, spent most of SmoothGrad's time in per-pass overhead; a stacked population's
    bound on a CPU is 8× larger, its pass being M small member blocks); an ensemble's, all its
    members' activations, but at least ``MAX_BATCH`` rows (its chunks of members then hold
    fewer members: each chunk draws its inputs' noise again); else ``resolve_max_batch``."""
    widths = _widths(model) if max_batch is None and ROWS.recognises(x) else 0
    if not widths:
        return resolve_max_batch(max_batch, x)
    if isinstance(model, MLPEnsemble):
        return max(MAX_BATCH, activation_floats(x.device) // (widths * model.size))
    return max(1, activation_floats(x.device, isinstance(model, PopulationMLP)) // widths)


def explain_model(model: nn.Module, x: torch.Tensor, method: str, entry, target, seeds: list[int], seed: int,
                  max_batch: int | None, options: dict) -> torch.Tensor:  # fmt: skip
    """Maps of ``model`` for inputs ``x`` by registry ``entry`` (``method``): the model in eval mode
    (restored afterwards) on its own device, where ``x`` and the maps go; the class per input
    ``interface.default_targets`` of ``target``; ``seeds`` input i's seed, ``seed`` the call's."""
    # Captum's DeepLift undoes max-pooling with max_unpool2d, which has no deterministic
    # kernel: under torch.use_deterministic_algorithms(True) (a Trainer with
    # deterministic=True leaves it on) such ops warn during the explanation instead of failing.
    strict = torch.are_deterministic_algorithms_enabled() and not torch.is_deterministic_algorithms_warn_only_enabled()
    with eval_mode(model):
        try:
            if strict:
                torch.use_deterministic_algorithms(True, warn_only=True)
            x = x.detach().to(model_device(model, x))
            rows = default_rows(model, x, max_batch)
            targets = default_targets(model, x, target, rows)
            output = output_kind(model) if default_class(model) is not None else None
            if output is not None and target is not None and len(x):  # a class outside the model's, named
                with torch.no_grad():
                    check_classes(uniform(targets), model(x[:1]).shape[-1])
            options = dict(options)
            rule = options.pop("softmax_rule", "gradient") if method == "deepshap" else "gradient"
            check_softmax_rule(model, rule, targets)
            return _explain(model, x, method, entry, targets, seeds, seed, rows, options, output, rule)
        finally:
            if strict:
                torch.use_deterministic_algorithms(True)


__all__ = ["ExplainedOutput", "PopulationAsBatch", "check_softmax_rule", "explain_model"]
