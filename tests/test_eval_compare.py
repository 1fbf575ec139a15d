"""Comparing checkpoints: every output of an evaluation, on the same instances and states."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
import torch

import tasks
from minirl.compare import checkpoint_labels, compare
from minirl.config import EvalArgs
from minirl.eval.results import load_results, save_results
from minirl.infra.errors import ConfigError

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # evaluate.py is a script at the repo root, not part of the package
import evaluate  # noqa: E402

SEEDS = list(tasks.EVAL_SEEDS[:6])


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
        recovery_states=12,
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
        "episodes.json",
        "episodes.html",
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
    # The viewer's sample: each checkpoint's first episode on every instance at every T, the
    # same instances for both, and the page puts them side by side (T = 2, the middle one).
    kept = json.loads((tmp_path / "episodes.json").read_text())["episodes"]
    assert list(kept) == ["base", "adapter0"]
    for records in kept.values():
        assert [(r["seed"], r["budget"]) for r in records] == [
            (s, t) for t in (1, 2, 3) for s in SEEDS[:5]
        ]
    page = (tmp_path / "episodes.html").read_text()
    assert page.count('class="instance" data-seed=') == 5 and "T = 2" in page
    # The open-loop yardstick at every T, and each checkpoint's feedback use there, in the
    # results file, the terminal table, the samples and the page.
    from minirl.eval.openloop import yardsticks

    blind = yardsticks("gridnav", [1, 2, 3])
    assert {t: r["success"] for t, r in results["open_loop"].items()} == {
        str(t): y.success for t, y in blind.items()
    }
    assert "open-loop best" in shown and f"{blind[3].success:.3f}±{blind[3].stderr:.3f}" in shown
    samples = json.loads((tmp_path / "episodes.json").read_text())
    for name, entry in results["checkpoints"].items():
        assert set(entry["feedback_use"]) == {"1", "2", "3"}
        assert samples["stats"][name]["3"]["feedback_use"] == entry["feedback_use"]["3"]["bits"]
    assert f"wins <b>{blind[2].success:.3f}</b>" in page
    # Pass@K can only grow with K, and (per instance, hence on average) with T when hidden.
    for entry in results["checkpoints"].values():
        cells = {(c["k"], c["t"]): c["mean"] for c in entry["grid"]}
        assert all(cells[(2, t)] >= cells[(1, t)] for t in (1, 2, 3))


def test_every_checkpoint_is_judged_on_the_same_states(
    quick_tiny_path, adapter_dir, tmp_path
) -> None:
    def run(checkpoints: str, hidden: bool = False):
        args = EvalArgs(
            model=quick_tiny_path,
            checkpoints=checkpoints,
            k="1",
            t="2-3",
            n=1,
            instances=4,
            decision_states=8,
            recovery_states=6,
            decision_samples=1,
            bootstrap=0,
            budget_visible=not hidden,
        )
        return compare(args, progress=False)

    both = run(f"base,{adapter_dir}")
    alone = run(adapter_dir)
    assert both.meta.decision_states == alone.meta.decision_states
    assert len(both.meta.decision_states) == 8
    # Same states and seed: the adapter's single-step result does not depend on its company.
    a = both.checkpoints["adapter0"].analysis.decision
    assert a == alone.checkpoints["adapter0"].analysis.decision
    # The post-error states are the base's, whoever else is compared, and so is recovery from them.
    assert both.meta.post_error_states == alone.meta.post_error_states
    assert 0 < len(both.meta.post_error_states) <= 6
    # So is each instance's error rate per turn in the base's episodes (the study's split).
    assert both.meta.base_error_rate == alone.meta.base_error_rate
    assert len(both.meta.base_error_rate) == 4
    assert all(0 <= r <= 1 for r in both.meta.base_error_rate)
    recovered = both.checkpoints["adapter0"].analysis.from_errors
    assert recovered == alone.checkpoints["adapter0"].analysis.from_errors
    assert recovered is not None and len(recovered.optimal_counts) == len(
        both.meta.post_error_states
    )
    # Hidden mode is recorded as such.
    assert run("base", hidden=True).meta.mode.startswith("hidden")


def test_checkpoint_labels() -> None:
    assert checkpoint_labels("base, bm=runs/x/ ,runs/fixed-8") == {
        "base": "base",
        "bm": "runs/x/",
        "fixed-8": "runs/fixed-8",
    }
    with pytest.raises(ConfigError, match="used twice"):
        checkpoint_labels("a/run,b/run")


def test_every_checkpoint_is_scored_exactly_on_the_base_s_same_position_pairs(
    quick_tiny_path: str, adapter_dir: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """The pairs are found once, in the base's episodes; each checkpoint's recorded scores are
    its own exact chances in them (here recomputed one state at a time, unbatched)."""
    from minirl import compare as compare_module
    from minirl.eval.analysis import replay
    from minirl.eval.position import action_probs, pair_record
    from minirl.models import load_policy

    found: list = []
    real = compare_module.same_position_pairs

    def recording(*a, **kw):
        found.extend(real(*a, **kw))
        return found

    monkeypatch.setattr(compare_module, "same_position_pairs", recording)
    args = EvalArgs(
        model=quick_tiny_path,
        checkpoints=f"base,{adapter_dir}",
        k="1",
        t="4,8",
        n=1,
        instances=6,
        decision_states=6,
        recovery_states=6,
        decision_samples=1,
        bootstrap=0,
    )
    results = compare(args, progress=False)
    assert len(found) >= 3
    assert results.meta.position_pairs == [pair_record(p) for p in found]
    for record, pair in zip(results.meta.position_pairs, found, strict=True):
        assert list(pair.pre.replies) == record["replies"][:-1]  # one failed reply apart
        before, after = replay(pair.pre), replay(pair.post)
        assert before.distance() == after.distance()  # the failure left the agent where it was
        assert record["error"] not in record["optimal"]
    env = tasks.make(args.task)
    for label, path in (("base", None), ("adapter0", adapter_dir)):
        model, tokenizer = load_policy(quick_tiny_path, "nf4", adapter=path, task=args.task)
        scores = results.checkpoints[label].analysis.position
        assert scores is not None and len(scores.optimal_pre) == len(found)
        for k, pair in enumerate(found):
            pre = action_probs(model, tokenizer, pair.pre, env)
            post = action_probs(model, tokenizer, pair.post, env)
            assert scores.optimal_pre[k] == pytest.approx(
                sum(pre[a] for a in pair.optimal), abs=1e-5
            )
            assert scores.optimal_post[k] == pytest.approx(
                sum(post[a] for a in pair.optimal), abs=1e-5
            )
            if pair.error:
                assert scores.repeat_post[k] == pytest.approx(post[pair.error], abs=1e-5)
    base, trained = (results.checkpoints[x].analysis.position for x in ("base", "adapter0"))
    assert base.optimal_pre != trained.optimal_pre  # the adapter is scored, not the base again
    # And the scores survive the file: results.json holds them, checked as they are read back.
    back = load_results(save_results(results, tmp_path / "results.json"))
    again = back.checkpoints["adapter0"].analysis.position
    assert again is not None and again.optimal_post == trained.optimal_post
    assert back.meta.position_pairs == results.meta.position_pairs


def test_position_scores_read_back_are_checked(tmp_path: Path) -> None:
    """A results.json whose same-position scores are not chances is refused in one line."""
    from minirl.eval.results import _position

    good = {
        "optimal_pre": [0.5],
        "optimal_post": [0.25],
        "repeat_pre": [None],
        "repeat_post": [0.1],
    }
    assert _position(good).repeat_pre[0] != _position(good).repeat_pre[0]  # null is NaN
    for bad, said in (
        ({**good, "optimal_pre": ["0.5<script>"]}, "not a chance"),
        ({**good, "optimal_post": [1.5]}, "not a chance"),
        ({**good, "repeat_post": [True]}, "not a chance"),
        ({**good, "optimal_pre": 0.5}, "not a list"),
        ({**good, "optimal_pre": [0.5, 0.5]}, "differ in length"),
    ):
        with pytest.raises(ValueError, match=said):
            _position(bad)
