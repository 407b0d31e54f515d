"""`octopt bench`: a functional check of the CLI at tiny sizes (never a speed assertion: benchmarks live
in bench/ and time nothing here). It runs as a subprocess from an empty folder, as an installed `octopt`
would, because the benchmark sets XLA_FLAGS and imports the peers, which must not leak into this process."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys

import pytest

from octopt import cli

OCTOPT_ROWS = [f"octopt {cls} {bits}-bit" for cls in ("Adam", "AdamW") for bits in (8, 4, 32)]
CASES = ["4096", "4096x4"]
OVERHEAD_TINY = [
    "--overhead-tensors",
    "4",
    "--overhead-sizes",
    "64",
    "--overhead-rounds",
    "1",
    "--overhead-steps",
    "2",
    "--overhead-warmup",
    "1",
]


def _installed(*names: str) -> bool:
    return all(importlib.util.find_spec(n) is not None for n in names)


@pytest.fixture(scope="module")
def bench_run(tmp_path_factory):
    cwd = tmp_path_factory.mktemp("bench")
    out = cwd / "results"
    cmd = [
        sys.executable,
        "-m",
        "octopt",
        "bench",
        "--sizes",
        *CASES,
        "--repeats",
        "1",
        "--warmup",
        "1",
        "--skip",
        "bnb",
        "torchao",
        "--stream-size",
        "2^16",
        "--memory-size",
        "2^16",
        "--memory-steps",
        "1",
        *OVERHEAD_TINY,
        "--out",
        str(out),
    ]
    p = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, timeout=120, env=dict(os.environ))
    assert p.returncode == 0, p.stderr[-3000:]
    return json.loads((out / "step.json").read_text()), p.stdout, out


# The tests that take bench_run are marked slow: the benchmark subprocess imports torch and jax and times
# every implementation (20-40 s here), so they are left out of the everyday run (pytest -m slow).
@pytest.mark.slow
def test_every_octopt_row_is_measured_in_every_case(bench_run):
    data, _, _ = bench_run
    for case in CASES:
        got = {r["impl"]: r for r in data["rows"] if r["case"] == case}
        for name in OCTOPT_ROWS:
            r = got[name]
            assert len(r["times_s"]) == 1 and r["median_s"] > 0 and r["ns_per_param"] > 0, r
            assert r["of_floor"] > 0 and r["gbps"] > 0
    assert data["floor_gbps"] == max(s["gbps"] for s in data["stream"])
    assert {(s["kernel"], s["threads"]) for s in data["stream"]} == {
        ("copy", 1),
        ("copy", 2),
        ("triad", 1),
        ("triad", 2),
    }


@pytest.mark.slow
def test_peers_are_measured_or_left_out_with_a_reason(bench_run):
    data, out, _ = bench_run
    impls = {r["impl"] for r in data["rows"]}
    left = " ".join(data["left_out"])
    assert "bnb: --skip bnb" in left and "torchao: --skip torchao" in left
    if _installed("torch"):
        assert {"torch Adam fused", "torch Adam foreach"} <= impls
        assert all(r["x_fused"] is not None for r in data["rows"] if r["times_s"])
    else:
        assert "torch: not importable" in left
    if _installed("jax", "optax"):
        assert "optax adam jit" in impls
    else:
        assert "optax: not importable" in left
    for line in data["left_out"]:
        assert f"skipped {line}" in out


@pytest.mark.slow
def test_memory_section_has_a_row_per_implementation(bench_run):
    data, out, _ = bench_run
    names = [m["impl"] for m in data["memory"]]
    octopt_rows = ["octopt Adam 8-bit", "octopt Adam 4-bit", "octopt Adam 32-bit"]
    assert names[:3] == octopt_rows, data["memory_failed"]
    for m in data["memory"]:
        assert m["n"] == 2**16 and m["peak_kib"] >= m["rss_before_kib"] > 0
        assert m["method"] in ("clear_refs", "sampling")
    assert "temporaries MiB" in out


@pytest.mark.slow
def test_table_and_chart_are_written(bench_run):
    data, out, folder = bench_run
    assert "of floor" in out and "x fused" in out and f"saved {folder / 'step.json'}" in out
    if _installed("matplotlib"):
        assert (folder / "step.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def _check_overhead_rows(data: dict, out: str) -> None:
    rows = {(r["path"], r["bits"]): r for r in data["overhead"]["rows"]}
    torch_rows = [("torch", 32), ("torch", 8), ("torch-foreach", 32), ("torch-fused", 32)]
    want = [("numpy", 32), ("numpy", 8)] + (torch_rows if _installed("torch") else [])
    for key in want:
        r = rows[key]
        assert r["tensors"] == 4 and r["elems"] == 64 and len(r["step_rounds_s"]) == 1, r
        assert (
            r["step_us"] > 0
            and r["kernel_us"] > 0
            and r["overhead_us_per_tensor"] == pytest.approx((r["step_us"] - r["kernel_us"]) / 3)
        )
    assert rows[("numpy", 8)]["state_bits"] == [8] and rows[("numpy", 32)]["target_us"] == 2.0
    assert "per-tensor overhead" in out and "overhead us/tensor" in out


def test_overhead_section_is_measured(bench_run):
    data, out, _ = bench_run
    _check_overhead_rows(data, out)


def test_overhead_only_runs_just_that_section(tmp_path):
    cmd = [
        sys.executable,
        "-m",
        "octopt",
        "bench",
        "--overhead-only",
        *OVERHEAD_TINY,
        "--no-chart",
        "--out",
        str(tmp_path / "r"),
    ]
    p = subprocess.run(
        cmd, cwd=tmp_path, capture_output=True, text=True, timeout=120, env=dict(os.environ), check=False
    )
    assert p.returncode == 0, p.stderr[-3000:]
    data = json.loads((tmp_path / "r" / "step.json").read_text())
    assert data["rows"] == [] and data["stream"] == [] and data["memory"] == []
    _check_overhead_rows(data, p.stdout)


def test_a_bad_size_is_refused_with_its_text(capsys, tmp_path):
    assert cli.main(["bench", "--sizes", "10x3", "--out", str(tmp_path / "r")]) == 2
    assert "bad size '10x3'" in capsys.readouterr().err
