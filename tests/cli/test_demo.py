"""`octopt demo`: runs in-process with a short schedule and checks its plot and printed summary."""

from __future__ import annotations

import contextlib
import io
import re
import struct
import sys

import pytest

from octopt import cli

EPOCHS = 2
ROW = re.compile(
    r"^(?P<bits>32|8)-bit Adam\s+(?P<loss>[\d.]+)\s+(?P<acc>[\d.]+)%\s+(?P<bytes>[\d,]+)\s+"
    r"(?P<q>\d+)/(?P<n>\d+)\s+(?P<dw>[\d.e+-]+)\s+[\d.]+s$",
    re.M,
)


def _run_demo(argv: list[str]) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        rc = cli.main(["demo", *argv])
    return rc, out.getvalue(), err.getvalue()


@pytest.fixture(scope="module")
def demo_run(tmp_path_factory):
    pytest.importorskip("sklearn", reason="the demo's data comes from scikit-learn")
    pytest.importorskip("matplotlib", reason="the demo plots with matplotlib")
    png = tmp_path_factory.mktemp("demo") / "curves.png"
    rc, out, err = _run_demo(["--epochs", str(EPOCHS), "--seed", "0", "--out", str(png)])
    assert rc == 0, err
    rows = {int(m["bits"]): m for m in ROW.finditer(out)}
    return png, out, rows


def test_writes_a_valid_png(demo_run):
    png, out, _ = demo_run
    data = png.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    assert data[12:16] == b"IHDR"
    width, height = struct.unpack(">II", data[16:24])
    assert width >= 400 and height >= 300
    assert data[-12:-4] == b"\x00\x00\x00\x00IEND"  # complete: ends with the empty IEND chunk
    from matplotlib.image import imread

    assert imread(png).shape[:2] == (height, width)
    assert f"loss curves written to {png}" in out


def test_summary_lists_both_runs_and_state_bytes(demo_run):
    _, out, rows = demo_run
    assert sorted(rows) == [8, 32], out
    # 64-256-256-10: W1 (16384) and W2 (65536) exceed min_8bit_size=4096; everything else stays 32-bit
    n = 64 * 256 + 256 + 256 * 256 + 256 + 256 * 10 + 10
    n8 = 64 * 256 + 256 * 256
    absmax_bytes = 2 * 4 * (64 * 256 // 256 + 256 * 256 // 256)  # m and v, one float32 per 256-block
    assert int(rows[32]["bytes"].replace(",", "")) == 8 * n
    assert int(rows[8]["bytes"].replace(",", "")) == 2 * n8 + absmax_bytes + 8 * (n - n8)
    assert (rows[32]["q"], rows[8]["q"], rows[8]["n"]) == ("0", "2", "6")
    assert "3.56x smaller" in out
    for r in rows.values():
        assert float(r["acc"]) > 85.0  # two epochs already classify digits well


def test_8bit_loss_close_to_32bit(demo_run):
    _, out, rows = demo_run
    rel = float(re.search(r"relative difference ([+-][\d.]+)%", out).group(1))
    l32, l8 = float(rows[32]["loss"]), float(rows[8]["loss"])
    assert abs(rel - 100 * (l8 - l32) / l32) < 0.5  # the printed figure matches the table (rounded losses)
    assert abs(rel) < 5.0, out


def test_8bit_steps_stay_near_lr(demo_run):
    # regression: tiny second moments used to round to 0, so a zero-gradient step moved a weight by
    # lr*m_hat/eps (hundreds of times lr); unsigned state maps now keep positive values nonzero
    _, _, rows = demo_run
    assert float(rows[8]["dw"]) < 10 * float(rows[32]["dw"])


def test_missing_package_names_the_install_command(monkeypatch):
    monkeypatch.setitem(sys.modules, "sklearn", None)  # makes `import sklearn` raise ImportError
    rc, out, err = _run_demo(["--no-plot"])
    assert rc == 1 and out == ""
    assert "scikit-learn" in err and 'pip install "octopt[demo]"' in err
