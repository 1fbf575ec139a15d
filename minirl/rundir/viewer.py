"""The episode viewer: one self-contained HTML page that replays sample episodes turn by turn.

    python -m minirl.rundir.viewer runs/budgetmix-gridnav  # -> runs/budgetmix-gridnav/episodes.html
    python -m minirl.rundir.viewer runs/eval --budget 8    # an evaluate.py output directory

It reads DIR/episodes.json (minirl.rundir.sample_episodes: the base and the trained policy of a run,
or every checkpoint of an evaluation, on the same held-out instances) and, for each episode:

1. replays it: a fresh environment, `tasks.make(task).reset(seed)`, then `step(reply)` for each
   recorded reply. The tasks are deterministic given the seed and the replies, so this gives back
   every turn's observation, its `info` (the oracle's marks) and, where the task has one, its
   picture (`Env.picture()`, tasks/base.py). A replay that disagrees with the record (a turn's
   marks, the instance's optimal length, a turn after the episode ended, `success`) means the
   file was edited or the task changed since the episodes were played, and is an error, not a
   silent lie: the page shows only what the task itself gives;
2. draws each picture as inline SVG: the walls (faint where the agent has not met them), the
   goal, the box and its target, the path walked so far, and the agent;
3. lays the policies side by side, one column each and one row per turn, so the same instance
   played before and after RL can be read across: the picture after the turn, the reply, and
   the marks: optimal, mistake, invalid, avoidable or unavoidable error (`info["error"]`, from
   tasks with hidden information), solved, and any task flag that is set (slipped, deadlock).

A slider under each instance (or the arrow keys, or DIR/episodes.html#turn=3) replays the turns
one at a time. No server and no network: the styles and the few lines of script are in the page.
Model output is data: every reply is HTML-escaped, never interpreted, and so is every other value
from the file, after minirl.rundir.sample_episodes has checked its type (a page is shared; it must
never run anything but its own script).
"""

from __future__ import annotations

import html
import math
import sys
from dataclasses import dataclass, field
from pathlib import Path

import tasks
from minirl.infra.errors import ConfigError, DataError
from minirl.rundir.sample_episodes import load_samples

CELL = 22  # pixels per grid cell
CHANGED = "the file was edited or the task has changed since these episodes were played"
BASE_INFO = {"action", "valid", "mistake", "optimal", "success", "distance", "error"}
COLOURS = {  # one colour per thing, used by the pictures and the legend alike
    "wall": "#3b3b3b",
    "goal": "#2da44e",
    "target": "#2da44e",
    "box": "#b5651d",
    "agent": "#1f6feb",
    "path": "#f0883e",
}


@dataclass
class Frame:
    """The state after one turn (turn 0: the start), as the replay found it."""

    turn: int
    reply: str | None
    observation: str
    picture: dict | None
    marks: list[str] = field(default_factory=list)


def marks(info: dict) -> list[str]:
    """The oracle's verdict on one turn, as short labels."""
    if not info["valid"]:
        return ["invalid"]
    out = ["optimal"] if info["optimal"] else []
    out += ["mistake"] if info["mistake"] else []
    out += [] if out else ["not optimal"]
    if info.get("error") in ("avoidable", "unavoidable"):  # tasks with hidden information
        out.append(f"{info['error']} error")
    out += ["solved"] if info["success"] else []
    # Task flags (icy's slipped, sokoban's deadlock) show up by name when they are set.
    return out + [key for key, value in info.items() if key not in BASE_INFO and value is True]


def replay(task: str, record: dict) -> list[Frame]:
    """Play a recorded episode's replies through a fresh env; one Frame per turn, plus the start.

    DataError if the replay disagrees with the record anywhere (see the module docstring).
    """
    env = tasks.make(task, text=record.get("task_text", "compact"))  # older files: compact
    where = f"{task} seed {record['seed']}"

    def differs(what: str, replayed: object, recorded: object) -> DataError:
        return DataError(
            f"{where}{what}: the replay says {replayed}, the recorded episode {recorded}: "
            + CHANGED
        )

    frames = [Frame(0, None, env.reset(record["seed"]), env.picture())]
    if env.optimal_length != record["optimal_length"]:
        raise differs(": optimal_length", env.optimal_length, record["optimal_length"])
    success = False
    for i, turn in enumerate(record["turns"], start=1):
        if env.done:
            raise DataError(
                f"{where}: the episode ended at turn {i - 1}, the file has more; {CHANGED}"
            )
        step = env.step(turn["reply"])
        for key in ("valid", "mistake", "optimal", "action"):
            if step.info[key] != turn[key]:
                raise differs(f" turn {i}", f"{key}={step.info[key]}", turn[key])
        success = step.info["success"]
        frames.append(Frame(i, turn["reply"], step.observation, env.picture(), marks(step.info)))
    if success != record["success"]:
        raise differs("", f"success={success}", record["success"])
    return frames


# ---- pictures ---------------------------------------------------------------------------------


def _square(cell: list[int], colour: str, inset: int = 1, extra: str = "") -> str:
    r, c = cell
    side = CELL - 2 * inset
    return (
        f'<rect x="{c * CELL + inset}" y="{r * CELL + inset}" width="{side}" height="{side}" '
        f'fill="{colour}" {extra}/>'
    )


def _centre(cell: list[int]) -> tuple[float, float]:
    return cell[1] * CELL + CELL / 2, cell[0] * CELL + CELL / 2


def svg(picture: dict, path: list[list[int]]) -> str:
    """An inline SVG of one picture (see Env.picture), with the agent's path so far."""
    rows, cols = picture["rows"], picture["cols"]
    parts = [f'<rect width="{cols * CELL}" height="{rows * CELL}" fill="#f6f8fa"/>']
    for r in range(rows + 1):
        parts.append(f'<line x1="0" y1="{r * CELL}" x2="{cols * CELL}" y2="{r * CELL}"/>')
    for c in range(cols + 1):
        parts.append(f'<line x1="{c * CELL}" y1="0" x2="{c * CELL}" y2="{rows * CELL}"/>')
    parts += [_square(cell, "#c9d1d9", 0, 'class="fog"') for cell in picture.get("fog", [])]
    parts += [_square(cell, COLOURS["wall"], 0, 'class="wall"') for cell in picture["walls"]]
    parts += [
        _square(cell, COLOURS["wall"], 3, 'class="hidden-wall" opacity="0.25"')
        for cell in picture.get("hidden_walls", [])
    ]
    if "goal" in picture:
        parts.append(_square(picture["goal"], COLOURS["goal"], 2, 'class="goal"'))
    if "target" in picture:
        x, y = _centre(picture["target"])
        parts.append(
            f'<circle class="target" cx="{x}" cy="{y}" r="{CELL / 2 - 2}" fill="none" '
            f'stroke="{COLOURS["target"]}" stroke-width="2.5"/>'
        )
    if "box" in picture:
        parts.append(_square(picture["box"], COLOURS["box"], 3, 'class="box"'))
    if len(path) > 1:
        points = " ".join(f"{x},{y}" for x, y in map(_centre, path))
        parts.append(
            f'<polyline class="path" points="{points}" fill="none" stroke="{COLOURS["path"]}" '
            'stroke-width="3" stroke-linejoin="round" opacity="0.8"/>'
        )
    if "agent" in picture:  # always, except in the legend's swatches
        x, y = _centre(picture["agent"])
        parts.append(
            f'<circle class="agent" cx="{x}" cy="{y}" r="{CELL / 3}" fill="{COLOURS["agent"]}"/>'
        )
    agent = " ".join(map(str, picture.get("agent", [])))
    return (
        f'<svg class="picture" data-agent="{agent}" width="{cols * CELL}" '
        f'height="{rows * CELL}" viewBox="0 0 {cols * CELL} {rows * CELL}">'
        + "".join(parts)
        + "</svg>"
    )


# ---- the page ---------------------------------------------------------------------------------


def esc(value: object) -> str:
    """Any value as HTML text: escaped, whatever its type (the file's values were checked)."""
    return html.escape(str(value))


def _cell(policy: str, frames: list[Frame], turn: int) -> str:
    if turn >= len(frames):
        return f'<td class="over" data-policy="{html.escape(policy)}">(episode over)</td>'
    frame = frames[turn]
    path = [f.picture["agent"] for f in frames[: turn + 1] if f.picture is not None]
    picture = svg(frame.picture, path) if frame.picture is not None else ""
    reply = (
        f'<div class="reply">reply: <code>{html.escape(frame.reply)}</code></div>'
        if frame.reply is not None
        else '<div class="reply">start</div>'
    )
    badges = "".join(
        f'<span class="mark {m.replace(" ", "-")}">{html.escape(m)}</span>' for m in frame.marks
    )
    return (
        f'<td class="frame" data-policy="{html.escape(policy)}" data-turn="{turn}" '
        f'data-reply="{html.escape(frame.reply or "")}" data-marks="{esc(",".join(frame.marks))}">'
        f'{picture}<div class="text">{reply}<div class="marks">{badges}</div>'
        f'<div class="obs">{html.escape(frame.observation)}</div></div></td>'
    )


def _outcome(record: dict) -> str:
    n = len(record["turns"])
    if record["success"]:
        return f"solved in {n} of {esc(record['budget'])} turns"
    return f"not solved ({n} turns played)"


def instance_section(task: str, records: dict[str, dict]) -> str:
    """One instance: every policy's episode side by side, a row per turn."""
    first = next(iter(records.values()))
    played = {policy: replay(task, record) for policy, record in records.items()}
    longest = max(len(frames) for frames in played.values())
    head = "".join(
        f'<th data-policy="{html.escape(p)}">{html.escape(p)}: {_outcome(r)}</th>'
        for p, r in records.items()
    )
    rows = [f"<tr><th></th>{head}</tr>"]
    for turn in range(longest):
        label = "start" if turn == 0 else f"turn {turn}"
        cells = "".join(_cell(policy, frames, turn) for policy, frames in played.items())
        rows.append(f'<tr class="turn-row" data-turn="{turn}"><th>{label}</th>{cells}</tr>')
    return (
        f'<section class="instance" data-seed="{esc(first["seed"])}" '
        f'data-budget="{esc(first["budget"])}"><h2>instance {esc(first["seed"])} &middot; '
        f"T = {esc(first['budget'])} &middot; the oracle needs {esc(first['optimal_length'])} "
        "turns</h2>"
        f'<div class="controls">replay: <input type="range" class="scrub" min="0" '
        f'max="{longest - 1}" value="{longest - 1}"> <span class="shown">all turns</span></div>'
        f'<table class="episodes">{"".join(rows)}</table></section>'
    )


def pick(samples: dict, budget: int = 0, instances: int = 6) -> tuple[int, list[dict[str, dict]]]:
    """The budget shown (0: the middle one kept) and, per instance, {policy: episode record}."""
    episodes = samples["episodes"]
    budgets = sorted({e["budget"] for records in episodes.values() for e in records})
    if not budgets:
        raise ValueError("the episodes file holds no episodes")
    budget = budget or budgets[len(budgets) // 2]
    if budget not in budgets:
        raise ValueError(f"no episodes at T={budget}; kept: {', '.join(map(str, budgets))}")
    by_policy = {
        policy: {e["seed"]: e for e in records if e["budget"] == budget}
        for policy, records in episodes.items()
    }
    seeds = [e["seed"] for e in next(iter(episodes.values())) if e["budget"] == budget]
    chosen = [
        {policy: found[seed] for policy, found in by_policy.items() if seed in found}
        for seed in seeds[:instances]
    ]
    return budget, chosen


def _legend(record: dict, task: str) -> str:
    """What each colour means, for the things this task's pictures show."""
    picture = replay(task, {**record, "turns": [], "success": False})[0].picture
    if picture is None:
        return ""
    swatch = {"rows": 1, "cols": 1, "walls": []}
    keys = [
        ("wall", {**swatch, "walls": [[0, 0]]}),
        ("goal", {**swatch, "goal": [0, 0]}),
        ("box", {**swatch, "box": [0, 0]}),
        ("target", {**swatch, "target": [0, 0]}),
        ("agent", {**swatch, "agent": [0, 0]}),
    ]
    present = {"wall": bool(picture["walls"]), "agent": True}
    shown = [
        svg(example, []) + f" {name}"
        for name, example in keys
        if present.get(name, name in picture)
    ]
    path = (
        f'<svg width="{CELL}" height="{CELL}"><line x1="2" y1="{CELL / 2}" x2="{CELL - 2}" '
        f'y2="{CELL / 2}" stroke="{COLOURS["path"]}" stroke-width="3"/></svg> path so far'
    )
    return "".join(f'<span class="key">{key}</span>' for key in [*shown, path])


def reference(samples: dict, budget: int) -> str:
    """What the best feedback-blind policy wins at `budget`, beside each policy's success and
    feedback use over the whole evaluation (minirl.eval.openloop, minirl.eval.feedback).

    Both come from the file (minirl.rundir.sample_episodes), so every value is type-checked here; a
    file written before they were kept says so instead.
    """
    from minirl.eval.openloop import from_record

    kept = samples.get("open_loop")
    found = from_record(kept.get(str(budget))) if isinstance(kept, dict) else None
    if found is None or (found.task, found.budget) != (samples["task"], budget):
        line = (
            "The best feedback-blind policy's success was not recorded in this file "
            f"(<code>python -m minirl.eval.openloop --task {html.escape(str(samples['task']))} "
            f"--budgets {budget}</code> computes it)."
        )
    else:
        how = (
            "exact"
            if found.method == "exact"
            else f"± {found.stderr:.3f} over {found.held_out} held-out instances"
        )
        line = (
            f"The best feedback-blind policy, a fixed sequence of replies that never reads an "
            f"observation, wins <b>{found.success:.3f}</b> ({how}) at T = {budget}: "
            f"<code>{html.escape(' | '.join(found.sequence))}</code>."
        )
    stats = samples.get("stats")
    for policy, by_budget in stats.items() if isinstance(stats, dict) else []:
        record = by_budget.get(str(budget)) if isinstance(by_budget, dict) else None
        keys = ("success", "feedback_use", "feedback_use_sd")
        values = [record.get(k) if isinstance(record, dict) else None for k in keys]
        if all(isinstance(v, int | float) and not isinstance(v, bool) for v in values) and all(
            math.isfinite(v) for v in values
        ):
            line += (
                f" {html.escape(str(policy))}: success {values[0]:.3f}, feedback use "
                f"{values[1]:.2f} ± {values[2]:.2f} bits per turn (0 for replies that ignore "
                "the observations), over all its held-out episodes."
            )
    return line


def page(samples: dict, title: str, budget: int = 0, instances: int = 6) -> str:
    """The whole HTML page for the samples of one run or evaluation."""
    task = samples["task"]
    budget, chosen = pick(samples, budget, instances)
    policies = list(samples["episodes"])
    solved = ", ".join(
        f"{html.escape(p)} solved {sum(c[p]['success'] for c in chosen if p in c)}/{len(chosen)}"
        for p in policies
    )
    legend = _legend(next(iter(chosen[0].values())), task) if chosen else ""
    sections = "".join(instance_section(task, records) for records in chosen)
    return PAGE.format(
        title=html.escape(title),
        task=html.escape(task),
        budget=esc(budget),
        visible="visible" if samples.get("budget_visible", True) else "hidden",
        solved=solved,
        reference=reference(samples, budget),
        legend=legend,
        sections=sections,
        style=STYLE,
        script=SCRIPT,
    )


def load_verified(path: str | Path) -> dict:
    """An episodes file, every value checked (minirl.rundir.sample_episodes) and every episode
    replayed: what the page shows, and what a resumed run keeps, is what the task gives. DataError
    if not."""
    samples = load_samples(path)
    for policy, records in samples["episodes"].items():
        for i, record in enumerate(records):
            try:
                replay(samples["task"], record)
            except DataError as err:
                raise DataError(f"{path}: episodes[{policy!r}][{i}], {err}") from err
    return samples


def check_output(directory: Path, output: Path) -> None:
    """Refuse a --output that would overwrite the page's input or another file of the run."""
    if output.suffix.lower() not in (".html", ".htm"):
        raise ConfigError(f"--output {output}: name an .html file")
    if output.is_dir():
        raise ConfigError(f"--output {output} is a directory; name an .html file")
    inside = directory.resolve() in output.resolve().parents
    if output.exists() and inside and output.name != "episodes.html":
        raise ConfigError(
            f"--output {output} is a file of the run in {directory}; only episodes.html there may "
            "be overwritten: name a new file"
        )


def write_page(
    directory: str | Path, output: str | Path | None = None, budget: int = 0, instances: int = 6
) -> Path:
    """DIR/episodes.json -> the page (default DIR/episodes.html); ValueError if there is none."""
    directory = Path(directory)
    source = directory / "episodes.json"
    if not source.exists():
        raise ValueError(f"{directory}: no episodes.json (written by training and evaluate.py)")
    path = Path(output) if output else directory / "episodes.html"
    if output:
        check_output(directory, path)
    samples = load_verified(source)
    path.write_text(page(samples, f"{directory.name}: episodes", budget, instances))
    return path


STYLE = """
body { font: 14px system-ui, sans-serif; margin: 1.5em; color: #1f2328; }
h1 { font-size: 1.4em; } h2 { font-size: 1.1em; margin: 1.5em 0 0.3em; }
.key { margin-right: 1.2em; white-space: nowrap; } .key svg { vertical-align: middle; }
.legend svg.picture { float: none; margin: 0; }
table.episodes { border-collapse: collapse; }
table.episodes th, table.episodes td { border: 1px solid #d0d7de; padding: 4px 8px;
  vertical-align: top; text-align: left; }
table.episodes th { white-space: nowrap; }
td.frame { min-width: 300px; } td.over { color: #8c959f; }
svg.picture { float: left; margin-right: 8px; }
svg.picture line { stroke: #d0d7de; stroke-width: 1; }
.text { overflow: hidden; } .obs { color: #57606a; font: 12px monospace; margin-top: 2px; }
.mark { display: inline-block; border-radius: 8px; padding: 0 6px; margin: 2px 2px 0 0;
  font-size: 12px; background: #eaeef2; }
.mark.optimal, .mark.solved { background: #dafbe1; color: #116329; }
.mark.mistake, .mark.avoidable-error, .mark.deadlock { background: #ffebe9; color: #a40e26; }
.mark.invalid { background: #fff8c5; color: #7d4e00; }
.controls { margin: 0 0 6px; }
"""

# Each slider shows the rows up to its turn; #turn=K in the address sets them all at load.
SCRIPT = """
function show(section, turn) {
  for (const row of section.querySelectorAll("tr.turn-row")) {
    row.hidden = Number(row.dataset.turn) > turn;
  }
  const scrub = section.querySelector("input.scrub");
  scrub.value = Math.min(turn, Number(scrub.max));
  section.querySelector(".shown").textContent =
    Number(scrub.value) >= Number(scrub.max) ? "all turns" : "up to turn " + scrub.value;
}
const sections = [...document.querySelectorAll("section.instance")];
for (const section of sections) {
  const scrub = section.querySelector("input.scrub");
  scrub.addEventListener("input", () => show(section, Number(scrub.value)));
}
document.addEventListener("keydown", (event) => {
  const step = { ArrowRight: 1, ArrowLeft: -1 }[event.key];
  if (!step) return;
  for (const section of sections) {
    show(section, Math.max(0, Number(section.querySelector("input.scrub").value) + step));
  }
});
const asked = location.hash.match(/turn=(\\d+)/);
if (asked) for (const section of sections) show(section, Number(asked[1]));
document.body.dataset.ready = "yes";
"""

PAGE = """<!doctype html>
<html><head><meta charset="utf-8"><title>{title}</title><style>{style}</style></head>
<body>
<h1>{title}</h1>
<p>Task <b>{task}</b>, turn budget T = {budget} ({visible} to the model). The same held-out
instances played by each policy, side by side; each row is the state after that turn.
{solved}.</p>
<p class="reference">{reference}</p>
<p class="legend">{legend}</p>
{sections}
<script>{script}</script>
</body></html>
"""


def main(argv: list[str] | None = None) -> int:
    from minirl.config import ViewerArgs
    from minirl.infra.cli import ArgParser, run_cli
    from minirl.infra.validation import check_fields

    parser = ArgParser(
        ViewerArgs,
        prog="minirl.rundir.viewer",
        description=__doc__.split("\n")[0],
        allow_abbrev=False,
    )
    parser.add_argument("directory", help="A run or evaluate.py directory with episodes.json.")
    args, rest = parser.parse_args_into_dataclasses(args=argv)

    def work() -> int:
        check_fields(args)
        try:
            path = write_page(rest.directory, args.output or None, args.budget, args.instances)
        except ValueError as err:  # nothing to draw in that directory: say which and why
            raise ConfigError(str(err)) from err
        print(f"wrote {path}: open it in a browser")
        return 0

    return run_cli("minirl.rundir.viewer", work, lambda: "nothing was written")


if __name__ == "__main__":
    sys.exit(main())
