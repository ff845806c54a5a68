"""The consistency protocol on a tiny image population (4 ResNet-8 runs on a folder of 16x16 PNGs):
end to end, sigma = 0 ensembles equal to their bases, the single-model row against a naive recomputation."""

from __future__ import annotations

import random

import numpy as np
import pytest
import torch

import evaluate
from evaluators.inputs.image_members import load_image_members
from evaluators.maps import explain
from evaluators.maps.image_explainers import reduce_map
from foundation.modality import IMAGES
from evaluators.metrics.agreement_functional import separability
from evaluators.protocols.population_sets import disjoint_sets
from evaluators.protocols.consistency import image_rows_per_pass


@pytest.fixture(scope="module")
def image_population(tmp_path_factory):
    """A folder of 4 train.py runs of ResNet-8 (BatchNorm) on 3 classes of 16x16 images, seeds 0-3."""
    import train
    from tests.datamodules.test_images import make_folder

    tmp = tmp_path_factory.mktemp("image_population")
    make_folder(tmp / "tiny", size=16, n=6)
    for seed in range(4):
        train.main([
            "--config", "configs/images/cifar10_resnet8.yaml", "--data.root", str(tmp / "tiny"),
            "--data.cache_dir", str(tmp / "cache"), "--data.batch_size", "6", "--data.eval_batch_size", "6",
            "--trainer.accelerator", "cpu", "--trainer.max_epochs", "1", "--trainer.limit_train_batches", "2",
            "--model.seed", str(seed), "--model.warmup_epochs", "0", "--log_to", "none",
            "--output_dir", str(tmp / "runs"), "--run_name", f"seed{seed}", "--trainer.enable_progress_bar", "false",
        ])  # fmt: skip
    return tmp / "runs"


def naive_sign_agreement(a: np.ndarray, b: np.ndarray, k: int) -> float:
    """SA@k of two flat maps, by a loop over the top-k pixels (ties to the lower index)."""
    top_a = sorted(range(len(a)), key=lambda f: (-abs(a[f]), f))[:k]
    top_b = set(sorted(range(len(b)), key=lambda f: (-abs(b[f]), f))[:k])
    return sum(1 for f in top_a if f in top_b and np.sign(a[f]) == np.sign(b[f])) / k


@pytest.mark.slow
def test_protocol_on_an_image_population(image_population, tmp_path):
    config = tmp_path / "consistency.yaml"
    config.write_text(
        f"population: {image_population}\nmethods: [saliency]\nn_models: [2]\nn_sets: 2\nn_points: 9\nk: 20\n"
        f"n_t: 2\nn_perturb: 2\nsigma: 0.0\ncurve_epochs: 1\nn_accuracy_images: 9\nn_background: 4\n"
        f"device: cpu\noutput_dir: {tmp_path / 'c'}\n"
    )  # fmt: skip
    summary = evaluate.main(["consistency", "--config", str(config)])
    by = {(r["strategy"], r["metric"]): r for r in summary["rows"]}
    assert {m for _, m in by} == {"sa", "ssa", "cdc_k", "cdc_d", "angular", "watson_c"}
    for metric in ("sa", "ssa", "cdc_d", "angular", "watson_c"):  # sigma = 0: perturbed ensembles are their bases
        assert by[("perturb", metric)]["mean"] == pytest.approx(by[("average", metric)]["mean"], abs=1e-6)
        assert by[("combine", metric)]["mean"] == pytest.approx(by[("connect", metric)]["mean"], abs=1e-6)
    # the single-model rows, recomputed with a naive loop over the pixels and pairs
    members, _, data = load_image_members(image_population, torch.device("cpu"))
    x, y = data.probe(9, "test")
    sets = disjoint_sets(4, 2, 2, 0)
    maps = [reduce_map(explain(members.members[s[0]], x, "saliency", target=y), "sum").flatten(1).double()
            for s in sets]  # fmt: skip
    sa = np.mean([naive_sign_agreement(maps[0][n].numpy(), maps[1][n].numpy(), 20) for n in range(9)])
    assert by[("single", "sa")]["mean"] == pytest.approx(sa, abs=1e-6)
    cos = torch.nn.functional.cosine_similarity(maps[0], maps[1], dim=1)
    assert by[("single", "angular")]["mean"] == pytest.approx(torch.arccos(cos).mean().item(), abs=1e-5)
    c = 1 - 2 * abs(separability(maps[0], maps[1]) - 0.5)
    assert by[("single", "watson_c")]["mean"] == pytest.approx(c, abs=1e-9)
    accuracy = [(members.members[s[0]](x).argmax(-1) == y).double().mean().item() for s in sets]
    assert by[("single", "sa")]["test_acc"] == pytest.approx(np.mean(accuracy), abs=1e-9)
    (report,) = list((tmp_path / "c").iterdir())
    table = (report / "table1.md").read_text()
    assert table.count("\n| ") == 7 and "saliency Watson C" in table and "saliency angle" in table


def test_image_options_are_checked(image_population):
    from evaluators.protocols.consistency import ConsistencyConfig

    with pytest.raises(evaluate.InputError, match=r"unknown explainer\(s\) \['deepshap'\]"):
        ConsistencyConfig(population=str(image_population), methods=["deepshap"])
    with pytest.raises(evaluate.InputError, match="option curve_mode='trained'; image populations take 'fixed'"):
        ConsistencyConfig(population=str(image_population), curve_mode="trained")
    with pytest.raises(evaluate.InputError, match="option map_reduction='mean'; expected one of"):
        ConsistencyConfig(population=str(image_population), map_reduction="mean")
    with pytest.raises(evaluate.InputError, match="1 train.py run"):
        load_image_members(image_population / "tiny" / "seed0", torch.device("cpu"))


def test_more_images_than_a_split_holds_are_refused(image_population, tmp_path):
    """The folder's splits hold 18 images (6 of each of 3 classes)."""
    config = tmp_path / "consistency.yaml"
    config.write_text(f"population: {image_population}\nmethods: [gradient_shap]\nn_models: [1]\nn_sets: 2\n"
                      f"n_points: 9\nn_accuracy_images: 9\nn_background: 4\ndevice: cpu\n"
                      f"output_dir: {tmp_path / 'c'}\n")  # fmt: skip
    for option, split in (("n_points", "test"), ("n_accuracy_images", "test"), ("n_background", "training")):
        with pytest.raises(evaluate.InputError, match=f"option {option}=500: the {split} split has 18 images; "
                                                      "expected at most 18"):
            evaluate.main(["consistency", "--config", str(config), "--set", f"{option}=500"])
    with pytest.raises(evaluate.InputError, match="option n_points_smoothgrad=10: the n_points selection has 9 images"):
        evaluate.main(["consistency", "--config", str(config), "--set", "methods=[smoothgrad]", "--set",
                       "n_points_smoothgrad=10"])  # fmt: skip
    assert not (tmp_path / "c").exists()


def test_an_image_population_file_reads_as_its_members(image_population, tmp_path):
    import yaml

    from evaluators.protocols.consistency import ConsistencyConfig
    from lightning_modules.image_population import ImagePopulation
    from lightning_modules import save_image_population

    runs, payload, data = load_image_members(image_population, torch.device("cpu"))
    data_cfg = yaml.safe_load((runs.folders[0] / "config.yaml").read_text())["data"]
    metadata = {**payload["metadata"], "datamodule": data_cfg}
    path = tmp_path / "population.pt"
    save_image_population(path, ImagePopulation.from_classifiers(runs.members), [0.0] * 4, metadata)
    assert ConsistencyConfig(population=str(path)).modality is IMAGES
    with pytest.raises(evaluate.InputError, match="nothing.pt: file not found; expected a population file"):
        ConsistencyConfig(population=str(tmp_path / "nothing.pt"), device="cpu")  # refused where it is named
    loaded, loaded_payload, loaded_data = load_image_members(path, torch.device("cpu"))
    assert loaded.size == 4 and loaded_payload["metadata"]["max_epochs"] == payload["metadata"]["max_epochs"]
    x = loaded_data.probe(5, "test")[0]
    for member, run in zip(loaded.members, runs.members):
        torch.testing.assert_close(member(x), run(x), rtol=0, atol=0)


def test_image_rows_per_pass_bound_rows_and_pixels_of_all_members():
    for shape, size, rows in [((3, 32, 32), 4, 1024), ((1, 28, 28), 1, 4096), ((3, 224, 224), 4, 20),
                              ((3, 224, 224), 100, 1), ((3, 64, 64), 2, 512)]:  # fmt: skip
        assert image_rows_per_pass(torch.zeros(1, *shape), size) == rows, (shape, size)


def test_watson_c_of_sampling_explainers_is_the_same_in_every_run_and_after_a_resume(image_population, tmp_path,
                                                                                     monkeypatch):  # fmt: skip
    """Expected Gradients and SmoothGrad draw from the protocol's seed alone: two runs from
    different global generator states, and a run stopped after two ensembles and resumed,
    give the same Watson C, SA and angles."""
    from evaluators.protocols import consistency

    def config(name: str):
        path = tmp_path / f"{name}.yaml"
        path.write_text(
            f"population: {image_population}\nstrategies: [single]\nmethods: [gradient_shap, smoothgrad]\n"
            f"n_models: [1]\nn_sets: 4\nn_points: 6\nn_points_smoothgrad: 6\nsmoothgrad_samples: 3\nk: 5\n"
            f"n_background: 4\nn_accuracy_images: 6\ndevice: cpu\noutput_dir: {tmp_path / name}\n"
        )  # fmt: skip
        return str(path)

    def reseed(seed):
        torch.manual_seed(seed)
        np.random.seed(seed)
        random.seed(seed)

    reseed(1)
    first = evaluate.main(["consistency", "--config", config("a")])
    reseed(2)
    assert evaluate.main(["consistency", "--config", config("b")])["rows"] == first["rows"]
    save_set, saved = consistency.save_set, []

    def stopped(*args):
        if len(saved) == 2:
            raise KeyboardInterrupt
        saved.append(1)
        save_set(*args)

    monkeypatch.setattr(consistency, "save_set", stopped)
    with pytest.raises(SystemExit):
        evaluate.main(["consistency", "--config", config("c")])
    monkeypatch.setattr(consistency, "save_set", save_set)
    (folder,) = (tmp_path / "c").iterdir()
    reseed(3)
    resumed = evaluate.main(["consistency", "--resume", str(folder)])
    assert resumed["rows"] == first["rows"]
    watson = [r for r in first["rows"] if r["metric"] == "watson_c"]
    assert {r["method"] for r in watson} == {"gradient_shap", "smoothgrad"}
