"""The suite reads environment variables in one module (conformance/harness/env.py).

A scan of every module of ``conformance/`` (the Python syntax tree, not text): a use of
``os.environ`` or ``os.getenv`` outside env.py is a read unless it builds a child's environment
(``{**os.environ, ...}``, ``dict(os.environ, ...)``) or sets variables (``os.environ[k] = v``,
``.update``, ``.pop``, ``.clear``, ``.setdefault``, ``del``). The failure names each read by file and
line. The readers themselves: defaults, empty values, a bad number named with its variable.
"""

from __future__ import annotations

import ast
import os
from pathlib import Path

import pytest

import conformance
from conformance.harness import env

PACKAGE = Path(conformance.__file__).resolve().parent
HOME = PACKAGE / "harness" / "env.py"
_WRITES = {"update", "pop", "clear", "setdefault"}


def _is_environ(node: ast.AST) -> bool:
    return (isinstance(node, ast.Attribute) and node.attr in ("environ", "getenv", "getenvb", "environb")
            and isinstance(node.value, ast.Name) and node.value.id == "os")


def env_reads(source: str, filename: str) -> list[str]:
    """``filename:line: text`` for every read of the environment in ``source``."""
    tree = ast.parse(source, filename)
    parents = {child: node for node in ast.walk(tree) for child in ast.iter_child_nodes(node)}
    lines = source.splitlines()
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module == "os" and any(
                a.name in ("environ", "getenv", "environb", "getenvb") for a in node.names):
            found.append(node)
            continue
        if not _is_environ(node):
            continue
        parent = parents.get(node)
        while isinstance(parent, ast.IfExp):  # dict(os.environ if env is None else env)
            node, parent = parent, parents.get(parent)
        if isinstance(parent, ast.Dict) and any(k is None and v is node for k, v in zip(parent.keys, parent.values)):
            continue  # {**os.environ, ...}: a child's environment
        if isinstance(parent, ast.Call) and isinstance(parent.func, ast.Name) and parent.func.id == "dict" \
                and parent.args and parent.args[0] is node:
            continue  # dict(os.environ, ...): a child's environment
        if isinstance(parent, ast.Subscript) and isinstance(parent.ctx, (ast.Store, ast.Del)):
            continue  # os.environ[k] = v, del os.environ[k]
        if isinstance(parent, ast.Attribute) and parent.attr in _WRITES and isinstance(parents.get(parent), ast.Call):
            continue  # os.environ.update(...) and the like
        found.append(node)
    return [f"{filename}:{n.lineno}: {lines[n.lineno - 1].strip()}" for n in sorted(found, key=lambda n: n.lineno)]


def test_only_env_py_reads_the_environment():
    modules = sorted(p for p in PACKAGE.rglob("*.py") if p != HOME)
    assert len(modules) > 40  # the whole suite was scanned
    reads = [r for p in modules for r in env_reads(p.read_text(), str(p.relative_to(PACKAGE.parent)))]
    assert not reads, ("read the environment through conformance/harness/env.py, not here:\n" + "\n".join(reads))


def test_the_scan_finds_reads_and_lets_children_and_writes_pass():
    source = "\n".join([
        "import os",
        "a = os.environ.get('X')",  # read
        "b = {**os.environ, 'Y': '1'}",
        "c = dict(os.environ, Z='1')",
        "d = dict(os.environ if a is None else {})",
        "os.environ['W'] = '1'",
        "os.environ.update({'V': '2'})",
        "os.environ.setdefault('U', '3')",
        "e = 'X' in os.environ",  # read
        "f = os.getenv('X')",  # read
        "g = sorted(os.environ.items())",  # read
        "from os import environ",  # read
    ])
    reads = env_reads(source, "m.py")
    assert [r.split(":")[1] for r in reads] == ["2", "9", "10", "11", "12"], reads
    assert reads[0] == "m.py:2: a = os.environ.get('X')"


def test_readers_take_defaults_and_name_a_bad_value(monkeypatch):
    for name in (env.IMPL, env.LANE, env.TORCHRUN_NPROC, env.RANK_THREADS, env.MODELS, "CI"):
        monkeypatch.delenv(name, raising=False)
    assert env.impl_spec() is None and env.lane() is None and not env.on_ci() and not env.all_models()
    assert env.torchrun_nproc() == 2 and env.rank_threads() == "1"
    monkeypatch.setenv(env.IMPL, "")
    assert env.impl_spec() is None  # empty is unset
    monkeypatch.setenv(env.IMPL, "pkg.mod:make")
    monkeypatch.setenv("CI", "True")
    monkeypatch.setenv(env.MODELS, "ALL")
    assert env.impl_spec() == "pkg.mod:make" and env.on_ci() and env.all_models()
    assert env.rank_threads({env.RANK_THREADS: "4"}) == "4"
    monkeypatch.setenv(env.TORCHRUN_NPROC, "two")
    with pytest.raises(env.EnvironmentVariableError, match=r"CONFORMANCE_TORCHRUN_NPROC='two'.*at least 1"):
        env.torchrun_nproc()


def test_override_sets_and_restores(monkeypatch):
    monkeypatch.setenv("CONFORMANCE_T_A", "old")
    monkeypatch.delenv("CONFORMANCE_T_B", raising=False)
    with env.override({"CONFORMANCE_T_A": None, "CONFORMANCE_T_B": "new"}):
        assert not env.is_set("CONFORMANCE_T_A") and os.environ["CONFORMANCE_T_B"] == "new"
    assert os.environ["CONFORMANCE_T_A"] == "old" and not env.is_set("CONFORMANCE_T_B")


def test_unmeasured_drops_only_the_coverage_variables():
    from conformance.harness.env import unmeasured

    given = {"COVERAGE_PROCESS_CONFIG": "x", "COV_CORE_SOURCE": "y", "PATH": "/bin", "MY_COVERAGE": "kept"}
    assert unmeasured(given) == {"PATH": "/bin", "MY_COVERAGE": "kept"}
    assert given["COVERAGE_PROCESS_CONFIG"] == "x"  # a new mapping: the caller's is unchanged
