"""Before and after, same sitting: the reference at another commit against this tree.

``python -m benchmarks.ab REV [--reps N] [--steps N]`` checks ``REV`` out into a temporary git
worktree and measures the pipeline benchmark's ``neuron`` figures on both trees, alternating: in
each repetition a cold start (empty caches) and then a warm start (over the caches the cold one
filled) of each tree, the tree that goes first swapping every repetition so that a drift of the
machine's state does not favour one side. Both sides run this tree's measurement child
(``benchmarks/_pipeline_child.py``, copied beside the worktree) with their own ``reference`` and
``neuron_fixtures`` on the path, so only the code under test differs; the two sides' logits
must agree (same model, same inputs) or the comparison is refused.

Figures: cold and warm first output (seconds, prefill plus one decode step, from the first call),
the cold one also split into the compiler's wall time (``iree-compile``, as the cache entries
record it: the same binary, flags and input on both sides when the keys agree, so its variance is
the machine's) and the rest (the code under test), and the steady-state decode step (median microseconds over ``--steps`` steps, from the warm runs),
each as the median over repetitions with its range, and the after/before ratio of the medians.
The load is sampled around every run; a comparison with any sample above the core count is
labelled busy (see :mod:`benchmarks._measure`). Writes ``reports/bench/ab.json`` and ``ab.md``.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchmarks._measure import CPUS, ROOT, is_busy, measured, summary

CHILD = ROOT / "benchmarks" / "_pipeline_child.py"


def _git(*args: str, cwd: Path = ROOT) -> str:
    return subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True, text=True).stdout.strip()


def _run(tree: Path, child: Path, caches: Path, steps: int) -> dict:
    env = dict(os.environ)
    env["PYTHONPATH"] = str(tree)
    env.update({
        "TORCH_NEURONX_NEFF_CACHE_DIR": str(caches / "neff"),
        "TORCH_NEURONX_NEFF_LOCAL_CACHE_DIR": str(caches / "neff-local"),
        "TORCH_NEURONX_HLO_CACHE_DIR": str(caches / "hlo"),
    })

    def go() -> dict:
        proc = subprocess.run(
            [sys.executable, str(child), "neuron", str(steps)], cwd=tree, env=env, capture_output=True, text=True,
            timeout=1800,
        )
        if proc.returncode != 0:
            raise RuntimeError(f"the child failed in {tree} ({proc.returncode}):\n{proc.stderr[-4000:]}")
        return json.loads(proc.stdout.strip().splitlines()[-1])

    return measured(go)


def _compiler_seconds(neff_root: Path) -> float:
    """The compile time the NEFF cache entries under ``neff_root`` record (the compiler's wall time)."""
    total = 0
    for meta in neff_root.glob("*/metadata.json"):
        total += int(json.loads(meta.read_text()).get("compile_time_us") or 0)
    return total / 1e6


def compare(rev: str, reps: int, steps: int) -> dict:
    commit = _git("rev-parse", "--verify", f"{rev}^{{commit}}")
    after_commit = _git("rev-parse", "HEAD")
    dirty = bool(_git("status", "--porcelain", "--untracked-files=no"))
    with tempfile.TemporaryDirectory(prefix="neuron-ab-") as tmp:
        tmp_path = Path(tmp)
        before_tree = tmp_path / "before"
        _git("worktree", "add", "--detach", str(before_tree), commit)
        try:
            child = tmp_path / "ab_child.py"
            shutil.copy(CHILD, child)
            trees = {"before": before_tree, "after": ROOT}
            runs: dict[str, dict[str, list[dict]]] = {side: {"cold": [], "warm": []} for side in trees}
            for rep in range(reps):
                order = ("before", "after") if rep % 2 == 0 else ("after", "before")
                for side in order:
                    caches = tmp_path / f"caches-{side}-{rep}"
                    for start in ("cold", "warm"):
                        r = _run(trees[side], child, caches, steps)
                        if start == "cold":  # the compiler's own wall time, from the entries the cold start wrote
                            r["compiler_s"] = _compiler_seconds(caches / "neff")
                            r["first_output_less_compiler_s"] = r["first_output_s"] - r["compiler_s"]
                        runs[side][start].append(r)
                        print(f"rep {rep} {side:6} {start}: first output {r['first_output_s']:.3f} s, decode "
                              f"{r['decode_step_median_us']:.1f} us (load {r['load_before']}-{r['load_after']})", flush=True)
        finally:
            _git("worktree", "remove", "--force", str(before_tree))
    checks = {round(r["logits_checksum"], 3) for side in runs.values() for rs in side.values() for r in rs}
    if len(checks) != 1:
        raise RuntimeError(f"the two trees computed different logits ({sorted(checks)}): not the same model, no comparison")
    loads = [x for side in runs.values() for rs in side.values() for r in rs for x in (r["load_before"], r["load_after"])]
    figures = {}
    for name, start, field in (("cold first output (s)", "cold", "first_output_s"),
                               ("  of which iree-compile (s)", "cold", "compiler_s"),
                               ("  the rest: Dynamo, passes, AOT, lowering, load (s)", "cold", "first_output_less_compiler_s"),
                               ("warm first output (s)", "warm", "first_output_s"),
                               ("decode step (us)", "warm", "decode_step_median_us")):
        b = summary([r[field] for r in runs["before"][start]])
        a = summary([r[field] for r in runs["after"][start]])
        figures[name] = {"before": b, "after": a, "ratio": a["median"] / b["median"]}
    return {
        "before": commit, "after": after_commit, "after_has_uncommitted_changes": dirty, "reps": reps, "steps": steps,
        "cores": CPUS, "loads": {"min": min(loads), "max": max(loads)}, "busy": is_busy(loads),
        "figures": figures, "runs": runs, "when": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime()),
    }


def table(result: dict) -> str:
    state = "BUSY: the load went above the core count, so read these as noisy" if result["busy"] else "not busy"
    lines = [
        f"# Before/after: {result['before'][:10]} -> {result['after'][:10]}"
        + (" (plus uncommitted changes)" if result["after_has_uncommitted_changes"] else ""),
        "",
        f"{result['reps']} repetitions, alternating which tree goes first; decode over {result['steps']} steps. "
        f"{result['cores']} cores; 1-minute load {result['loads']['min']:.2f}-{result['loads']['max']:.2f}: {state}. "
        f"{result['when']}.",
        "",
        "| figure | before: median [min-max] | after: median [min-max] | after / before |",
        "|---|---|---|---|",
    ]
    for name, f in result["figures"].items():
        b, a = f["before"], f["after"]
        lines.append(f"| {name} | {b['median']:.3f} [{b['min']:.3f}-{b['max']:.3f}] | "
                     f"{a['median']:.3f} [{a['min']:.3f}-{a['max']:.3f}] | {f['ratio']:.3f} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.ab", description=__doc__.splitlines()[0])
    parser.add_argument("rev", help="the commit to compare this tree against (the 'before')")
    parser.add_argument("--reps", type=int, default=6)
    parser.add_argument("--steps", type=int, default=300)
    opts = parser.parse_args(argv)
    if opts.reps < 2 or opts.steps < 1:
        parser.error("--reps must be at least 2 (each tree goes first once) and --steps at least 1")
    result = compare(opts.rev, opts.reps, opts.steps)
    out = ROOT / "reports" / "bench"
    out.mkdir(parents=True, exist_ok=True)
    (out / "ab.json").write_text(json.dumps(result, indent=2, sort_keys=True) + "\n")
    text = table(result)
    (out / "ab.md").write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
