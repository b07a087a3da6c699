"""Unit tests of the scope module, the level helper and the metadata schema (no compiling)."""

from __future__ import annotations

import json

import pytest

from reference.compiler.scope import apply_platform_compiler_args, apply_scoped_compiler_args, scoped_compiler_args
from reference.core.errors import BackendOptionError, CompilerArgumentError
from reference.core.schema import SCHEMA_VERSION, ArtifactMetadata, MetadataError
from reference.runner.opt_level import optimization_level, with_optimization_level


@pytest.mark.parametrize(
    "args,level,expected",
    [
        (["-O1", "--target", "trn2"], 3, ["-O3", "--target", "trn2"]),
        (["--target", "trn2"], 2, ["--target", "trn2", "-O2"]),
        (["--optlevel", "1", "--lnc", "2"], 3, ["-O3", "--lnc", "2"]),
        (["--optlevel=2", "-O1"], 1, ["-O1"]),
        (["--target trn2 -O1", "--auto-cast", "all"], 3, ["--target trn2 -O3", "--auto-cast", "all"]),
        (["-O2 --optlevel 3"], 1, ["-O1"]),
        (None, 2, ["-O2"]),
        ("-O1 --target trn2", 3, ["-O3 --target trn2"]),
    ],
)
def test_with_optimization_level(args, level, expected):
    assert with_optimization_level(args, level) == expected


def test_with_optimization_level_result_parses_with_the_level_set():
    out = with_optimization_level(["--model-type", "transformer", "--optlevel", "1"], 3)
    assert optimization_level(out) == 3
    assert apply_platform_compiler_args({"compiler_args": out})["compiler_args"][-2:] == ["--target", "trn2"]


@pytest.mark.parametrize("args", [["--optlevel"], ["--optlevel", "5"], ["--optlevel=x"], ["-O0"], ["-Ofast"], [3]])
def test_with_optimization_level_rejects_malformed_input(args):
    with pytest.raises(CompilerArgumentError):
        with_optimization_level(args, 2)


@pytest.mark.spec("000.scope.concrete-list-only")
def test_scope_rejects_a_string_or_non_strings():
    with pytest.raises(BackendOptionError, match="list of strings"):
        with scoped_compiler_args("-O3"):
            pass
    with pytest.raises(BackendOptionError):
        with scoped_compiler_args(["-O3", 3]):
            pass
    assert apply_scoped_compiler_args({"compiler_args": ["-O1"]}) == {"compiler_args": ["-O1"]}


def test_scope_value_is_copied():
    args = ["-O2"]
    with scoped_compiler_args(args):
        args.append("--target")
        assert apply_scoped_compiler_args({})["compiler_args"] == ["-O2"]


def _doc(**fields):
    base = {"cache_key": "k" * 32, "graph_name": "g", "input_specs": [], "output_specs": []}
    return json.dumps({**base, **fields})


def test_schema_v0_staged_entry_reads_without_arguments():
    meta = ArtifactMetadata.from_json(_doc(hlo_file="graph.hlo", compiler_args=["-O3"]))
    assert meta.compiler_args is None  # v0 recorded none, whatever the document says
    assert meta.stage == "captured" and meta.schema_version == SCHEMA_VERSION


def test_schema_v1_entry_keeps_arguments_and_is_compiled():
    meta = ArtifactMetadata.from_json(_doc(schema_version=1, compiler_args=["-O2"], artifact_size=10, hlo_file="x"))
    assert meta.compiler_args == ["-O2"] and meta.stage == "compiled"


def test_schema_round_trip_and_rejections():
    meta = ArtifactMetadata("k", "g", ["-O3"], {}, [], [], {}, stage="captured", hlo_file="graph.hlo")
    assert ArtifactMetadata.from_json(meta.to_json()) == meta
    with pytest.raises(MetadataError, match="schema_version"):
        ArtifactMetadata.from_json(_doc(schema_version=SCHEMA_VERSION + 1))
    with pytest.raises(MetadataError, match="compiler_args"):
        ArtifactMetadata.from_json(_doc(schema_version=2, compiler_args="-O3"))
    with pytest.raises(MetadataError, match="stage"):
        ArtifactMetadata.from_json(_doc(schema_version=2, stage="half"))
