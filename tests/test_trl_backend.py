"""`--backend trl`: TRL's GRPOTrainer driving minirl's rollout, budgets and rewards.

What is checked: the split of an episode into TRL's prompt and completion (the env mask selects
exactly the replies), the rollout_func contract on a real GRPOTrainer run (prompts arrive with
each instance already G times and one episode comes back per prompt; env_mask as long as the
completion; one T per group), the adapter it writes (peft loads it, evaluate.py evaluates it),
and that minirl's loss and TRL's `_compute_loss` agree on the same batch.
"""

from __future__ import annotations

import json
import random
import shutil
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from peft import PeftModel
from safetensors.torch import load_file
from trl.trainer.utils import pad

import minirl.rollout as rollout_module
import tasks
from minirl import grpo, trainer
from minirl import trl_backend as backend
from minirl.chat import budget_text, prompt_ids
from minirl.config import BudgetArgs, Config, GRPOArgs, ModelArgs, TaskArgs, validate
from minirl.episode import EpisodeSpec
from minirl.infra.errors import ConfigError
from minirl.logprobs import sequence_logps, to_batch
from minirl.models import load_base, load_policy, reference_policy, resolve_model_path
from minirl.rollout import rollout

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # evaluate.py is a script at the repo root, not part of the package
import evaluate  # noqa: E402

G = 4


def trl_config(output_dir: Path, **grpo: object) -> Config:
    settings = dict(
        num_generations=G,
        max_steps=3,
        eval_seeds=0,
        logging_steps=1,
        save_steps=2,
        output_dir=str(output_dir),
        backend="trl",
    )
    settings.update(grpo)
    return Config(
        model=ModelArgs(model="tiny"),
        grpo=GRPOArgs(**settings),  # type: ignore[arg-type]
        budget=BudgetArgs(mode="budgetmix", budget_min=2, budget_max=5),
        task=TaskArgs(tasks_per_step=2, max_new_tokens=3),
    )


def played(quick_policy, groups: int = 2, budget: int = 3):
    model, tok = quick_policy
    torch.manual_seed(0)
    specs = [EpisodeSpec("gridnav", s, budget, i) for i, s in enumerate(range(groups))]
    return rollout(model, tok, [s for s in specs for _ in range(G)], max_new_tokens=3)


def test_episode_splits_into_prompt_and_a_completion_whose_mask_is_the_replies(
    quick_policy,
) -> None:
    _, tok = quick_policy
    episodes = played(quick_policy)
    # The quick policy's few turns here may bump no wall: mark one, so the penalty is checked.
    episodes[0].turns[0].mistake = True
    out = backend.to_trl(episodes, invalid_penalty=0.5, mistake_penalty=0.25)
    backend.check_rollout_output(out, len(episodes))
    for i, ep in enumerate(episodes):
        prompt, completion = out["prompt_ids"][i], out["completion_ids"][i]
        mask = out["env_mask"][i]
        assert prompt + completion == ep.input_ids
        assert len(completion) == len(mask) == len(out["logprobs"][i])
        # The prompt is the system rules and the first observation, up to the generation prompt.
        env = tasks.make("gridnav")
        assert prompt == prompt_ids(tok, env.system_prompt, budget_text(env.reset(ep.seed), 3))
        # env_mask selects exactly the sampled replies; the rest is template and observations.
        masked = [t for t, m in zip(completion, mask, strict=True) if m]
        replies = " ".join(turn.reply for turn in ep.turns)
        assert tok.decode(masked, skip_special_tokens=True).split() == replies.split()
        unmasked = tok.decode([t for t, m in zip(completion, mask, strict=True) if not m])
        assert unmasked.count("<|im_start|> user") == ep.turns_used - 1
        assert mask[0] == 1 and sum(mask) == sum(ep.loss_mask)
        invalid = sum(not t.valid for t in ep.turns)
        mistakes = sum(t.mistake for t in ep.turns)  # TRL's advantage is per episode: in R_i
        assert out["reward"][i] == pytest.approx(
            float(ep.success) - 0.5 * invalid - 0.25 * mistakes
        )
        assert out["turns"][i] == ep.turns_used <= out["budget"][i] == ep.budget


def test_contract_errors_are_caught_before_trl_sees_them(quick_policy) -> None:
    """The two pitfalls of DESIGN.md section 10, as a rollout_func would make them."""
    episodes = played(quick_policy, groups=1)
    out = backend.to_trl(episodes, 0.0)
    # Expanding the (already repeated) prompts G times again: G*G episodes for G prompts.
    doubled = {k: [v for v in rows for _ in range(G)] for k, rows in out.items()}
    with pytest.raises(ValueError, match=f"returned {G * G} prompt_ids for {G} prompts"):
        backend.check_rollout_output(doubled, G)
    out["env_mask"][1] = out["env_mask"][1][:-1]
    with pytest.raises(ValueError, match="episode 1: env_mask has"):
        backend.check_rollout_output(out, G)


def test_dataset_draws_the_instances_and_budgets_minirl_draws(quick_policy, monkeypatch) -> None:
    """Both backends play the same instances at the same T from the same seed."""
    cfg = trl_config(Path("unused"), max_steps=3)
    cfg.task.tasks_per_step = 3
    rows = backend.episode_dataset(cfg)["prompt"]
    assert len(rows) == 3 * 3

    seen: list[list[EpisodeSpec]] = []

    class Drawn(Exception):
        pass

    def capture(model, tokenizer, specs, **kwargs):
        seen.append(specs)
        raise Drawn

    monkeypatch.setattr(rollout_module, "rollout", capture)
    model, tok = quick_policy
    rng = random.Random(cfg.grpo.seed)
    for step in range(3):
        with pytest.raises(Drawn):
            trainer.train_step(model, tok, None, cfg, rng, step)  # type: ignore[arg-type]
    minirl_groups = [(s.seed, s.budget) for specs in seen for s in specs[::G]]
    assert minirl_groups == [(r["seed"], r["budget"]) for r in rows]
    assert len({r["budget"] for r in rows}) > 1  # BudgetMix: T varies across groups


@pytest.fixture(scope="module")
def trl_run(tmp_path_factory: pytest.TempPathFactory) -> dict:
    """3 real GRPOTrainer steps on the tiny base (CPU), recording what rollout_func saw."""
    out = tmp_path_factory.mktemp("trl") / "run"
    cfg = trl_config(out, eval_seeds=4)  # report_to: the default, tensorboard
    calls: list[tuple[list[dict], dict]] = []
    real = backend.make_rollout_func

    def recording(cfg, tokenizer):
        rollout_func = real(cfg, tokenizer)

        def spy(prompts, trl_trainer):
            output = rollout_func(prompts, trl_trainer)
            calls.append((list(prompts), output))
            return output

        return spy

    mp = pytest.MonkeyPatch()
    mp.setattr(backend, "make_rollout_func", recording)
    try:
        result = backend.train_trl(cfg, progress=False)
    finally:
        mp.undo()
    return {"cfg": cfg, "out": out, "calls": calls, "result": result}


def test_three_trl_steps_honour_the_rollout_contract(trl_run: dict) -> None:
    cfg, calls = trl_run["cfg"], trl_run["calls"]
    rows = backend.episode_dataset(cfg)["prompt"]
    assert len(calls) == 3  # one rollout batch per optimizer step
    for step, (prompts, output) in enumerate(calls):
        # TRL hands over each instance already num_generations times, consecutively ...
        groups = rows[step * 2 : step * 2 + 2]
        assert prompts == [spec for spec in groups for _ in range(G)]
        # ... and gets exactly one episode per prompt back, with a mask as long as its completion.
        assert all(len(v) == len(prompts) for v in output.values())
        for ids, mask in zip(output["completion_ids"], output["env_mask"], strict=True):
            assert len(ids) == len(mask) and mask[0] == 1
        # One T per group: every episode of a group played its group's budget.
        for g, spec in enumerate(groups):
            budgets = output["budget"][g * G : (g + 1) * G]
            turns = output["turns"][g * G : (g + 1) * G]
            assert budgets == [spec["budget"]] * G and max(turns) <= spec["budget"]


def test_trl_run_logs_learns_and_writes_minirl_outputs(trl_run: dict) -> None:
    out, calls = trl_run["out"], trl_run["calls"]
    lines = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines()]
    steps = [x for x in lines if "reward" in x]
    assert [x["step"] for x in steps] == [1, 2, 3]
    for x, (_, output) in zip(steps, calls, strict=True):
        # TRL's logged reward is the mean of the rewards rollout_func computed.
        assert x["reward"] == pytest.approx(sum(output["reward"]) / len(output["reward"]))
        assert x["success"] == pytest.approx(sum(output["success"]) / len(output["success"]))
    assert any(x["grad_norm"] > 0 for x in steps), "no step had a non-tied group"
    assert sorted(p.name for p in out.glob("checkpoint-*")) == ["checkpoint-2", "checkpoint-3"]
    meta = json.loads((out / "trainer_state.json").read_text())
    assert meta["config"]["grpo"]["backend"] == "trl"
    assert meta["config"]["task"]["task"] == "gridnav"


def test_trl_run_reports_to_tensorboard_what_it_logs(trl_run: dict) -> None:
    """TRL's own TensorBoard callback, pointed at OUTPUT/tensorboard, holds TRL's log lines; the
    before/after evaluation is added at steps 0 and 3, and the run draws its pictures."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    out = trl_run["out"]
    events = EventAccumulator(str(out / "tensorboard"), size_guidance={"scalars": 0})
    events.Reload()
    lines = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines()]
    steps = [x for x in lines if "reward" in x]
    for line in steps:
        for key in ("reward", "success", "turns", "budget", "invalid_rate", "entropy"):
            found = [e.value for e in events.Scalars(f"train/{key}") if e.step == line["step"]]
            assert found == [np.float32(line[key])], (key, line["step"])
    summary = json.loads((out / "summary.json").read_text())
    for step, results in ((0, summary["base"]), (3, summary["trained"])):
        for t, result in results.items():
            found = [e.value for e in events.Scalars(f"eval/success_T{t}") if e.step == step]
            assert found == [np.float32(result["success"])]
    assert (out / "curves.png").stat().st_size > 10_000
    assert (out / "episodes.html").read_text().count('class="instance"') == 4


def test_trl_adapter_loads_with_peft_and_evaluates(trl_run: dict, tmp_path: Path, capsys) -> None:
    out = trl_run["out"]
    saved = load_file(out / "adapter_model.safetensors")
    assert saved and all(torch.isfinite(v).all() for v in saved.values())
    base = load_base(resolve_model_path("tiny", "gridnav"), "nf4")
    model = PeftModel.from_pretrained(base, str(out))
    loaded = {n: p for n, p in model.named_parameters() if "lora_" in n}
    assert len(loaded) == len(saved)
    b_weights = [p for n, p in loaded.items() if "lora_B" in n]
    assert any(p.abs().sum() > 0 for p in b_weights), "training did not move the adapter"
    for name, tensor in saved.items():
        match = [p for n, p in loaded.items() if n.replace(".default", "").endswith(name[-40:])]
        assert match and torch.equal(match[0].detach(), tensor), name

    args = ["--model", "tiny", "--k", "1", "--t", "2", "--n", "2", "--instances", "4"]
    args += ["--decision_states", "4", "--bootstrap", "0", "--output", str(tmp_path)]
    assert evaluate.main(["--checkpoints", f"base,trl={out}", *args]) == 0
    results = json.loads((tmp_path / "results.json").read_text())
    assert list(results["checkpoints"]) == ["base", "trl"]
    # evaluate.py reads the run's config: the wrong task is refused, not silently measured.
    assert evaluate.main(["--checkpoints", str(out), "--task", "guess", *args]) == 2
    assert "was trained on 'gridnav'" in capsys.readouterr().err


def test_a_resumed_trl_run_logs_what_the_uninterrupted_run_logged(
    trl_run: dict, tmp_path: Path
) -> None:
    """Killed after logging step 3 but before saving it, then resumed from checkpoint-2.

    TRL averages what it logs over the steps since its last log, a window that restarts at a
    resume, so minirl makes it log every step; --logging_steps 10 on the resume (the red-team
    run's default) must not change a line. The closing aggregate line stays out of the file.
    """
    out = tmp_path / "killed"
    shutil.copytree(trl_run["out"], out)
    shutil.rmtree(out / "checkpoint-3")
    for name in ("adapter_model.safetensors", "adapter_config.json", "trainer_state.json"):
        (out / name).unlink()
    full = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines()]
    assert [x["step"] for x in full] == [1, 2, 3]  # one line per step, no closing line
    cfg = trl_config(out, resume=True, logging_steps=10, eval_seeds=4)  # as trl_run
    backend.train_trl(cfg, progress=False)
    resumed = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines()]
    timing = {"step_time"}
    assert [{k: v for k, v in x.items() if k not in timing} for x in resumed] == [
        {k: v for k, v in x.items() if k not in timing} for x in full
    ]
    a = load_file(trl_run["out"] / "adapter_model.safetensors")
    b = load_file(out / "adapter_model.safetensors")
    assert a.keys() == b.keys()
    for key in a:
        torch.testing.assert_close(b[key], a[key], rtol=0, atol=0)


def test_config_mapping(tmp_path: Path) -> None:
    cfg = trl_config(tmp_path, num_iterations=2, loss_type="dr_grpo", epsilon_high=0.28)
    args = backend.grpo_config(cfg, str(tmp_path))
    assert args.per_device_train_batch_size == 2 * G and args.steps_per_generation == 1
    assert args.generation_batch_size == 2 * G  # one step = tasks_per_step groups of G
    # Under `accelerate launch` with 2 processes each one plays half of a step's episodes.
    assert backend.grpo_config(cfg, str(tmp_path), num_processes=2).per_device_train_batch_size == G
    assert args.max_steps == 6 and args.save_steps == 4  # counted in optimizer steps
    assert args.max_completion_length == 3 * 5  # max_new_tokens * budget_max
    assert (args.loss_type, args.epsilon_high, args.num_generations) == ("dr_grpo", 0.28, G)
    assert args.lr_scheduler_type == "constant" and not args.gradient_checkpointing
    # A schedule passes through; its warmup counted in optimizer steps like max_steps.
    cfg.grpo.lr_scheduler_type, cfg.grpo.warmup_steps = "cosine", 2
    scheduled = backend.grpo_config(cfg, str(tmp_path))
    assert (scheduled.lr_scheduler_type, scheduled.warmup_steps) == ("cosine", 4)
    cfg.grpo.lr_scheduler_type, cfg.grpo.warmup_steps = "constant", 0
    assert not args.mask_truncated_completions and not args.shuffle_dataset
    assert not args.bf16  # no CUDA here
    assert args.report_to == ["tensorboard"] and args.run_name == tmp_path.name
    assert backend.grpo_config(trl_config(tmp_path, report_to=["none"]), "x").report_to == []
    assert args.logging_steps == 1  # every step its own metrics.jsonl line (see MAPPING)
    with pytest.raises(ConfigError, match="split evenly over 3 processes"):
        backend.grpo_config(cfg, str(tmp_path), num_processes=3)
    # minirl's micro-batch maps onto TRL's: accumulated, so one step still sees every episode.
    cfg.grpo.per_device_train_batch_size = 2
    micro = backend.grpo_config(cfg, str(tmp_path))
    assert micro.per_device_train_batch_size == 2 and micro.gradient_accumulation_steps == 4
    assert micro.steps_per_generation == 4 and micro.generation_batch_size == 2 * G
    cfg.grpo.per_device_train_batch_size = 3
    with pytest.raises(ConfigError, match="must divide the 8 episodes"):
        backend.grpo_config(cfg, str(tmp_path))
    cfg.task.reward_mode = "process"
    with pytest.raises(ConfigError, match="--reward_mode process"):
        validate(cfg)


def test_minirl_and_trl_losses_agree_on_one_batch(quick_tiny_path: str, tmp_path: Path) -> None:
    """minirl.grpo.policy_loss and GRPOTrainer._compute_loss, fed the same ids, masks, advantages
    and old log-probs (and reference log-probs when beta > 0), give the same loss and the same
    LoRA gradients for every loss_type.

    They agree because minirl uses TRL's formulas, with one setting: TRL 1.16 defaults to
    `use_bias_correction_kl=True`, which multiplies each token's k3 KL by the ratio rho, and
    minirl's KL has no such factor, so `grpo_config` sets it to False. With TRL's default the
    losses differ by beta * mean(kl * (rho - 1)) over the masked tokens, which is checked below.

    In a real step the two backends still differ in one input: with num_iterations = 1, TRL takes
    pi_old = pi_theta.detach() (ratio exactly 1; the rollout's log-probs only feed vLLM's
    importance correction), while minirl takes the log-probs stored at sampling time (ratio 1 up
    to the numerical gap between the sampling and the training forward). The last block checks
    that TRL's choice equals minirl's loss with old = current log-probs. The old log-probs are
    perturbed here so that the clip is active.
    """
    torch.manual_seed(0)
    model, tok = load_policy(quick_tiny_path, quant="nf4")
    with torch.no_grad():  # an adapter that differs from the base, so the KL term is not 0
        for name, p in model.named_parameters():
            if "lora_B" in name:
                p.normal_(0, 0.2)
    cfg = trl_config(tmp_path, epsilon_high=0.28)
    cfg.model.model = quick_tiny_path
    trl_trainer = backend.build_trainer(cfg, model, tok, str(tmp_path), progress=False)
    trl_trainer.current_gradient_accumulation_steps = 1  # set by Trainer's loop; one batch here

    episodes = played((model, tok), groups=2, budget=4)
    batch = to_batch(episodes, tok.pad_token_id, torch.device("cpu"))
    rewards = torch.tensor([1.0, 0.0, 0.0, 1.0, 0.0, 0.0, 0.0, 1.0])
    advantages, _ = grpo.group_advantages(rewards, G)
    noise = torch.randn(batch.old_logps.shape, generator=torch.Generator().manual_seed(1))
    old = batch.old_logps + 0.3 * noise * batch.loss_mask
    with torch.no_grad(), reference_policy(model):
        ref = sequence_logps(model, batch.input_ids, batch.attention_mask)
    model.train()

    # TRL's layout of the same batch: left-padded prompts, right-padded completions.
    starts = [ep.loss_mask.index(1) for ep in episodes]
    ends = [len(ep.input_ids) for ep in episodes]

    def completion_part(full: torch.Tensor) -> torch.Tensor:
        rows = [full[b, s:e] for b, (s, e) in enumerate(zip(starts, ends, strict=True))]
        return pad(rows, padding_value=0, padding_side="right")

    prompts = [torch.tensor(ep.input_ids[:s]) for ep, s in zip(episodes, starts, strict=True)]
    completions = [torch.tensor(ep.input_ids[s:]) for ep, s in zip(episodes, starts, strict=True)]
    env_mask = completion_part(batch.loss_mask).long()
    inputs = {
        "prompt_ids": pad(prompts, tok.pad_token_id, "left"),
        "prompt_mask": pad([torch.ones_like(p) for p in prompts], 0, "left"),
        "completion_ids": pad(completions, tok.pad_token_id, "right"),
        "completion_mask": pad([torch.ones_like(c) for c in completions], 0, "right"),
        "tool_mask": env_mask,  # what TRL names the env_mask internally
        "advantages": advantages,
        "old_per_token_logps": completion_part(old),
        "ref_per_token_logps": completion_part(ref),
        "num_items_in_batch": env_mask.sum(),
    }
    max_completion_length = cfg.task.max_new_tokens * cfg.budget.budget_max
    params = [p for p in model.parameters() if p.requires_grad]

    def minirl_loss(loss_type: str, beta: float, old_logps: torch.Tensor | None = None):
        logps = sequence_logps(model, batch.input_ids, batch.attention_mask)
        loss, _ = grpo.policy_loss(
            logps,
            logps.detach() if old_logps is None else old_logps,
            grpo.trajectory_token_advantages(advantages, batch.loss_mask),
            batch.loss_mask,
            epsilon=0.2,
            epsilon_high=0.28,
            beta=beta,
            ref_logps=ref,
            loss_type=loss_type,
            max_completion_length=max_completion_length,
        )
        return loss

    def gradients(loss: torch.Tensor) -> list[torch.Tensor]:
        return [g.clone() for g in torch.autograd.grad(loss, params)]

    for loss_type in grpo.LOSS_TYPES:
        for beta in (0.0, 0.04):
            # GRPOTrainer reads these attributes in _compute_loss; set per case instead of
            # building a trainer for each of the eight combinations.
            trl_trainer.loss_type, trl_trainer.beta = loss_type, beta
            ours = minirl_loss(loss_type, beta, old)
            theirs = trl_trainer._compute_loss(model, inputs)
            assert ours.item() != 0.0
            torch.testing.assert_close(theirs, ours, atol=1e-6, rtol=1e-5, msg=loss_type)
            for a, b in zip(gradients(ours), gradients(theirs), strict=True):
                torch.testing.assert_close(a, b, atol=1e-7, rtol=1e-4)

    # TRL's default use_bias_correction_kl=True weighs each token's KL by rho: exactly that gap.
    trl_trainer.loss_type, trl_trainer.beta = "dapo", 0.04
    trl_trainer.args.use_bias_correction_kl = True
    with torch.no_grad():
        logps = sequence_logps(model, batch.input_ids, batch.attention_mask)
        on = batch.loss_mask.bool()
        delta, ratio = (ref - logps)[on], (logps - old).exp()[on]
        kl = delta.exp() - delta - 1
        gap = 0.04 * (kl * (ratio - 1)).sum() / on.sum()
        torch.testing.assert_close(
            trl_trainer._compute_loss(model, inputs) - minirl_loss("dapo", 0.04, old), gap
        )
    trl_trainer.args.use_bias_correction_kl = False

    # TRL's own default at num_iterations = 1: no old log-probs, so pi_old = pi_theta.detach().
    trl_trainer.beta = 0.0
    on_policy = {k: v for k, v in inputs.items() if k != "old_per_token_logps"}
    torch.testing.assert_close(
        trl_trainer._compute_loss(model, on_policy), minirl_loss("dapo", 0.0), atol=1e-6, rtol=1e-5
    )
