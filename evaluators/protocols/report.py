"""``evaluate.py report`` in the protocol registry: the reliability report, whose parts live in
``evaluators/reports/reliability/`` (docs/trust.md)."""

from evaluators.protocols.registry import PROTOCOLS
from evaluators.reports.reliability.config import DEFAULT_CONFIGS, ReportConfig
from evaluators.reports.reliability.protocol import REPORT, evaluate_report, write_report

PROTOCOLS.add("report", evaluate_report, help="can I trust these explanations? agreement, calibrated sanity and "
              "faithfulness in one page (docs/trust.md)", config=ReportConfig, write=write_report, report=REPORT,
              resumable=True, default_configs=DEFAULT_CONFIGS)  # fmt: skip
