"""The episode viewer: the tasks' pictures, the replay, and the page as a real browser shows it.

The episodes here are scripted, not sampled, so every expected mark and position is known: an
"oracle" policy that always takes an optimal action, and a "clumsy" one that sends garbage, walks
into walls and wanders. The page is opened in headless Chromium (Debian's `chromium`): the test
reads the DOM after the page's script ran and checks every turn of every episode it shows against
an independent replay through the environment, and takes a screenshot that must show the
pictures (a blank page, or one whose script failed, fails). Without Chromium the browser tests
are skipped locally with the reason; under CI (CI=true) a missing Chromium is a failure.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from html.parser import HTMLParser
from pathlib import Path

import matplotlib.image
import numpy as np
import pytest

import tasks
from minirl.episode import Episode
from minirl.rundir import viewer
from minirl.rundir.sample_episodes import add_samples, load_samples

SEEDS = list(tasks.EVAL_SEEDS[:3])
BUDGET = 12
CLUMSY = ["banana", "up", "up", "left", "<script>alert(1)</script>", "down"]


def play(task: str, seed: int, choose) -> Episode:
    """An Episode whose replies come from `choose(env, turn)`, marked by the env as rollout does."""
    from minirl.eval.feedback import simulate

    return simulate(task, [seed], BUDGET, choose)[0]


def oracle(env, turn: int) -> str:
    return sorted(env.optimal_actions())[0]


def clumsy(env, turn: int) -> str:
    return CLUMSY[turn % len(CLUMSY)]


def write_samples(task: str, path: Path) -> Path:
    for policy, choose in (("base", clumsy), ("trained", oracle)):
        episodes = {BUDGET: [play(task, seed, choose) for seed in SEEDS]}
        add_samples(path, policy, episodes, task=task, budget_visible=True)
    return path


# ---- pictures and replay -------------------------------------------------------------------


@pytest.mark.parametrize("task", ["gridnav", "icy", "sokoban"])
def test_pictures_show_the_state(task: str) -> None:
    env = tasks.make(task)
    env.reset(SEEDS[0])
    for action in ["up", "left", "down", "right", "up"]:
        picture = env.picture()
        json.dumps(picture)  # a plain, JSON-ready dict
        assert picture["rows"] == picture["cols"] == env.size
        walls = {tuple(cell) for cell in picture["walls"]}
        assert walls == set(env.grid.walls)
        if task == "sokoban":
            player, box = env.state
            assert (tuple(picture["agent"]), tuple(picture["box"])) == (player, box)
            assert tuple(picture["target"]) == env.target and "goal" not in picture
        else:
            assert tuple(picture["agent"]) == env.pos and tuple(picture["goal"]) == env.goal
        assert tuple(picture["agent"]) not in walls
        if env.done:
            break
        env.step(action)


def test_a_task_without_a_picture_says_none() -> None:
    env = tasks.make("guess")
    env.reset(0)
    assert env.picture() is None


def test_replay_gives_back_every_turn_and_refuses_a_changed_task(tmp_path: Path) -> None:
    samples = load_samples(write_samples("gridnav", tmp_path / "episodes.json"))
    for record in samples["episodes"]["base"] + samples["episodes"]["trained"]:
        frames = viewer.replay("gridnav", record)
        assert [f.turn for f in frames] == list(range(len(record["turns"]) + 1))
        env = tasks.make("gridnav")
        env.reset(record["seed"])
        for frame, turn in zip(frames[1:], record["turns"], strict=True):
            env.step(turn["reply"])
            assert frame.picture["agent"] == list(env.pos) and frame.reply == turn["reply"]
    base = samples["episodes"]["base"][0]["turns"]
    assert viewer.replay("gridnav", samples["episodes"]["base"][0])[1].marks == ["invalid"]
    assert "mistake" in viewer.marks({**_info(), "mistake": True})
    assert viewer.marks({**_info(), "error": "avoidable", "mistake": True})[-1] == "avoidable error"
    assert viewer.marks({**_info(), "slipped": True})[-1] == "slipped"
    tampered = {**samples["episodes"]["base"][0], "turns": [{**base[0], "valid": True}, *base[1:]]}
    with pytest.raises(ValueError, match="the task has changed"):
        viewer.replay("gridnav", tampered)


def _info() -> dict:
    return {"valid": True, "mistake": False, "optimal": False, "success": False, "distance": 1.0}


# ---- the page in a real browser ---------------------------------------------------------------


def chromium() -> str:
    found = shutil.which("chromium") or shutil.which("chromium-browser")
    if found is None:
        if os.environ.get("CI"):
            pytest.fail("CI must install Debian's chromium (see .ci/run)")
        pytest.skip("chromium is not installed (apt-get install chromium)")
    return found


def browse(url: str, tmp: Path, *extra: str) -> subprocess.CompletedProcess:
    # Offline and quiet: without the background-networking flags Chromium tries the network.
    flags = [
        *("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run"),
        *("--disable-background-networking", "--disable-component-update", "--disable-sync"),
        f"--user-data-dir={tmp / 'profile'}",
        "--virtual-time-budget=5000",  # let the page's script run before dumping
    ]
    return subprocess.run(
        [chromium(), *flags, *extra, url], capture_output=True, text=True, timeout=120, check=True
    )


class Cells(HTMLParser):
    """The DOM's turn cells: their attributes, text and the picture's agent inside each."""

    def __init__(self) -> None:
        super().__init__()
        self.cells: list[dict] = []
        self.rows: dict[tuple[str, int], bool] = {}  # (seed, turn) -> hidden
        self.body: dict = {}
        self.scripts = 0
        self._seed = ""
        self._cell: dict | None = None

    def handle_starttag(self, tag: str, attrs: list) -> None:
        a = dict(attrs)
        if tag == "body":
            self.body = a
        elif tag == "script":
            self.scripts += 1
        elif tag == "section":
            self._seed = a["data-seed"]
        elif tag == "tr" and "data-turn" in a:
            self.rows[(self._seed, int(a["data-turn"]))] = "hidden" in a
        elif tag == "td" and a.get("class") == "frame":
            self._cell = {**a, "seed": self._seed, "text": "", "agent": None, "walls": 0}
            self.cells.append(self._cell)
        elif tag == "svg" and self._cell is not None and a.get("class") == "picture":
            self._cell["agent"] = a["data-agent"]
        elif tag == "rect" and self._cell is not None and a.get("class") == "wall":
            self._cell["walls"] += 1

    def handle_endtag(self, tag: str) -> None:
        if tag == "td":
            self._cell = None

    def handle_data(self, data: str) -> None:
        if self._cell is not None:
            self._cell["text"] += data


def dom(page: Path, tmp: Path, fragment: str = "") -> Cells:
    parsed = Cells()
    parsed.feed(browse(page.as_uri() + fragment, tmp, "--dump-dom").stdout)
    return parsed


@pytest.mark.parametrize("task", ["gridnav", "sokoban"])
def test_the_page_shows_every_turn_of_every_episode(task: str, tmp_path: Path) -> None:
    write_samples(task, tmp_path / "episodes.json")
    page = viewer.write_page(tmp_path)
    found = dom(page, tmp_path)
    assert found.body.get("data-ready") == "yes", "the page's script did not run"
    assert found.scripts == 1  # the reply "<script>..." stayed text
    samples = load_samples(tmp_path / "episodes.json")
    checked = 0
    for policy, records in samples["episodes"].items():
        for record in records:
            env = tasks.make(task)
            env.reset(record["seed"])
            for i, turn in enumerate([None, *record["turns"]]):
                if turn is not None:
                    info = env.step(turn["reply"]).info
                match = [
                    c
                    for c in found.cells
                    if (c["seed"], c["data-policy"], c["data-turn"])
                    == (str(record["seed"]), policy, str(i))
                ]
                assert len(match) == 1, (policy, record["seed"], i)
                cell = match[0]
                # The picture shows where the agent really is after this turn.
                assert cell["agent"] == " ".join(map(str, env.picture()["agent"]))
                assert cell["walls"] == len(env.picture()["walls"])
                if turn is None:
                    continue
                assert cell["data-reply"] == turn["reply"] and turn["reply"] in cell["text"]
                marks = cell["data-marks"].split(",")
                assert ("invalid" in marks) == (not turn["valid"])
                assert ("optimal" in marks) == turn["optimal"]
                assert ("mistake" in marks) == turn["mistake"]
                assert ("solved" in marks) == info["success"]
                for mark in marks:
                    assert mark in cell["text"]  # the badges are visible text, not only data
                checked += 1
    every_turn = sum(len(r["turns"]) for rs in samples["episodes"].values() for r in rs)
    assert checked == every_turn > 2 * len(SEEDS)
    # The oracle's column solves every instance in the fewest moves; the clumsy one errs.
    for record in samples["episodes"]["trained"]:
        assert record["success"] and len(record["turns"]) == record["optimal_length"]
    assert not samples["episodes"]["base"][0]["turns"][0]["valid"]  # "banana"


def test_the_replay_control_hides_later_turns(tmp_path: Path) -> None:
    write_samples("gridnav", tmp_path / "episodes.json")
    page = viewer.write_page(tmp_path)
    found = dom(page, tmp_path, "#turn=2")
    assert found.rows and found.body.get("data-ready") == "yes"
    for (_, turn), hidden in found.rows.items():
        assert hidden == (turn > 2), turn


def test_the_screenshot_shows_the_pictures(tmp_path: Path) -> None:
    write_samples("sokoban", tmp_path / "episodes.json")
    page = viewer.write_page(tmp_path)
    shot = tmp_path / "shot.png"
    browse(page.as_uri(), tmp_path, f"--screenshot={shot}", "--window-size=1000,900")
    pixels = (matplotlib.image.imread(shot)[..., :3] * 255).round().astype(int)

    def count(hex_colour: str) -> int:
        rgb = np.array([int(hex_colour[i : i + 2], 16) for i in (1, 3, 5)])
        return int((np.abs(pixels - rgb).sum(axis=-1) < 12).sum())

    # Agents, walls and boxes are drawn (a blank or unstyled page has none of these colours).
    assert count(viewer.COLOURS["agent"]) > 500
    assert count(viewer.COLOURS["wall"]) > 2000
    assert count(viewer.COLOURS["box"]) > 300
    assert len(np.unique(pixels.reshape(-1, 3), axis=0)) > 50


def test_cli_writes_the_page_and_fails_in_one_line(tmp_path: Path, capsys) -> None:
    write_samples("icy", tmp_path / "episodes.json")
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
    command = [sys.executable, "-m", "minirl.rundir.viewer", str(tmp_path), "--instances", "2"]
    ok = subprocess.run(command, capture_output=True, text=True, env=env, check=False)
    assert ok.returncode == 0, ok.stderr
    assert (tmp_path / "episodes.html").read_text().count('class="instance"') == 2
    assert viewer.main([str(tmp_path), "--budget", "99"]) == 2
    assert capsys.readouterr().err.strip() == (
        f"minirl.rundir.viewer: error: no episodes at T=99; kept: {BUDGET}"
    )
    assert viewer.main([str(tmp_path / "nothing")]) == 2
    assert "no episodes.json" in capsys.readouterr().err


# ---- a page built from a file trusts nothing in it ---------------------------------------------

# Each payload, if it ran, marks the page: the test reads the mark back from the browser's DOM.
PAYLOADS = [
    "<script>document.body.dataset.pwned = 'script'</script>",
    '"><img src=x onerror="document.body.dataset.pwned = \'img\'">',
    "'><svg onload=\"document.body.dataset.pwned = 'svg'\">",
    "</code></td></tr></table><script>document.body.dataset.pwned='break-out'</script>",
]


def test_no_text_from_the_file_runs_in_the_page(tmp_path: Path) -> None:
    """Every text the file may hold (policy names, replies, the directory's name) is a payload;
    the page opened in Chromium must run its own script and nothing else."""
    run = tmp_path / "run<script>document.body.dataset.pwned='title'<"
    run.mkdir()
    samples = load_samples(write_samples("gridnav", run / "episodes.json"))
    for i, payload in enumerate(PAYLOADS):
        records = json.loads(json.dumps(samples["episodes"]["base"]))
        for record in records:  # the replies carry the payload, the marks still replay true
            for turn in record["turns"]:
                if not turn["valid"]:
                    turn["reply"] = payload
        samples["episodes"][payload + str(i)] = records
    (run / "episodes.json").write_text(json.dumps(samples))
    page = viewer.write_page(run)
    found = dom(page, tmp_path)
    assert found.body.get("data-ready") == "yes", "the page's own script did not run"
    assert "data-pwned" not in found.body, found.body
    assert found.scripts == 1
    # The control: the same payloads, unescaped, do run in this browser.
    bare = tmp_path / "bare.html"
    bare.write_text(f"<html><body>{''.join(PAYLOADS)}</body></html>")
    assert "data-pwned" in dom(bare, tmp_path).body


@pytest.mark.parametrize("field", ["seed", "budget", "optimal_length"])
@pytest.mark.parametrize("payload", PAYLOADS[:2])
def test_a_planted_number_never_runs_in_the_page(
    field: str, payload: str, tmp_path: Path, capsys
) -> None:
    """A file whose seed, budget or optimal_length is a script: the viewer refuses it in one line
    and writes no page. (Its turns are invalid replies, which replay alike in every instance, so
    only the type check can stop it; a page, if one were written, must still run nothing.)"""
    env = tasks.make("gridnav")
    env.reset(SEEDS[0])
    turn = {"reply": "banana", "action": None, "valid": False, "mistake": False}
    turn |= {"optimal": False, "distance_before": 1.0, "distance_after": 1.0, "reward": 0.0}
    record = {"seed": SEEDS[0], "budget": 4, "optimal_length": env.optimal_length}
    record |= {"success": False, "turns": [turn, turn], field: payload}
    samples = {"task": "gridnav", "episodes": {"base": [record], "trained": [record]}}
    (tmp_path / "episodes.json").write_text(json.dumps(samples))
    code = viewer.main([str(tmp_path)])
    page = tmp_path / "episodes.html"
    if page.exists():
        found = dom(page, tmp_path)
        assert "data-pwned" not in found.body and found.scripts == 1, found.body
    lines = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(lines) == 1, lines
    assert f".{field}: expected an integer" in lines[0], lines
    assert not page.exists()


def good_samples(tmp_path: Path) -> dict:
    return json.loads(write_samples("gridnav", tmp_path / "episodes.json").read_text())


def solved(samples: dict) -> dict:
    return next(r for r in samples["episodes"]["trained"] if r["success"])


def unsolved(samples: dict) -> dict:
    return next(r for r in samples["episodes"]["base"] if not r["success"])


def first_turn(samples: dict) -> dict:
    return samples["episodes"]["base"][0]["turns"][0]


# (what is wrong, how the file is changed (a function of the parsed file, or bytes), words the
# one line must hold). Type errors name the field; replay errors name the episode and the field.
MALFORMED = {
    "not JSON": (b"{'task': gridnav}", ["not valid JSON"]),
    "empty": (b"", ["not valid JSON"]),
    "truncated": (lambda d: json.dumps(d)[:200].encode(), ["not valid JSON"]),
    "not UTF-8": (b'{"task": "grid\xffnav", "episodes": {}}', ["byte 14 is not UTF-8"]),
    "nested without end": (b"[" * 100_000 + b"]" * 100_000, ["nested too deeply"]),
    "a 5000-digit number": (b'{"task": ' + b"9" * 5000 + b"}", ["more digits than Python"]),
    "a list": (b"[1, 2]", ["expected an object, got a list"]),
    "episodes a list": (lambda d: {**d, "episodes": []}, ["json: episodes: expected an object"]),
    "no episodes": (lambda d: {"task": d["task"]}, ["no 'episodes'"]),
    "no task": (lambda d: {"episodes": d["episodes"]}, ["no 'task'"]),
    "unknown task": (lambda d: {**d, "task": "chess"}, ["task 'chess' is not one of"]),
    "task a number": (lambda d: {**d, "task": 5}, ["json: task: expected a string, got 5"]),
    "policy not a list": (lambda d: {**d, "episodes": {"base": 7}}, ["['base']: expected a list"]),
    "seed a string": (lambda d: unsolved(d).update(seed="1000000"), [".seed: expected an integer"]),
    "seed a script": (
        lambda d: unsolved(d).update(seed="1<script>alert(1)</script>"),
        [".seed: expected an integer, got '1<script>"],
    ),
    "seed a float": (lambda d: unsolved(d).update(seed=1000000.0), [".seed: expected an integer"]),
    "seed a bool": (lambda d: unsolved(d).update(seed=True), [".seed: expected an integer"]),
    "seed negative": (lambda d: unsolved(d).update(seed=-1), [".seed: must be >= 0"]),
    "seed too long": (lambda d: unsolved(d).update(seed=10**400), [".seed: expected an integer"]),
    "budget a string": (
        lambda d: unsolved(d).update(budget='12"><img src=x onerror=alert(1)>'),
        [".budget: expected an integer"],
    ),
    "budget 0": (lambda d: unsolved(d).update(budget=0), [".budget: must be in [1, 100]"]),
    "budget 1e9": (lambda d: unsolved(d).update(budget=10**9), [".budget: must be in [1, 100]"]),
    "optimal_length a string": (
        lambda d: unsolved(d).update(optimal_length="<script>alert(1)</script>"),
        [".optimal_length: expected an integer"],
    ),
    "success a string": (lambda d: unsolved(d).update(success="yes"), [".success: expected true"]),
    "turns an object": (lambda d: unsolved(d).update(turns={}), [".turns: expected a list"]),
    "task_text unknown": (
        lambda d: unsolved(d).update(task_text="klingon"),
        [".task_text: expected one of compact, natural"],
    ),
    "a turn without its reply": (lambda d: first_turn(d).pop("reply"), ["no 'reply'"]),
    "a reply a number": (lambda d: first_turn(d).update(reply=5), [".reply: expected a string"]),
    "valid a string": (lambda d: first_turn(d).update(valid="false"), [".valid: expected true"]),
    "a distance a string": (
        lambda d: first_turn(d).update(distance_before="far"),
        [".distance_before: expected a number"],
    ),
    "more turns than T": (
        lambda d: unsolved(d).update(budget=len(unsolved(d)["turns"]) - 1),
        ["more than its budget"],
    ),
    # Well-typed, but the replay disagrees: the page would show an outcome the task never gave.
    "success tampered": (lambda d: unsolved(d).update(success=True), ["success=False", "edited"]),
    "failure tampered": (lambda d: solved(d).update(success=False), ["success=True", "edited"]),
    "optimal_length tampered": (
        lambda d: solved(d).update(optimal_length=solved(d)["optimal_length"] + 1),
        ["optimal_length", "edited"],
    ),
    "a mark tampered": (lambda d: first_turn(d).update(valid=True), ["turn 1", "valid=False"]),
    "an action tampered": (
        lambda d: solved(d)["turns"][0].update(
            action="left" if solved(d)["turns"][0]["action"] != "left" else "up"
        ),
        ["turn 1", "action="],
    ),
    "a turn after the end": (
        lambda d: solved(d)["turns"].append(dict(solved(d)["turns"][-1])),
        ["the episode ended at turn", "the file has more"],
    ),
}


@pytest.mark.parametrize("case", sorted(MALFORMED))
def test_a_malformed_episodes_file_is_one_line(case: str, tmp_path: Path, capsys) -> None:
    change, words = MALFORMED[case]
    samples = good_samples(tmp_path)
    # A change gives the whole file (bytes), a new object (a dict), or edits the parsed file.
    result = change if isinstance(change, bytes) else change(samples)
    if not isinstance(result, bytes):
        result = json.dumps(result if isinstance(result, dict) else samples).encode()
    raw = result
    (tmp_path / "episodes.json").write_bytes(raw)
    assert viewer.main([str(tmp_path)]) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("minirl.rundir.viewer: error: "), lines
    for word in words:
        assert word in lines[0], (word, lines[0])
    assert not (tmp_path / "episodes.html").exists()


def test_output_may_not_overwrite_the_input_or_the_run(tmp_path: Path, capsys) -> None:
    run = tmp_path / "run"
    run.mkdir()
    write_samples("gridnav", run / "episodes.json")
    (run / "adapter_config.json").write_text("{}")
    (run / "notes.html").write_text("mine")
    (tmp_path / "folder.html").mkdir()
    refused = {
        run / "episodes.json": "name an .html file",
        run / "adapter_config.json": "name an .html file",
        run / "notes.html": "is a file of the run",
        tmp_path / "folder.html": "is a directory",
        run: "name an .html file",
    }
    before = {p.name: p.read_bytes() for p in run.iterdir()}
    for output, words in refused.items():
        assert viewer.main([str(run), "--output", str(output)]) == 2
        lines = capsys.readouterr().err.strip().splitlines()
        assert len(lines) == 1 and words in lines[0], (output, lines)
    assert {p.name: p.read_bytes() for p in run.iterdir()} == before
    for output in (run / "episodes.html", tmp_path / "elsewhere.html"):
        assert viewer.main([str(run), "--output", str(output)]) == 0
        assert output.read_text().count('class="instance"') == len(SEEDS)
