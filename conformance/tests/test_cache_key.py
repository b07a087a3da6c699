"""Contract: the compile-cache key (``create_cache_hash``).

32 lowercase hex characters, a pure function of the HLO text, the compiler arguments, the input
tensor specs, the tool versions and the collectives' replica groups:

- it changes with any flag or flag value, any dtype/shape/stride, any tool version, the replica
  groups and the target;
- it does not change with the working directory, the install path, ``PYTHONHASHSEED``, the time,
  the process, the rank or device index, whitespace in the argument list, or source locations;
- a flag's value stays paired with its flag: the same tokens paired differently give another key.

Property tests use hypothesis (derandomized under CI). On a failure the message carries the key's
per-component breakdown from the implementation.
"""

from __future__ import annotations

import json
import os
import random
import re
import subprocess
import sys

import pytest
from hypothesis import given
from hypothesis import strategies as st

import neuron_fixtures
from conformance.harness.child import raise_if_not_supported
from conformance.plugin import SUITE
from conformance.harness.properties import settings

# --- strategies ------------------------------------------------------------------------------------

VALUED = {
    "--target": ["trn1", "inf2", "trn2", "trn3"],
    "--lnc": ["1", "2"],
    "--model-type": ["generic", "transformer", "unet-inference"],
    "--auto-cast": ["none", "matmult", "all"],
    "--auto-cast-type": ["bf16", "fp16", "tf32"],
}
BARE = ["--enable-saturate-infinity", "--enable-mixed-precision-accumulation", "--enable-fast-loading-neuron-binaries"]
OPT = ["-O1", "-O2", "-O3"]
DTYPES = ["float32", "float16", "bfloat16", "float64", "int64", "int32", "bool"]


@st.composite
def flag_groups(draw):
    """A list of flag groups (each one flag with its value), distinct flags, in some order."""
    groups = []
    names = draw(st.lists(st.sampled_from(sorted(VALUED)), unique=True, max_size=4))
    for name in names:
        groups.append([name, draw(st.sampled_from(VALUED[name]))])
    for bare in draw(st.lists(st.sampled_from(BARE), unique=True, max_size=2)):
        groups.append([bare])
    if draw(st.booleans()):
        groups.append([draw(st.sampled_from(OPT))])
    return draw(st.permutations(groups))


def _tokens(groups) -> list[str]:
    return [t for g in groups for t in g]


@st.composite
def tensor_specs(draw):
    n = draw(st.integers(1, 4))
    specs = []
    for _ in range(n):
        shape = draw(st.lists(st.integers(1, 64), min_size=0, max_size=4))
        stride, acc = [], 1
        for d in reversed(shape):
            stride.insert(0, acc)
            acc *= d
        specs.append((draw(st.sampled_from(DTYPES)), tuple(shape), tuple(stride)))
    return specs


WHITESPACE = st.text(alphabet=" \t\n", min_size=1, max_size=4)


@pytest.fixture(scope="module")
def hlos(impl) -> list[str]:
    """Real StableHLO from the fixtures (lowered once)."""
    texts = []
    for name in ("mlp", "vision_encoder"):
        model, args = neuron_fixtures.build(name)
        texts.extend(impl.lower(model, args))
    return texts


def _explain(impl, a: dict, b: dict) -> str:
    try:
        _, da = impl.cache().hash(**a, breakdown=True)
        _, db = impl.cache().hash(**b, breakdown=True)
    except Exception as exc:  # the breakdown is a debugging aid; never mask the real failure
        return f"(no breakdown: {exc})"
    return "breakdown A:\n" + json.dumps(da, indent=1, default=str)[:3000] + "\nbreakdown B:\n" + json.dumps(db, indent=1, default=str)[:3000]


def _same(impl, a: dict, b: dict, why: str) -> None:
    ka, kb = impl.cache().hash(**a), impl.cache().hash(**b)
    assert ka == kb, f"{why}: keys differ ({ka} vs {kb})\n{_explain(impl, a, b)}"


def _differ(impl, a: dict, b: dict, why: str) -> None:
    ka, kb = impl.cache().hash(**a), impl.cache().hash(**b)
    assert ka != kb, f"{why}: keys collide ({ka})\n{_explain(impl, a, b)}"


def _case(hlo, args, specs, **kw) -> dict:
    return dict(hlo=hlo, compiler_args=args, input_specs=specs, **kw)


PROPS = settings(max_examples=60)

# --- shape of the key --------------------------------------------------------------------------------


@PROPS
@given(groups=flag_groups(), specs=tensor_specs(), which=st.integers(0, 1))
@pytest.mark.spec("002.cache.same-32-char-hash")
def test_the_key_is_32_lowercase_hex_and_repeatable(impl, hlos, groups, specs, which):
    case = _case(hlos[which], _tokens(groups), specs)
    key = impl.cache().hash(**case)
    assert re.fullmatch(r"[0-9a-f]{32}", key), key
    assert impl.cache().hash(**case) == key


# --- invariances -------------------------------------------------------------------------------------


@PROPS
@given(groups=flag_groups(), specs=tensor_specs(), seps=st.lists(WHITESPACE, min_size=12, max_size=12), lead=WHITESPACE)
def test_whitespace_and_token_splitting_do_not_change_the_key(impl, hlos, groups, specs, seps, lead):
    tokens = _tokens(groups)
    spaced = lead + "".join(t + seps[i % len(seps)] for i, t in enumerate(tokens))
    grouped = [" ".join(g) for g in groups]  # "--lnc 2" as one list item
    equals = [f"{g[0]}={g[1]}" if len(g) == 2 else g[0] for g in groups]  # "--lnc=2"
    base = _case(hlos[0], tokens, specs)
    _same(impl, base, _case(hlos[0], spaced, specs), "the same arguments as one whitespace-laden string")
    _same(impl, base, _case(hlos[0], grouped, specs), "flag and value given as one list item")
    _same(impl, base, _case(hlos[0], equals, specs), "flag=value spelling")


def _with_locations(text: str, rng: random.Random) -> str:
    out = []
    n = 0
    for line in text.splitlines():
        stripped = line.rstrip()
        if stripped.endswith(("}", "{")) or not stripped or stripped.startswith("module"):
            out.append(line)
            continue
        n += 1
        loc = rng.choice([f'loc("/home/u{n}/model.py":{n}:{rng.randint(1, 80)})', f"loc(#loc{n})", 'loc(unknown)',
                          f'loc(callsite("f"("/tmp/x.py":{n}:2) at "g"("/opt/y.py":3:{n})))'])
        out.append(f"{stripped} {loc}")
    out.append("#loc = loc(unknown)")
    out.extend(f'#loc{i} = loc("/srv/build/src{i}.py":{i}:7)' for i in range(1, n + 1))
    return "\n".join(out) + "\n"


@settings(max_examples=10)
@given(seed=st.integers(0, 2**32 - 1), which=st.integers(0, 1))
def test_source_locations_do_not_change_the_key(impl, hlos, seed, which):
    located = _with_locations(hlos[which], random.Random(seed))
    specs = [("float32", (4, 32), (32, 1))]
    _same(impl, _case(hlos[which], ["--target", "trn2"], specs), _case(located, ["--target", "trn2"], specs),
          "the same HLO with source locations and debug location aliases")


# --- sensitivities --------------------------------------------------------------------------------------


@PROPS
@given(groups=flag_groups(), specs=tensor_specs(), data=st.data())
@pytest.mark.spec("000.key.inputs")
def test_any_flag_or_flag_value_changes_the_key(impl, hlos, groups, specs, data):
    base = _case(hlos[0], _tokens(groups), specs)
    valued = [g for g in groups if len(g) == 2]
    if valued:
        g = data.draw(st.sampled_from(valued))
        other = data.draw(st.sampled_from([v for v in VALUED[g[0]] if v != g[1]]))
        changed = [[g[0], other] if x is g else x for x in groups]
        _differ(impl, base, _case(hlos[0], _tokens(changed), specs), f"{g[0]} {g[1]} -> {other}")
    if groups:
        i = data.draw(st.integers(0, len(groups) - 1))
        dropped = groups[:i] + groups[i + 1:]
        _differ(impl, base, _case(hlos[0], _tokens(dropped), specs), f"dropping {groups[i]}")
    missing = [b for b in BARE if [b] not in groups]
    if missing:
        added = groups + [[data.draw(st.sampled_from(missing))]]
        _differ(impl, base, _case(hlos[0], _tokens(added), specs), f"adding {added[-1]}")


@PROPS
@given(specs=tensor_specs(), data=st.data())
def test_values_stay_paired_with_their_flags(impl, hlos, specs, data):
    """The same tokens, paired differently, never give the same key (``--lnc 2 -O1`` style)."""
    lnc, other_flag = "--lnc", data.draw(st.sampled_from(["--optlevel", "--lnc"]))
    a = data.draw(st.sampled_from(["1", "2"]))
    b = "2" if a == "1" else "1"
    if other_flag == "--lnc":  # the same flag twice: order decides which value wins
        first, second = [lnc, a, "--target", "trn2"], ["--target", "trn2", lnc, b]
        what = "--lnc with another value"
    else:
        first, second = [lnc, a, other_flag, b], [lnc, b, other_flag, a]
        what = "values swapped between two flags"
    _differ(impl, _case(hlos[0], first, specs), _case(hlos[0], second, specs), what)


@pytest.mark.spec("001.env.target-override")
def test_the_target_changes_the_key(impl, hlos):
    specs = [("float32", (4, 32), (32, 1))]
    keys = {impl.cache().hash(hlos[0], ["--target", t], specs) for t in ("trn1", "inf2", "trn2", "trn3")}
    assert len(keys) == 4


@PROPS
@given(specs=tensor_specs(), data=st.data())
@pytest.mark.spec("000.key.inputs", "001.cache.shape-per-entry")
def test_any_dtype_shape_or_stride_changes_the_key(impl, hlos, specs, data):
    i = data.draw(st.integers(0, len(specs) - 1))
    dtype, shape, stride = specs[i]
    base = _case(hlos[0], ["--target", "trn2"], specs)
    new_dtype = data.draw(st.sampled_from([d for d in DTYPES if d != dtype]))
    variants = {"dtype": (new_dtype, shape, stride)}
    if shape:
        j = data.draw(st.integers(0, len(shape) - 1))
        variants["shape"] = (dtype, shape[:j] + (shape[j] + 1,) + shape[j + 1:], stride)
        variants["stride"] = (dtype, shape, stride[:j] + (stride[j] + 1,) + stride[j + 1:])
    variants["rank"] = (dtype, shape + (1,), stride + (1,))
    for what, spec in variants.items():
        changed = specs[:i] + [spec] + specs[i + 1:]
        _differ(impl, base, _case(hlos[0], ["--target", "trn2"], changed), f"input {i} {what}: {specs[i]} -> {spec}")


@settings(max_examples=30)
@given(pos=st.integers(0, 10**9), digit=st.sampled_from("0123456789"), which=st.integers(0, 1))
@pytest.mark.spec("001.cache.content-addressed")
def test_any_change_to_the_hlo_changes_the_key(impl, hlos, pos, digit, which):
    text = hlos[which]
    pos %= len(text)
    changed = text[:pos] + digit + text[pos:]
    specs = [("float32", (4, 32), (32, 1))]
    _differ(impl, _case(text, [], specs), _case(changed, [], specs), f"a {digit!r} inserted at {pos}")


@settings(max_examples=30)
@given(data=st.data())
@pytest.mark.spec("000.key.inputs", "001.cache.compiler-version-in-key")
def test_any_tool_version_changes_the_key(impl, hlos, data):
    versions = impl.versions()
    if not versions:
        pytest.skip("the implementation reports no tool versions")
    name = data.draw(st.sampled_from(sorted(versions)))
    bumped = {**versions, name: versions[name] + data.draw(st.sampled_from([".post1", "+local", "1"]))}
    specs = [("float32", (4, 32), (32, 1))]
    a = _case(hlos[0], ["--target", "trn2"], specs, versions=versions)
    b = _case(hlos[0], ["--target", "trn2"], specs, versions=bumped)
    _differ(impl, a, b, f"tool version {name}: {versions[name]} -> {bumped[name]}")
    _same(impl, a, _case(hlos[0], ["--target", "trn2"], specs), "explicit installed versions vs the default")


@settings(max_examples=30)
@given(world=st.sampled_from([2, 4, 8]), data=st.data())
@pytest.mark.spec("002.collectives.group-name-normalized")
def test_replica_groups_change_the_key(impl, hlos, world, data):
    ranks = data.draw(st.permutations(list(range(world))))
    size = data.draw(st.sampled_from([d for d in (1, 2, world) if world % d == 0]))
    groups = [sorted(ranks[i:i + size]) for i in range(0, world, size)]
    other = [list(reversed(g)) for g in groups] if size > 1 else [list(range(world))]
    specs = [("float32", (4, 32), (32, 1))]
    base = _case(hlos[0], [], specs, replica_groups=groups)
    _differ(impl, _case(hlos[0], [], specs), base, "no groups vs groups")
    _differ(impl, base, _case(hlos[0], [], specs, replica_groups=other), f"groups {groups} vs {other}")
    _same(impl, base, _case(hlos[0], [], specs, replica_groups=[list(g) for g in groups]), "equal groups")


# --- fresh processes ----------------------------------------------------------------------------------


def _batch(hlos) -> list[dict]:
    rng = random.Random(1234)
    cases = []
    for i in range(40):
        names = rng.sample(sorted(VALUED), rng.randint(0, 3))
        args = [t for n in names for t in (n, rng.choice(VALUED[n]))] + rng.sample(OPT, rng.randint(0, 1))
        shape = [rng.randint(1, 9) for _ in range(rng.randint(0, 3))]
        stride = [1] * len(shape)
        for j in range(len(shape) - 2, -1, -1):
            stride[j] = stride[j + 1] * shape[j + 1]
        cases.append(
            {
                "hlo": hlos[i % len(hlos)],
                "compiler_args": args if i % 2 else " ".join(args),
                "input_specs": [[rng.choice(DTYPES), shape, stride]],
                "replica_groups": [[0, 1], [2, 3]] if i % 5 == 0 else None,
            }
        )
    return cases


@pytest.mark.spec("001.cache.reused-across-runs")
def test_keys_are_identical_across_fresh_processes_seeds_directories_and_ranks(impl, hlos, pytestconfig, tmp_path):
    spec = pytestconfig.stash[SUITE].spec
    cases = _batch(hlos)
    inp = tmp_path / "cases.json"
    inp.write_text(json.dumps(cases))
    expected = [impl.cache().hash(c["hlo"], c["compiler_args"], [tuple(s) for s in c["input_specs"]],
                                replica_groups=c["replica_groups"]) for c in cases]
    runs = {
        "seed0-rank0": {"PYTHONHASHSEED": "0", "RANK": "0", "LOCAL_RANK": "0", "NEURON_RT_VISIBLE_CORES": "0"},
        "seed987-rank3": {"PYTHONHASHSEED": "987", "RANK": "3", "LOCAL_RANK": "3", "WORLD_SIZE": "4",
                          "NEURON_RT_VISIBLE_CORES": "3", "TZ": "Asia/Tokyo"},
    }
    procs = {}
    for tag, extra in runs.items():
        cwd = tmp_path / f"cwd-{tag}"
        cwd.mkdir()
        env = {**os.environ, **extra, "PYTHONPATH": os.pathsep.join(p for p in [os.getcwd(), *sys.path] if p)}
        cmd = [sys.executable, "-m", "conformance.tests._key_child", "--impl", spec, str(inp), str(tmp_path / f"{tag}.json")]
        procs[tag] = subprocess.Popen(cmd, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    for tag, proc in procs.items():
        out, _ = proc.communicate(timeout=600)
        raise_if_not_supported(proc.returncode, out, f"{tag}: key child")
        assert proc.returncode == 0, f"{tag}: key child failed:\n{out[-3000:]}"
        got = json.loads((tmp_path / f"{tag}.json").read_text())
        diffs = [i for i, (a, b) in enumerate(zip(got, expected)) if a != b]
        assert not diffs and len(got) == len(expected), (
            f"{tag}: keys differ from this process for cases {diffs[:5]}: {[got[i] for i in diffs[:5]]} vs "
            f"{[expected[i] for i in diffs[:5]]}"
        )
