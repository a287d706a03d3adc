"""Files a repair leaves that once broke its grade or its record: hard links, names that are not UTF-8.

Real repair episodes on inflection's ordinal() bug (the adversarial solver tests' task). A hard
link is a regular file: the read-back archived the second name of an inode as a link member with
no data, so whichever name sorted second (the package's ``__init__.py`` here) read as deleted and
a correct fix was graded a collection error. A file name that is not UTF-8 reached the outcome as
lone surrogates, which no UTF-8 record can hold.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from sparring.agents.episodes import read_jsonl, write_jsonl
from sparring.envs.core import Episode
from tests.envs.swe.bugs import SOURCE, files, pool  # noqa: F401
from tests.envs.swe.test_adversarial_solver import FIX, _play, env, task  # noqa: F401

pytestmark = [pytest.mark.docker, pytest.mark.slow, pytest.mark.timeout(900)]

#: A backup name that sorts before ``__init__.py``, so that the source itself is the second name.
BACKUP = "inflection/__backup.py"


@pytest.mark.parametrize("fix_first", [True, False], ids=["fix_then_link", "link_then_fix"])
def test_a_correct_fix_with_a_hard_linked_backup_is_solved(env: Any, fix_first: bool) -> None:  # noqa: F811
    link = f"<bash>ln {SOURCE} {BACKUP} && stat -c %h {SOURCE}</bash>"
    reward, outcome = _play(env, *((FIX, link) if fix_first else (link, FIX)))
    assert outcome["solved"] and reward == 1.0 and outcome["status"] == "passed", outcome
    assert SOURCE in outcome["changed_files"] and SOURCE not in outcome["ignored"], outcome


def test_file_names_that_are_not_utf8_leave_a_storable_graded_outcome(env: Any, tmp_path: Path) -> None:  # noqa: F811
    odd = (
        "<bash>touch $'\\xff' inflection/$'\\xfe'.py && mkdir $'\\xfd' && printf 'x = 1\\n' > $'\\xfd'/m.py"
        " && ls</bash>"
    )
    obs, info = env.reset(seed=0)
    episode = Episode("swe", "solver", "swe", info["task_id"], info["task"], obs)
    for action in (FIX, odd, "<submit>fixed, plus some odd names</submit>"):
        obs, reward, terminated, _, info = env.step(action)
        obs.encode("utf-8")  # strict
    assert terminated
    outcome = info["outcome"]
    json.dumps(outcome, ensure_ascii=False).encode("utf-8")  # strict: no lone surrogate anywhere
    assert outcome["solved"] and reward == 1.0, outcome
    assert "inflection/\ufffd.py" in outcome["changed_files"], outcome["changed_files"]
    episode.outcome, episode.reward = outcome, reward
    assert read_jsonl(write_jsonl([episode], tmp_path / "e.jsonl"))[0].outcome == outcome
