"""Unit tests of ``reference.cache.key``: canonical forms, the breakdown and the SPMD hook."""

from __future__ import annotations

import hashlib

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from reference.cache.key import (
    COMPONENTS,
    KEY_LENGTH,
    canonical_hlo,
    create_cache_hash,
    explain_difference,
    hlo_digest,
)
from reference.core.errors import CompilerArgumentError
from reference.core.specs import TensorSpec

HLO = """module @m {
  func.func @main(%arg0: tensor<4xf32>) -> tensor<4xf32> {
    %0 = stablehlo.add %arg0, %arg0 : tensor<4xf32>
    return %0 : tensor<4xf32>
  }
}
"""
LOCATED = """module @m {
  func.func @main(%arg0: tensor<4xf32> loc("a.py":1:1)) -> tensor<4xf32> {
    %0 = stablehlo.add %arg0, %arg0 : tensor<4xf32> loc(#loc2)
    return %0 : tensor<4xf32> loc(callsite("f"("/x/b.py":2:3) at fused["g", "h"(#loc2)]))
  } loc(#loc1)
} loc(#loc)
#loc = loc(unknown)
#loc1 = loc("/home/me/model.py":10:4)
#loc2 = loc("model.py":11:8)
"""
SPECS = [TensorSpec("float32", (4,), (1,))]


def test_locations_are_stripped_and_nothing_else():
    assert canonical_hlo(LOCATED) == HLO.encode()
    assert canonical_hlo(HLO) == HLO.encode()
    assert canonical_hlo('%0 = "foo.bar"() {sym = "block(x)"} : () -> ()\n') == b'%0 = "foo.bar"() {sym = "block(x)"} : () -> ()\n'


@settings(max_examples=50)
@given(body=st.lists(st.text(alphabet="abc%=() \"", max_size=60), max_size=40), pad=st.integers(0, 600_000))
def test_the_streamed_digest_equals_the_digest_of_the_canonical_text(body, pad):
    lines = ["x" * pad, *body]  # the padding pushes lines across chunk boundaries
    plain = "\n".join(lines) + "\n}\n"
    located = "\n".join(f"{ln} loc(#loc{i})" for i, ln in enumerate(lines)) + "\n} loc(#loc)\n#loc = loc(unknown)\n"
    expected = hashlib.sha256(canonical_hlo(plain)).hexdigest()
    assert hlo_digest(plain) == expected == hashlib.sha256(plain.encode()).hexdigest()
    assert hlo_digest(plain.encode()) == expected
    assert hlo_digest(located) == expected
    assert hlo_digest(located.encode()) == expected


def test_spec_forms_agree():
    triple = [("float32", (4,), (1,))]
    mapping = [{"dtype": "torch.float32", "shape": [4], "stride": [1]}]
    assert create_cache_hash(HLO, [], SPECS) == create_cache_hash(HLO, [], triple) == create_cache_hash(HLO, [], mapping)


def test_breakdown_names_the_component_that_differs():
    k1, b1 = create_cache_hash(HLO, ["-O1"], SPECS, breakdown=True)
    k2, b2 = create_cache_hash(HLO, ["-O2"], SPECS, breakdown=True)
    assert len(k1) == KEY_LENGTH and k1 != k2
    assert set(b1["digests"]) == set(COMPONENTS)
    assert explain_difference(b1, b2) == ["compiler_args"]
    assert b1["components"]["compiler_args"] == [["-O", "1"]]


def test_the_normalizer_hook_sees_the_text_and_its_output_is_what_is_keyed():
    seen = []

    def normalize(text: str) -> str:
        seen.append(text)
        return text.replace('"tp_group_rank3"', '"mesh0"')

    a = HLO.replace("@main", '@main attributes {group = "tp_group_rank3"}')
    b = HLO.replace("@main", '@main attributes {group = "mesh0"}')
    assert create_cache_hash(a, [], SPECS, hlo_normalizer=normalize) == create_cache_hash(b, [], SPECS)
    assert seen == [a]


def test_replica_groups_as_a_mapping_are_order_free_by_name():
    m1 = {"tp": [[0, 1], [2, 3]], "dp": [[0, 2], [1, 3]]}
    m2 = {"dp": [[0, 2], [1, 3]], "tp": [[0, 1], [2, 3]]}
    assert create_cache_hash(HLO, [], SPECS, replica_groups=m1) == create_cache_hash(HLO, [], SPECS, replica_groups=m2)


def test_a_bad_argument_list_raises_a_typed_error_naming_the_flag():
    with pytest.raises(CompilerArgumentError, match="--lnc"):
        create_cache_hash(HLO, ["--lnc"], SPECS)


def test_the_runtime_version_is_one_of_the_tool_versions():
    """An artifact built beside one runtime may not load in another: the runtime's version keys it."""
    import importlib.metadata as md

    from reference.cache.key import create_cache_hash, tool_versions

    versions = tool_versions()
    assert versions["runtime"] == md.version("iree-base-runtime")
    spec = [("float32", [4], [1])]
    assert create_cache_hash("module {}", [], spec, versions) != create_cache_hash(
        "module {}", [], spec, {**versions, "runtime": versions["runtime"] + ".post1"})


def test_the_compiler_version_is_read_without_importing_the_compiler():
    """The key's compiler version is ``iree.compiler.version.VERSION``, read from its file: a warm
    process that compiles nothing never loads the compiler's libraries."""
    import subprocess
    import sys

    code = (
        "import sys\n"
        "from reference.cache.key import tool_versions\n"
        "v = tool_versions()['compiler']\n"
        "assert 'iree.compiler' not in sys.modules, 'the compiler package was imported'\n"
        "import iree.compiler.version as m\n"
        "assert v == m.VERSION, (v, m.VERSION)\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
