"""What the tests share, in one place: ``ROOT`` (the checkout, which every test that runs a
script or reads configs/, docs/ or bench/ uses as its working folder), helpers
(``tests.support.helpers``), the tiny models and networks several suites train or bring in
(``tiny_models``, ``user_nets``) and the three-class table (``multiclass_data``). Fixtures
live in ``tests/conftest.py``; the files that old versions wrote, with the golden record,
under ``tests/golden/``."""

from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
