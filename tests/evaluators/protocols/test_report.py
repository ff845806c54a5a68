"""evaluators/protocols/report.py: ``evaluate.py report`` is registered as the reliability report
(evaluators/reports/reliability/), resumable, read from a population, its default configs on disk."""

from __future__ import annotations

from pathlib import Path

from evaluators.protocols.registry import PROTOCOLS
from evaluators.reports.reliability import protocol as reliability
from evaluators.reports.reliability.config import ReportConfig
from tests.support import ROOT


def test_the_report_protocol_is_the_reliability_report():
    entry = PROTOCOLS["report"]
    assert entry.obj is reliability.evaluate_report and entry.write is reliability.write_report
    assert entry.config is ReportConfig and entry.report == "report.json"
    assert entry.resumable and not entry.has_sets and entry.source == "population" and entry.report_dir is None


def test_its_default_configs_are_the_report_folders_table_and_image_configs():
    defaults = PROTOCOLS["report"].default_configs
    assert {kind: Path(path).relative_to(ROOT).as_posix() for kind, path in defaults.items()} == {
        kind: f"configs/report/{'image_folder' if kind == 'image population' else 'table'}.yaml" for kind in defaults}
    assert "image population" in defaults and all(Path(path).is_file() for path in defaults.values())
