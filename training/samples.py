"""Sampled episodes of a run: what the policy generated, as it saw it, with its rewards and advantages.

Every iteration, :class:`EpisodeSampler` picks ``log_episodes`` of each (domain, role)'s rollouts at
random (seeded by the run's seed, the iteration, the domain and the role, so a replayed iteration
picks the same ones) and writes each as one line of ``OUT/episodes.jsonl`` and, per (domain, role),
as one TensorBoard text entry (``episodes/DOMAIN/ROLE``). A resumed run first drops the lines of
the iterations after its checkpoint, which it plays again. A line holds:

* ``iteration``, ``domain``, ``role``, ``group``, ``task_id``, ``env_id``;
* ``text``: the episode's whole token buffer decoded as is (chat template, special tokens and
  observations included): the exact text the model was conditioned on and generated;
* ``prompt`` and ``turns`` (each turn's ``action``, ``observation``, ``reward``, ``tool``,
  ``error`` and ``advantage``);
* ``reward`` (the outcome reward the game assigned), ``turn_rewards`` (shaping only),
  ``turn_advantages`` (the advantage each turn's action tokens were trained with,
  ``A^O + λ·A^T``; null when the episode was not trained on), ``trained``;
* ``end_reason`` and ``outcome`` (the env's outcome dict).

Episodes are agent output and may hold any text: every string is made valid UTF-8 (a lone
surrogate becomes ``?``) before it is written, so the file and TensorBoard always read back.
"""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

from sparring.training.game import Rollout
from sparring.training.metrics import MetricsLog

__all__ = ["EPISODES_FILE", "EpisodeSampler", "episode_record", "utf8_safe"]

EPISODES_FILE = "episodes.jsonl"


def utf8_safe(value: Any) -> Any:
    """``value`` with every string (dict keys too) encodable as UTF-8: lone surrogates become ``?``.

    Example:
        >>> utf8_safe({"a\\udc80": ["ok", "\\ud800x"]})
        {'a?': ['ok', '?x']}
    """
    if isinstance(value, str):
        return value.encode("utf-8", errors="replace").decode("utf-8")
    if isinstance(value, dict):
        return {utf8_safe(str(k)): utf8_safe(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [utf8_safe(v) for v in value]
    if value is None or isinstance(value, bool | int | float):
        return value
    return utf8_safe(str(value))  # numpy scalars, paths: their text


def _turn_advantages(rollout: Rollout, token_advantages: Any) -> list[float | None]:
    """Each turn's trained advantage: the value on its action tokens (None for a turn without any)."""
    ep = rollout.episode
    out: list[float | None] = [None] * len(ep.turns)
    for turn, acting, adv in zip(ep.token_turn, ep.action_mask, token_advantages, strict=True):
        if acting and 0 <= turn < len(out) and out[turn] is None:
            out[turn] = float(adv)
    return out


def episode_record(
    rollout: Rollout, iteration: int, tokenizer: Any = None, token_advantages: Any = None
) -> dict[str, Any]:
    """One ``episodes.jsonl`` line (see the module docstring), UTF-8 safe.

    Args:
        rollout: The episode with its game-assigned reward and group.
        iteration: The iteration that played it (1 for the first self-play iteration).
        tokenizer: Decodes the token buffer into ``text``; without one (or tokens) ``text`` is the
            prompt and the turns joined.
        token_advantages: The advantage of each of its tokens as the update used them, or None when
            it was not trained on.
    """
    ep = rollout.episode
    advantages = _turn_advantages(rollout, token_advantages) if token_advantages is not None else None
    if tokenizer is not None and ep.token_ids:
        text = tokenizer.decode(ep.token_ids, skip_special_tokens=False)
    else:
        text = "\n".join([ep.prompt, *(f"{t.action}\n{t.observation}" for t in ep.turns)])
    turns = [
        {"action": t.action, "observation": t.observation, "reward": t.reward, "tool": t.tool, "error": t.error,
         "advantage": advantages[i] if advantages else None}
        for i, t in enumerate(ep.turns)
    ]  # fmt: skip
    record = {
        "iteration": iteration,
        "domain": rollout.domain,
        "role": rollout.role,
        "group": rollout.group[2],
        "task_id": ep.task_id,
        "env_id": ep.env_id,
        "reward": rollout.reward,
        "turn_rewards": rollout.turn_rewards,
        "turn_advantages": advantages,
        "trained": advantages is not None,
        "end_reason": rollout.reason,
        "outcome": ep.outcome,
        "error": ep.error,
        "tokens": len(ep.token_ids),
        "action_tokens": sum(ep.action_mask),
        "prompt": ep.prompt,
        "turns": turns,
        "text": text,
    }
    return utf8_safe(record)


def _markdown(records: list[dict[str, Any]]) -> str:
    """TensorBoard text of one (domain, role)'s samples: a heading each, the text as a code block.

    An indented code block, not a fence: no line of the episode can close it.
    """
    parts = []
    for i, r in enumerate(records, 1):
        advantages = ", ".join("-" if a is None else f"{a:+.3f}" for a in r["turn_advantages"] or [])
        parts.append(
            f"**{i}. task {r['task_id']}: reward {r['reward']:.3f}, end {r['end_reason']}, "
            f"turn advantages [{advantages or 'not trained'}]**\n\n"
            + "\n".join("    " + line for line in r["text"].splitlines())
        )
    return "\n\n".join(parts)


class EpisodeSampler:
    """Writes a few sampled episodes per (domain, role) and iteration to the run folder and TensorBoard.

    Args:
        out: The run folder.
        per_role: Episodes per (domain, role) and iteration (0: none).
        seed: The run's seed (with the iteration, domain and role it seeds each pick).
        metrics: The run's metrics log (its TensorBoard writer gets the text).
        tokenizer: The policy's tokenizer, to decode token buffers.
        enabled: False on every process but the main one.
    """

    def __init__(self, out: Path, per_role: int, seed: int, metrics: MetricsLog, tokenizer: Any, enabled: bool = True):
        """Remember where the samples go; nothing is written before the first :meth:`add`."""
        self.path = out / EPISODES_FILE
        self.per_role = per_role
        self.seed = seed
        self.metrics = metrics
        self.tokenizer = tokenizer
        self.enabled = enabled and per_role > 0

    def resume(self, iteration: int) -> None:
        """Drop the samples of iterations after ``iteration`` (a resumed run plays them again)."""
        if not self.enabled or not self.path.is_file():
            return
        lines = self.path.read_text(encoding="utf-8").splitlines(keepends=True)
        kept = [line for line in lines if line.endswith("\n") and json.loads(line)["iteration"] <= iteration]
        if len(kept) < len(lines):
            work = self.path.with_suffix(".tmp")
            work.write_text("".join(kept), encoding="utf-8")
            work.replace(self.path)

    def pick(self, rollouts: list[Rollout], iteration: int) -> dict[tuple[str, str], list[Rollout]]:
        """Up to ``per_role`` rollouts of each (domain, role), in play order, the same for the same iteration."""
        by_role: dict[tuple[str, str], list[Rollout]] = {}
        for r in rollouts:
            by_role.setdefault((r.domain, r.role), []).append(r)
        picked = {}
        for (domain, role), members in by_role.items():
            rng = random.Random(f"{self.seed}/{iteration}/{domain}/{role}")
            chosen = sorted(rng.sample(range(len(members)), min(self.per_role, len(members))))
            picked[(domain, role)] = [members[i] for i in chosen]
        return picked

    def add(self, rollouts: list[Rollout], iteration: int, trainer: Any) -> int:
        """Write the picks of one game's rollouts, played in ``iteration``; returns how many were written.

        ``trainer.credit`` gives the token advantages the update will use (it is deterministic).
        """
        if not self.enabled or not rollouts:
            return 0
        picked = self.pick(rollouts, iteration)
        kept, advantages, _ = trainer.credit(rollouts)
        trained = {id(r): a for r, a in zip(kept, advantages, strict=True)}
        written = 0
        with self.path.open("a", encoding="utf-8") as fh:
            for (domain, role), chosen in picked.items():
                records = [episode_record(r, iteration, self.tokenizer, trained.get(id(r))) for r in chosen]
                for record in records:
                    fh.write(json.dumps(record, ensure_ascii=False) + "\n")
                written += len(records)
                self.metrics.text(f"episodes/{domain}/{role}", _markdown(records), iteration)
        return written
