"""`ets sweep` on the tiny config: every pair, table and plots, resumable, validated first."""

import csv
import json
from pathlib import Path

import pytest

from ets.app.cli import main

TINY = Path(__file__).resolve().parents[1] / "configs" / "tiny.yaml"
PLOTS = ("accuracy_vs_width.png", "kv_size_vs_width.png", "throughput_vs_width.png", "accuracy_vs_kv_size.png")


def sweep(out, *extra):
    return main(["sweep", "--quiet", "--config", str(TINY), "--methods", "beam,rebase", "--widths", "2,3",
                 "--out", str(out), "data.limit=2", *extra])


def test_sweep_writes_every_pair_and_resumes(tmp_path, capsys):
    out = tmp_path / "sw"
    assert sweep(out) == 0
    rows = list(csv.DictReader((out / "table.csv").open()))
    assert [(r["method"], r["width"]) for r in rows] == [("beam", "2"), ("rebase", "2"), ("beam", "3"), ("rebase", "3")]
    for r in rows:
        assert float(r["kv_size_per_problem"]) > 0 and r["aggregation"] == "last" and r["vote"] == "weighted"
    for name in PLOTS:
        assert (out / name).stat().st_size > 1000
    assert "| beam | 2 |" in (out / "table.md").read_text()

    # Interrupt one pair mid-way: drop its last problem. The rerun redoes only that one.
    pair = out / "rebase_w3.jsonl"
    all_ids = sorted(json.loads(l)["id"] for l in pair.read_text().splitlines())
    kept = pair.read_text().splitlines()[0]
    pair.write_text(kept + "\n")
    untouched = (out / "beam_w2.jsonl").read_text()
    assert sweep(out) == 0
    ids = [json.loads(l)["id"] for l in pair.read_text().splitlines()]
    assert len(all_ids) == 2 and sorted(ids) == all_ids and pair.read_text().startswith(kept)
    assert (out / "beam_w2.jsonl").read_text() == untouched
    assert len(list(csv.DictReader((out / "table.csv").open()))) == 4
    # The resumed pair's wall time, throughput and live KV describe its one problem searched
    # again, not both: marked, and said under the table; the others are not
    table = (out / "table.md").read_text()
    resumed = next(line for line in table.splitlines() if line.startswith("| rebase | 3 |"))
    others = [line for line in table.splitlines() if line.startswith("| ") and line != resumed]
    from ets.app.report import COLUMNS, MEASURED

    cells = dict(zip([key for key, _, _ in COLUMNS], resumed.strip("| ").split(" | ")))
    assert all(cells[k] == "n/a" or cells[k].endswith("*") for k in MEASURED) and cells["tokens_per_s"].endswith("*")
    assert sum(c.endswith("*") for c in cells.values()) == sum(cells[k] != "n/a" for k in MEASURED)
    assert not any("*" in line for line in others)
    assert "* measured over the problems the run searched after it was resumed" in table


@pytest.mark.parametrize("flag, value, words", [("--widths", "16,0", ">= 1"), ("--methods", "beam,mcts", "mcts")])
def test_bad_sweep_fails_before_any_work(tmp_path, capsys, flag, value, words):
    out = tmp_path / "sw"
    argv = ["sweep", "--quiet", "--config", str(TINY), "--methods", "beam", "--widths", "2", "--out", str(out)]
    argv[argv.index(flag) + 1] = value
    assert main(argv) == 2
    assert words in capsys.readouterr().err
    assert not out.exists()


def test_a_row_reads_the_policys_memory_not_engine_counters():
    from ets.app.sweep import pair_config, pair_row
    from ets.config import load_config

    config = pair_config(load_config(TINY), "beam", 2, Path("out"))
    summary = {"accuracy": 0.5, "policy_stats": {"peak_live_kv_tokens": 1}, "reward_stats": {"pool_kv_tokens": 9},
               "policy_memory": {"capacity_tokens": 100, "live_tokens": 0, "peak_live_tokens": 40, "mean_live_tokens": 25.0}}
    row = pair_row(config, summary)
    assert (row["peak_kv_tokens"], row["mean_kv_tokens"]) == (40, 25.0)
    assert not {"policy_stats", "policy_memory", "reward_stats"} & set(row) and row["accuracy"] == 0.5
    # A backend that measures no live KV (the transformers baseline): the table says n/a.
    none = {"capacity_tokens": None, "live_tokens": 0, "peak_live_tokens": None, "mean_live_tokens": None}
    assert pair_row(config, {"policy_memory": none})["peak_kv_tokens"] is None


def test_relative_to_rebase_says_n_a_for_unknown_throughput():
    """A summary rebuilt without timings has throughput None: the line says n/a, no nan, no crash."""
    from ets.app.sweep import relative_to_rebase

    rows = [dict(method="ets", width=4, kv_size_per_problem=50, tokens_per_s=None, problems_per_s=2.0, accuracy=0.5),
            dict(method="rebase", width=4, kv_size_per_problem=100, tokens_per_s=10.0, problems_per_s=1.0, accuracy=0.25)]
    assert relative_to_rebase(rows) == [
        "W=4: ETS vs REBASE: KV size 2.00x smaller, throughput 2.00x problems/s (n/a tokens/s), accuracy +25.0 points"]


def test_relative_to_rebase_gives_the_ratio_on_the_ets_code_metric_too():
    from ets.app.sweep import relative_to_rebase

    rows = [dict(method="ets", width=4, kv_size_per_problem=50, kv_size_ref_per_problem=40, tokens_per_s=2.0,
                 problems_per_s=2.0, accuracy=0.5),
            dict(method="rebase", width=4, kv_size_per_problem=100, kv_size_ref_per_problem=72, tokens_per_s=1.0,
                 problems_per_s=1.0, accuracy=0.5)]
    assert relative_to_rebase(rows) == [
        "W=4: ETS vs REBASE: KV size 2.00x smaller (1.80x on the ETS code's metric), throughput 2.00x problems/s "
        "(2.00x tokens/s), accuracy +0.0 points"]


def test_relative_to_rebase_says_larger_where_ets_keeps_more():
    """A small width where ETS's tree outgrows REBASE's: "1.25x larger", never "0.80x smaller"."""
    from ets.app.sweep import relative_to_rebase

    rows = [dict(method="ets", width=4, kv_size_per_problem=125, kv_size_ref_per_problem=90, tokens_per_s=1.0,
                 problems_per_s=1.0, accuracy=0.5),
            dict(method="rebase", width=4, kv_size_per_problem=100, kv_size_ref_per_problem=100, tokens_per_s=1.0,
                 problems_per_s=1.0, accuracy=0.5)]
    assert relative_to_rebase(rows)[0].startswith(
        "W=4: ETS vs REBASE: KV size 1.25x larger (1.11x smaller on the ETS code's metric), throughput")


def test_each_pair_frees_the_last_pairs_models_before_building_its_own(tmp_path, monkeypatch):
    """A pair's policy and PRM hold KV pools (the demo's are ~2.7 GB a pair) in reference
    cycles; the sweep must collect them before the next pair builds its own."""
    import gc
    import weakref

    import ets.policy.build as build
    from ets.app.sweep import run_sweep
    from ets.config import load_config

    real, built = build.build_policy, []

    def tracked(*args, **kwargs):
        assert all(ref() is None for ref in built), "the last pair's policy is still alive"
        policy = real(*args, **kwargs)
        built.append(weakref.ref(policy))
        return policy

    monkeypatch.setattr(build, "build_policy", tracked)
    gc.disable()            # as when a run allocates few Python objects: no collection by chance
    try:
        run_sweep(load_config(TINY), ["beam", "rebase", "best_of_n"], [2], tmp_path / "sweep", show_progress=False)
    finally:
        gc.enable()
    assert len(built) == 3 and all(ref() is None for ref in built)


def test_a_run_leaves_its_models_collectable_for_the_next_run_in_the_process(tmp_path, monkeypatch):
    """A sweep's worker runs one search after another. Each run freezes what it loaded out
    of the cycle collector's way (ets/engine/heap.py); frozen for good, the last run's
    models and KV pools were never freed (a demo worker grew by ~2 GB a run, to 11-12 GB)."""
    import gc
    import weakref

    import ets.app.run as run_module
    from ets.config import load_config

    made = []

    def tracked(real):
        def build(*args, **kwargs):
            model = real(*args, **kwargs)
            made.append(weakref.ref(model))
            return model
        return build

    monkeypatch.setattr(run_module, "build_policy", tracked(run_module.build_policy))
    monkeypatch.setattr(run_module, "build_reward", tracked(run_module.build_reward))
    config = load_config(TINY, ["data.limit=2", "method=rebase", "width=2", f"output={tmp_path / 'r.jsonl'}"])
    frozen_before = gc.get_freeze_count()
    run_module.run(config, show_progress=False)
    assert gc.get_freeze_count() == frozen_before
    gc.collect()
    assert len(made) == 2 and all(ref() is None for ref in made), "the run's policy or reward model is still alive"


def _records(folder: Path) -> dict[str, list]:
    """Each run's records without their timings (the one thing jobs may change)."""
    out = {}
    for f in sorted(folder.glob("*.jsonl")):
        rows = [json.loads(l) for l in f.read_text().splitlines()]
        out[f.name] = sorted(({k: v for k, v in r.items() if k != "wall_time"} for r in rows), key=lambda r: r["id"])
    return out


def test_two_jobs_write_what_one_process_writes(tmp_path, capsys):
    """--jobs 2: the four runs go two at a time in spawned processes, with the same records,
    table rows and files as one process running them in turn; each run's config says the
    threads it ran with; an error in a job is the same one-line error, exit 2."""
    alone, jobs = tmp_path / "alone", tmp_path / "jobs"
    assert sweep(alone) == 0 and sweep(jobs, "--jobs", "2") == 0
    assert _records(alone) == _records(jobs) and len(_records(jobs)) == 4
    cols = ("method", "width", "accuracy", "kv_size_per_problem", "generated_tokens")
    table = [[r[c] for c in cols] for r in csv.DictReader((jobs / "table.csv").open())]
    assert table == [[r[c] for c in cols] for r in csv.DictReader((alone / "table.csv").open())]
    threads = json.loads((jobs / "beam_w2.config.json").read_text())["recorded"]["torch_threads"]
    assert threads == max(1, (__import__("os").cpu_count() or 1) // 2)
    capsys.readouterr()
    assert sweep(tmp_path / "bad", "policy.model=/no/such/model", "--jobs", "2") == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "/no/such/model" in err[0], err


def test_runs_in_worker_processes_print_no_bars_and_find_the_embedder_made(tmp_path, capfd, fake_distill):
    """A sweep's spawned runs load real checkpoints (here the shipped demo models) without
    transformers' "Loading weights" bars, which would cut through the sweep's own bar; and
    the demo's static embedder is distilled once, by the driver before its workers start
    (`fake_distill` counts the driver's calls; a worker would distil for real, bar and all)."""
    demo = Path(__file__).resolve().parents[1] / "ets" / "demo" / "demo.yaml"
    assert main(["sweep", "--config", str(demo), "--methods", "best_of_n,ets", "--widths", "2",
                 "--out", str(tmp_path / "sw"), "--jobs", "2", "data.limit=1", "max_depth=2"]) == 0
    err = capfd.readouterr().err
    assert "2 runs at a time" in err           # the sweep's bar is there ...
    assert "Loading weights" not in err        # ... and no one else's
    assert len(fake_distill) == 1, fake_distill          # made here, once
    assert len(list((tmp_path / "static-embedders").iterdir())) == 1


def _state_and_parent(pid: int) -> tuple[str, int] | None:
    """(state, parent pid) of a process from Linux /proc; None once it is gone."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return fields[0], int(fields[1])


def _children(pid: int) -> list[int]:
    found = [(int(p.name), _state_and_parent(int(p.name))) for p in Path("/proc").glob("[0-9]*")]
    return [c for c, sp in found if sp is not None and sp[1] == pid]


def _alive(pid: int) -> bool:
    sp = _state_and_parent(pid)
    return sp is not None and sp[0] not in ("Z", "X")


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="reads /proc")
def test_workers_end_when_the_sweep_driver_is_killed(tmp_path):
    """SIGKILL the driver of `--jobs 2` in the middle of its runs: its two worker processes
    end within seconds instead of searching on (holding the outputs' locks), and the next
    sweep can take those outputs."""
    import os
    import signal
    import subprocess
    import sys
    import time

    from ets.app.lock import lock_results

    demo = Path(__file__).resolve().parents[1] / "ets" / "demo" / "demo.yaml"
    out = tmp_path / "sw"
    driver = subprocess.Popen([sys.executable, "-m", "ets", "sweep", "--quiet", "--config", str(demo),
                               "--methods", "best_of_n,rebase", "--widths", "64", "--jobs", "2",
                               "--out", str(out), "data.limit=8"])
    workers: list[int] = []
    try:
        deadline = time.time() + 120
        while len(list(out.glob("*.jsonl"))) < 2:   # both runs hold their outputs
            assert driver.poll() is None and time.time() < deadline, "the runs did not start"
            time.sleep(0.2)
        workers = _children(driver.pid)
        assert len(workers) >= 2
        driver.send_signal(signal.SIGKILL)
        driver.wait()
        deadline = time.time() + 10
        while any(_alive(w) for w in workers):
            assert time.time() < deadline, "the workers outlived their driver"
            time.sleep(0.2)
    finally:  # whatever happened, leave no process behind
        for pid in [driver.pid, *workers]:
            if _alive(pid):
                os.kill(pid, signal.SIGKILL)
        driver.wait()
    for results in out.glob("*.jsonl"):
        os.close(lock_results(results))  # free: nobody writes there any more
