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
from minirl import viewer
from minirl.episode import Episode, Turn
from minirl.samples import add_samples, load_samples

SEEDS = list(tasks.EVAL_SEEDS[:3])
BUDGET = 12
CLUMSY = ["banana", "up", "up", "left", "<script>alert(1)</script>", "down"]


def play(task: str, seed: int, choose) -> Episode:
    """An Episode whose replies come from `choose(env, turn)`, marked by the env as rollout does."""
    env = tasks.make(task)
    env.reset(seed)
    episode = Episode(task, seed, 0, BUDGET, True, env.optimal_length)
    for turn in range(BUDGET):
        reply = choose(env, turn)
        before = env.distance()
        step = env.step(reply)
        info = step.info
        episode.turns.append(
            Turn(
                reply,
                info["action"],
                info["valid"],
                info["mistake"],
                info["optimal"],
                before,
                info["distance"],
                step.reward,
            )
        )
        if step.done:
            episode.success = info["success"]
            break
    return episode


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
    command = [sys.executable, "-m", "minirl.viewer", str(tmp_path), "--instances", "2"]
    ok = subprocess.run(command, capture_output=True, text=True, env=env, check=False)
    assert ok.returncode == 0, ok.stderr
    assert (tmp_path / "episodes.html").read_text().count('class="instance"') == 2
    assert viewer.main([str(tmp_path), "--budget", "99"]) == 2
    assert capsys.readouterr().err.strip() == (
        f"minirl.viewer: error: no episodes at T=99; kept: {BUDGET}"
    )
    assert viewer.main([str(tmp_path / "nothing")]) == 2
    assert "no episodes.json" in capsys.readouterr().err
