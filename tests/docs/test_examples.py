"""Every runnable example of the docs runs as written: each ```python block of docs/*.md and README.md
is one test, executed in a fresh namespace from a temporary working folder.

A block that needs a framework this machine lacks is skipped with the reason (its imports say what it
needs; octopt.optax also needs the XLA FFI handler). A block that is not a whole program (a signature
sketch, a fragment) is marked in the doc by the line ``<!-- doc-test: skip REASON -->`` right above it.
Where an example prints what it claims, ``EXPECTED`` checks the printout.

The ```c and ```csharp blocks (docs/c.md: the C ABI) are whole programs too: each is compiled against
the installed package's C library (octopt.c_library(), its header in the package's include/) with the
C compiler, or with Mono's mcs, and run; they are skipped with the reason where the compiler or Mono
is missing, and are marked ``c_abi``.
"""

from __future__ import annotations

import ast
import importlib
import os
import re
import shutil
import subprocess
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
FENCE = re.compile(r"^```python[ \t]*\n(.*?)^```[ \t]*$", re.DOTALL | re.MULTILINE)
NATIVE_FENCE = re.compile(r"^```(c|csharp)[ \t]*\n(.*?)^```[ \t]*$", re.DOTALL | re.MULTILINE)
SKIP_MARK = re.compile(r"<!--\s*doc-test:\s*skip\b\s*(.*?)\s*-->\s*$")


@dataclass(frozen=True)
class Block:
    doc: str  # path relative to the repository root
    index: int  # 1-based, among the doc's python blocks
    line: int  # 1-based line of the block's first code line in the doc
    code: str
    skip: str | None  # the reason given by a doc-test: skip mark
    lang: str = "python"  # or "c", "csharp"

    @property
    def id(self) -> str:
        return f"{self.doc}#{self.index}" if self.lang == "python" else f"{self.doc}#{self.lang}{self.index}"


def find_blocks() -> list[Block]:
    blocks = []
    for doc in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]:
        text = doc.read_text(encoding="utf-8")
        for k, m in enumerate(FENCE.finditer(text), start=1):
            before = text[: m.start()].rstrip("\n").rsplit("\n", 1)[-1]
            mark = SKIP_MARK.search(before)
            line = text.count("\n", 0, m.start(1)) + 1
            reason = (mark.group(1) or "marked in the doc") if mark else None
            blocks.append(Block(str(doc.relative_to(ROOT)), k, line, m.group(1), reason))
    return blocks


def find_native_blocks() -> list[Block]:
    """The ```c and ```csharp blocks, with ids like docs/c.md#c1 and docs/c.md#csharp1."""
    blocks = []
    for doc in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]:
        text = doc.read_text(encoding="utf-8")
        counts: dict[str, int] = {}
        for m in NATIVE_FENCE.finditer(text):
            lang = m.group(1)
            counts[lang] = counts.get(lang, 0) + 1
            before = text[: m.start()].rstrip("\n").rsplit("\n", 1)[-1]
            mark = SKIP_MARK.search(before)
            line = text.count("\n", 0, m.start(2)) + 1
            reason = (mark.group(1) or "marked in the doc") if mark else None
            blocks.append(Block(str(doc.relative_to(ROOT)), counts[lang], line, m.group(2), reason, lang))
    return blocks


def missing_requirement(code: str) -> str | None:
    """Why this machine cannot run the code (a module it imports does not import), or None."""
    names = []
    for node in ast.walk(ast.parse(code)):
        if isinstance(node, ast.Import):
            names += [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.append(node.module)
    for name in names:
        try:
            importlib.import_module(name)
        except Exception as e:  # noqa: BLE001 - a broken install counts as missing
            return f"needs {name}, which does not import here ({type(e).__name__}: {e})"
        if name in ("octopt.optax", "octopt.jax", "octopt.jax.optax"):
            import octopt

            if not octopt._octopt.xla_ffi_built():
                return f"needs {name}, and octopt was built without the XLA FFI handler"
    return None


# ---- what the examples say they print -------------------------------------------------------------


def _readme(out: str) -> None:
    assert "bytes of state per parameter" in out


def _numpy_md(out: str) -> None:
    assert "codes uint8 (4097,) absmax (17,)" in out
    loss = float(re.search(r"loss ([0-9.e-]+)", out).group(1))
    assert loss < 1e-2
    per_param = float(re.search(r"state bytes per parameter ([0-9.]+)", out).group(1))
    assert per_param == 2 + 8 / 256
    assert "'bits': 8, 'block_size': 256" in out


def _torch_md(out: str) -> None:
    assert "'bits': 32" in out and "'bits': 8, 'block_size': 256" in out
    loss = float(re.search(r"loss ([0-9.]+)", out).group(1))
    assert loss < 0.01


def _torch_md_fsdp(out: str) -> None:
    m = re.search(r"1 rank\(s\): loss ([0-9.]+) at the start, ([0-9.]+) at step 50, ([0-9.]+) at step 51", out)
    start, saved, resumed = (float(v) for v in m.groups())
    assert saved < 0.1 * start and resumed < 2 * saved
    assert "the resumed run equals the uninterrupted one: True" in out
    per_param = float(re.search(r"optimizer checkpoint: ([0-9.]+) bytes per parameter", out).group(1))
    assert 2.0 < per_param <= 2.2  # 8-bit codes of two states, their absmax, DCP's framing
    assert "optimizer state on rank 0:" in out


def _torch_md_trainer(out: str) -> None:
    loss = float(re.search(r"training loss ([0-9.]+)", out).group(1))
    assert loss < 4.0  # from ln(64) = 4.16 for the untrained model


def _jax_md_orbax(out: str) -> None:
    assert "the resumed run equals the uninterrupted one: True" in out
    per_param = float(re.search(r"checkpoint of the optimizer state: ([0-9.]+) bytes per parameter", out).group(1))
    assert per_param < 2.2


def _jax_md(out: str) -> None:
    loss = float(re.search(r"loss ([0-9.]+)", out).group(1))
    assert loss < 1.0
    assert "exp_avg of w: uint8 (64, 80) absmax (20,)" in out
    assert "in place: True" in out


def _c_md_c(out: str) -> None:
    loss = float(re.search(r"loss ([0-9.]+) after 200 steps; 8330 bytes of state", out).group(1))
    assert loss < 0.01  # from 1026 at the start
    assert "status 2: AdamW: unexpected option 'betas[9]'" in out


def _c_md_csharp(out: str) -> None:
    loss = float(re.search(r"loss ([0-9.]+) after 200 steps", out).group(1))
    assert loss < 1e-3
    assert "error: Adam: argument 'params[1]' must have dtype float32 or float16 or bfloat16, got dtype code 7" in out


EXPECTED: dict[str, Callable[[str], None]] = {
    "docs/c.md#c1": _c_md_c,
    "docs/c.md#csharp1": _c_md_csharp,
    "README.md#1": _readme,
    "docs/numpy.md#1": _numpy_md,
    "docs/torch.md#1": _torch_md,
    "docs/torch.md#3": _torch_md_fsdp,
    "docs/torch.md#5": _torch_md_trainer,
    "docs/jax.md#1": _jax_md,
    "docs/jax.md#2": _jax_md_orbax,
}

BLOCKS = find_blocks()
NATIVE_BLOCKS = find_native_blocks()


def test_a_block_whose_framework_is_missing_is_skipped_with_the_reason():
    reason = missing_requirement("import numpy as np\nfrom octopt_no_such_framework import x\n")
    assert reason.startswith("needs octopt_no_such_framework, which does not import here")
    assert "ModuleNotFoundError" in reason
    assert missing_requirement("import numpy as np\nimport octopt\n") is None


def test_every_expectation_names_a_block():
    assert set(EXPECTED) <= {b.id for b in BLOCKS + NATIVE_BLOCKS}, "EXPECTED names a block that no doc has (any more)"
    # a block inserted above one with an expectation shifts the numbers: the check must not land on a skip
    skipped = sorted(b.id for b in BLOCKS if b.id in EXPECTED and b.skip is not None)
    assert not skipped, f"EXPECTED names blocks marked doc-test: skip: {skipped}"


@pytest.mark.parametrize("block", BLOCKS, ids=[b.id for b in BLOCKS])
def test_doc_example_runs(block: Block, capsys, monkeypatch, tmp_path):
    if block.skip is not None:
        pytest.skip(f"{block.id} is no whole program: {block.skip}")
    reason = missing_requirement(block.code)
    if reason is not None:
        pytest.skip(f"{block.id} {reason}")
    monkeypatch.chdir(tmp_path)
    # blank lines before the code: a traceback names the doc and the line in it
    code = compile("\n" * (block.line - 1) + block.code, str(ROOT / block.doc), "exec")
    exec(code, {"__name__": "doc_example"})  # noqa: S102 - our own docs
    out = capsys.readouterr().out
    check = EXPECTED.get(block.id)
    if check is not None:
        check(out)


def _run(cmd: list, cwd: Path, env: dict | None = None) -> str:
    proc = subprocess.run([str(c) for c in cmd], cwd=cwd, capture_output=True, text=True, timeout=300, env=env)
    assert proc.returncode == 0, f"{' '.join(map(str, cmd))} exited with {proc.returncode}:\n{proc.stdout}{proc.stderr}"
    return proc.stdout


@pytest.mark.c_abi
@pytest.mark.parametrize("block", NATIVE_BLOCKS, ids=[b.id for b in NATIVE_BLOCKS])
def test_doc_native_example_runs(block: Block, tmp_path):
    """A C block is compiled as C99 with warnings as errors against the package's C library; a C# block
    with Mono's mcs and run with mono, the library's folder on LD_LIBRARY_PATH."""
    if block.skip is not None:
        pytest.skip(f"{block.id} is no whole program: {block.skip}")
    import octopt

    lib = Path(octopt.c_library())
    # blank lines before the code: a compiler's message names the doc's line
    source = "\n" * (block.line - 1) + block.code
    if block.lang == "c":
        cc = os.environ.get("CC") or shutil.which("cc") or shutil.which("gcc") or shutil.which("clang")
        if cc is None:
            pytest.skip(f"{block.id} needs a C compiler (cc, gcc or clang)")
        (tmp_path / "example.c").write_text(source)
        include = Path(octopt.__file__).parent / "include"
        flags = ["-std=c99", "-Wall", "-Wextra", "-Wpedantic", "-Werror", f"-I{include}"]
        _run([cc, *flags, "example.c", lib, f"-Wl,-rpath,{lib.parent}", "-lm", "-o", "example"], tmp_path)
        out = _run([tmp_path / "example"], tmp_path)
    else:
        mcs, mono = shutil.which("mcs"), shutil.which("mono")
        if mcs is None or mono is None:
            pytest.skip(f"{block.id} needs Mono (apt-get install mono-mcs mono-runtime)")
        (tmp_path / "Example.cs").write_text(source)
        _run([mcs, "-nologo", "-out:Example.exe", "Example.cs"], tmp_path)
        env = dict(os.environ)
        env["LD_LIBRARY_PATH"] = os.pathsep.join(p for p in (str(lib.parent), env.get("LD_LIBRARY_PATH")) if p)
        out = _run([mono, "Example.exe"], tmp_path, env)
    check = EXPECTED.get(block.id)
    assert check is not None, f"{block.id}: a native example must say what it prints (EXPECTED)"
    check(out)
