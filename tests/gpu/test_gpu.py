"""The GPU path, run where a CUDA device exists (skipped elsewhere, CI included).

On a GPU the batched and the single-model products come from different cuBLAS
kernels, so a population member is no longer bit-identical to the model trained
alone; the population issue's bound, max |Δparam| <= 1e-5 after one epoch, holds in
float64 and is asserted there (in float32 Adam amplifies the rounding, see the test).
Explainers, agreement metrics and simplex-QP weights on the GPU are compared with the
same computation on the CPU.

Image models (ResNet-8 and torchvision's ResNet-18 with the small-input stem, random
weights, 32x32 random images) are compared in float64, where the two devices differ only
by the order of their sums (float32 would add cuDNN's TF32 convolutions, about 1e-3
relative): logits to 1e-10, and explain's saliency, integrated gradients, GradCAM
and RISE (masks drawn on the CPU from its seed) to 1e-7 relative. SmoothGrad's noise
comes from a generator on the input's device seeded per image (``foundation.seeds``),
so a GPU run draws other numbers than a CPU run of the same seed: one test draws the GPU
run's noise on the CPU (the same numbers) and checks the maps to 1e-7; another keeps the
GPU's own noise and checks only that the map is as far from a CPU map as two CPU maps of
other seeds are from each other (the same estimator, not the same numbers); a third checks
that the GPU run's noise comes from a GPU generator, leaving the global generators (CPU's
and GPU's) untouched, and that the maps do not depend on the seed's other users or on
``max_batch``.
"""

from __future__ import annotations

import copy

import pytest
import pytorch_lightning as pl
import torch

import evaluate
import train
from datamodules import FinancialDataModule
from evaluators.aggregators.simplex_qp import solve_simplex_qp
from evaluators.maps import EXPLAINERS, explain
from evaluators.metrics.agreement_functional import angular_difference, ley_agreements
from lightning_modules import ImageClassifier, MLPClassifier, PopulationMLP, load_population
from lightning_modules.curve_population import curves_between
from lightning_modules.curves import MLPCurve
from lightning_modules.ensembles import ENSEMBLES

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU"),
]
GPU = torch.device("cuda")


def gpu_trainer(max_epochs: int = 1, precision: str = "32-true") -> pl.Trainer:
    return pl.Trainer(
        max_epochs=max_epochs, accelerator="gpu", devices=1, logger=False, enable_checkpointing=False,
        enable_progress_bar=False, enable_model_summary=False, precision=precision,
    )  # fmt: skip


def max_param_diff(a: torch.nn.Module, b: torch.nn.Module) -> float:
    return max((p.cpu() - q.cpu()).abs().max().item() for p, q in zip(a.parameters(), b.parameters()))


def test_population_member_equals_model_trained_alone_on_gpu():
    """In float64: in float32 Adam's per-coordinate step m / sqrt(v) turns the batched and
    single kernels' rounding (about 1e-7) into parameter differences up to the learning
    rate where a gradient is near 0 (7.6e-4 after one German epoch on an H100)."""
    seeds = [0, 7, 42]
    population = PopulationMLP(in_features=61, seeds=seeds, lr=4e-3)
    trainer = gpu_trainer(precision="64-true")
    trainer.fit(population, datamodule=FinancialDataModule(dataset="german", batch_size=32))
    assert trainer.strategy.root_device.type == "cuda"
    for i, seed in enumerate(seeds):
        alone = MLPClassifier(in_features=61, seed=seed, lr=4e-3)
        data = FinancialDataModule(dataset="german", batch_size=32)
        gpu_trainer(precision="64-true").fit(alone, datamodule=data)
        assert max_param_diff(population.member(i), alone) <= 1e-5


def test_curves_trained_in_a_stack_on_gpu_equal_curves_alone():
    population = PopulationMLP(in_features=61, seeds=[3, 5, 8, 13], lr=4e-3)
    pairs = [(0, 1), (2, 3)]
    stacked = curves_between(population, pairs, mode="trained")
    gpu_trainer().fit(stacked, datamodule=FinancialDataModule(dataset="german"))
    for i, (a, b) in enumerate(pairs):
        alone = MLPCurve(
            in_features=61, mode="trained", start_seed=population.seeds[a], end_seed=population.seeds[b],
            lr=4e-3, t_seed=population.seeds[a],
        )  # fmt: skip
        gpu_trainer().fit(alone, datamodule=FinancialDataModule(dataset="german"))
        ours = dict(stacked.curve(i).named_parameters())
        for name, p in alone.named_parameters():
            assert (ours[name].cpu() - p.cpu()).abs().max().item() <= 1e-5, name


def test_population_run_from_train_py_on_gpu_matches_the_cpu_run(tmp_path):
    def run(accelerator: str) -> dict:
        return train.main([
            "--config", "configs/population.yaml", "--model.size", "8", "--trainer.max_epochs", "3",
            "--trainer.accelerator", accelerator, "--trainer.enable_progress_bar", "false", "--log_to", "csv",
            "--output_dir", str(tmp_path / accelerator),
        ])  # fmt: skip

    on_gpu, on_cpu = run("gpu"), run("cpu")
    gpu_pop, gpu_file = load_population(on_gpu["population"])
    cpu_pop, cpu_file = load_population(on_cpu["population"])
    assert max_param_diff(gpu_pop, cpu_pop) <= 1e-4
    # 200 test rows: a float-level difference may move a row across the boundary, not more
    for a, b in zip(gpu_file["member_test_acc"], cpu_file["member_test_acc"]):
        assert abs(a - b) <= 0.005 + 1e-9


@pytest.fixture(scope="module")
def ensembles():
    torch.manual_seed(0)
    population = PopulationMLP(in_features=6, seeds=[0, 1, 2, 3])
    with torch.no_grad():
        for p in population.parameters():
            p.add_(0.2 * torch.randn_like(p))
    curves = [MLPCurve(in_features=6, start_seed=s, end_seed=s + 1) for s in (0, 10)]
    return {
        "average": ENSEMBLES["average"](population, [0, 1, 2]),
        "perturb": ENSEMBLES["perturb"](population, [0, 1], n_perturb=5, sigma=0.2),
        "combine": ENSEMBLES["combine"](population, [0, 1, 2, 3], curves, n_t=3, n_perturb=4, sigma=0.1),
    }


@pytest.mark.parametrize("kind", ["average", "perturb", "combine"])
@pytest.mark.parametrize(
    "method", ["saliency", "input_x_gradient", "integrated_gradients", "deeplift", "deepshap", "feature_ablation"]
)
def test_explanations_on_gpu_equal_cpu(ensembles, kind, method):
    ensemble = ensembles[kind]
    x, background = torch.randn(40, 6), torch.randn(8, 6)
    options = {"baselines": background} if method == "deepshap" else {}
    on_cpu = explain(ensemble, x, method, **options)
    gpu_options = {k: v.to(GPU) for k, v in options.items()}
    on_gpu = explain(copy.deepcopy(ensemble).to(GPU), x.to(GPU), method, **gpu_options)
    assert on_gpu.device.type == "cuda"
    torch.testing.assert_close(on_gpu.cpu(), on_cpu, rtol=1e-4, atol=1e-5)


def test_agreement_metrics_on_gpu_equal_cpu():
    generator = torch.Generator().manual_seed(0)
    e = torch.randn(6, 200, 12, generator=generator)
    on_cpu, on_gpu = ley_agreements(e, 4), ley_agreements(e.to(GPU), 4)
    for name, value in on_cpu.items():
        assert on_gpu[name].device.type == "cuda"
        torch.testing.assert_close(on_gpu[name].cpu(), value, msg=name)
    torch.testing.assert_close(angular_difference(e.to(GPU)).cpu(), angular_difference(e), rtol=1e-4, atol=1e-5)


def test_consistency_protocol_on_gpu_matches_cpu(tmp_path):
    population = train.main([
        "--config", "configs/population.yaml", "--model.size", "8", "--trainer.max_epochs", "3",
        "--trainer.accelerator", "cpu", "--trainer.enable_progress_bar", "false", "--log_to", "none",
        "--output_dir", str(tmp_path / "pop"),
    ])["population"]  # fmt: skip
    config = tmp_path / "consistency.yaml"
    config.write_text(
        f"population: {population}\nstrategies: [single, average, connect]\nmethods: [saliency, deepshap]\n"
        f"n_models: [4]\nn_sets: 2\nn_points: 40\nn_points_deepshap: 20\nn_background: 5\nn_t: 3\n"
    )
    rows = {}
    for device in ("cuda", "cpu"):
        summary = evaluate.main(["consistency", "--config", str(config), "--set", f"device={device}",
                                 "--set", f"output_dir={tmp_path / device}"])  # fmt: skip
        rows[device] = {(r["strategy"], r["method"], r["metric"]): r for r in summary["rows"]}
    for key, on_cpu in rows["cpu"].items():
        on_gpu = rows["cuda"][key]
        # a top-5 rank may flip on a float-level difference: 0.005 per flip on 40 points; Watson's C
        # (one pair of sets): a held-out row of DeepSHAP's 20 flipping its side moves C by 2 x 1/20
        tolerance = 0.1 + 1e-9 if key[2] == "watson_c" else 0.02
        assert on_gpu["mean"] == pytest.approx(on_cpu["mean"], abs=tolerance), key
        assert on_gpu["test_acc"] == pytest.approx(on_cpu["test_acc"], abs=0.005 + 1e-9), key


def test_smoothgrad_of_an_ensemble_in_chunks_on_gpu_sees_one_noise(ensembles, monkeypatch):
    """Every chunk draws each input's noise from the input's own seed on the GPU: chunked equals
    one pass, and the caller's generators are left as they were."""
    from evaluators.maps import batches
    from evaluators.maps.adapters import ExplainedOutput
    from foundation.seeds import input_seeds

    ensemble, x = copy.deepcopy(ensembles["combine"]).to(GPU), torch.randn(20, 6, device=GPU)
    whole = EXPLAINERS["smoothgrad"].obj(ExplainedOutput(ensemble), x, torch.ones(20, dtype=torch.long, device=GPU),
                                         256, seeds=input_seeds(5, None, 20))  # fmt: skip
    monkeypatch.setitem(batches.ACTIVATION_FLOATS_PER_CHUNK, "accelerator", 1)  # one member per chunk
    cpu_state, gpu_state = torch.get_rng_state(), torch.cuda.get_rng_state()
    torch.testing.assert_close(explain(ensemble, x, "smoothgrad", seed=5), whole, rtol=1e-4, atol=1e-6)
    assert torch.equal(torch.get_rng_state(), cpu_state) and torch.equal(torch.cuda.get_rng_state(), gpu_state)


def test_simplex_qp_weights_on_gpu_reach_the_cpu_objective():
    """Batched active-set steps on the GPU: the same objectives as on the CPU (the weights
    themselves may differ where the minimiser is not unique, as with the duplicated maps)."""
    a = torch.randn(2000, 12, 6, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    gamma = a @ a.transpose(1, 2)
    gamma[::4, :, 1] = gamma[::4, :, 0]
    gamma[::4, 1, :] = gamma[::4, 0, :]
    on_gpu = solve_simplex_qp(gamma.to(GPU))
    assert on_gpu.device.type == "cuda" and on_gpu.dtype == torch.float64
    objective = [torch.einsum("bi,bij,bj->b", w.cpu(), gamma, w.cpu()) for w in (on_gpu, solve_simplex_qp(gamma))]
    floor = 1e-12 * gamma.diagonal(dim1=1, dim2=2).amax(1)
    assert ((objective[0] - objective[1]).abs() <= 1e-6 * objective[1] + floor).all()


def test_fidelity_metrics_on_gpu_equal_cpu():
    """Faithfulness correlation, ROAD (the conjugate-gradient imputation included) and
    relative stability of a float64 CNN on the GPU equal the CPU's: their random draws
    are made on the CPU, so only the kernels' rounding differs."""
    from torch import nn

    from evaluators.metrics.faithfulness_correlation import faithfulness_correlation
    from evaluators.metrics.infidelity import subset_perturbations
    from evaluators.metrics.relative_stability import relative_stability
    from evaluators.metrics.road import linear_imputation, road_curves

    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(3, 4, 3, padding=1), nn.Softplus(), nn.Flatten(),
                          nn.Linear(4 * 16 * 16, 5)).double().eval()  # fmt: skip
    gen = torch.Generator().manual_seed(1)
    x = torch.randn(6, 3, 16, 16, generator=gen, dtype=torch.float64)
    maps = torch.randn(6, 16, 16, generator=gen, dtype=torch.float64)
    removed = torch.rand(6, 16, 16, generator=gen) < 0.8
    removed[:, 0, 0] = False
    torch.testing.assert_close(linear_imputation(x.to(GPU), removed.to(GPU)).cpu(), linear_imputation(x, removed),
                               rtol=0, atol=1e-9)  # fmt: skip

    def saliency(net):
        def explain_fn(v, t):
            v = v.detach().clone().requires_grad_(True)
            return torch.autograd.grad(net(v).gather(1, t[:, None]).sum(), v)[0].sum(1)
        return explain_fn

    results = {}
    for device in ("cpu", GPU):
        net = copy.deepcopy(model).to(device)
        zeros = torch.zeros(3, 16, 16, dtype=torch.float64)
        samples = subset_perturbations(net, x, n_samples=20, units="pixels", baseline=zeros)
        fcor = faithfulness_correlation(maps.to(device), samples)
        _, morf = road_curves(net, x, maps, "morf", output="logit", difference=True)
        _, lerf = road_curves(net, x, maps, "lerf", output="accuracy")
        stability = relative_stability(net, x, maps, saliency(net), n_samples=8, layer="3")
        assert fcor.device.type == morf.device.type == stability["ris"].device.type == torch.device(device).type
        results[str(device)] = [fcor, morf, lerf] + [stability[k] for k in ("ris", "rrs", "ros")]
        results[f"{device} kept"] = stability["kept"].cpu()
    assert torch.equal(results["cuda kept"], results["cpu kept"])
    for on_gpu, on_cpu in zip(results["cuda"], results["cpu"]):
        torch.testing.assert_close(on_gpu.cpu(), on_cpu, rtol=1e-7, atol=1e-9)


# --- image models ------------------------------------------------------------------------
IMAGE_MODELS = {"resnet8": ("resnet8", False), "resnet18_small_stem": ("resnet18", True)}  # arch, small stem


def image_classifier(name: str) -> ImageClassifier:
    """Random weights in float64, BatchNorm statistics from one training-mode pass over random
    images (so that eval-mode BatchNorm is not the identity), in eval mode, on the CPU."""
    arch, small_input_stem = IMAGE_MODELS[name]
    model = ImageClassifier(arch=arch, num_classes=10, small_input_stem=small_input_stem, seed=0).double()
    with torch.no_grad():
        model.train()(random_images(16, seed=1))
    return model.eval()


def random_images(n: int, seed: int = 0) -> torch.Tensor:
    return torch.randn(n, 3, 32, 32, dtype=torch.float64, generator=torch.Generator().manual_seed(seed))


@pytest.fixture(scope="module", params=list(IMAGE_MODELS))
def image_model(request) -> ImageClassifier:
    return image_classifier(request.param)


def assert_maps_close(on_gpu: torch.Tensor, on_cpu: torch.Tensor) -> None:
    """float64 maps equal to 1e-7 relative, or 1e-9 of the map's largest value."""
    assert on_gpu.device.type == GPU.type and on_gpu.dtype == torch.float64
    assert on_cpu.abs().max() > 0
    torch.testing.assert_close(on_gpu.cpu(), on_cpu, rtol=1e-7, atol=1e-9 * on_cpu.abs().max().item())


def test_image_classifier_logits_on_gpu_equal_cpu_in_float64(image_model):
    x = random_images(8)
    for mode in ("eval", "train"):  # running BatchNorm statistics, then the batch's own
        on_cpu, on_gpu = copy.deepcopy(image_model), copy.deepcopy(image_model).to(GPU)
        with torch.no_grad():
            cpu = on_cpu.train(mode == "train")(x)
            gpu = on_gpu.train(mode == "train")(x.to(GPU))
        assert gpu.device.type == GPU.type and gpu.dtype == torch.float64
        torch.testing.assert_close(gpu.cpu(), cpu, rtol=1e-10, atol=1e-10, msg=mode)


@pytest.mark.parametrize(
    ("method", "options"),
    [("saliency", {}), ("integrated_gradients", {"n_steps": 16}), ("gradcam", {}),
     ("rise", {"n_masks": 64, "s": 4, "seed": 0})],
)  # fmt: skip
def test_image_explanations_on_gpu_equal_cpu_in_float64(image_model, method, options):
    x, target = random_images(2), torch.tensor([3, 7])
    on_cpu = explain(image_model, x, method, target=target, **options)
    on_gpu = explain(copy.deepcopy(image_model).to(GPU), x.to(GPU), method, target=target.to(GPU), **options)
    assert_maps_close(on_gpu, on_cpu)


def test_image_smoothgrad_on_gpu_with_the_cpu_noise_equals_cpu(image_model, monkeypatch):
    """The GPU run's noise drawn from the CPU generator (``torch.normal`` patched to draw on
    the CPU and move the draw to the device): the same numbers as the CPU run's, so this
    checks the GPU's computation of SmoothGrad, not its noise."""
    import evaluators.maps.gradients as gradients

    x, target = random_images(2), torch.tensor([3, 7])
    on_cpu = explain(image_model, x, "smoothgrad", target=target, nt_samples=8, seed=5)
    normal = gradients.normal
    monkeypatch.setattr(gradients, "normal", lambda shape, stdevs, seed, device: normal(
        shape, stdevs, seed, torch.device("cpu")).to(device))
    on_gpu = explain(copy.deepcopy(image_model).to(GPU), x.to(GPU), "smoothgrad", target=target.to(GPU),
                     nt_samples=8, seed=5)  # fmt: skip
    assert_maps_close(on_gpu, on_cpu)


def test_image_smoothgrad_with_the_gpu_noise_agrees_in_distribution():
    """The GPU's own noise: the map is another SmoothGrad sample, as far from a CPU map
    (seed 0) as another CPU map (seed 2) is, within 0.8-1.25 times (the ratio for CPU seeds
    spans 0.98-1.02 over 42 pairs; noise of half or twice the scale gives 1.5 or 2.0, maps
    of other images 8). The numbers themselves are not compared."""
    model, x = image_classifier("resnet8"), random_images(8)
    target = torch.arange(8) % 10

    def smoothgrad(seed: int, device: torch.device) -> torch.Tensor:
        on = copy.deepcopy(model).to(device)
        return explain(on, x.to(device), "smoothgrad", target=target.to(device), nt_samples=32,
                       seed=seed).cpu()  # fmt: skip

    cpu = torch.device("cpu")
    reference, other, on_gpu = smoothgrad(0, cpu), smoothgrad(2, cpu), smoothgrad(1, GPU)
    ratio = ((on_gpu - reference).norm() / (other - reference).norm()).item()
    assert 0.8 < ratio < 1.25, ratio


@pytest.mark.parametrize("method", ["smoothgrad", "vargrad", "gradient_shap"])
def test_image_sampling_on_gpu_draws_from_gpu_generators_of_its_seed(monkeypatch, method):
    model, x = copy.deepcopy(image_classifier("resnet8")).to(GPU), random_images(5).to(GPU)
    options = {"baselines": random_images(4, seed=2).to(GPU), "n_samples": 3} if method == "gradient_shap" else {
        "nt_samples": 3}  # fmt: skip
    devices, normal = [], torch.normal

    def recorded(*args, generator=None, **kwargs):
        devices.append(generator.device.type)
        return normal(*args, generator=generator, **kwargs)

    monkeypatch.setattr(torch, "normal", recorded)
    cpu_state, gpu_state = torch.get_rng_state(), torch.cuda.get_rng_state()
    first = explain(model, x, method, seed=3, **options)
    assert set(devices) == {"cuda"} and len(devices) == 5  # one generator per image
    assert torch.equal(torch.get_rng_state(), cpu_state) and torch.equal(torch.cuda.get_rng_state(), gpu_state)
    torch.manual_seed(1)
    torch.cuda.manual_seed(1)
    torch.testing.assert_close(explain(model, x, method, seed=3, max_batch=2, **options), first,
                               rtol=1e-6, atol=1e-9 * first.abs().max().item())  # fmt: skip
    part = explain(model, x[3:], method, seed=3, index=torch.tensor([3, 4]), **options)
    torch.testing.assert_close(part, first[3:], rtol=1e-6, atol=1e-9 * first.abs().max().item())
