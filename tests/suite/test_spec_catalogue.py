"""The seeds' statement catalogue (conformance/spec/) agrees with the tests that cite it.

Cheap by design (five TOML files and an ast pass over the test files, no test imported): a
statement with neither a citing test nor a documented reason, or a marker citing an id the
catalogue lacks, fails ``make test`` here, naming the statement or the test."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest

from conformance.reporting import spec_coverage as spec

ROOT = Path(__file__).resolve().parents[2]
CITING = [ROOT / "conformance" / "tests", ROOT / "tests"]
SUITE = (ROOT / "conformance" / "tests").as_posix()
#: seeds whose statements may still be tested by unit tests alone (their conformance tests are
#: being written); every other seed's 'tested' statements need a citing conformance test
UNIT_TESTED_ALLOWED: set[str] = set()


@pytest.fixture(scope="module")
def cited() -> dict[str, list[str]]:
    """Every citation in the conformance and unit tests, read once for the module (an ast pass over
    a few hundred files is most of what these checks cost)."""
    return spec.citations(CITING)


def _slug(heading: str) -> str:
    # GitHub's anchors: lower case, punctuation dropped, spaces to dashes
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def test_every_statement_has_a_citing_test_or_a_documented_reason(cited):
    catalogue = spec.load()
    assert spec.problems(catalogue, cited) == []


def test_every_tested_statement_is_cited_by_a_conformance_test(cited):
    """A unit test of the reference checks no other implementation: a statement it alone cites
    is untested in every other implementation's report."""
    catalogue = spec.load()
    found = spec.problems(catalogue, cited, suite=SUITE)
    assert [p for p in found if p[:3] not in UNIT_TESTED_ALLOWED] == []


def test_a_statement_only_a_unit_test_cites_is_not_tested_by_the_suite(tmp_path, cited):
    unit = tmp_path / "tests" / "test_unit.py"
    unit.parent.mkdir()
    unit.write_text('import pytest\n\n\n@pytest.mark.spec("001.env.planted")\ndef test_unit():\n    pass\n')
    folder = _planted(tmp_path, '\n[[statement]]\nid = "001.env.planted"\nkind = "env"\nquote = "q"\nstatus = "tested"\n')
    both = {**cited, **spec.citations([unit])}
    assert [p for p in spec.problems(spec.load(folder), both) if "planted" in p] == []
    assert [p for p in spec.problems(spec.load(folder), both, suite=SUITE) if "planted" in p] == [
        f"001.env.planted: status 'tested' but no conformance test cites it (add @pytest.mark.spec('001.env.planted') "
        f"to the test under {SUITE} that checks it, or make it a deviation with its docs/ link or not-applicable-on-CPU "
        "with its reason)"]


def test_the_catalogue_covers_every_seed_with_enough_statements():
    catalogue = spec.load()
    seeds = {st.seed_number for st in catalogue.values()}
    assert seeds == {"000", "001", "002", "003", "004"}
    assert len(catalogue) >= 150


def test_every_deviation_links_a_docs_section_that_exists():
    for st in spec.load().values():
        if st.status != spec.DEVIATION:
            continue
        page, _, anchor = st.doc.partition("#")
        path = ROOT / page
        assert path.is_file(), f"{st.id}: {st.doc} names no file of docs/"
        headings = {_slug(line.lstrip("#")) for line in path.read_text().splitlines() if line.startswith("#")}
        assert not anchor or anchor in headings, f"{st.id}: {page} has no section #{anchor}"


def _planted(tmp_path: Path, text: str) -> Path:
    folder = tmp_path / "spec"
    shutil.copytree(spec.CATALOGUE_DIR, folder)
    with open(folder / "001_backend.toml", "a", encoding="utf-8") as f:
        f.write(text)
    return folder


def test_a_planted_statement_without_a_test_or_a_reason_fails_naming_it(tmp_path, cited):
    folder = _planted(tmp_path, '\n[[statement]]\nid = "001.env.planted-variable"\nkind = "env"\n'
                                'quote = "TORCH_NEURONX_PLANTED - bool - False"\nstatus = "tested"\n')
    found = spec.problems(spec.load(folder), cited)
    assert len(found) == 1 and found[0].startswith("001.env.planted-variable: status 'tested' but no test cites it")


def test_a_marker_citing_an_unknown_id_fails_naming_the_test(tmp_path, cited):
    tests = tmp_path / "test_planted.py"
    tests.write_text('import pytest\n\n\n@pytest.mark.spec("001.env.disable-fallback-execution", "001.env.no-such-variable")\n'
                     'def test_planted():\n    pass\n')
    found = spec.problems(spec.load(), {**cited, **spec.citations([tests])})
    assert found == [f"{tests.as_posix()}::test_planted: @pytest.mark.spec cites '001.env.no-such-variable', "
                     "which conformance/spec/ does not list"]


@pytest.mark.parametrize("fields, words", [
    ('status = "deviation"', "a deviation links the page of docs/"),
    ('status = "not-applicable-on-CPU"', "say why it is not applicable"),
    ('status = "maybe"', "status 'maybe'"),
])
def test_a_reason_is_required_for_a_statement_no_test_checks(tmp_path, fields, words):
    folder = _planted(tmp_path, f'\n[[statement]]\nid = "001.env.planted"\nkind = "env"\nquote = "q"\n{fields}\n')
    with pytest.raises(spec.CatalogueError, match=re.escape(words)) as info:
        spec.load(folder)
    assert "001_backend.toml" in str(info.value) and "001.env.planted" in str(info.value)


def test_an_id_of_another_seed_or_listed_twice_is_refused(tmp_path):
    folder = _planted(tmp_path, '\n[[statement]]\nid = "002.env.x"\nkind = "env"\nquote = "q"\nstatus = "tested"\n')
    with pytest.raises(spec.CatalogueError, match="this file's seed"):
        spec.load(folder)
    folder = _planted(tmp_path / "twice", '\n[[statement]]\nid = "001.param.model"\nkind = "env"\nquote = "q"\nstatus = "tested"\n')
    with pytest.raises(spec.CatalogueError, match="listed twice"):
        spec.load(folder)


def _catalogue(*statements: spec.Statement) -> dict[str, spec.Statement]:
    return {st.id: st for st in statements}


def test_a_run_meets_fails_skips_or_leaves_each_statement_untested():
    st = [spec.Statement(id=f"001.env.s{i}", seed="001_x.txt", quote="q", kind="env", status=spec.TESTED) for i in range(5)]
    st.append(spec.Statement(id="001.api.row", seed="001_x.txt", quote="q", kind="api", status=spec.TESTED,
                             support=("apis", "compile", "Supported")))
    tests = [
        {"id": "a::t1", "outcome": "passed", "spec": ["001.env.s0", "001.env.s1"]},
        {"id": "a::t2", "outcome": "failed", "message": "boom", "spec": ["001.env.s1"]},
        {"id": "a::t3", "outcome": "skipped", "message": "not supported by x: no such capability", "spec": ["001.env.s2"]},
        {"id": "a::t4", "outcome": "fell back", "message": "fell back: eager", "spec": ["001.env.s3"]},
        {"id": "a::t5", "outcome": "passed", "spec": ["001.api.row"]},
    ]
    cov = spec.coverage(_catalogue(*st), tests, [{"table": "apis", "row": "compile", "status": "Partial"}])
    verdicts = {s["id"]: s["verdict"] for s in cov["statements"]}
    assert verdicts == {"001.env.s0": "met", "001.env.s1": "failed", "001.env.s2": "skipped", "001.env.s3": "failed",
                        "001.env.s4": "untested", "001.api.row": "failed"}
    notes = {s["id"]: s["note"] for s in cov["statements"]}
    assert notes["001.api.row"] == "support row observed Partial; the seed says Supported"
    assert "no such capability" in notes["001.env.s2"]
    seed = cov["seeds"]["001_x.txt"]
    assert (seed["statements"], seed["met"], seed["failed"], seed["skipped"], seed["untested"]) == (6, 1, 3, 1, 1)
    page = spec.render(cov, "x", "default")
    assert "| 001_x.txt | 6 | 1 | 3 | 1 | 1 | 0 | 0 | 0 |" in page and "| env | 1 | 2 | 1 | 1 |" in page


def test_the_figures_in_the_docs_are_the_catalogues():
    import collections

    catalogue = spec.load()
    counts = collections.Counter((st.seed_number, st.status) for st in catalogue.values())
    page = (ROOT / "docs" / "spec_coverage.md").read_text()
    guarded = collections.Counter(st.seed_number for st in catalogue.values() if st.mutants)
    non_normative = collections.Counter(n.seed[:3] for n in spec.load_non_normative())
    rows = {line.split("|")[1].strip()[:3]: [int(c) for c in line.split("|")[2:9]]
            for line in page.splitlines() if re.match(r"\| (00\d|all) ", line)}
    for seed in ("000", "001", "002", "003", "004"):
        want = [sum(v for (s, _), v in counts.items() if s == seed),
                counts[(seed, spec.TESTED)], counts[(seed, spec.DEVIATION)], counts[(seed, spec.NOT_APPLICABLE)],
                counts[(seed, spec.INTERNAL)], guarded[seed], non_normative[seed]]
        assert rows.get(seed) == want, f"docs/spec_coverage.md, seed {seed}: {rows.get(seed)}; the catalogue: {want}"
    assert rows.get("all") == [len(catalogue), *(sum(counts[(s, st)] for s in "000 001 002 003 004".split())
                                                 for st in (spec.TESTED, spec.DEVIATION, spec.NOT_APPLICABLE, spec.INTERNAL)),
                               sum(guarded.values()), sum(non_normative.values())]


def test_every_mutant_a_statement_names_is_registered():
    from conformance.selfcheck.mutants import MUTANTS

    assert spec.unknown_mutants(spec.load(), MUTANTS) == []


def test_a_statement_naming_an_unregistered_mutant_is_reported(tmp_path):
    folder = _planted(tmp_path, '\n[[statement]]\nid = "001.env.planted"\nkind = "env"\nquote = "q"\nstatus = "tested"\n'
                                'mutants = ["no_such_mutant"]\n')
    from conformance.selfcheck.mutants import MUTANTS

    assert spec.unknown_mutants(spec.load(folder), MUTANTS) == [
        "001.env.planted: mutants names 'no_such_mutant', which conformance.selfcheck.mutants does not register"]
    bad = _planted(tmp_path / "bad", '\n[[statement]]\nid = "001.env.planted"\nkind = "env"\nquote = "q"\nstatus = "tested"\n'
                                     'mutants = "one"\n')
    with pytest.raises(spec.CatalogueError, match="mutants is a list"):
        spec.load(bad)


def test_non_normative_sentences_give_their_reason(tmp_path):
    assert all(n.reason and n.quote for n in spec.load_non_normative())
    folder = _planted(tmp_path, '\n[[non_normative]]\nquote = "an example"\n')
    with pytest.raises(spec.CatalogueError, match="the reason it is not a statement"):
        spec.load_non_normative(folder)


def test_the_lanes_reports_merge_into_one_verdict_per_statement(tmp_path, capsys):
    st = {f"001.env.s{i}": spec.Statement(id=f"001.env.s{i}", seed="001_x.txt", quote="q", kind="env", status=spec.TESTED)
          for i in range(4)}
    st["001.env.na"] = spec.Statement(id="001.env.na", seed="001_x.txt", quote="q", kind="env", status=spec.NOT_APPLICABLE,
                                      reason="r")
    default = spec.coverage(st, [{"id": "a::t1", "outcome": "passed", "spec": ["001.env.s0"]},
                                 {"id": "a::t2", "outcome": "skipped", "spec": ["001.env.s2"]}], [])
    slow = spec.coverage(st, [{"id": "a::t3", "outcome": "passed", "spec": ["001.env.s1"]},
                              {"id": "a::t4", "outcome": "failed", "message": "boom", "spec": ["001.env.s0"]}], [])
    cov = spec.merge_lanes(st, {"default": default, "slow": slow})
    verdicts = {s["id"]: (s["verdict"], s["lanes"]) for s in cov["statements"]}
    assert verdicts["001.env.s0"] == ("failed", {"default": "met", "slow": "failed"})
    assert verdicts["001.env.s1"][0] == "met" and verdicts["001.env.s2"][0] == "skipped"
    assert [s["id"] for s in spec.untested_outside_not_applicable(cov)] == ["001.env.s3"]
    # the command: reads reports/<impl>/<lane>/spec-coverage.json, writes the merged page, fails on untested
    import json

    for lane, c in (("default", default), ("slow", slow)):
        (tmp_path / "x" / lane).mkdir(parents=True)
        (tmp_path / "x" / lane / "spec-coverage.json").write_text(json.dumps(c))
    assert spec.main(["--impl", "x", "--reports", str(tmp_path)]) in (0, 1)
    out = capsys.readouterr().out
    assert "from lanes default, slow (no report from strict, models)" in out
    assert (tmp_path / "x" / "spec-coverage.md").read_text().startswith("# Spec coverage: x (lane default + slow)")
    assert spec.main(["--impl", "none", "--reports", str(tmp_path)]) == 2


def test_a_statements_mutants_are_judged_by_tests_that_cite_it(cited):
    """A mutant named by a statement is run against tests that cite that statement: its survival
    then says the statement's own tests miss a violation of it."""
    from conformance.selfcheck.mutants import MUTANTS

    wrong = []
    for sid, st in spec.load().items():
        by_file = {}
        for where in cited.get(sid, []):
            path, _, owner = where.partition("::")
            by_file.setdefault(Path(path).resolve().relative_to(ROOT).as_posix(), set()).add(owner)
        for name in st.mutants:
            for test in MUTANTS[name].tests if name in MUTANTS else ():
                path, _, func = test.partition("::")
                owners = by_file.get(path, set())
                if func.split("[")[0] not in owners and not any(o.endswith("_SPEC") for o in owners):
                    wrong.append(f"{sid}: mutant {name} is judged by {test}, which does not cite it")
    assert wrong == []
