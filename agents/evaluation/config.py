"""What every evaluation shares: the model SPEC, limits, concurrency and the evaluation folder."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sparring import SparringError
from sparring.agents.generation import SamplingParams
from sparring.agents.runner import RunnerConfig
from sparring.config_cli import ABOVE_0, AT_LEAST_1, NOT_NEGATIVE, Range
from sparring.config_cli import check_ranges as check_field_ranges

__all__ = ["GROUPS", "HEADLINE", "RANGES", "EvalConfig", "check_ranges", "check_split", "out_dir", "run_identity",
           "runner_config", "slug"]  # fmt: skip

#: The headline metric of each domain, as reports name it.
HEADLINE = {
    "swe": "solve rate",
    "search": "EM",
    "search-propose": "valid rate",
    "judge": "accuracy",
    "best-of-n": "pick solve rate",
}
#: How each domain's instances are grouped (``group``, ``kind``), as reports name it.
GROUPS = {
    "swe": ("repository", "bug kind"),
    "search": ("source", "question kind"),
    "search-propose": ("seed source", "hops"),
    "judge": ("solver", "outcome"),
    "best-of-n": ("source", "question kind"),
}


@dataclass
class EvalConfig:
    """Options of every ``sparring eval`` run (the domains add theirs)."""

    model: str = "default"
    """Model SPEC: default, a hub id or local folder, a training checkpoint folder, openai:URL#MODEL, vllm:MODEL,
    or scripted:NAME, NAME one of oracle, do-nothing, retrieval-floor, definition-search, definition-match,
    definition-proposer, decoy-fix (SWE), never-solved or visible-tests (judges)."""
    chat_only: bool = False
    """With an openai: SPEC: a chat-only API (hosted models): messages, not token ids."""
    split: str = "heldout"
    """heldout (never trained on) or train."""
    max_turns: int = 30
    """Turn limit per instance."""
    max_new_tokens: int = 512
    """Tokens generated per turn at most."""
    max_seconds: float | None = None
    """Wall-clock limit per instance; an instance over it is stopped and counted unsolved (None: no limit)."""
    concurrency: int = 4
    """Instances played at once (and the largest generation batch)."""
    request_timeout: float = 600.0
    """Seconds per request to an openai: endpoint; failed requests are retried with backoff."""
    device: str = "cpu"
    """Torch device of a local model (cpu, cuda)."""
    threads: int | None = None
    """Torch CPU threads (None: torch's choice)."""
    out: str | None = None
    """Evaluation folder: report.json, report.md, plots, records.jsonl (default: a folder under evals/ named
    after the domain, split, set and model). The same command with the same folder resumes an interrupted run."""
    plots: bool = True
    """Draw the PNG plots (needs matplotlib, in the train extra)."""


def check_split(split: str) -> None:
    """Refuse a split other than ``heldout`` or ``train`` in one sentence."""
    if split not in ("heldout", "train"):
        raise SparringError(f"unknown split {split!r}; use heldout (never trained on) or train.")


#: The allowed range of every numeric option of every evaluation: a count or a limit outside it would be
#: taken up silently (0 turns plays nothing and scores it), so none goes unchecked.
RANGES: dict[str, Range] = {
    **dict.fromkeys(
        ("max_turns", "max_new_tokens", "concurrency", "threads", "limit", "topk", "n_bugs", "best_of"), AT_LEAST_1
    ),
    "solver_temperature": NOT_NEGATIVE,
    "seed": NOT_NEGATIVE,
    **dict.fromkeys(("max_seconds", "request_timeout", "command_timeout", "test_timeout"), ABOVE_0),
}


def check_ranges(config: EvalConfig) -> None:
    """Refuse, in one sentence naming the option, a numeric option outside its range (None passes: no limit)."""
    check_field_ranges(config, RANGES, lambda name: "--" + name.replace("_", "-"))


def slug(text: str) -> str:
    """``text`` as a folder name: word characters, dots and dashes (``scripted:oracle`` -> ``scripted_oracle``)."""
    return re.sub(r"[^\w.-]+", "_", text).strip("_.")[:60] or "model"


def out_dir(config: EvalConfig, domain: str, *parts: Any) -> Path:
    """``--out``, or the default folder named after the domain, split, set and model (stable, so reruns resume)."""
    if config.out:
        return Path(config.out)
    name = "-".join([domain, config.split, *(str(p) for p in parts if p not in (None, "")), slug(config.model)])
    return Path("evals") / name


def runner_config(config: EvalConfig) -> RunnerConfig:
    """Greedy turns under the configured limits, with a progress bar on stderr."""
    check_ranges(config)
    return RunnerConfig(
        concurrency=config.concurrency,
        sampling=SamplingParams(temperature=0.0, max_new_tokens=config.max_new_tokens),
        max_turns=config.max_turns,
        max_seconds=config.max_seconds,
        env_workers=max(2, config.concurrency),
        progress=True,
    )


def run_identity(config: EvalConfig, domain: str, **settings: Any) -> dict[str, Any]:
    """What makes two runs the same evaluation (``run.json``): a resumed run must match it."""
    return {
        "domain": domain,
        "model": config.model,
        "chat_only": config.chat_only,
        "split": config.split,
        "max_turns": config.max_turns,
        "max_new_tokens": config.max_new_tokens,
        "max_seconds": config.max_seconds,
        **settings,
    }
