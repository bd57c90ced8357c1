"""`pip install .` as a user runs it: a fresh virtual environment (none of the system's
packages), the build backend fetched by pip, then `import ridge` and one generation. The
build reuses scikit-build-core's build directory (build-python/), so only the extension
module's own file is compiled again."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from test_cli import ROOT, STORIES

CHECK = """
import json, sys, ridge
llm = ridge.LLM(sys.argv[1])
out = llm.generate("Once upon a time", ridge.SamplingParams(temperature=0, max_tokens=8))[0]
print(json.dumps({"file": ridge.__file__, "text": out.outputs[0].text, "typed": ridge.__path__[0]}))
"""


def test_the_package_installs_and_imports_in_a_fresh_virtual_environment(tmp_path):
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=120)
    python = venv / "bin" / "python"
    res = subprocess.run([str(python), "-m", "pip", "install", "-q", "--disable-pip-version-check", str(ROOT)],
                         capture_output=True, text=True, timeout=1500)
    assert res.returncode == 0, res.stdout + res.stderr
    res = subprocess.run([str(python), "-c", CHECK, str(STORIES)], capture_output=True, text=True, timeout=120,
                         cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    out = json.loads(res.stdout)
    package = Path(out["file"]).parent
    assert package.is_relative_to(venv), out  # the installed copy, not the source tree
    assert (package / "py.typed").exists() and (package / "_ridge.pyi").exists()
    assert out["text"]
    # The same greedy text as the package under test gives.
    import ridge
    with ridge.LLM(STORIES) as llm:
        assert llm.generate("Once upon a time", ridge.SamplingParams(temperature=0, max_tokens=8))[0].outputs[0].text \
            == out["text"]
