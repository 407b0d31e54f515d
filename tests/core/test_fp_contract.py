"""Every target that compiles octopt's numerics is built without floating-point contraction (finding 10 of
issue 21): GCC contracts a * b + c into one FMA by default where the target has FMA (aarch64 always), which
rounds once instead of twice; the extension's own inline numerics (the CPU XLA handler's stores, NAdam's
products) would then differ from the core's and from the CUDA backend's (--fmad=false).

Checked two ways: the built core and extension report the flag they were compiled with, and every target
that a CMakeLists.txt of this repository defines goes through octopt_numerics_flags (cmake/numerics.cmake)."""

import re
from pathlib import Path

import octopt
from octopt import _octopt

ROOT = Path(__file__).resolve().parents[2]
# Not part of octopt's build: build trees, the examples and the C ABI's C test program (projects of their own,
# built against an installed octopt; the C program sets -ffp-contract=off itself) and a separate throwaway
# project that times argument hand-off (bench/handoff_probe).
SKIP = ("build/", "examples/", "tests/c_abi/", "bench/handoff_probe/")


def test_built_core_and_extension_have_no_contraction():
    assert octopt.info()["fp_contract"] == {"core": "off", "extension": "off"}
    assert tuple(_octopt.fp_contract()) == ("off", "off")


def _targets(text: str) -> list[str]:
    out = []
    for m in re.finditer(r"\b(add_library|add_executable|nanobind_add_module)\(\s*([\w${}:]+)", text):
        if m.group(1) == "add_library" and re.match(r"\s*[\w${}:]+\s+ALIAS\b", text[m.end(1) + 1 :]):
            continue
        out.append(m.group(2))
    return out


def test_every_numerics_target_gets_the_flags():
    missing = []
    for path in sorted(ROOT.rglob("CMakeLists.txt")):
        rel = path.relative_to(ROOT).as_posix()
        if rel.startswith(SKIP):
            continue
        text = path.read_text()
        for target in _targets(text):
            if not re.search(r"octopt_numerics_flags\(\s*" + re.escape(target) + r"\s*\)", text):
                missing.append(f"{rel}: {target}")
    assert not missing, "targets without octopt_numerics_flags: " + ", ".join(missing)


def test_the_flags_are_what_they_say():
    text = (ROOT / "cmake/numerics.cmake").read_text()
    assert "-ffp-contract=off" in text and "--fmad=false" in text
    assert "-ffp-contract=off" not in (ROOT / "cpp/CMakeLists.txt").read_text(), "one place for the flag"
