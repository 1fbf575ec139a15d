"""`--report_to`: every tracker holds exactly what metrics.jsonl and summary.json hold.

One real 3-step run through `python train.py` reports to all three trackers at once, offline
and with the network cut off (tests/no_network.py: any DNS lookup or internet connection fails
and is recorded): tensorboard's event files are read back with tensorboard's own reader,
trackio's local SQLite store with trackio's, and W&B's offline run file (no login, no network:
wandb picks offline mode by itself) with its protobuf records. Each step's scalars must equal
that step's line of metrics.jsonl (tensorboard stores float32, so there they are compared as
float32), and the before/after evaluation must equal summary.json. The same run must leave its
curves and its episode viewer page.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from html.parser import HTMLParser
from pathlib import Path

import matplotlib.image
import numpy as np
import pytest

from minirl.config import Config, GRPOArgs, validate
from minirl.infra.errors import ConfigError
from minirl.rundir import trackers

ROOT = Path(__file__).resolve().parents[1]
STEPS = 3


@pytest.fixture(scope="module")
def run(quick_tiny_path: str, tmp_path_factory: pytest.TempPathFactory) -> dict:
    tmp = tmp_path_factory.mktemp("report")
    out = tmp / "run"
    env = {k: v for k, v in os.environ.items() if k not in ("WANDB_MODE", "WANDB_API_KEY")}
    env.update(TRACKIO_DIR=str(tmp / "trackio"), OMP_NUM_THREADS="1")
    args = ["--model", quick_tiny_path, "--steps", str(STEPS), "--num_generations", "2"]
    args += ["--tasks_per_step", "2", "--eval_seeds", "4", "--budget_min", "2", "--budget_max", "4"]
    args += ["--output_dir", str(out), "--report_to", "tensorboard", "trackio", "wandb"]
    network = tmp / "network.log"
    proc = subprocess.run(
        [sys.executable, "tests/no_network.py", str(network), "train.py", *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    lines = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines()]
    summary = json.loads((out / "summary.json").read_text())
    tried = network.read_text() if network.exists() else ""
    return {
        "out": out,
        "tmp": tmp,
        "metrics": lines,
        "summary": summary,
        "env": env,
        "stdout": proc.stdout,
        "net": tried,
    }


def test_no_tracker_reaches_for_the_network(run: dict) -> None:
    """Without a login, wandb must not even resolve a host: it used to build its settings (and
    start its system monitor's metadata lookup) before minirl's offline mode took effect."""
    assert run["net"] == "", run["net"]


def train_scalars(line: dict) -> dict[str, float]:
    return {f"train/{k}": v for k, v in line.items() if k != "step"}


def eval_scalars(results: dict) -> dict[str, float]:
    return {f"eval/{f}_T{t}": r[f] for t, r in results.items() for f in trackers.EVAL_FIELDS}


def test_tensorboard_holds_metrics_jsonl(run: dict) -> None:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    events = EventAccumulator(str(run["out"] / "tensorboard"), size_guidance={"scalars": 0})
    events.Reload()
    assert [m["step"] for m in run["metrics"]] == list(range(1, STEPS + 1))
    tags = set(events.Tags()["scalars"])
    for line in run["metrics"]:
        for tag, value in train_scalars(line).items():
            found = [e.value for e in events.Scalars(tag) if e.step == line["step"]]
            assert found == [np.float32(value)], (tag, line["step"])
    expected = {tag: None for line in run["metrics"] for tag in train_scalars(line)}
    summary = run["summary"]
    for step, results in ((0, summary["base"]), (STEPS, summary["trained"])):
        for tag, value in eval_scalars(results).items():
            assert [e.value for e in events.Scalars(tag) if e.step == step] == [np.float32(value)]
            expected[tag] = None
    assert tags == set(expected)  # nothing else, nothing missing
    # The sample episodes: one markdown row per kept episode (2 policies x 4 instances x 3 T).
    text = events.Tensors("episodes/text_summary")[0].tensor_proto.string_val[0].decode()
    assert text.count("\n| 100000") == 2 * 4 * 3


def test_trackio_store_holds_metrics_jsonl(run: dict) -> None:
    # In a child process: trackio fixes its store's directory when it is first imported.
    read = (
        "import json, sys; from trackio.sqlite_storage import SQLiteStorage; "
        "print(json.dumps(SQLiteStorage.get_logs(sys.argv[1], sys.argv[2]), default=str))"
    )
    proc = subprocess.run(
        [sys.executable, "-c", read, trackers.PROJECT, run["out"].name],
        env=run["env"],
        capture_output=True,
        text=True,
        check=True,
    )
    logs = json.loads(proc.stdout.strip().splitlines()[-1])
    for line in run["metrics"]:
        found = [
            {k: v for k, v in log.items() if k.startswith("train/")}
            for log in logs
            if log["step"] == line["step"] and any(k.startswith("train/") for k in log)
        ]
        assert found == [train_scalars(line)], line["step"]
    summary = run["summary"]
    for step, results in ((0, summary["base"]), (STEPS, summary["trained"])):
        found = [
            {k: v for k, v in log.items() if k.startswith("eval/")}
            for log in logs
            if log["step"] == step and any(k.startswith("eval/") for k in log)
        ]
        assert found == [eval_scalars(results)]
    assert any("episodes" in log for log in logs)


def wandb_history(path: Path) -> list[dict]:
    """The history rows of a W&B run file: a LevelDB-style log of protobuf Records.

    wandb 0.31 no longer ships a Python reader for its own files, so this is the format as its
    writer lays it out: a 7-byte header (":W&B", magic, version), then 32 KiB blocks of chunks,
    each with a 7-byte header (crc32c, length, type: 1 full, 2 first, 3 middle, 4 last).
    """
    from wandb.proto import wandb_internal_pb2

    data = path.read_bytes()
    assert data[:4] == b":W&B"
    pos, record, rows = 7, b"", []
    while pos + 7 <= len(data):
        room = 32768 - pos % 32768
        if room < 7:  # too little room for a chunk header: the block is padded
            pos += room
            continue
        length, kind = int.from_bytes(data[pos + 4 : pos + 6], "little"), data[pos + 6]
        if kind == 0:
            break
        record += data[pos + 7 : pos + 7 + length]
        pos += 7 + length
        if kind in (1, 4):
            parsed = wandb_internal_pb2.Record()
            parsed.ParseFromString(record)
            record = b""
            if parsed.WhichOneof("record_type") == "history":
                items = parsed.history.item  # a "train/reward" key may come split at the "/"
                rows.append(
                    {i.key or "/".join(i.nested_key): json.loads(i.value_json) for i in items}
                )
    return rows


def test_wandb_offline_run_holds_metrics_jsonl(run: dict) -> None:
    (found,) = (run["out"] / "wandb").glob("offline-run-*/run-*.wandb")  # offline, by itself
    rows = wandb_history(found)
    for line in run["metrics"]:
        at = [r for r in rows if r.get(trackers.STEP_KEY) == line["step"] and "train/reward" in r]
        assert len(at) == 1
        assert {k: at[0][k] for k in train_scalars(line)} == train_scalars(line)
    trained = [r for r in rows if r.get(trackers.STEP_KEY) == STEPS and "eval/success_T2" in r]
    assert trained[0]["eval/success_T2"] == run["summary"]["trained"]["2"]["success"]
    assert any(key.startswith("episodes") for r in rows for key in r)


def test_the_run_draws_its_curves_and_its_episodes(run: dict) -> None:
    out = run["out"]
    pixels = matplotlib.image.imread(out / "curves.png")[..., :3]
    assert pixels.shape[0] > 400 and pixels.std() > 0.05  # not a blank canvas
    page = (out / "episodes.html").read_text()
    samples = json.loads((out / "episodes.json").read_text())
    assert list(samples["episodes"]) == ["base", "trained"]
    assert page.count('class="instance"') == 4  # the 4 evaluation instances at the middle T
    assert page.count('<td class="frame" data-policy="trained"') == sum(
        len(e["turns"]) + 1 for e in samples["episodes"]["trained"] if e["budget"] == 3
    )


def test_the_run_reports_the_open_loop_yardstick_and_feedback_use(run: dict) -> None:
    from minirl.eval.openloop import yardsticks

    summary = run["summary"]
    expected = yardsticks("gridnav", [2, 3, 4])  # the cached values the run read
    assert set(summary["open_loop"]) == {"2", "3", "4"}
    for t, y in expected.items():
        assert summary["open_loop"][str(t)]["success"] == y.success
        assert summary["open_loop"][str(t)]["sequence"] == y.sequence
    for policy in ("base", "trained"):
        for t in ("2", "3", "4"):
            used, sd = summary[policy][t]["feedback_use"], summary[policy][t]["feedback_use_sd"]
            assert -1.0 < used <= 2.0 and 0.0 <= sd < 1.0  # at most log2(4 moves + invalid)
    # train.py's closing table: success base -> trained, the yardstick and feedback use.
    rows = [line for line in run["stdout"].splitlines() if line.startswith("  T=")]
    assert len(rows) == 3
    for row, t in zip(rows, ("2", "3", "4"), strict=True):
        base, trained = summary["base"][t], summary["trained"][t]
        assert f"{base['success']:.3f} -> {trained['success']:.3f}" in row
        assert f"open-loop {expected[int(t)].success:.3f}" in row
        shown = [f"{r['feedback_use']:.2f}±{r['feedback_use_sd']:.2f}" for r in (base, trained)]
        assert f"feedback use {shown[0]} -> {shown[1]}" in row
    # The viewer's page says it too, for the budget it shows (the middle one, T = 3).
    page = (run["out"] / "episodes.html").read_text()
    assert f"wins <b>{expected[3].success:.3f}</b>" in page
    assert f"trained: success {summary['trained']['3']['success']:.3f}, feedback use" in page


def test_report_to_is_checked(monkeypatch: pytest.MonkeyPatch) -> None:
    cfg = Config(grpo=GRPOArgs(report_to=["tensorboard", "comet_ml"]))
    with pytest.raises(ConfigError, match="--report_to 'comet_ml': valid choices are none, "):
        validate(cfg)
    with pytest.raises(ConfigError, match="cannot be combined"):
        validate(Config(grpo=GRPOArgs(report_to=["none", "wandb"])))
    yaml_style = Config(grpo=GRPOArgs(report_to="trackio,wandb"))  # type: ignore[arg-type]
    validate(yaml_style)
    assert yaml_style.grpo.report_to == ["trackio", "wandb"]
    assert Config().grpo.report_to == ["tensorboard"]
    # W&B: offline unless a login or WANDB_MODE says otherwise, so it never waits for a network.
    monkeypatch.delenv("WANDB_MODE", raising=False)
    monkeypatch.delenv("WANDB_API_KEY", raising=False)
    monkeypatch.setenv("HOME", "/nonexistent")  # no ~/.netrc
    assert trackers.wandb_mode() == "offline"
    monkeypatch.setenv("WANDB_API_KEY", "x" * 40)
    assert trackers.wandb_mode() == "online"
    monkeypatch.setenv("WANDB_MODE", "disabled")
    assert trackers.wandb_mode() == "disabled"


# ---- the episode table in TensorBoard: replies are text, never Markdown or HTML ----------------

NASTY_REPLIES = [
    "<img src=http://example.com/x.png>",
    "![](http://example.com/y.png)",
    "[click](javascript:alert(1))",
    "<script>alert(1)</script>",
    "up | down",
    "left\n| 1 | 2 | forged | row | x | y |",
    "**bold** _it_ `code` # head",
    "&lt;b&gt; \\| back\\slash",
    "nul\x00byte\r\nend",
]


class Rendered(HTMLParser):
    """The tags, table rows and cell texts of TensorBoard's rendering of a text summary."""

    def __init__(self) -> None:
        super().__init__()
        self.tags: list[str] = []
        self.rows: list[list[str]] = []

    def handle_starttag(self, tag: str, attrs: list) -> None:
        self.tags.append(tag)
        if tag == "tr":
            self.rows.append([])
        elif tag in ("td", "th"):
            self.rows[-1].append("")

    def handle_data(self, data: str) -> None:
        if self.rows and self.rows[-1]:
            self.rows[-1][-1] += data


def render(markdown: str) -> Rendered:
    from tensorboard.plugin_util import markdown_to_safe_html  # what TensorBoard's page shows

    found = Rendered()
    found.feed(markdown_to_safe_html(markdown))
    return found


def test_replies_show_in_tensorboard_as_the_text_they_are(tmp_path: Path) -> None:
    """The episode table, logged to a real event file and read back, rendered as TensorBoard's
    page renders it: every reply is its own text in its own cell."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    turn = {"valid": True, "mistake": False, "optimal": False}
    records = [
        {"seed": i, "budget": 4, "success": False, "turns": [{**turn, "reply": reply}]}
        for i, reply in enumerate(NASTY_REPLIES)
    ]
    with trackers.tracking(["tensorboard"], tmp_path, {}) as opened:
        opened.log_episodes({"episodes": {"base<i>|": records}}, 1)
    events = EventAccumulator(str(tmp_path / "tensorboard"), size_guidance={"tensors": 0})
    events.Reload()
    text = events.Tensors("episodes/text_summary")[0].tensor_proto.string_val[0].decode()
    found = render(text)
    assert not {"img", "a", "script", "strong", "em", "code", "h1"} & set(found.tags), found.tags
    assert len(found.rows) == 1 + len(NASTY_REPLIES)  # no row cut, none forged
    for row, reply in zip(found.rows[1:], NASTY_REPLIES, strict=True):
        assert len(row) == 6, row
        row = [cell.strip() for cell in row]  # the rendering's own line breaks
        assert row[2] == "base<i>|"
        shown = reply.replace("\r\n", "\u23ce").replace("\n", "\u23ce").replace("\x00", "\ufffd")
        assert row[-1] == shown, (row[-1], reply)
    # The control: unescaped, TensorBoard renders these replies as live images and links.
    bare = "| reply |\n|---|\n" + "\n".join(f"| {r} |" for r in NASTY_REPLIES[:3])
    assert {"img", "a"} <= set(render(bare).tags)


# ---- a tracker that cannot log is refused before the model loads -------------------------------


def tracker_cases(tmp: Path) -> dict[str, tuple[list[str], dict[str, str], str]]:
    """name -> (--report_to, environment, words of the one-line error)."""
    (tmp / "a_file").write_text("")
    under_a_file = str(tmp / "a_file" / "dir")
    return {
        "tensorboard a file": (["tensorboard"], {}, "tensorboard, which is a file"),
        "WANDB_MODE sideways": (["wandb"], {"WANDB_MODE": "sideways"}, "WANDB_MODE='sideways'"),
        "online without a key": (["wandb"], {"WANDB_MODE": "online"}, "needs a W&B login"),
        "WANDB_DATA_DIR unwritable": (
            ["wandb"],
            {"WANDB_DATA_DIR": under_a_file},
            "choose another WANDB_DATA_DIR",
        ),
        "WANDB_CACHE_DIR unwritable": (
            ["wandb"],
            {"WANDB_CACHE_DIR": under_a_file},
            "choose another WANDB_CACHE_DIR",
        ),
        "TRACKIO_DIR unwritable": (
            ["trackio"],
            {"TRACKIO_DIR": under_a_file},
            "choose another TRACKIO_DIR",
        ),
        "HF_HOME unwritable": (["trackio"], {"HF_HOME": under_a_file}, "choose another HF_HOME"),
    }


def test_trackers_that_cannot_log_are_one_line_before_training(
    quick_tiny_path: str, tmp_path: Path, capsys, monkeypatch: pytest.MonkeyPatch
) -> None:
    import train

    for name in ("WANDB_MODE", "WANDB_API_KEY", "TRACKIO_DIR", "WANDB_DATA_DIR"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))  # no ~/.netrc: no W&B login
    for case, (report_to, env, words) in tracker_cases(tmp_path).items():
        out = tmp_path / case.replace(" ", "-")
        if case == "tensorboard a file":
            out.mkdir()
            (out / "tensorboard").write_text("")
        with monkeypatch.context() as patch:
            for key, value in env.items():
                patch.setenv(key, value)
            code = train.main(
                ["--model", quick_tiny_path, "--output_dir", str(out), "--report_to", *report_to]
            )
        lines = capsys.readouterr().err.strip().splitlines()
        assert code == 2 and len(lines) == 1, (case, lines)
        assert lines[0].startswith("train.py: error: ") and words in lines[0], (case, lines)
        assert not (out / "metrics.jsonl").exists()  # refused before the run began


def test_a_tracker_failing_mid_run_is_one_line(tmp_path: Path, monkeypatch) -> None:
    """wandb stages a table in WANDB_DATA_DIR when it is logged: unwritable by then, the run
    stops with a RunError naming wandb (exit status 1), not 134 lines of traceback."""
    from minirl.infra.errors import RunError

    monkeypatch.delenv("WANDB_MODE", raising=False)
    monkeypatch.delenv("WANDB_API_KEY", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    (tmp_path / "a_file").write_text("")
    turns = [{"reply": "up", "valid": True, "mistake": False, "optimal": True}]
    samples = {"episodes": {"base": [{"seed": 1, "budget": 4, "success": True, "turns": turns}]}}
    with pytest.raises(RunError, match=r"^--report_to wandb could not log \(") as err:
        with trackers.tracking(["wandb"], tmp_path, {}) as opened:
            opened.log_metrics({"step": 1, "reward": 0.5})
            monkeypatch.setenv("WANDB_DATA_DIR", str(tmp_path / "a_file" / "dir"))
            opened.log_episodes(samples, 1)
    assert "\n" not in str(err.value) and err.value.exit_code == 1
