"""Overlapping publishing runs evaluate and publish in the order they finished training
(retrain.orchestration.turns): a later run waits while an earlier one is active, a dead
run's ticket never blocks the line, and a retried wait keeps its place."""
from __future__ import annotations

from retrain.orchestration import turns


def test_a_later_run_waits_for_an_earlier_active_one(tmp_path):
    states = {"manual__a": "running", "scheduled__b": "running"}
    home = str(tmp_path)
    assert turns.ahead(home, "dag", "manual__a", states.get) == ([], {})
    assert turns.ahead(home, "dag", "scheduled__b", states.get) == (["manual__a"], {})
    # a rescheduled poke keeps its place behind the same run
    assert turns.ahead(home, "dag", "scheduled__b", states.get) == (["manual__a"], {})
    turns.give_back(home, "dag", "manual__a")
    assert turns.ahead(home, "dag", "scheduled__b", states.get) == ([], {})


def test_the_ticket_of_a_run_that_ended_without_giving_it_back_is_dropped(tmp_path):
    states = {"manual__a": "running", "manual__b": "running"}
    home = str(tmp_path)
    turns.take(home, "dag", "manual__a")
    assert turns.ahead(home, "dag", "manual__b", states.get) == (["manual__a"], {})
    states["manual__a"] = "failed"            # died in evaluate: push never gave it back
    assert turns.ahead(home, "dag", "manual__b", states.get) == ([], {"manual__a": "failed"})
    assert [p.name.split("__", 1)[1] for p in turns.folder(home, "dag").glob("*.json")] == [
        "manual__b.json"]
    # a run Airflow no longer knows (its database was reset) is no obstacle either
    turns.give_back(home, "dag", "manual__b")
    turns.take(home, "dag", "manual__gone")
    assert turns.ahead(home, "dag", "manual__c", lambda run_id: "unknown") == (
        [], {"manual__gone": "unknown"})


def test_dags_and_run_ids_with_odd_characters_keep_their_own_lines(tmp_path):
    home = str(tmp_path)
    run = "manual__2026-11-07T10:41:07.5+00:00"
    turns.take(home, "ctr_daily_retrain", run)
    assert turns.ahead(home, "text_daily_finetune", "manual__x", lambda r: "running")[0] == []
    assert turns.ahead(home, "ctr_daily_retrain", "manual__x", lambda r: "running")[0] == [run]
    turns.give_back(home, "ctr_daily_retrain", run)
    assert not list(turns.folder(home, "ctr_daily_retrain").glob(f"*{run[:10]}*"))


def test_only_a_missing_run_counts_as_ended():
    """Any other failure to ask Airflow fails the poke, so a live run's ticket is never
    dropped because the API hiccuped."""
    from types import SimpleNamespace as NS
    assert turns.run_not_found(NS(response=NS(status_code=404)))           # dag.test()
    assert turns.run_not_found(NS(error=NS(detail={"status_code": 404})))  # via supervisor
    assert not turns.run_not_found(NS(response=NS(status_code=500)))
    assert not turns.run_not_found(NS(error=NS(detail={"status_code": 503})))
    assert not turns.run_not_found(ConnectionError("refused"))
