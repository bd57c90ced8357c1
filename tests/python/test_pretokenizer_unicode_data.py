"""The committed src/tokenizer/unicode_data.cpp is what scripts/gen-unicode-data writes.

Skipped when this Python's unicodedata has another Unicode version than the one the file was
generated from (its first line names it), since the tables would then legitimately differ.
"""

import pathlib
import re
import subprocess
import sys
import unicodedata

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
DATA = ROOT / "src" / "tokenizer" / "unicode_data.cpp"


def test_generated_tables_are_current():
    header = DATA.read_text(encoding="utf-8").splitlines()[0]
    version = re.search(r"\(Unicode ([0-9.]+)\)", header)
    assert version, header
    if version.group(1) != unicodedata.unidata_version:
        pytest.skip("generated from Unicode %s, this Python has %s"
                    % (version.group(1), unicodedata.unidata_version))
    result = subprocess.run([sys.executable, str(ROOT / "scripts" / "gen-unicode-data"), "--check"],
                            capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
