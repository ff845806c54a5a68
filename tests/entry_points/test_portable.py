"""Portable mode (portable.py): the same weights whatever kernels the CPU would pick natively.

One machine cannot be two CPUs, but the variables that portable mode fixes are exactly the
choices another CPU makes differently (MKL's code branch, ATen's vector width, the thread
count). So the test trains German Credit's MLP (2 epochs) under two native settings that
change the weights in the default mode, and checks that portable mode gives bit-identical
weights under both (asked by ``--portable`` under one, by the environment variable under the
other).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from portable import weights_sha256
from tests.support import ROOT

# Two native settings as two CPUs would have them: this CPU's own choices, and the
# SSE4.2 branch of MKL with ATen's unvectorised kernels on two threads.
NATIVE = {
    "native": {},
    "other": {"MKL_CBWR": "SSE4_2", "ATEN_CPU_CAPABILITY": "default", "OMP_NUM_THREADS": "2", "MKL_NUM_THREADS": "2"},
}
PORTABLE_VARIABLES = ("RELIABLE_EXPLANATIONS_PORTABLE", "MKL_CBWR", "ATEN_CPU_CAPABILITY", "OMP_NUM_THREADS",
                      "MKL_NUM_THREADS")  # fmt: skip


def train(tmp_path: Path, name: str, native: dict, *flags: str, portable_env: bool = False) -> tuple[str, dict]:
    env = {k: v for k, v in os.environ.items() if k not in PORTABLE_VARIABLES}
    env.update(native)
    if portable_env:
        env["RELIABLE_EXPLANATIONS_PORTABLE"] = "1"
    result = subprocess.run(
        [sys.executable, "train.py", *flags, "--trainer.max_epochs", "2", "--log_to", "none",
         "--trainer.enable_progress_bar", "false", "--output_dir", str(tmp_path), "--run_name", name],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-2000:]
    run = tmp_path / "german" / name
    import torch

    state = torch.load(run / "checkpoints" / "last.ckpt", map_location="cpu", weights_only=True)["state_dict"]
    return weights_sha256(state), json.loads((run / "metrics.json").read_text())


def test_portable_mode_gives_the_same_weights_under_other_native_kernels(tmp_path):
    default = {k: train(tmp_path, f"default-{k}", native) for k, native in NATIVE.items()}
    assert default["native"][0] != default["other"][0], "the native settings must differ for the test to mean anything"
    assert default["native"][1]["mode"] == {"portable": False}
    by_flag = train(tmp_path, "flag-native", NATIVE["native"], "--portable")
    by_env = train(tmp_path, "env-other", NATIVE["other"], portable_env=True)
    assert by_flag[0] == by_env[0]
    assert by_flag[0] not in (default["native"][0], default["other"][0])  # the mode changed the kernels
    assert by_flag[1]["mode"]["portable"] and by_flag[1]["mode"]["settings"]["MKL_CBWR"] == "COMPATIBLE"


@pytest.mark.parametrize("value", ["yes", "2"])
def test_portable_environment_variable_takes_only_0_or_1(value):
    env = {**os.environ, "RELIABLE_EXPLANATIONS_PORTABLE": value}
    result = subprocess.run([sys.executable, "train.py", "--print_config"], cwd=ROOT, env=env,
                            capture_output=True, text=True, timeout=300)  # fmt: skip
    assert result.returncode == 2, result.stderr
    assert result.stderr.strip() == f"error: environment variable RELIABLE_EXPLANATIONS_PORTABLE={value!r}; " \
                                    "expected 1 (portable) or 0"


def test_portable_flag_in_a_process_that_imported_torch_is_refused(monkeypatch, capsys):
    import portable

    for name in PORTABLE_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    args = ["--portable", "--print_config"]
    with pytest.raises(SystemExit) as stop:
        portable.enable_if_asked(args)
    assert stop.value.code == 2
    assert "torch was imported before portable mode was set" in capsys.readouterr().err
