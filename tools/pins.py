"""Print the dependency pins declared in setup.cfg, for the Makefile.

`pins.py`           -> install_requires + the `test` and `docs` extras (one pip command line)
`pins.py --no-deps` -> the `data` and `test_no_deps` extras, installed without dependencies
`pins.py --key`     -> a short hash of all of them, naming the shared environment
"""

import configparser
import hashlib
import sys
from pathlib import Path

cfg = configparser.ConfigParser()
cfg.read(Path(__file__).resolve().parent.parent / "setup.cfg")


def _lines(section: str, key: str) -> list[str]:
    return [line.strip() for line in cfg[section][key].splitlines() if line.strip()]


regular = (_lines("options", "install_requires") + _lines("options.extras_require", "test")
           + _lines("options.extras_require", "docs"))
no_deps = _lines("options.extras_require", "data") + _lines("options.extras_require", "test_no_deps")

if "--key" in sys.argv:
    blob = "\n".join(regular + ["--no-deps"] + no_deps + [sys.version.split()[0]])
    print(hashlib.sha256(blob.encode()).hexdigest()[:16])
elif "--no-deps" in sys.argv:
    print(" ".join(f"'{p}'" for p in no_deps))
else:
    print(" ".join(f"'{p}'" for p in regular))
