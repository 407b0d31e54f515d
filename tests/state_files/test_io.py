"""State files (docs/format.md): operating-system errors, atomic writes, ``inspect`` and the
``octopt inspect`` command.
"""

from __future__ import annotations

import json
import re
import resource
import signal
import subprocess
import sys

import numpy as np
import pytest

from octopt import _octopt
from octopt import state_file as sf
from octopt.cli import main as cli_main
from octopt.state_file import StateFileError


# --------------------------------------------------------------------------------------------------
# I/O errors and atomic writes


def test_os_errors(tmp_path):
    missing = tmp_path / "missing.safetensors"
    with pytest.raises(FileNotFoundError, match=re.escape(f"read_state_file: cannot open '{missing}'")):
        sf.load(missing)
    with pytest.raises(FileNotFoundError, match=re.escape(f"inspect_state_file: cannot open '{missing}'")):
        sf.inspect(missing)
    with pytest.raises(IsADirectoryError, match="read_state_file: cannot read"):
        sf.load(tmp_path)
    with pytest.raises(StateFileError, match="read_state_file: '/dev/null': not a regular file"):
        sf.load("/dev/null")


def test_atomic_replace_leaves_no_temporaries(tmp_path, files_in):
    path = tmp_path / "s.safetensors"
    sf.save(path, {"a": np.zeros(3, np.float32)}, {"v": "1"})
    sf.save(path, {"a": np.ones(3, np.float32)}, {"v": "2"})
    got, meta = sf.load(path)
    assert meta == {"v": "2"} and got["a"].tolist() == [1, 1, 1]
    assert files_in(tmp_path) == ["s.safetensors"]


def test_failed_writes_keep_the_old_file(tmp_path, files_in):
    path = tmp_path / "s.safetensors"
    sf.save(path, {"a": np.arange(3, dtype=np.float32)}, {"v": "old"})
    before = path.read_bytes()

    with pytest.raises(TypeError, match="save_state_file: tensor 'c' has element type complex64"):
        sf.save(path, {"a": np.zeros(3, np.float32), "c": np.zeros(2, np.complex64)})
    with pytest.raises(ValueError, match="metadata key 'octopt.crc32c' is reserved"):
        sf.save(path, {}, {"octopt.crc32c": "x"})
    with pytest.raises(ValueError, match="tensor name '__a' starts with '__' \\(reserved\\)"):
        sf.save(path, {"__a": np.zeros(1)})
    with pytest.raises(ValueError, match="tensor name '' is empty"):
        sf.save(path, {"": np.zeros(1)})
    with pytest.raises(ValueError, match="is longer than 1024 bytes"):
        sf.save(path, {"x" * 1025: np.zeros(1)})
    with pytest.raises(TypeError, match="metadata key 'v' must map to a str, got int"):
        sf.save(path, {}, {"v": 1})
    # the rename fails: the target is a folder
    folder = tmp_path / "folder"
    folder.mkdir()
    with pytest.raises(IsADirectoryError, match=re.escape(f"cannot rename the temporary file onto '{folder}'")):
        sf.save(folder, {"a": np.zeros(1)})
    # the temporary cannot be created: the parent is a regular file (fails for root too)
    with pytest.raises(NotADirectoryError, match="write_state_file: cannot create a temporary file next to"):
        sf.save(path / "child.safetensors", {"a": np.zeros(1)})
    # the disk fills up half way through the data (a file-size limit stands in for a full disk)
    old_handler = signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
    resource.setrlimit(resource.RLIMIT_FSIZE, (4096, hard))
    try:
        with pytest.raises(OSError, match=re.escape(f"write_state_file: cannot write '{path}' (temporary")) as e:
            sf.save(path, {"big": np.zeros(100_000, np.uint8)})
    finally:
        resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))
        signal.signal(signal.SIGXFSZ, old_handler)
    assert "File too large" in str(e.value)
    assert path.read_bytes() == before
    assert files_in(tmp_path) == ["folder", "s.safetensors"]


def test_save_argument_errors(tmp_path):
    path = tmp_path / "s.safetensors"
    with pytest.raises(TypeError, match="save: argument 'tensors' must be a mapping"):
        sf.save(path, [("a", np.zeros(1))])
    with pytest.raises(TypeError, match="save: tensor names must be str, got int"):
        sf.save(path, {1: np.zeros(1)})
    with pytest.raises(TypeError, match="tensor 'o' has dtype object"):
        sf.save(path, {"o": np.array([None])})
    with pytest.raises(TypeError, match="save_state_file: each entry of 'tensors' must be"):
        _octopt.save_state_file(str(path), [np.zeros(1)], {})
    with pytest.raises(TypeError, match="save_state_file: tensor 'x' must be an array"):
        _octopt.save_state_file(str(path), [("x", "not an array")], {})
    with pytest.raises(ValueError, match="must be C-contiguous"):
        _octopt.save_state_file(str(path), [("x", np.zeros((4, 4))[:, 1])], {})
    assert not path.exists()


# --------------------------------------------------------------------------------------------------
# inspect and the command line


def test_inspect_report(tmp_path, two_tensors, write, build):
    path = tmp_path / "s.safetensors"
    sf.save(path, {"m": np.arange(4, dtype=np.float32), "c": np.arange(3, dtype=np.uint8)}, {"octopt.step": "5"})
    r = sf.inspect(path)
    assert r["valid"] and r["error"] is None
    assert (r["format"], r["format_version"], r["header_checksum"]) == ("octopt-state", "1", "ok")
    assert r["file_size"] == path.stat().st_size == 8 + r["header_size"] + r["data_size"]
    assert r["metadata"]["octopt.step"] == "5"
    rows = [(t["name"], t["dtype"], t["shape"], t["data_offsets"], t["nbytes"], t["checksum"]) for t in r["tensors"]]
    assert rows == [("m", "F32", [4], [0, 16], 16, "ok"), ("c", "U8", [3], [16, 19], 3, "ok")]
    assert all(t["crc32c"] == t["crc32c_computed"] for t in r["tensors"])
    assert r["checksums"] == {"ok": 2, "bad": 0, "missing": 0}

    entries, data = two_tensors()
    r = sf.inspect(write(tmp_path, build(entries, data, crcs={"__header__": "00000000", "a": "00000000"})))
    assert not r["valid"] and "no checksum for tensor 'b'" in r["error"]
    assert [t["checksum"] for t in r["tensors"]] == ["bad", "missing"] and r["header_checksum"] == "bad"

    r = sf.inspect(write(tmp_path, b"\x01\x02"))
    assert not r["valid"] and "too short" in r["error"] and r["tensors"] == [] and r["header_size"] is None


def test_cli_inspect(tmp_path, capsys, write):
    good = tmp_path / "good.safetensors"
    sf.save(good, {"m": np.arange(4, dtype=np.float32), "q": np.arange(3, dtype=np.uint8)}, {"octopt.step": "5"})
    assert cli_main(["inspect", str(good)]) == 0
    out = capsys.readouterr().out
    assert "octopt-state, version 1" in out and "octopt.step = 5" in out and "valid" in out
    assert re.search(r"m\s+F32\s+\[4\]\s+16\s+[0-9a-f]{8}\s+ok", out)
    assert re.search(r"q\s+U8\s+\[3\]\s+3\s+[0-9a-f]{8}\s+ok", out)

    raw = bytearray(good.read_bytes())
    raw[-1] ^= 1
    bad = write(tmp_path, bytes(raw), "bad.safetensors")
    assert cli_main(["inspect", str(bad)]) == 1
    captured = capsys.readouterr()
    assert re.search(r"q\s+U8\s+\[3\]\s+3\s+[0-9a-f]{8}\s+bad", captured.out) and "INVALID" in captured.out
    assert "tensor 'q': checksum mismatch" in captured.err

    assert cli_main(["inspect", "--json", str(bad)]) == 1
    assert json.loads(capsys.readouterr().out)["checksums"] == {"ok": 1, "bad": 1, "missing": 0}

    cut = write(tmp_path, bytes(raw[:20]), "cut.safetensors")
    assert cli_main(["inspect", str(cut)]) == 1
    assert "exceeds the 12 bytes that follow it (truncated?)" in capsys.readouterr().err

    assert cli_main(["inspect", str(tmp_path / "missing")]) == 1
    assert "No such file or directory" in capsys.readouterr().err


def test_cli_inspect_exit_status_in_a_process(tmp_path, two_tensors, write, build):
    entries, data = two_tensors()
    bad = bytearray(build(entries, data))
    bad[-1] ^= 1
    path = write(tmp_path, bytes(bad))
    proc = subprocess.run(
        [sys.executable, "-m", "octopt", "inspect", str(path)], capture_output=True, text=True, timeout=60
    )
    assert proc.returncode == 1 and "tensor 'b': checksum mismatch" in proc.stderr
