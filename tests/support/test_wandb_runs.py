"""The offline-run reader the W&B tests rely on, against W&B's own writer: a run file read while
W&B's service process is still writing it (cut at any byte) gives a prefix of the finished
file's records and never raises."""

from __future__ import annotations

import wandb
from tests.support.wandb_runs import offline_runs, records


def test_a_run_file_cut_anywhere_reads_as_a_prefix_of_its_records(tmp_path):
    run = wandb.init(mode="offline", dir=tmp_path, project="reader", group="g", job_type="check",
                     config={"a": 1})  # fmt: skip
    for step in range(40):
        run.log({"loss": 1.0 / (step + 1), "text": "x" * (50 * step)})
    run.finish()
    (found,) = offline_runs(tmp_path)
    assert (found.project, found.group, found.job_type, found.config["a"]) == ("reader", "g", "check", 1)
    assert found.logged["loss"] == 1.0 / 40
    path = next(tmp_path.glob("wandb/offline-run-*/run-*.wandb"))
    whole = [r.SerializeToString() for r in records(path)]
    data = path.read_bytes()
    cut = tmp_path / "cut.wandb"
    lengths = []
    for end in range(8, len(data), 37):
        cut.write_bytes(data[:end])
        got = [r.SerializeToString() for r in records(cut)]
        assert got == whole[: len(got)]
        lengths.append(len(got))
    assert lengths == sorted(lengths) and lengths[-1] >= len(whole) - 2
