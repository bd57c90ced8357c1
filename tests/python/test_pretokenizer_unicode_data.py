"""The committed src/tokenizer/unicode_data.cpp is what scripts/gen-unicode-data writes.

The generator reads unicodedata2 at a pinned Unicode version (scripts/requirements-test.txt);
skipped only where unicodedata2 is not installed.
"""

import pathlib
import re
import subprocess
import sys
import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
DATA = ROOT / "src" / "tokenizer" / "unicode_data.cpp"


def test_generated_tables_are_current():
    header = DATA.read_text(encoding="utf-8").splitlines()[0]
    version = re.search(r"\(Unicode ([0-9.]+)\)", header)
    assert version, header
    unicodedata2 = pytest.importorskip("unicodedata2")
    assert version.group(1) == unicodedata2.unidata_version, "regenerate: scripts/gen-unicode-data"
    result = subprocess.run([sys.executable, str(ROOT / "scripts" / "gen-unicode-data"), "--check"],
                            capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
