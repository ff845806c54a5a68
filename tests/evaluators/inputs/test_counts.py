"""Options that count inputs of a split (``evaluators.inputs.counts``): asking for more than the
split holds is one InputError naming the option, the number asked and the number the split
holds; an option's documented default on a smaller split takes all of it, with a warning."""

from __future__ import annotations

import pytest
import torch

import evaluate
from datamodules import FinancialDataModule
from evaluators.inputs.counts import counted
from evaluators.protocols.roar.grid import estimator_options
from foundation.errors import InputError


def test_the_rule():
    assert counted("n_points", 36, 36, "test split", "rows", 1000) == 36
    assert counted("n_points", 10, 36, "test split", "rows", 1000) == 10
    with pytest.raises(InputError, match=r"^option n_points=500: the test split has 36 rows; expected at most 36$"):
        counted("n_points", 500, 36, "test split", "rows", 1000)
    with pytest.warns(UserWarning, match=r"option n_points=1000 \(its default\) is more than the test split's 36 rows: "
                                         r"using all 36"):
        assert counted("n_points", 1000, 36, "test split", "rows", 1000) == 36
    for bad in (0, -3, 2.5, True, "10"):
        with pytest.raises(InputError, match=r"expected a positive integer"):
            counted("n_points", bad, 36, "test split")


@pytest.fixture(scope="module")
def german_sizes(data_dir):
    data = FinancialDataModule(dataset="german")
    return len(data.test_tensors[0]), len(data.train_tensors[0])


def consistency(tmp_path, population, *settings) -> dict:
    config = tmp_path / "consistency.yaml"
    config.write_text(f"population: {population}\nstrategies: [single]\nmethods: [saliency]\nn_models: [1]\n"
                      f"n_sets: 2\ndevice: cpu\noutput_dir: {tmp_path / 'out'}\n")  # fmt: skip
    return evaluate.main(["consistency", "--config", str(config), *(a for s in settings for a in ("--set", s))])


def test_tabular_consistency_and_sigma_refuse_more_points_than_a_split_holds(small_population, german_sizes, tmp_path):
    n_test, n_train = german_sizes
    for settings, message in (
        (["n_points=500"], f"option n_points=500: the test split has {n_test} rows"),
        (["methods=[smoothgrad]", f"n_points_smoothgrad={n_test + 1}"],
         f"option n_points_smoothgrad={n_test + 1}: the test split has {n_test} rows"),
        (["methods=[deepshap]", f"n_points_deepshap={n_test + 1}"],
         f"option n_points_deepshap={n_test + 1}: the test split has {n_test} rows"),
        (["methods=[deepshap]", f"n_background={n_train + 1}"],
         f"option n_background={n_train + 1}: the training split has {n_train} rows; expected at most {n_train}"),
    ):  # fmt: skip
        with pytest.raises(InputError, match=message):
            consistency(tmp_path, small_population, *settings)
        assert not (tmp_path / "out").exists()  # nothing left behind
    sigma = tmp_path / "sigma.yaml"
    sigma.write_text(f"population: {small_population}\nn_models: 2\nsigmas: [0.0]\nlayers: [0]\ndevice: cpu\n"
                     f"output_dir: {tmp_path / 'sigma'}\n")  # fmt: skip
    with pytest.raises(InputError, match=f"option n_points=500: the test split has {n_test} rows"):
        evaluate.main(["sigma", "--config", str(sigma), "--set", "n_points=500"])


def test_the_default_number_of_points_takes_a_smaller_split_whole_and_says_so(small_population, german_sizes, tmp_path):
    n_test, _ = german_sizes
    assert n_test < 1000  # n_points' default
    with pytest.warns(UserWarning, match=f"option n_points=1000 \\(its default\\) is more than the test split's "
                                         f"{n_test} rows: using all {n_test}"):
        consistency(tmp_path, small_population)
    (kept,) = (tmp_path / "out").glob("*/sets/n1/single/set-000.pt")
    assert torch.load(kept, weights_only=True)["explanations"]["saliency"].shape[0] == n_test


def test_image_protocols_refuse_more_images_than_the_split_holds(tiny_run, tmp_path):
    from tests.evaluators.protocols.test_aggregation import small_config
    from tests.evaluators.protocols.test_optimised_aggregation import config as optimised_config

    n_test = n_train = 12  # tiny_run's folder: 4 images of each of 3 classes per split
    with pytest.raises(InputError, match=f"option --n_images=50: the test split has {n_test} images; expected at"):
        evaluate.main(["explain", str(tiny_run), "--methods", "saliency", "--n_images", "50", "--log_to", "none"])
    with pytest.raises(InputError, match=f"option n_baselines=5000: the training split has {n_train} images"):
        evaluate.main(["aggregation", "--config", str(small_config(tmp_path / "a", tiny_run, n_baselines=5000))])
    with pytest.raises(InputError, match="option n_grid=5: the n_inputs selection has 4 inputs; expected at most 4"):
        evaluate.main(["aggregation", "--config", str(small_config(tmp_path / "g", tiny_run, n_grid=5))])
    with pytest.raises(InputError, match=f"option n_inputs=50: the test split has {n_test} images; expected at"):
        evaluate.main(["optimised", "--config", optimised_config(tmp_path / "o", tiny_run, n_inputs=50)])


def test_a_roar_estimators_background_may_not_outgrow_the_training_split(german_sizes):
    _, n_train = german_sizes
    data = FinancialDataModule(dataset="german")
    assert len(estimator_options("deepshap", {"baselines": "training", "n_baselines": 7}, data, 0)["baselines"]) == 7
    with pytest.raises(InputError, match=f"option estimators.deepshap.n_baselines={n_train + 1}: the training split "
                                         f"has {n_train} inputs"):
        estimator_options("deepshap", {"baselines": "training", "n_baselines": n_train + 1}, data, 0)
