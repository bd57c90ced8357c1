"""The Python package's tests (tests/python/package): ctest runs them with the Python of
the virtual environment scripts/install-python-package installs the package into
(build/python-venv), after installing it (the py.package.install test). The helpers of the
CLI tests (paths, the `ridge` runner) come from tests/python."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
