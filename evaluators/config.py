"""What every population evaluator's config starts with."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class PopulationSource:
    """The population file to evaluate and, optionally, another folder holding its raw data."""

    population: str
    data_dir: str | None = None
