"""A protocol's report logged to W&B, into ``WANDB_PROJECT``, where train.py logs too (offline by default)."""

from __future__ import annotations

from pathlib import Path

from foundation.errors import InputError

LOG_TO = ("wandb_offline", "wandb_online", "none")
WANDB_PROJECT = "reliable-explanations"


def check_log_to(value: str, option: str = "log_to") -> None:
    if value not in LOG_TO:
        raise InputError(f"option {option}={value!r}; expected one of {list(LOG_TO)}")


def log_report(log_to: str, out_dir: Path, job_type: str, config: dict,
               tables: dict[str, tuple[list[str], list[list]]] | None = None,
               images: dict[str, Path] | None = None, scalars: dict[str, float] | None = None,
               group: str | None = None) -> None:  # fmt: skip
    """One W&B run in ``out_dir`` holding ``tables`` (name -> (columns, rows)), ``images``
    (name -> PNG) and ``scalars`` (name -> number, also the run's summary, which a dashboard
    charts across runs), in W&B group ``group`` (e.g. one per population); nothing when
    ``log_to`` is ``none``."""
    if log_to == "none":
        return
    import wandb

    mode = "offline" if log_to == "wandb_offline" else "online"
    run = wandb.init(project=WANDB_PROJECT, dir=str(out_dir), mode=mode, job_type=job_type, config=config,
                     group=group)
    run.log({**{name: wandb.Table(columns=columns, data=rows) for name, (columns, rows) in (tables or {}).items()},
             **{name: wandb.Image(str(path)) for name, path in (images or {}).items()}, **(scalars or {})})  # fmt: skip
    run.finish()
