"""An offline W&B run read back from its ``run-<id>.wandb`` file (LevelDB's log format after a
7-byte ``:W&B`` header, each record a ``wandb_internal_pb2.Record``), without the wandb server."""

from __future__ import annotations

import json
import struct
import time
import zlib
from dataclasses import dataclass
from pathlib import Path

BLOCK, HEADER = 32768, 7


def records(path: Path):
    """Every complete protobuf ``Record`` of an offline run's ``run-<id>.wandb`` file (each chunk's
    header holds zlib's CRC-32 of its type byte and data)."""
    from wandb.proto import wandb_internal_pb2

    data = path.read_bytes()
    assert data[:4] == b":W&B"
    pos, parts = HEADER, b""
    while pos + HEADER <= len(data):
        if BLOCK - pos % BLOCK < HEADER:  # a block's tail too short for a header is padding
            pos += BLOCK - pos % BLOCK
            continue
        checksum, length, kind = struct.unpack("<IHB", data[pos : pos + HEADER])
        chunk = data[pos + HEADER : pos + HEADER + length]
        if len(chunk) < length or zlib.crc32(bytes([kind]) + chunk) != checksum:
            return  # the service process is still writing this record: the file so far ends here
        pos += HEADER + length
        parts = chunk if kind in (1, 2) else parts + chunk  # FULL, FIRST | MIDDLE, LAST
        if kind in (1, 4):
            record = wandb_internal_pb2.Record()
            record.ParseFromString(parts)
            yield record


@dataclass
class OfflineRun:
    folder: Path  # offline-run-<time>-<id>
    project: str
    group: str
    job_type: str
    config: dict  # W&B's config: key -> value
    logged: dict  # every logged key (nested keys joined by "/") -> its last value

    def media(self, key: str) -> Path:
        """The file a logged table or image ``key`` was written to."""
        return self.folder / "files" / self.logged[f"{key}/path"]


def finished_records(path: Path, wait_s: float = 30.0) -> list:
    """The records of a run's file once its ``exit`` record is on disk: W&B's service process
    writes the file on its own and may still be closing it when ``run.finish()`` returns."""
    deadline = time.monotonic() + wait_s
    while True:
        found = list(records(path))
        if any(r.WhichOneof("record_type") == "exit" for r in found) or time.monotonic() > deadline:
            return found
        time.sleep(0.2)


def offline_runs(out_dir: Path) -> list[OfflineRun]:
    """Every offline W&B run under ``out_dir/wandb``, oldest first."""
    found = []
    for run_file in sorted(Path(out_dir).glob("wandb/offline-run-*/run-*.wandb")):
        run, config, logged = None, {}, {}
        for record in finished_records(run_file):
            kind = record.WhichOneof("record_type")
            if kind == "run":
                run = record.run
                config |= {item.key: json.loads(item.value_json) for item in run.config.update}
            elif kind == "config":
                config |= {item.key: json.loads(item.value_json) for item in record.config.update}
            elif kind == "history":
                logged |= {item.key or "/".join(item.nested_key): json.loads(item.value_json)
                           for item in record.history.item}  # fmt: skip
        found.append(OfflineRun(run_file.parent, run.project, run.run_group, run.job_type,
                                {k: v.get("value", v) if isinstance(v, dict) else v for k, v in config.items()},
                                logged))  # fmt: skip
    return found


def assert_logged(out_dir: Path, job_type: str, source: str | Path, scalars: dict[str, float], tables: list[str],
                  images: list[str]) -> OfflineRun:  # fmt: skip
    """``out_dir`` holds one offline W&B run of ``job_type`` in ``source``'s population group
    (``population_link``), with its link in the config, each of ``scalars`` (name -> value), and
    each table and image written to its media file."""
    from evaluators.reports.wandb_log import WANDB_PROJECT, population_link

    (run,) = offline_runs(out_dir)
    link = population_link(source)
    assert (run.project, run.job_type, run.group) == (WANDB_PROJECT, job_type, link.group)
    assert run.config["wandb_link"] == link.config()
    for name, value in scalars.items():
        assert abs(run.logged[name] - value) <= 1e-9 * max(1.0, abs(value)), name
    for name in tables:
        assert run.logged[f"{name}/_type"] == "table-file" and json.loads(run.media(name).read_text())["data"]
    for name in images:
        assert run.logged[f"{name}/_type"] == "image-file" and run.media(name).stat().st_size > 0
    return run
