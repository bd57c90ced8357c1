"""`pip install .` into a fresh virtual environment (none of the system's packages), then
`import ridge` and one generation there, outside the source tree: the wheel carries the
package, its stubs and the engine, and needs nothing else at run time.

The build backend (scikit-build-core, pybind11) is the one scripts/install-deps installed,
put on PYTHONPATH for pip's build only (--no-build-isolation): a new isolated environment
would make scikit-build-core clear its build directory (build-python/) and compile the
whole engine again; this way only the extension module's own file is recompiled.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pybind11
import scikit_build_core

from test_cli import ROOT, STORIES

CHECK = """
import json, sys, ridge
llm = ridge.LLM(sys.argv[1])
out = llm.generate("Once upon a time", ridge.SamplingParams(temperature=0, max_tokens=8))[0]
print(json.dumps({"file": ridge.__file__, "text": out.outputs[0].text}))
"""


def test_the_package_installs_and_imports_in_a_fresh_virtual_environment(tmp_path):
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=120)
    python = venv / "bin" / "python"
    backend = {str(Path(m.__file__).resolve().parents[1]) for m in (scikit_build_core, pybind11)}
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sorted(backend))}
    res = subprocess.run([str(python), "-m", "pip", "install", "-q", "--disable-pip-version-check",
                          "--no-build-isolation", str(ROOT)], capture_output=True, text=True, timeout=1500, env=env)
    assert res.returncode == 0, res.stdout + res.stderr
    clean = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    res = subprocess.run([str(python), "-c", CHECK, str(STORIES)], capture_output=True, text=True, timeout=120,
                         cwd=tmp_path, env=clean)
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
