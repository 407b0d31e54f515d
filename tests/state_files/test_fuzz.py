"""A bounded run of the state-file fuzzer (fuzz/README.md): the seed corpus and the kept regressions
(every run), then, marked ``fuzz`` and left out of the everyday run (``pytest -m fuzz``), OCTOPT_FUZZ_RUNS
(default 100000) deterministic mutations of the seed corpus with the built-in mutator and, where
atheris is installed, a short libFuzzer run. Any exception other than StateFileError / OSError /
ValueError, a crash, or inspect disagreeing with load fails it."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

FUZZ = Path(__file__).resolve().parent / "fuzz"

RUNS = int(os.environ.get("OCTOPT_FUZZ_RUNS", "100000"))


@pytest.fixture(scope="module")
def target(fuzz_state_file):
    t = fuzz_state_file.Target()
    yield t
    t.close()


@pytest.mark.parametrize("name", sorted(p.name for p in (FUZZ / "corpus").iterdir()))
def test_corpus_file_loads(target, name):
    loaded = target.loaded
    target((FUZZ / "corpus" / name).read_bytes())
    assert target.loaded == loaded + 1, f"seed {name} no longer loads"


@pytest.mark.parametrize("name", sorted(p.name for p in (FUZZ / "regressions").iterdir()))
def test_regression(target, name, fuzz_state_file):
    target.opt = fuzz_state_file.make_optimizer()
    target((FUZZ / "regressions" / name).read_bytes())


@pytest.mark.fuzz
def test_builtin_mutator(target, tmp_path, fuzz_state_file):
    done = fuzz_state_file.run_builtin(RUNS, seed=0, crash_dir=tmp_path, target=target)
    print(f"fuzz smoke: {done} inputs ran clean, {target.loaded} loaded")
    assert done >= RUNS
    assert target.loaded > RUNS // 20, "the mutator hardly produced loadable files: it no longer gets past the checks"


@pytest.mark.fuzz
def test_atheris(tmp_path):
    pytest.importorskip("atheris")
    corpus = tmp_path / "corpus"
    shutil.copytree(FUZZ / "corpus", corpus)
    runs = max(RUNS // 5, 1000)
    proc = subprocess.run(
        [
            sys.executable,
            str(FUZZ / "fuzz_state_file.py"),
            str(corpus),
            str(FUZZ / "regressions"),
            f"-runs={runs}",
            "-max_len=8192",
            f"-artifact_prefix={tmp_path}/",
        ],
        capture_output=True,
        text=True,
        timeout=170,
        cwd=tmp_path,
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    assert f"Done {runs} runs" in proc.stderr
