"""The σ ablation of perturbed models (evaluators/protocols/sigma_ablation.py): at σ = 0 every
perturbed model is its member, so the agreement and accuracy are the members' own (saliency of
the positive-class logit by autograd, ``sign_agreement``); the report's CSV and figure; bad
options named."""

from __future__ import annotations

import json

import pytest
import torch

import evaluate
from datamodules import FinancialDataModule
from evaluators.metrics.agreement_functional import sign_agreement
from evaluators.protocols.sigma_ablation import SigmaAblationConfig
from foundation.errors import InputError
from lightning_modules import load_population


def test_sigma_ablation_at_zero_is_the_members_own_agreement(small_population, tmp_path):
    config = tmp_path / "sigma.yaml"
    config.write_text(
        f"population: {small_population}\nn_models: 3\nn_perturb: 4\nsigmas: [0.0, 0.5]\nlayers: [0]\n"
        f"n_points: 50\noutput_dir: {tmp_path / 'sigma'}\ndevice: cpu\n"  # the reference below runs on the CPU
    )
    summary = evaluate.main(["sigma", "--config", str(config)])
    zero = summary["rows"][0]
    population, _ = load_population(small_population)
    members = torch.randperm(population.size, generator=torch.Generator().manual_seed(0))[:3].tolist()
    x, y = FinancialDataModule(dataset="german").test_tensors
    # a perturbed model explains its variants' mean positive-class logit: at sigma = 0, the member's logit
    logit = []
    for i in members:
        xi = x[:50].clone().requires_grad_()
        logit.append(torch.autograd.grad(population.member(i)(xi)[:, 1].sum(), xi)[0])
    assert zero["sa"] == pytest.approx(sign_agreement(torch.stack(logit), 5).mean().item(), abs=1e-6)
    accuracy = [(population.member(i)(x).argmax(-1) == y).float().mean().item() for i in members]
    assert zero["test_acc"] == pytest.approx(sum(accuracy) / 3, abs=1e-6)
    (report,) = list((tmp_path / "sigma").iterdir())
    assert (report / "sigma_ablation.png").stat().st_size > 1000
    csv = (report / "sigma_ablation.csv").read_text().splitlines()
    written = json.loads((report / "sigma_ablation.json").read_text())["rows"]
    assert csv[0] == "layer,sigma,sa,test_acc,test_acc_std" and len(csv) == 1 + len(summary["rows"]) == 3
    for line, row in zip(csv[1:], written):
        layer, sigma, sa, acc, std = line.split(",")
        assert (int(layer), float(sigma)) == (row["layer"], row["sigma"])
        assert float(sa) == pytest.approx(row["sa"], abs=1e-6)
        assert float(acc) == pytest.approx(row["test_acc"], abs=1e-6)


def test_an_unknown_explainer_is_named(small_population):
    with pytest.raises(InputError, match="option method='gradcam': unknown explainer; expected one of"):
        SigmaAblationConfig(population=small_population, method="gradcam")
