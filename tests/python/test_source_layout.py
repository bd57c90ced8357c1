"""The shape of src/ that ../shared/DESIGN.md and STYLE.md promise, checked on the tree:
no include cycle between ridge's own headers, no folder grown past about twenty .cpp/.h
pairs, and kernels/ by concern, each subfolder with the one header (named after it) that
the rest of ridge includes. A new file that breaks one of these fails here, naming it."""

from __future__ import annotations

import re
from pathlib import Path

SRC = Path(__file__).resolve().parents[2] / "src"
INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.MULTILINE)
# Beyond this many stems (foo.h and foo.cpp are one), a folder is two things: split it.
MAX_STEMS_PER_FOLDER = 22
# What kernels/ shares across its concerns (the ISA choice, scratch, SIMD helpers): the
# rest of ridge may include the first two.
KERNELS_SHARED_PUBLIC = {"kernels/isa.h", "kernels/scratch.h"}


def sources() -> list[Path]:
    return sorted(p for p in SRC.rglob("*") if p.suffix in (".h", ".cpp"))


def includes(path: Path) -> list[str]:
    """ridge's own headers that `path` includes, as paths under src/."""
    found = []
    for name in INCLUDE.findall(path.read_text(encoding="utf-8", errors="replace")):
        if (SRC / name).is_file():
            found.append(name)
        elif (path.parent / name).is_file():
            found.append(str((path.parent / name).relative_to(SRC)))
    return found


def test_every_include_names_a_file():
    missing = []
    for path in sources():
        for name in INCLUDE.findall(path.read_text(encoding="utf-8", errors="replace")):
            if not (SRC / name).is_file() and not (path.parent / name).is_file() and "/" in name:
                missing.append(f"{path.relative_to(SRC)}: {name}")
    assert not missing, "includes of files that do not exist: " + ", ".join(missing)


def test_no_include_cycle():
    graph = {str(p.relative_to(SRC)): includes(p) for p in sources() if p.suffix == ".h"}
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    stack: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        stack.append(node)
        for dep in graph.get(node, []):
            if state.get(dep) == 1:
                return stack[stack.index(dep):] + [dep]
            if dep not in state:
                cycle = visit(dep)
                if cycle:
                    return cycle
        stack.pop()
        state[node] = 2
        return None

    for node in graph:
        if node not in state:
            cycle = visit(node)
            assert cycle is None, "include cycle: " + " -> ".join(cycle)


def test_no_folder_past_about_twenty_pairs():
    folders: dict[Path, set[str]] = {}
    for path in sources():
        folders.setdefault(path.parent, set()).add(path.stem)
    crowded = {str(f.relative_to(SRC)): len(s) for f, s in folders.items() if len(s) > MAX_STEMS_PER_FOLDER}
    assert not crowded, f"folders with more than {MAX_STEMS_PER_FOLDER} .cpp/.h stems: {crowded}"


def kernel_rooms() -> list[Path]:
    return sorted(p for p in (SRC / "kernels").iterdir() if p.is_dir())


def test_kernels_by_concern_each_with_its_header():
    rooms = kernel_rooms()
    assert {p.name for p in rooms} >= {"gemm", "attention", "ops", "recurrent"}
    for room in rooms:
        assert (room / f"{room.name}.h").is_file(), f"kernels/{room.name}/ has no {room.name}.h"


def test_the_rest_of_ridge_includes_only_the_kernel_rooms_headers():
    allowed = set(KERNELS_SHARED_PUBLIC) | {f"kernels/{r.name}/{r.name}.h" for r in kernel_rooms()}
    reached_in = []
    for path in sources():
        if path.is_relative_to(SRC / "kernels"):
            continue
        for name in includes(path):
            if name.startswith("kernels/") and name not in allowed:
                reached_in.append(f"{path.relative_to(SRC)} includes {name}")
    assert not reached_in, "outside kernels/, include only its rooms' headers: " + "; ".join(reached_in)


# The ISA flags let a kernel header that needs a target pragma compile on its own here;
# they only enable the instructions for the compiler, nothing runs.
ISA_FLAGS = ["-mavx2", "-mfma", "-mf16c", "-mavx512f", "-mavx512bw", "-mavx512vl", "-mavx512dq", "-mavx512vnni",
             "-mavx512bitalg", "-mavx512bf16", "-mamx-tile", "-mamx-int8", "-mamx-bf16"]


def test_every_kernel_header_compiles_on_its_own():
    """A header that is a fragment of some .cpp (included mid-file, leaning on what that
    file declared before it) is how the old kernels/ hid an include cycle; each kernel
    header must stand alone."""
    import shutil
    import subprocess
    from concurrent.futures import ThreadPoolExecutor

    compiler = shutil.which("g++") or shutil.which("c++")
    assert compiler, "no C++ compiler on PATH"
    headers = sorted((SRC / "kernels").rglob("*.h"))

    def compile_alone(header: Path) -> str | None:
        source = f'#include "{header.relative_to(SRC)}"\n'
        run = subprocess.run([compiler, "-std=c++20", "-fsyntax-only", "-Wall", "-Werror=return-type", *ISA_FLAGS,
                              "-I", str(SRC), "-x", "c++", "-"], input=source, capture_output=True, text=True)
        if run.returncode == 0:
            return None
        return f"{header.relative_to(SRC)}:\n{run.stderr[:1500]}"

    with ThreadPoolExecutor(max_workers=2) as pool:
        failures = [f for f in pool.map(compile_alone, headers) if f]
    assert not failures, "kernel headers that do not compile on their own:\n" + "\n".join(failures)
