"""The environment image of one exported SWE-bench instance, and what is read back from it.

SWE-bench's harness starts an instance's environment, checks out ``base_commit`` in the
repository, applies ``test_patch`` and the model's patch, and runs FAIL_TO_PASS and
PASS_TO_PASS. The instance image ``sparring-swe/NAME:DIGEST`` is built FROM the repository image
(``sparring-repo/NAME:VERSION``, its Python and dependencies): its ``/repo`` is the state a
solver starts from (the bug and the weakened tests applied) as ONE commit with no parent, which
is ``base_commit``. The release history is left out on purpose: the repository image's history
holds the clean code, which is the fix (``git diff HEAD~1`` would show it), so no commit of the
instance image's ``/repo`` reaches it. The commit's author, dates (the release's) and message are
fixed, so the same bug always gets the same commit id; the repair env's solver starts from the
same tree (:func:`~sparring.envs.swe.grading.setup_solver_repo`).

:func:`probe_instance` then starts a container of the instance image and does what SWE-bench's
harness does: reads ``base_commit``, checks that ``patch`` applies, applies ``test_patch``, and runs
the FAIL_TO_PASS tests on the buggy code, whose failure reports are the instance's symptom.
"""

from __future__ import annotations

import re
import shlex
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

from sparring import SparringError
from sparring.envs.swe.bugs.artifact import BugArtifact
from sparring.envs.swe.grading import SOLVER_COMMIT

__all__ = ["IMAGE_PREFIX", "InstanceProbe", "build_instance_image", "instance_image", "probe_instance"]

#: Repository of the instance images.
IMAGE_PREFIX = "sparring-swe"

#: Failing tests whose reports make the symptom, and lines kept of each.
SYMPTOM_TESTS = 3
SYMPTOM_LINES = 20

_RECIPE = """\
ARG REPO_IMAGE
FROM ${{REPO_IMAGE}}
USER root
COPY bug.diff weaken.diff /tmp/sparring-swe/
RUN cd /repo \\
 && git apply --whitespace=nowarn /tmp/sparring-swe/bug.diff \\
 && if [ -s /tmp/sparring-swe/weaken.diff ]; then git apply --whitespace=nowarn /tmp/sparring-swe/weaken.diff; fi \\
 && date="$(git log -1 --format=%cI)" \\
 && rm -rf /tmp/sparring-swe /repo/.git \\
 && find /repo -name __pycache__ -prune -exec rm -rf {{}} + \\
 && find /repo -name '*.py[co]' -delete \\
 && git init -q -b main \\
 && git add -A \\
 && GIT_AUTHOR_DATE="$date" GIT_COMMITTER_DATE="$date" git -c user.name=sparring \\
    -c user.email=sparring@sparring.invalid commit -q -m "{message}" \\
 && chown -R sparring:sparring /repo
"""


def instance_image(artifact: BugArtifact) -> str:
    """The tag of a bug's instance image: ``sparring-swe/NAME:DIGEST`` (the digest of its bug id)."""
    return f"{IMAGE_PREFIX}/{artifact.repo}:{artifact.bug_id.rsplit('-', 1)[-1]}"


def build_instance_image(artifact: BugArtifact, repo_image: str, instance_id: str) -> str:
    """Build (or find in the build cache) the instance image of a validated bug; returns its tag.

    Raises:
        SparringError: The repository image is missing, the build failed (a diff that does not
            fit the repository image) or the engine refused it.
    """
    from sparring.containers.images import build_image, image_labels

    if image_labels(repo_image) is None:
        raise SparringError(
            f"the image {repo_image} that bug {artifact.bug_id} was validated on is not built; "
            f"run `sparring build repos {artifact.repo}` first."
        )
    tag = instance_image(artifact)
    context = Path(tempfile.mkdtemp(prefix="sparring-swe-"))
    try:
        (context / "Dockerfile").write_text(_RECIPE.format(message=SOLVER_COMMIT))
        (context / "bug.diff").write_text(artifact.bug_inject_diff)
        (context / "weaken.diff").write_text(artifact.test_weaken_diff)
        labels = {"sparring.repo": artifact.repo, "sparring.instance": instance_id, "sparring.repo_image": repo_image}
        build_image(context, tag, labels, buildargs={"REPO_IMAGE": repo_image})
    finally:
        shutil.rmtree(context, ignore_errors=True)
    return tag


@dataclass
class InstanceProbe:
    """What :func:`probe_instance` read from an instance image.

    Attributes:
        base_commit: The commit of ``/repo``.
        failures: The FAIL_TO_PASS tests' failure reports on the buggy code with ``test_patch``
            applied (pytest's short tracebacks, ``/repo/`` dropped), or "" when none were read.
    """

    base_commit: str
    failures: str


def probe_instance(
    image: str, patch: str, test_patch: str, fail_to_pass: list[str], timeout: float = 300.0
) -> InstanceProbe:
    """Check the instance the way SWE-bench's harness uses it, and read its symptom.

    In a fresh container of ``image``: ``/repo`` is a clean checkout of one commit, ``patch``
    applies to it (``git apply --check``), ``test_patch`` applies, and with it ``patch`` still
    applies; then the first FAIL_TO_PASS tests run on the buggy code.

    Raises:
        SparringError: The image breaks one of these (an export bug, not the user's), or no
            container starts.
    """
    from sparring.containers.sandbox import Sandbox

    with Sandbox.create(image) as box:
        box.put_file("/tmp/sparring-swe/patch.diff", patch)
        box.put_file("/tmp/sparring-swe/test_patch.diff", test_patch)
        steps = [
            "git rev-parse HEAD",
            'test -z "$(git status --porcelain)"',
            "git apply --check /tmp/sparring-swe/patch.diff",
            "{ test ! -s /tmp/sparring-swe/test_patch.diff || git apply /tmp/sparring-swe/test_patch.diff; }",
            "git apply --check /tmp/sparring-swe/patch.diff",
        ]
        r = box.exec(" && ".join(steps), timeout=120)
        if not r.ok:
            raise SparringError(
                f"the instance image {image} does not hold the bug state its patches apply to "
                f"({(r.stderr or r.stdout).strip()[:300]}); rebuild the repository image and export again."
            )
        commit = r.stdout.split()[0]
        ids = " ".join(shlex.quote(t) for t in _varied(fail_to_pass)[:SYMPTOM_TESTS])
        run = box.exec(
            f"python -m pytest -p no:cacheprovider -o addopts= -q --tb=short --color=no {ids}", timeout=timeout
        )
    return InstanceProbe(base_commit=commit, failures=_failures(run.stdout))


_SECTION = re.compile(r"^_{3,} (.+?) _{3,}$")
#: Object addresses in pytest's reports: they differ between runs, and the statement must not.
_ADDRESS = re.compile(r" at 0x[0-9a-f]+")


def _varied(test_ids: list[str]) -> list[str]:
    """The test ids with one of each test function first (the parameters of one test say the same thing)."""
    seen: set[str] = set()
    first: list[str] = []
    rest: list[str] = []
    for test in test_ids:
        base = test.split("[", 1)[0]
        (rest if base in seen else first).append(test)
        seen.add(base)
    return first + rest


def _failures(output: str) -> str:
    """The FAILURES section of pytest's output, each test's report cut to :data:`SYMPTOM_LINES` lines."""
    lines = _ADDRESS.sub("", output.replace("/repo/", "")).splitlines()
    try:
        start = next(i for i, line in enumerate(lines) if re.match(r"^=+ FAILURES =+$", line))
    except StopIteration:
        return ""
    reports: list[list[str]] = []
    for line in lines[start + 1 :]:
        if line.startswith("=" * 5):  # the short summary or the final line: the section is over
            break
        if _SECTION.match(line):
            reports.append([line])
        elif reports:
            reports[-1].append(line)
    kept = []
    for report in reports[:SYMPTOM_TESTS]:
        body = report[:SYMPTOM_LINES] + (["..."] if len(report) > SYMPTOM_LINES else [])
        kept.append("\n".join(body).rstrip())
    return "\n\n".join(kept)
