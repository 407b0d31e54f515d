"""An optimizer's definition is checked by the compiler (cpp/include/octopt/numerics/optim_list.hpp, rules/).

Each case copies the core's headers, breaks them the way a contributor might (a listed optimizer without its
definition, a definition without its list entry, a definition missing its update rule, more state slots than
kMaxStateSlots), and compiles a translation unit that includes the dispatch: it must fail, naming the problem.
The unchanged copy compiles, so a failure is the break's and not the setup's. Syntax checks only (about a
second each).
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from .conftest import cxx

_INCLUDE = Path(__file__).resolve().parents[2] / "cpp" / "include"
_TU = '#include "octopt/optim_table.hpp"\nint main() { return octopt::optim_state_slots(octopt::OptimKind::adam); }\n'

_MUON_RULE = """#pragma once
#include "../optim_rule.hpp"
namespace octopt {
template <>
struct OptimRule<OptimKind::example> : RuleDefaults {
  static constexpr const char* name = "example";
  static constexpr const char* class_name = "Example";
  static constexpr const char* summary = "test";
  static constexpr SlotSpec slots[] = {SLOTS};
  static constexpr std::array options{"lr"};
  static constexpr int num_betas = 0;
  static constexpr std::array<HParamValue, 0> defaults{};
  UPDATE
};
}  // namespace octopt
"""
_UPDATE = "static OCTOPT_HD float update(const SlotScalars&, float p, float, SlotValues&, float*) { return p; }"


def _list_entry(root: Path) -> None:
    path = root / "octopt" / "numerics" / "optim_list.hpp"
    text = path.read_text()
    assert "  X(nadam)" in text
    path.write_text(text.replace("  X(nadam)", "  X(nadam) X(example)"))


def _rule_file(root: Path, slots: str = '{"momentum_buffer", true, true}', update: str = _UPDATE) -> None:
    (root / "octopt" / "numerics" / "rules" / "example.hpp").write_text(
        _MUON_RULE.replace("SLOTS", slots).replace("UPDATE", update)
    )
    path = root / "octopt" / "numerics" / "optim_rules.hpp"
    text = path.read_text()
    assert '#include "rules/sgd.hpp"' in text
    path.write_text(text.replace('#include "rules/sgd.hpp"', '#include "rules/sgd.hpp"\n#include "rules/example.hpp"'))


def _unchanged(root: Path) -> None:
    pass


def _listed_without_rule(root: Path) -> None:
    _list_entry(root)


def _rule_without_entry(root: Path) -> None:
    _rule_file(root)


def _rule_without_update(root: Path) -> None:
    _list_entry(root)
    _rule_file(root, update="")


def _too_many_slots(root: Path) -> None:
    _list_entry(root)
    _rule_file(
        root, slots='{"a", true, true}, {"b", true, false}, {"c", true, false}, {"d", false, false}, {"e", true, false}'
    )


def _complete_new_rule(root: Path) -> None:
    _list_entry(root)
    _rule_file(root)


# (break, expected to compile, a phrase the compiler's message must contain)
CASES = {
    "unchanged": (_unchanged, True, None),
    "new optimizer, list entry and definition": (_complete_new_rule, True, None),
    "listed without definition": (_listed_without_rule, False, "OptimRule<octopt::OptimKind::example>"),
    "definition without list entry": (_rule_without_entry, False, "example"),
    "definition without update": (_rule_without_update, False, "update"),
    "more slots than kMaxStateSlots": (_too_many_slots, False, "kMaxStateSlots"),
}


@pytest.mark.parametrize("case", list(CASES))
def test_definition_checked_by_compiler(case: str, tmp_path: Path) -> None:
    compiler = cxx()
    if compiler is None:
        pytest.skip("no C++ compiler found")
    root = tmp_path / "include"
    shutil.copytree(_INCLUDE, root)
    brk, compiles, phrase = CASES[case]
    brk(root)
    tu = tmp_path / "tu.cpp"
    tu.write_text(_TU)
    r = subprocess.run(
        [compiler, "-std=c++17", "-fsyntax-only", "-I", str(root), str(tu)], capture_output=True, text=True
    )
    if compiles:
        assert r.returncode == 0, r.stderr[-4000:]
    else:
        assert r.returncode != 0, f"{case}: compiled, but must not"
        assert phrase in r.stderr, r.stderr[-4000:]
