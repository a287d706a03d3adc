"""``sparring/SWEInject-v0``: the injector writes a bug artifact (docs/swe.md).

At reset the env takes a fresh container of a repository image: the clean repository at /repo
with its git history (one commit per release). The prompt asks for one injection strategy,
drawn per task: ``direct`` (break some code), ``removal`` (remove code hunks and fix the
callers so the code still imports) or ``history`` (revert a past change found with ``git log``).
The injector writes the five artifact files into a folder and calls ``submit(folder)``; the env
validates them in fresh containers (:func:`~sparring.envs.swe.validation.validate_artifact`) and
ends with the verdict in ``info["outcome"]``.

The injector's real reward needs the solvers' results: the terminal step gives
``rewards.injector_invalid`` for an invalid artifact and 0 for a valid one. A valid artifact's
outcome carries ``solver_task``, the repair task (:func:`~sparring.envs.swe.tasks.repair_task`)
for ``SWERepair-v0``: the trainer's game plays solvers on the task and computes the injector's
reward from their solve rate with the same ``rewards``
(:meth:`~sparring.envs.swe.rewards.SWERewards.proposer`).
"""

from __future__ import annotations

import logging
import posixpath
from typing import Any

from sparring import SparringError
from sparring.containers.channel import FileTooLargeError
from sparring.containers.pools import PoolSet
from sparring.envs.core import TextEnv
from sparring.envs.swe.bugs.artifact import ARTIFACT_FILES, JUNIT_PATH, BugArtifact
from sparring.envs.swe.rewards import SWERewards
from sparring.envs.swe.tasks import repair_task
from sparring.envs.swe.tools import SandboxTools
from sparring.envs.swe.validation import MAX_ARTIFACT_BYTES, ValidationConfig, ValidationResult, validate_artifact
from sparring.envs.tools import tool

__all__ = ["STRATEGIES", "SWEInjectEnv", "inject_task"]

logger = logging.getLogger(__name__)

#: Injection strategy -> the instruction the prompt gives for it.
STRATEGIES = {
    "direct": "Introduce a subtle bug directly: change the logic of one or more functions so that some tests fail.",
    "removal": (
        "Remove one or more hunks of code (a branch, a feature, a helper) and make the minimal compatibility fixes "
        "so that the package still imports; some tests must fail because of the missing code."
    ),
    "history": (
        "Use `git log -p` to find a past change (a fix or feature between two releases) and revert it in the "
        "current code, adapting it where the code moved on, so that some tests fail."
    ),
}

INJECT_PROMPT = """You are working in the Python repository at /repo ({repo} {version}); it has its git history.
Your task: create a bug that the repository's tests can detect, and describe it as a bug artifact.

Strategy: {strategy}

Write these files into a folder (for example /tmp/bug) and then call <submit>/tmp/bug</submit>:
- test_script.sh: runs the relevant tests from /repo, e.g.
  python -m pytest -p no:cacheprovider -o junit_family=xunit1 --junitxml="$SPARRING_JUNIT" tests/test_x.py
  ($SPARRING_JUNIT is {junit}; the built-in parser reads that JUnit report).
- test_files.txt: the test files that detect the bug, one path per line, relative to /repo.
- test_parser.py (optional): reads the script's output on stdin and prints JSON {{test_id: "passed"|"failed"|...}}.
- bug_inject.diff: a unified diff (git diff) of code files, not test files, that introduces the bug.
- test_weaken.diff: a unified diff of files in test_files.txt that hides the bug (the weakened tests pass).

Tip: make your changes in /repo, save them with `git diff -- <code files> > /tmp/bug/bug_inject.diff` and
`git diff -- <test files> > /tmp/bug/test_weaken.diff`. The artifact is checked on fresh copies of the
original repository: the tests must pass before the bug, some must fail with it, pass again with the
weakening, and each changed file must matter."""


def inject_task(repo: str, image: str, version: str, strategy: str) -> dict[str, Any]:
    """An injection task (``options["task"]`` / ``info["task"]``)."""
    if strategy not in STRATEGIES:
        raise ValueError(f"unknown strategy {strategy!r}; use one of {sorted(STRATEGIES)}")
    return {"id": f"inject-{repo}-{version}-{strategy}", "repo": repo, "image": image, "version": version,
            "strategy": strategy}  # fmt: skip


class SWEInjectEnv(SandboxTools, TextEnv):
    """The injector role of the SWE game; see the module docstring."""

    role = "proposer"
    domain = "swe"

    def __init__(
        self,
        *,
        max_turns: int = 30,
        repos: list[str] | None = None,
        split: str = "train",
        strategies: tuple[str, ...] = tuple(STRATEGIES),
        validation: ValidationConfig | None = None,
        rewards: SWERewards | None = None,
        command_timeout: float = 120.0,
        docker_hosts: list[str] | None = None,
        **kwargs: Any,
    ):
        """Create the env.

        Args:
            max_turns: Turn limit.
            repos: Repositories to draw from; the catalog's ``split`` whose images are built when None.
            split: Catalog split used when ``repos`` is None.
            strategies: Injection strategies drawn per task.
            validation: Validation thresholds (``min_passing_tests``, ...).
            rewards: Reward settings (SSR's defaults when None).
            command_timeout: Seconds one ``bash`` call may run.
            docker_hosts: Docker engine URLs the containers run on (default: the process's, else
                ``SPARRING_DOCKER_HOSTS``, else the local engine; see :mod:`~sparring.containers.engines`).
            **kwargs: Passed to :class:`TextEnv` (``max_length``, ``render_mode``).
        """
        super().__init__(max_turns=max_turns, **kwargs)
        self._repos = repos
        self.split = split
        self.strategies = tuple(strategies)
        self.validation = validation or ValidationConfig()
        self.rewards = rewards or SWERewards()
        self.command_timeout = command_timeout
        # the validation's runs, and the next one
        self._pools = PoolSet(size=self.validation.parallel + 1, hosts=docker_hosts)
        self._sandbox = None
        self.last_artifact: BugArtifact | None = None
        """The artifact of the last episode, when one was submitted."""
        self.last_validation: ValidationResult | None = None
        """Its validation verdict."""

    def _draw_task(self) -> dict[str, Any]:
        from sparring.envs.swe.bugs.store import available_repos

        repos = available_repos(self.split, self._repos)
        if not repos:
            raise SparringError(
                f"no repository image is built for the {self.split} split; run `sparring setup --for test`."
            )
        spec = repos[int(self.np_random.integers(len(repos)))]
        strategy = self.strategies[int(self.np_random.integers(len(self.strategies)))]
        return inject_task(spec.name, spec.image, spec.version, strategy)

    def _begin(self, task: dict[str, Any]) -> str:
        self._release()
        self.last_artifact, self.last_validation = None, None
        self._sandbox = self._pools.acquire(task["image"])
        return INJECT_PROMPT.format(
            repo=task["repo"], version=task["version"], strategy=STRATEGIES[task["strategy"]], junit=JUNIT_PATH
        )

    def _read_artifact(self, folder: str) -> BugArtifact | str:
        """The artifact in ``folder``, or the observation saying what is wrong with the folder.

        Each file is read with the agent's rights and never past :data:`MAX_ARTIFACT_BYTES`: the
        harness reads no more of what an agent wrote than a real artifact needs.
        """
        files: dict[str, str] = {}
        base = self._path(folder)
        too_large = []
        for name in ARTIFACT_FILES:
            try:
                data = self._box().get_file(posixpath.join(base, name), as_agent=True, max_bytes=MAX_ARTIFACT_BYTES)
            except FileTooLargeError:
                too_large.append(name)
                continue
            except Exception:  # absent, not the agent's, not a file, a dead container: from_files names it
                continue
            files[name] = data.decode("utf-8", errors="replace")
        if too_large:
            return (
                f"Error: {', '.join(too_large)} in {base} holds more than {MAX_ARTIFACT_BYTES} bytes, more than the "
                "harness reads; a bug artifact's files are a few KB. Write smaller ones, then submit again."
            )
        assert self._task is not None
        try:
            return BugArtifact.from_files(
                files, repo=self._task["repo"], version=self._task["version"], origin=f"agent:{self._task['strategy']}"
            )
        except ValueError as e:
            return f"Error: {e} in {base}; write the files there, then submit again."

    @tool(example={"folder": "/tmp/bug"})
    def submit(self, folder: str) -> str:
        """Submit the bug artifact for validation; this ends the episode.

        Args:
            folder: Folder with test_script.sh, test_files.txt, bug_inject.diff, test_weaken.diff, test_parser.py.
        """
        artifact = self._read_artifact(folder)
        if isinstance(artifact, str):
            return artifact  # nothing is lost: the injector can fix the folder and submit again
        assert self._task is not None
        self._release()  # validation uses fresh containers; the injector's own is done
        try:
            result = validate_artifact(
                artifact, self._task["image"], self._pools.pool(self._task["image"]), self.validation
            )
        except SparringError:
            raise  # the engine started no container: transient, not the injector's doing
        except Exception as e:  # nothing in an artifact may make step() raise: it is an invalid verdict
            logger.exception("validation failed on an artifact")
            result = ValidationResult(valid=False, reason="error", detail=f"validation failed: {type(e).__name__}: {e}")
        self.last_artifact, self.last_validation = artifact, result
        outcome = result.to_dict() | {"bug_id": artifact.bug_id, "artifact": artifact.to_dict()}
        if result.valid:
            # The link of the game: solvers play this task, and their solve rate sets the reward.
            image = self._task["image"]
            outcome["solver_task"] = repair_task(artifact, result.fail_to_pass, result.pass_to_pass, image, result)
        self._finish(outcome, 0.0 if result.valid else self.rewards.injector_invalid)
        if result.valid:
            return f"The bug is valid: {len(result.fail_to_pass)} test(s) fail with it."
        return f"The bug is invalid ({result.reason}): {result.detail}"

    def _on_turn_limit(self) -> tuple[dict[str, Any], float]:
        self._release()
        return {"valid": False, "reason": "no_submission", "detail": "the turn limit came first"}, (
            self.rewards.injector_invalid
        )
