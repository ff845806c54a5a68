"""``evaluate.py report`` end to end on a population trained here from a CSV table, with no
config file: its files (strict JSON, PNGs, one HTML page), its numbers against independent
recomputations (autograd saliency, SA@k by hand), its W&B offline run (read from the run
file itself: scalars, table, figures, group), resuming an interrupted report, and the page in
a real headless browser (Debian's chromium and chromium-driver with Selenium)."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch

import evaluate
import train
from evaluators.reports.reliability import maps, protocol
from foundation.errors import InputError
from lightning_modules import load_population
from lightning_modules.population_io import population_datamodule
from tests.entry_points.test_own_table import data_args, write_table
from tests.support.wandb_runs import records

EXPLAINERS = ["saliency", "input_x_gradient"]
OPTIONS = ["--set", "n_points=20", "--set", f"explainers=[{', '.join(EXPLAINERS)}]", "--set", "n_bootstrap=50",
           "--set", "infidelity_samples=5", "--set", "device=cpu"]  # fmt: skip


@pytest.fixture(scope="module")
def population(tmp_path_factory) -> str:
    """A binary CSV table's population of 4 MLPs (train.py, configs/population.yaml)."""
    out = tmp_path_factory.mktemp("report")
    path = write_table(out / "loans.csv", 2, n=150)
    trained = train.main(["--config", "configs/population.yaml", *data_args(path), "--model.size", "4",
                          "--model.hidden", "[8]", "--model.lr", "0.01", "--trainer.max_epochs", "2", "--log_to",
                          "none", "--trainer.enable_progress_bar", "false", "--output_dir", str(out / "runs")])
    return trained["population"]


@pytest.fixture(scope="module")
def report(population, tmp_path_factory) -> tuple[dict, Path]:
    out = tmp_path_factory.mktemp("reports")
    summary = evaluate.main(["report", "--population", population, "--output_dir", str(out), *OPTIONS])
    (run_dir,) = out.iterdir()
    return summary, run_dir


def strict_json(path: Path) -> dict:
    def refuse(constant):
        raise AssertionError(f"{path}: {constant} in strict JSON")

    return json.loads(path.read_text(), parse_constant=refuse)


def test_files_and_summary(report):
    summary, run_dir = report
    for name in ("report.json", "report.html", "summary.txt", "agreement.png", "sanity.png", "faithfulness.png",
                 "settle.png", *(f"maps/{e}.pt" for e in EXPLAINERS)):  # fmt: skip
        assert (run_dir / name).is_file(), name
    written = strict_json(run_dir / "report.json")
    assert written["summary"]["text"] == summary["summary"]["text"] == (run_dir / "summary.txt").read_text()
    text = summary["summary"]["text"]
    assert all(e in text for e in EXPLAINERS) and "Recommended: " in text
    assert written["population"]["n_members"] == 4 and written["population"]["n_points"] == 20
    for e in EXPLAINERS:
        verdict = written["sections"]["sanity"]["explainers"][e]["verdict"]
        d = verdict["delta"]
        assert verdict["passed"] == (d["mean"] - d["ci95"] > 0)
        assert d["mean"] == pytest.approx(np.mean(verdict["per_member"]["delta"]))
    html = (run_dir / "report.html").read_text()
    assert html.count("data:image/png;base64,") == 4 and "http://" not in html and "https://" not in html


def top_k_sign_agreement(a: np.ndarray, b: np.ndarray, k: int) -> float:
    """Ley et al.'s SA@k of two maps, by hand."""
    top_a, top_b = np.argsort(-np.abs(a), kind="stable")[:k], np.argsort(-np.abs(b), kind="stable")[:k]
    return sum(1 for f in set(top_a) & set(top_b) if np.sign(a[f]) == np.sign(b[f])) / k


def test_maps_and_agreement_against_independent_recomputation(report, population):
    """Member 0's saliency maps are autograd's gradient of its positive-class logit; member 0's
    SA@k is the mean over its pairs and rows of SA@k computed by hand."""
    summary, run_dir = report
    unit = torch.load(run_dir / "maps" / "saliency.pt", weights_only=True)
    pop, payload = load_population(population)
    data = population_datamodule(payload)
    data.setup("test")
    x = data.test_tensors[0][:20].clone().requires_grad_(True)
    pop.member(0)(x)[:, 1].sum().backward()
    assert torch.allclose(unit["maps"][0].float(), x.grad, atol=1e-6)
    maps = unit["maps"].numpy()
    k = summary["sections"]["agreement"]["k"]
    by_hand = np.mean([top_k_sign_agreement(maps[0, i], maps[b, i], k) for b in (1, 2, 3) for i in range(20)])
    assert summary["sections"]["agreement"]["explainers"]["saliency"]["sa"]["per_member"][0] == pytest.approx(by_hand)


def test_wandb_offline_run_holds_scalars_table_figures_and_group(report):
    summary, run_dir = report
    (run_file,) = run_dir.glob("wandb/offline-run-*/run-*.wandb")
    logged, group = {}, None
    for record in records(run_file):
        if record.WhichOneof("record_type") == "run":
            group = record.run.run_group
        if record.WhichOneof("record_type") == "history":
            items = record.history.item
            logged |= {item.key or "/".join(item.nested_key): json.loads(item.value_json) for item in items}
    assert group == summary["population"]["group"]
    verdict = summary["sections"]["sanity"]["explainers"]["saliency"]["verdict"]
    assert logged["sanity/saliency/delta"] == pytest.approx(verdict["delta"]["mean"])
    assert logged["summary/_type"] == "table-file"
    for name in ("agreement", "sanity", "faithfulness", "settle"):
        assert logged[f"figure/{name}/_type"] == "image-file"
        assert (run_file.parent / "files" / logged[f"figure/{name}/path"]).is_file()


def finished(run_dir: Path) -> dict:
    """A report folder's report.json without what differs between two runs of it: the time it
    took and the folder it was written to."""
    written = strict_json(run_dir / protocol.REPORT)
    del written["seconds"], written["config"]["output_dir"]
    return written


def test_interrupted_report_resumes_with_the_same_report(report, population, tmp_path, monkeypatch, capsys):
    """Interrupted inside its second explainer (member 2's cascading randomisation), the report
    keeps the first explainer's maps and nothing of the second; --resume reads the first (not
    computed again) and ends with the report.json of the uninterrupted report."""
    _, uninterrupted = report
    real = maps.randomisation
    calls = []

    def interrupted(member, own, x, target, method, *args, **kwargs):
        calls.append(method)
        if calls.count(EXPLAINERS[1]) == 2:
            raise KeyboardInterrupt
        return real(member, own, x, target, method, *args, **kwargs)

    monkeypatch.setattr(maps, "randomisation", interrupted)
    with pytest.raises(SystemExit) as stopped:
        evaluate.main(["report", "--population", population, "--output_dir", str(tmp_path), *OPTIONS])
    assert stopped.value.code == 130 and calls == [EXPLAINERS[0]] * 4 + [EXPLAINERS[1]] * 2
    (run_dir,) = tmp_path.iterdir()
    assert sorted(p.name for p in (run_dir / "maps").iterdir()) == [f"{EXPLAINERS[0]}.pt"]
    assert not (run_dir / protocol.REPORT).exists()
    monkeypatch.setattr(maps, "randomisation", real)
    capsys.readouterr()
    evaluate.main(["report", "--resume", str(run_dir)])
    out = capsys.readouterr().out
    assert f"{EXPLAINERS[0]}: read from" in out and f"{EXPLAINERS[0]}: 1/" not in out
    assert f"{EXPLAINERS[1]}: 1/" in out  # the second explainer computed, its steps shown with the time left
    assert finished(run_dir) == finished(uninterrupted)


def chromium_driver():
    """A headless Chromium through Selenium and Debian's chromedriver, or a skip naming what is missing."""
    webdriver = pytest.importorskip("selenium.webdriver", reason="selenium not installed (setup.cfg's test extra)")
    browser, driver = shutil.which("chromium"), shutil.which("chromedriver")
    if browser is None or driver is None:
        pytest.skip("Debian's chromium and chromium-driver are not installed (make browser)")
    options = webdriver.ChromeOptions()
    options.binary_location = browser
    for flag in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                 "--window-size=1280,900"):
        options.add_argument(flag)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    from selenium.webdriver.chrome.service import Service

    return webdriver.Chrome(service=Service(driver), options=options)


def test_page_in_a_headless_browser(report):
    """The page loads with no console error, offline, and every figure is decoded and shown."""
    _, run_dir = report
    driver = chromium_driver()
    try:
        driver.get((run_dir / "report.html").resolve().as_uri())
        images = driver.execute_script(
            "return Array.from(document.images).map(i => [i.alt, i.complete, i.naturalWidth, "
            "i.getBoundingClientRect().width, getComputedStyle(i).display, getComputedStyle(i).visibility]);")
        errors = [e for e in driver.get_log("browser") if e["level"] in ("SEVERE", "ERROR")]
    finally:
        driver.quit()
    assert sorted(i[0] for i in images) == ["agreement", "faithfulness", "sanity", "settle"]
    for alt, complete, natural, shown, display, visibility in images:
        assert complete and natural > 0 and shown > 0 and display != "none" and visibility == "visible", alt
    assert errors == []


@pytest.mark.parametrize("setting, message", [
    ("explainers=[gradcam]", "option explainers: ['gradcam'] do not take rows"),
    ("explainers=[nonesuch]", "unknown explainer 'nonesuch'; expected one of"),
    ("options={saliency: 3}", "explainer 'saliency': options 3; expected a mapping"),
    ("measure=ssim", "option measure='ssim'; expected one of ['spearman_abs', 'spearman'] (rows)"),
    ("faithfulness=[road_morf]", "option faithfulness=['road_morf']"),
    ("k=6", "option k=6: the maps have 5 features; expected k <= 5"),
])  # fmt: skip
def test_bad_options_are_refused_in_one_line_leaving_no_folder(population, tmp_path, setting, message):
    out = tmp_path / "reports"
    with pytest.raises(InputError, match=re.escape(message)):
        evaluate.main(["report", "--population", population, "--output_dir", str(out), *OPTIONS, "--set", setting])
    assert not out.exists()


def test_no_population_names_the_default_config():
    with pytest.raises(InputError, match=re.escape("configs/report/table.yaml")):
        evaluate.main(["report"])
