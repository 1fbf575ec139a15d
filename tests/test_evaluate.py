"""Pass@(K,T) evaluation: hidden and visible sweeps, fixed decision states, evaluate.py."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import tasks
from minirl import sweep as sweep_module
from minirl.analysis import (
    Rate,
    error_recovery,
    first_error,
    horizon_bucket,
    replay,
    sample_states,
    success_by_horizon,
    turn_efficiency,
)
from minirl.chat import budget_text
from minirl.config import ConfigError, EvalArgs, parse_ints
from minirl.rollout import Episode, Turn, rollout
from minirl.sweep import specs_for, success_counts, sweep, truncate

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # evaluate.py is a script at the repo root, not part of the package
import evaluate  # noqa: E402

SEEDS = list(tasks.EVAL_SEEDS[:6])


def turn(optimal: bool, valid: bool = True) -> Turn:
    return Turn("x", "x", valid, False, optimal, 1.0, 1.0, 0.0)


def episode(optimal: list[bool], success: bool, optimal_length: int = 2) -> Episode:
    e = Episode("gridnav", 0, 0, 8, True, optimal_length, success=success)
    e.turns = [turn(o) for o in optimal]
    return e


# ---- the sweep ---------------------------------------------------------------------------------


def test_hidden_budget_truncation_equals_rolling_out_the_smaller_budget(quick_policy) -> None:
    """With the budget hidden, the first t turns at T_max are the episode at budget t, exactly.

    Every batched generate call sees the same active episodes and the same RNG stream for turns
    before t, so even the sampled tokens agree, not only their distribution.
    """
    model, tok = quick_policy
    by_t = sweep(model, tok, "gridnav", [1, 2, 3, 5], SEEDS, 3, budget_visible=False, seed=7)
    assert sorted(by_t) == [1, 2, 3, 5]
    for t in (1, 2, 3):
        torch.manual_seed(7)
        direct = rollout(model, tok, specs_for("gridnav", SEEDS, 3, t), budget_visible=False)
        assert [e.success for e in by_t[t]] == [e.success for e in direct]
        assert [[x.reply for x in e.turns] for e in by_t[t]] == [
            [x.reply for x in e.turns] for e in direct
        ]
        assert all(e.budget == t and e.turns_used <= t for e in by_t[t])
    # Successes can only grow with the budget, episode by episode.
    for a, b in zip(by_t[2], by_t[5], strict=True):
        assert b.success >= a.success


def test_visible_budget_rolls_out_every_t(quick_policy, monkeypatch) -> None:
    model, tok = quick_policy
    budgets_played = []
    real = sweep_module.rollout

    def spy(model, tokenizer, specs, **kwargs):
        budgets_played.append(specs[0].budget)
        return real(model, tokenizer, specs, **kwargs)

    monkeypatch.setattr(sweep_module, "rollout", spy)
    by_t = sweep(model, tok, "gridnav", [2, 4], SEEDS[:2], 2, budget_visible=True, batch_size=2)
    assert budgets_played == [2, 2, 4, 4]  # two batches per budget
    for t, episodes in by_t.items():
        prompt = tok.decode(episodes[0].input_ids).replace(" ", "")  # word-level decode spaces
        assert f"turnsleft:{t}<" in prompt  # the first observation told the model its budget
    budgets_played.clear()
    sweep(model, tok, "gridnav", [2, 4], SEEDS[:2], 2, budget_visible=False, batch_size=2)
    assert budgets_played == [4, 4]  # hidden: one rollout at max T


def test_truncate_and_counts() -> None:
    e = episode([True, False, True], success=True)
    e.budget = 3
    assert truncate(e, 3).success and not truncate(e, 2).success
    assert truncate(e, 2).turns_used == 2
    with pytest.raises(ValueError, match="cannot extend"):
        truncate(e, 4)
    wins = [episode([True], s) for s in (True, False, True, True)]
    assert success_counts({1: wins}, n=2) == {1: [1, 2]}


# ---- the analyses ------------------------------------------------------------------------------


def test_error_recovery_by_hand() -> None:
    episodes = [
        episode([True, True], True),  # no error, success
        episode([False, True, True], True),  # first error at 1, recovered
        episode([False, False], False),  # first error at 1, lost
        episode([True, False, True], True),  # first error at 2, recovered
        episode([True, True, True], False),  # no error, ran out of turns
    ]
    assert [first_error(e) for e in episodes] == [None, 1, 1, 2, None]
    r = error_recovery(episodes)
    assert r["no_error"] == Rate(0.5, 2)
    assert r["after_error"] == Rate(2 / 3, 3)
    assert r["by_first_error_turn"] == {1: Rate(0.5, 2), 2: Rate(1.0, 1)}


def test_horizon_and_efficiency_by_hand() -> None:
    assert [horizon_bucket(n) for n in (1, 2, 3, 4, 7)] == ["1-2", "1-2", "3-4", "3-4", "7-8"]
    episodes = [
        episode([True] * 2, True, optimal_length=2),
        episode([True] * 5, True, optimal_length=3),
        episode([True], False, optimal_length=4),
    ]
    assert success_by_horizon(episodes) == {"1-2": Rate(1.0, 1), "3-4": Rate(0.5, 2)}
    eff = turn_efficiency(episodes)
    assert eff["mean_turns"] == pytest.approx(3.5) and eff["mean_excess"] == pytest.approx(1.0)


def test_decision_states_are_exact_conversation_prefixes(quick_policy) -> None:
    model, tok = quick_policy
    episodes = sweep(model, tok, "gridnav", [4], SEEDS, 2, budget_visible=True)[4]
    states = sample_states(episodes, 10, seed=3)
    assert states == sample_states(episodes, 10, seed=3)  # deterministic
    for s in states:
        env = replay(s)
        turns_left = s.budget - len(s.replies)
        # The prompt ends with the replayed env's observation, then the assistant's header.
        expected_obs = tok(budget_text(env._observe(), turns_left), add_special_tokens=False)
        text = tok.decode(s.prompt_ids)
        assert tok.decode(expected_obs["input_ids"]) in text
        assert text.rstrip().endswith("assistant")


# ---- evaluate.py -------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def adapter_dir(quick_tiny_path: str, tmp_path_factory: pytest.TempPathFactory) -> str:
    """A real, different adapter: LoRA B matrices set to noise, saved with save_pretrained."""
    from minirl.models import load_policy

    model, _ = load_policy(quick_tiny_path, quant="nf4")
    torch.manual_seed(0)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "lora_B" in name:
                p.normal_(0, 0.5)
    out = tmp_path_factory.mktemp("adapter")
    model.save_pretrained(out)
    return str(out)


def eval_args(model: str, checkpoints: str, output: Path, **kw) -> list[str]:
    args = dict(
        model=model,
        checkpoints=checkpoints,
        k="1,2",
        t="1-3",
        n=2,
        instances=5,
        decision_states=12,
        decision_samples=2,
        bootstrap=50,
        output=str(output),
        **kw,
    )
    return [f"--{k}={v}" for k, v in args.items()]


def test_evaluate_end_to_end_writes_every_output(
    quick_tiny_path, adapter_dir, tmp_path, capsys
) -> None:
    import datasets

    assert evaluate.main(eval_args(quick_tiny_path, f"base,{adapter_dir}", tmp_path)) == 0
    shown = capsys.readouterr().out
    assert "Pass@(K,T): base" in shown and "adapter0 − base" in shown
    assert "Behaviour at T=3" in shown
    names = {p.name for p in tmp_path.iterdir()}
    expected = {
        "results.json",
        "results.jsonl",
        "heatmap_base.png",
        "passkt_curves.png",
        "behaviour.png",
    }
    assert expected <= names and len([n for n in names if n.startswith("heatmap_")]) == 2
    for png in tmp_path.glob("*.png"):
        assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    results = json.loads((tmp_path / "results.json").read_text())
    meta = results["meta"]
    assert meta["seeds"] == SEEDS[:5] and meta["n"] == 2 and meta["budget_visible"] is True
    assert meta["ks"] == [1, 2] and meta["ts"] == [1, 2, 3] and meta["minirl_version"]
    assert list(results["checkpoints"]) == ["base", "adapter0"]
    assert results["checkpoints"]["adapter0"]["path"] == adapter_dir
    table = datasets.load_dataset("json", data_files=str(tmp_path / "results.jsonl"))["train"]
    assert len(table) == 2 * 2 * 3
    assert set(table.column_names) >= {"checkpoint", "k", "t", "mean", "stderr", "ci_low"}
    # Pass@K can only grow with K, and (per instance, hence on average) with T when hidden.
    for entry in results["checkpoints"].values():
        cells = {(c["k"], c["t"]): c["mean"] for c in entry["grid"]}
        assert all(cells[(2, t)] >= cells[(1, t)] for t in (1, 2, 3))


def test_every_checkpoint_is_judged_on_the_same_states(
    quick_tiny_path, adapter_dir, tmp_path
) -> None:
    from minirl.compare import compare

    def run(checkpoints: str, hidden: bool = False) -> dict:
        args = EvalArgs(
            model=quick_tiny_path,
            checkpoints=checkpoints,
            k="1",
            t="2-3",
            n=1,
            instances=4,
            decision_states=8,
            decision_samples=1,
            bootstrap=0,
            budget_visible=not hidden,
        )
        return compare(args, progress=False)

    both = run(f"base,{adapter_dir}")
    alone = run(adapter_dir)
    assert both["meta"]["decision_states"] == alone["meta"]["decision_states"]
    assert len(both["meta"]["decision_states"]) == 8
    # Same states and seed: the adapter's single-step result does not depend on its company.
    a = both["checkpoints"]["adapter0"]["analysis"]["decision"]
    assert a == alone["checkpoints"]["adapter0"]["analysis"]["decision"]
    # Hidden mode is recorded as such.
    assert run("base", hidden=True)["meta"]["mode"].startswith("hidden")


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--checkpoints", "base,/no/such/dir"], "is not 'base' or an existing directory"),
        (["--k", "1,16", "--n", "8"], "--k 16 exceeds --n 8"),
        (["--t", ","], "--t is empty"),
        (["--task", "chess"], "--task 'chess': valid tasks are"),
        (["--t", "5-2"], "range 5-2 is empty"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(flags: list[str], message: str) -> None:
    proc = subprocess.run(
        [sys.executable, "evaluate.py", *flags],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and message in lines[0] and lines[0].startswith("evaluate.py: error")


def test_checkpoint_labels() -> None:
    from minirl.compare import checkpoint_labels

    assert checkpoint_labels("base, bm=runs/x/ ,runs/fixed-8") == {
        "base": "base",
        "bm": "runs/x/",
        "fixed-8": "runs/fixed-8",
    }
    with pytest.raises(ConfigError, match="used twice"):
        checkpoint_labels("a/run,b/run")


def test_parse_ints() -> None:
    assert parse_ints("1-4,8,2", "t") == [1, 2, 3, 4, 8]
    with pytest.raises(ConfigError, match="expected integers"):
        parse_ints("a-b", "t")
    with pytest.raises(ConfigError, match=">= 1"):
        parse_ints("0,1", "k")
