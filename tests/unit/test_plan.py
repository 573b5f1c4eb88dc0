"""`retrain plan`: the arithmetic of the capacity plan, on the project's own benchmark
results (bench/results) and on copies of them with one figure changed, so each test sees
the figure it depends on move the answer. No subprocess, no TensorFlow: seconds.
"""
from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest

from retrain import cli, plan as P

ROOT = Path(__file__).resolve().parents[2]


def _plan(**kw) -> P.Plan:
    return P.plan(P.PlanSpec(**kw))


def _stage(p: P.Plan, name: str) -> P.StagePlan:
    return next(s for s in p.stages if s.name == name)


def _bench_copy(tmp_path: Path, name: str, edit) -> Path:
    bench = tmp_path / "bench"
    shutil.copytree(P.BENCH_DIR, bench)
    doc = json.loads((bench / name).read_text())
    edit(doc)
    (bench / name).write_text(json.dumps(doc))
    return bench


def test_more_rows_need_more_beam_workers_and_workers():
    # Sizes past what one machine does in its share of the day at the measured rates.
    small, big = _plan(rows_per_day=10**9), _plan(rows_per_day=10**10)
    bigger = _plan(rows_per_day=10**11)
    assert _stage(bigger, "preprocess").machines > _stage(small, "preprocess").machines >= 1
    # Training and evaluation grow too, each spread over its machines as built.
    assert _stage(big, "train").machines > _stage(small, "train").machines >= 1
    assert _stage(bigger, "evaluate").machines > _stage(big, "evaluate").machines >= 1


def test_beam_workers_follow_the_measured_rate_per_core():
    """ceil(core-seconds of work / (cores x time left after start-up)), by hand."""
    spec = P.PlanSpec(rows_per_day=2 * 10**10, window_days=3,
                      machines={"beam": P.Machine(cores=8, memory_gb=32)})
    p = P.plan(spec)
    f = {k: v["value"] for k, v in p.figures.items()}
    work = 2e10 / f["validate_rate"] + 6e10 / f["preprocess_rate"]    # core-seconds
    room = 0.3 * 24 * 3600 - f["validate_startup"] - f["preprocess_startup"]
    assert _stage(p, "preprocess").machines == -(-work // (8 * room)) > 1
    wider = P.plan(P.PlanSpec(rows_per_day=2 * 10**10,
                              machines={"beam": P.Machine(cores=32, memory_gb=32)}))
    assert _stage(wider, "preprocess").machines < _stage(p, "preprocess").machines


def test_a_slower_benchmark_means_more_workers(tmp_path):
    def slower(doc):
        for pt in doc["rows_sweep"]["3"]:
            pt["seconds"] = pt["seconds"] * 3
    bench = _bench_copy(tmp_path, "preprocess_window.json", slower)
    spec = P.PlanSpec(rows_per_day=10**10)
    assert (_stage(P.plan(spec, bench), "preprocess").machines
            > _stage(P.plan(spec), "preprocess").machines)


def test_the_preprocessing_curve_is_interpolated_between_measured_sizes():
    pts = [(1e6, 24.0), (5e6, 52.0), (2e7, 112.0)]
    assert P.segment(pts, 3e6)[:2] == pytest.approx((7e-6, 17.0))
    assert P.segment(pts, 1e5)[2] == 0                   # below: the first piece
    assert P.segment(pts, 1e11)[:2] == pytest.approx((4e-6, 32.0))  # above: the last
    with pytest.raises(P.PlanError):
        P.segment([(1e6, 24.0)], 1e6)


def test_a_table_that_does_not_fit_one_ps_needs_more_ps():
    ps_kind = {"ps": P.Machine(cores=8, memory_gb=8)}
    fits = _plan(machines=ps_kind)
    assert fits.parameter_servers["for_memory"] == 1
    # 400M user ids: 1.6 GB of bias weights, 4.8 GB with two Adam slots, x1.76 at peak.
    big = _plan(machines=ps_kind, table_rows={"user_id": 400_000_000})
    ps = big.parameter_servers
    assert ps["for_memory"] > 1 and ps["count"] >= ps["for_memory"]
    assert ps["per_ps_need_mb"] <= ps["per_ps_usable_mb"]
    one_fewer = P.ps_bytes([P.Table(**{k: t[k] for k in ("name", "rows", "width", "trainable",
                                                          "lookups")}) for t in ps["tables"]],
                           ps["for_memory"] - 1, ps["slots"], ps["min_shard_bytes"])
    need = (big.figures["ps_runtime_mb"]["value"]
            + big.figures["ps_peak_factor"]["value"] * one_fewer / 2**20)
    assert need > ps["per_ps_usable_mb"]                # the count is the smallest that fits
    user = next(t for t in ps["tables"] if t["name"] == "bias_user_id")
    assert user["shards"] == ps["count"]


def test_tables_bigger_than_a_worker_block_only_the_evaluation_that_loads_them_whole():
    """The export saves the tables where they live (no copy on the coordinator), so a
    user table larger than any worker machine does not block training; each evaluation
    worker still loads both models whole, and the plan names that limit."""
    big = {"table_rows": {"user_id": 2_000_000_000}, "embedding_dims": {"user_id": 16},
           "machines": {"ps": P.Machine(cores=8, memory_gb=32)}}
    p = _plan(**big)
    assert p.parameter_servers["all_weights_gb"] > 100        # more than a 64 GB worker
    assert not any(b.startswith("train:") for b in p.blockers), p.blockers
    assert any(b.startswith("evaluate: each evaluation worker loads both models whole")
               for b in p.blockers), p.blockers
    roomy = _plan(**{**big, "machines": {**big["machines"],
                                         "evaluate": P.Machine(cores=16, memory_gb=512)}})
    assert not any(b.startswith("evaluate:") for b in roomy.blockers), roomy.blockers


def _train_rate(p: P.Plan) -> float:
    return next(part["rate"] for part in p.steps["train"]["parts"]
                if part["figure"] == "train_rate")


def test_tables_past_the_sharded_runs_smallest_size_slow_the_step_by_its_figure(tmp_path):
    """bench/memory_wall.py's step time over table sizes (ps on separate hosts) enters the
    training rate once a table passes its smallest size, and only then; a slower measured
    step means a slower planned rate."""
    f = {k: v["value"] for k, v in _plan().figures.items()}
    small = _plan(table_rows={"user_id": int(f["sharded_from_rows"])})
    big = _plan(table_rows={"user_id": int(f["sharded_from_rows"]) + 1})
    assert _train_rate(small) == pytest.approx(f["train_rate"])
    assert f["table_step_factor"] >= 1
    assert _train_rate(big) == pytest.approx(f["train_rate"] / f["table_step_factor"])

    def slower(doc):
        doc["sizes"][-1]["step_ms_median"] = 3 * doc["sizes"][0]["step_ms_median"]
    bench = _bench_copy(tmp_path, "memory_wall.json", slower)
    p = P.plan(P.PlanSpec(table_rows={"user_id": 10**8}), bench)
    assert p.figures["table_step_factor"]["value"] == pytest.approx(3)
    assert _train_rate(p) == pytest.approx(f["train_rate"] / 3)
    assert any("larger tables are not measured" in a["source"] for a in p.assumptions)


def test_the_ps_peak_factor_is_the_larger_of_the_one_ps_and_the_sharded_runs(tmp_path):
    def hungry(doc):          # a sharded ps peaking at runtime + 3 x its share
        for size in doc["sizes"]:
            size["ps_peak_private_mb_max"] = doc["ps_runtime_mb"] + 3 * size["share_per_ps_mb"]
    p = P.plan(P.PlanSpec(), _bench_copy(tmp_path, "memory_wall.json", hungry))
    assert p.figures["ps_peak_factor"]["value"] == pytest.approx(3)
    assert "memory_wall.json" in p.figures["ps_peak_factor"]["source"]
    one_ps = json.loads((P.BENCH_DIR / "ps_sparse.json").read_text())
    assert _plan().figures["ps_peak_factor"]["value"] >= one_ps["lazy_adam"][
        "ps_peak_over_weights_and_slots_largest"]


def test_bytes_per_id_add_every_table_of_a_field_with_its_slots():
    ps = _plan(embedding_dims={"user_id": 16}).parameter_servers
    # bias (1) + embedding (16) floats, each with lazy Adam's two slots: 17 x 4 x 3 bytes.
    assert ps["bytes_per_id"]["user_id"] == 17 * 4 * 3
    # item_id: a bias with slots and a fixed count column (no slots).
    assert ps["bytes_per_id"]["item_id"] == 4 * 3 + 4


def test_shards_and_bytes_follow_the_trainers_partitioner():
    small = P.Table("t", 1000, 4, True)           # 16 KB < min_shard_bytes: one shard
    assert P.shards(small, 8, 256 << 10) == 1
    assert P.ps_bytes([small], 8, 2, 256 << 10) == 1000 * 4 * 4 * 3
    big = P.Table("u", 1_000_001, 4, True)        # 16 MB: up to num_ps shards
    assert P.shards(big, 4, 256 << 10) == 4
    assert P.ps_bytes([big], 4, 2, 256 << 10) == 250_001 * 4 * 4 * 3
    fixed = P.Table("c", 1_000_000, 1, False)     # not trainable: no optimizer slots
    assert P.ps_bytes([fixed], 1, 2, 256 << 10) == 4_000_000


def test_tables_are_the_trainers_and_scale_with_sparse_scale():
    base = _plan().parameter_servers["tables"]
    rows = {t["name"]: t["rows"] for t in base}
    assert rows["bias_user_id"] == 262144 and rows["count_item_id"] == 131072
    assert {t["name"]: t["width"] for t in base}["emb_category_id"] == 4
    scaled = _plan(sparse_scale=10, table_rows={"item_id": 500_000}).parameter_servers
    srows = {t["name"]: t["rows"] for t in scaled["tables"]}
    assert srows["bias_user_id"] == 2621440            # scaled
    assert srows["bias_item_id"] == 500_000            # an override is not scaled
    wide = _plan(embedding_dims={"user_id": 16}).parameter_servers["tables"]
    assert {t["name"]: t["width"] for t in wide}["emb_user_id"] == 16


def test_a_deadline_too_short_for_any_machine_count_says_so(capsys):
    p = _plan(deadline_hours=0.002)                    # 7.2 s: below every start-up
    assert not p.fits
    assert any("deadline too short for any machine count" in b for b in p.blockers)
    assert all(s.machines is None for s in p.stages)
    assert cli.main(["plan", "--deadline-hours", "0.002"]) == 1
    assert "deadline too short for any machine count" in capsys.readouterr().out


def test_the_seeds_experiment_fits_with_only_what_is_built():
    """~1e11 rows over the window, tables x10, one day: every stage sized as built, no
    stage counting on a distributed version that does not exist."""
    p = _plan(rows_per_day=1e11 / 3, sparse_scale=10)
    assert p.fits and not p.blockers
    for stage in p.stages:
        assert stage.machines and not stage.machines_if_distributed, stage
    serial = [part for st in p.steps.values() for part in st["parts"] if not part["parallel"]]
    # What still runs in one process is bounded by one day or a fixed sample, never the
    # window: the new day's content digest (later checks only stat files) and the
    # export's sample.
    assert [part["what"] for part in serial] == [
        "rows of the new day, content digest (the task's one process)",
        "export's bounded sample of eval rows (coordinator)"]
    assert serial[0]["work"] == p.data["rows_per_day"] < p.data["window_rows"]


def test_one_process_work_that_cannot_fit_is_named_with_the_distributed_count():
    slow = P.Step("train", 10.0, "train_startup", (
        P.Part("a pass in one process", 1e9, 1e4, "x", "", False),
        P.Part("examples", 1e9, 1e5, "y", "", True)))
    stage = P.size_stage("train", "worker", [slow], 3600.0)
    assert stage.machines is None and stage.machines_if_distributed > 1
    assert "a pass in one process runs in one process as built" in stage.blocker


def test_evaluation_is_sized_from_its_beam_job_benchmark(tmp_path):
    f = P.load_figures(3, "lazy_adam", 5e5).all()
    assert "evaluate_ctr.json" in f["evaluate_rate"].source and f["evaluate_rate"].value > 0
    slower = _bench_copy(tmp_path, "evaluate_ctr.json", lambda d: [
        r.update(seconds=r["seconds"] * 3) for r in d["runs"]])
    spec = P.PlanSpec(rows_per_day=10**10)
    assert _stage(P.plan(spec, slower), "evaluate").machines > _stage(P.plan(spec),
                                                                      "evaluate").machines


def test_a_slow_network_needs_more_ps():
    fast = _plan(rows_per_day=10**9, ps_network_gbps=100).parameter_servers
    slow = _plan(rows_per_day=10**9, ps_network_gbps=0.1).parameter_servers
    assert slow["for_network"] > fast["for_network"] and slow["count"] == slow["for_network"]


def test_every_figure_is_printed_with_its_source_and_every_assumption_with_its_own():
    p = _plan(rows_per_day=10**9)
    text = P.render(p)
    assert len(p.figures) >= 10
    for name, fig in p.figures.items():
        assert fig["source"].startswith("bench/results/") and ".json" in fig["source"]
        assert f"[{fig['source']}]" in text and name in text
        assert (ROOT / fig["source"].split()[0]).is_file()
    for a in p.assumptions:
        assert a["assumption"] in text and a["source"] in text
    for step in p.steps.values():
        for part in step["parts"]:
            assert f"[{part['figure']}" in text
    assert json.loads(json.dumps(P.plan_json(p)))["figures"] == p.figures


def test_the_cached_window_limit_matches_the_beam_job():
    text = (ROOT / "beam_jobs" / "preprocess_ctr.py").read_text()
    assert int(re.search(r"^MAX_CACHED_DATASETS = (\d+)", text, re.M)[1]) == P.CACHED_WINDOW_MAX


@pytest.mark.parametrize("argv, message", [
    (["--deadline-hours", "0"], "--deadline-hours must be a number > 0"),
    (["--machine", "memory_gb=8"], "needs cores=N"),
    (["--machine", "worker:cores=0,memory_gb=8"], "cores must be a whole number >= 1"),
    (["--machine", "gpu-box:cores=4"], "role must be one of"),
    (["--machine", "cores=4,disk=9"], "--machine takes cores=N,memory_gb=N,gpu=0|1"),
    (["--rows-per-day", "0"], "--rows-per-day must be >= 1"),
    (["--sparse-scale", "-1"], "--sparse-scale must be a number > 0"),
    (["--share", "train=0.9"], "add up to more than 1"),
    (["--table-rows", "no_such_field=10"], "no_such_field"),
    (["--table-rows", "user_id=10"], "below the feature's"),
    (["--feature-config", "/nonexistent/features.yaml"], "does not exist"),
])
def test_bad_input_is_refused_by_name(capsys, argv, message):
    assert cli.main(["plan", *argv]) == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err


def test_a_broken_benchmark_file_is_named_never_echoed(tmp_path):
    secret = "do-not-echo-this-token"
    bench = _bench_copy(tmp_path, "ps_sparse.json", lambda d: d.update(points=secret))
    with pytest.raises(P.PlanError) as e:
        P.plan(P.PlanSpec(), bench)
    assert "ps_sparse.json" in str(e.value) and secret not in str(e.value)
    (bench / "ps_sparse.json").write_text("{" + secret)
    with pytest.raises(P.PlanError) as e:
        P.plan(P.PlanSpec(), bench)
    assert "not valid JSON" in str(e.value) and secret not in str(e.value)


def test_help_has_examples(capsys):
    with pytest.raises(SystemExit):
        cli.main(["plan", "--help"])
    out = capsys.readouterr().out
    assert "--total-rows 1e11 --sparse-scale 10" in out and "--check" in out


def test_the_check_compares_with_the_fastest_run():
    assert P._compare(13.0, 10.0) == {"predicted_s": 13.0, "measured_s": 10.0,
                                      "error_percent": 30.0}
    assert P._compare(6.5, 10.0)["error_percent"] == -35.0


def test_training_figures_come_from_the_sweep_of_the_checked_run(tmp_path):
    """Loop and start-up from bench/results/train_sweep.json: the rate is 1 / slope of the
    piece around the plan's size, start-up the rest of the wall (the counting pass the
    sweep also timed is no longer the trainer's: the preprocessing job counts)."""
    def sweep(doc):
        doc["points"] = [
            {"window_rows": 1e5, "train_rows": 8e4, "examples": 8e4, "stats_s": 2.0,
             "loop_s": 4.0, "startup_s": 10.0},
            {"window_rows": 1e6, "train_rows": 8e5, "examples": 8e5, "stats_s": 6.0,
             "loop_s": 22.0, "startup_s": 12.0},
            {"window_rows": 1e7, "train_rows": 8e6, "examples": 8e6, "stats_s": 38.0,
             "loop_s": 182.0, "startup_s": 14.0}]
    bench = _bench_copy(tmp_path, "train_sweep.json", sweep)
    f = P.load_figures(3, "lazy_adam", 5e5, bench).all()
    assert "train_count_rate" not in f
    assert f["train_rate"].value == pytest.approx(7.2e5 / 18.0)
    # start-up: median 12 s + the intercept of the loop's first piece
    icpt_loop = 4.0 - 18.0 / 7.2e5 * 8e4
    assert f["train_startup"].value == pytest.approx(12.0 + icpt_loop)
    assert "train_sweep.json" in f["train_rate"].source
    big = P.load_figures(3, "lazy_adam", 5e7, bench).all()        # the last piece
    assert big["train_rate"].value == pytest.approx(7.2e6 / 160.0)
    # A slower sweep means more training workers for the same plan.
    spec = P.PlanSpec(rows_per_day=10**9)
    slow = _bench_copy(tmp_path / "slow", "train_sweep.json", lambda d: [
        p.update(loop_s=p["loop_s"] * 4) for p in d["points"]])
    n = lambda s: s.machines or s.machines_if_distributed  # noqa: E731
    assert n(_stage(P.plan(spec, slow), "train")) > n(_stage(P.plan(spec), "train"))
