"""The SWE instance sets: seeded, fixed sets of validated bugs, and replays of given sets.

A set for ``(split, repositories, n, seed)`` is built on first use and saved under
``sparring_home()/eval/``; every later run with the same options reads it back, so two runs with
the same seed evaluate the same bugs even after the bug stores grew. Building it takes the bugs
stored for each repository of the split whose image is built (procedural ones and any an injector
policy added), generating procedural bugs where a store holds fewer than the repository's share
(``n`` spread evenly), then draws each repository's share with the seed.

``--instances FILE`` replays a given set instead: the ``instances.json`` an evaluation folder
holds, a JSONL of repair tasks, or the SWE-bench JSONL of ``sparring export swe-instances``. An
exported instance replays in its repository image (``repo_image``: the env builds the bug state
from ``bug_patch`` and ``test_weaken_patch`` itself), whose release commit must still be the
instance's ``environment_setup_commit``.
"""

from __future__ import annotations

import hashlib
import json
import sys
from pathlib import Path
from typing import Any

import numpy as np

from sparring import SparringError, sparring_home

__all__ = ["build_instance_set", "load_instance_file", "task_from_swe_instance"]


def _chosen_repos(split: str, repos: list[str] | None) -> list[str]:
    """The repositories of the set: ``repos`` (all in ``split``, images built), else the split's built ones."""
    from sparring.envs.swe.bugs.store import available_repos
    from sparring.envs.swe.repos.catalog import get_repo

    if repos:
        for name in repos:
            spec = get_repo(name)
            if spec.split != split:
                raise SparringError(
                    f"{spec.name} is a {spec.split} repository, not {split}; pass --split {spec.split}."
                )
        built = {s.name for s in available_repos(names=repos)}
        missing = [get_repo(n).name for n in repos if get_repo(n).name not in built]
        if missing:
            raise SparringError(
                f"the image of {', '.join(missing)} is not built; run `sparring build repos {' '.join(missing)}`."
            )
        return sorted({get_repo(n).name for n in repos})
    names = sorted(s.name for s in available_repos(split))
    if not names:
        raise SparringError(f"no {split} repository image is built; run `sparring build repos --split {split}`.")
    return names


def _shares(n: int, repos: list[str]) -> dict[str, int]:
    """``n`` spread over the repositories as evenly as possible (the first ones get the remainder)."""
    return {name: n // len(repos) + (1 if i < n % len(repos) else 0) for i, name in enumerate(repos)}


def _set_path(split: str, repos: list[str], n: int, seed: int) -> Path:
    key = "+".join(repos)
    if len(key) > 60:
        key = hashlib.sha256(key.encode()).hexdigest()[:12]
    return sparring_home() / "eval" / f"swe-{split}-n{n}-s{seed}-{key}.json"


def build_instance_set(
    split: str, repos: list[str] | None, n: int, seed: int, generate: bool = True
) -> tuple[list[dict[str, Any]], Path]:
    """The seeded set of ``n`` repair tasks (built and saved on first use); returns it and its file.

    Raises:
        SparringError: No repository image of the split is built, a named repository is of
            another split, or a store lacks bugs and ``generate`` is off.
    """
    from sparring.envs.swe.bugs.store import bug_store_dir, generate_bugs, load_bugs
    from sparring.envs.swe.tasks import repair_task

    if n < 1:
        raise SparringError(f"--n-bugs must be at least 1, not {n}.")
    names = _chosen_repos(split, repos)
    path = _set_path(split, names, n, seed)
    if path.is_file():
        return load_instance_file(path), path
    shares = _shares(n, names)
    stored = {name: load_bugs(name) for name in names}
    for name in names:
        need = shares[name] - len(stored[name])
        if need <= 0:
            continue
        if not generate:
            raise SparringError(
                f"the bug store of {name} holds {len(stored[name])} bug(s), the set needs {shares[name]}; "
                f"run `sparring bugs generate --repo {name} --n {need}` or drop --no-generate."
            )
        store = bug_store_dir(name)
        print(
            f"generating {need} procedural bug(s) of {name} for the evaluation set; they stay in its bug store "
            f"{store} (`sparring bugs list` counts them)",
            file=sys.stderr,
        )
        made = generate_bugs(name, need, seed=seed, progress=lambda line: print(f"  {line}", file=sys.stderr))
        print(f"  {name}: {len(made.saved)} bug(s) from {made.tried} mutation(s), saved in {store}", file=sys.stderr)
        stored[name] = load_bugs(name)
    rng = np.random.default_rng(seed)
    order = {name: [stored[name][i] for i in rng.permutation(len(stored[name]))] for name in names}
    chosen = {name: order[name][: shares[name]] for name in names}
    spare = [bug for name in names for bug in order[name][shares[name] :]]
    short = n - sum(len(b) for b in chosen.values())
    picked = [bug for name in names for bug in chosen[name]] + spare[:short]
    if not picked:
        raise SparringError(f"no validated bugs in the stores of {', '.join(names)}; run `sparring bugs generate`.")
    if len(picked) < n:
        print(
            f"the stores of {', '.join(names)} hold {len(picked)} bug(s): the set has {len(picked)}, not {n}",
            file=sys.stderr,
        )
    tasks = [repair_task(a, v.fail_to_pass, v.pass_to_pass, image, v) for a, v, image in picked]
    path.parent.mkdir(parents=True, exist_ok=True)
    work = path.with_suffix(".tmp")
    work.write_text(json.dumps({"split": split, "repos": names, "n": n, "seed": seed, "instances": tasks}))
    work.replace(path)
    return tasks, path


def task_from_swe_instance(row: dict[str, Any]) -> dict[str, Any]:
    """The repair task of one exported SWE-bench-style instance (``sparring export swe-instances``).

    Raises:
        SparringError: The row lacks the fields Sparring exports (a SWE-bench instance from
            elsewhere cannot be rebuilt as a bug state in an image).
    """
    from sparring.envs.swe.bugs.artifact import BugArtifact
    from sparring.envs.swe.tasks import repair_task

    needed = ("bug_patch", "test_weaken_patch", "test_script", "test_files", "repo_image", "repo_name", "FAIL_TO_PASS",
              "PASS_TO_PASS")  # fmt: skip
    lacking = [k for k in needed if k not in row]
    if lacking:
        raise SparringError(
            f"instance {row.get('instance_id', '?')} lacks {', '.join(lacking)}; only instances written by "
            "`sparring export swe-instances` can be replayed."
        )

    def listed(value: Any) -> list[str]:
        return list(json.loads(value) if isinstance(value, str) else value)

    artifact = BugArtifact(
        test_script=row["test_script"],
        test_files=listed(row["test_files"]),
        bug_inject_diff=row["bug_patch"],
        test_weaken_diff=row["test_weaken_patch"],
        test_parser=row.get("test_parser") or None,
        repo=row["repo_name"],
        version=row.get("version", ""),
        order=int(row.get("order") or 1),
        origin=row.get("origin", ""),
    )
    task = repair_task(artifact, listed(row["FAIL_TO_PASS"]), listed(row["PASS_TO_PASS"]), row["repo_image"])
    task["id"] = str(row.get("instance_id") or task["id"])
    return task


def _check_setup_commits(rows: list[dict[str, Any]], path: Path) -> None:
    """Every exported instance's ``environment_setup_commit`` must be the release commit of its repository image."""
    from sparring.envs.swe.bugs.export import release_commit

    heads: dict[str, str] = {}
    for row in rows:
        image, commit = row.get("repo_image", ""), row.get("environment_setup_commit", "")
        if not image or not commit:
            continue
        if image not in heads:
            heads[image] = release_commit(image, row.get("repo_name", ""))
        if heads[image] and heads[image] != commit:
            raise SparringError(
                f"instance {row.get('instance_id')} of {path} was set up from commit {commit[:12]}, but "
                f"{image} holds {heads[image][:12]}; rebuild the image from the same releases or re-export."
            )


def load_instance_file(path: Path) -> list[dict[str, Any]]:
    """The repair tasks of an instance file (see the module docstring).

    Raises:
        SparringError: The file is missing or holds no instances of a known form.
    """
    path = Path(path)
    if not path.is_file():
        raise SparringError(f"no instance file at {path}; pass an instances.json or a JSONL of instances.")
    text = path.read_text(encoding="utf-8")
    try:
        if path.suffix == ".json":
            data = json.loads(text)
            rows = data["instances"] if isinstance(data, dict) else data
        else:
            rows = [json.loads(line) for line in text.splitlines() if line.strip()]
    except (json.JSONDecodeError, KeyError, TypeError) as e:
        raise SparringError(f"{path} is not an instance file ({e}); pass an instances.json or a JSONL.") from None
    if not isinstance(rows, list) or not rows or not all(isinstance(r, dict) for r in rows):
        raise SparringError(f"{path} holds no instances.")
    exported = [r for r in rows if "artifact" not in r]
    _check_setup_commits(exported, path)
    return [r if "artifact" in r else task_from_swe_instance(r) for r in rows]
