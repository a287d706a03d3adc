"""Micro-batched update forwards score, lose and differentiate exactly what one forward per episode does.

The episodes are real: the search solver's, played on the real env and corpus by the trainer's own
generator (a tiny random Llama with SmolLM2's vocabulary), so they differ in length and hold chat
markup, tool calls and search results. Two tasks, three attempts each: the attempts at one task share
their prompt, so with ``share`` a pass holds two rows (each a prompt once and three rests), without
it six padded rows; both must score what six separate forwards do.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import pytest
import torch

from sparring.training.config import load_config
from sparring.training.game import GAMES, Rollout, play_iteration
from sparring.training.sequences import batch_scores, bucket, can_share, packed_rows, to_sequence, token_batches
from sparring.training.trainer import Trainer
from tests.training.conftest import tiny_model

# float32 sums taken in another order (padded rows, another accumulation order of the gradients)
LOGPROB_ATOL = 1e-5
GRAD_RTOL, GRAD_ATOL = 1e-4, 1e-7


def _trainer(tokenizer: Any, tmp_path: Path, budget: int, *overrides: str) -> Trainer:
    config = load_config(
        None,
        [f"out={tmp_path / f'run{budget}'}", "games=search", "backend=hf", "threads=1", "search_group=3",
         "drawn_tasks=2", "search_max_turns=2", "max_new_tokens=24", "temperature=1", "drop_zero_variance=false",
         "overlong=score", "episode_seconds=3600", f"update_tokens_per_batch={budget}", *overrides],
    )  # fmt: skip
    return Trainer(config, model=tiny_model(tokenizer), tokenizer=tokenizer)


@pytest.fixture(scope="module")
def rollouts(corpus: Any, smol_tokenizer: Any, tmp_path_factory: pytest.TempPathFactory) -> list[Rollout]:
    """Six solver episodes of two tasks, of six lengths, with rewards that differ within each group."""
    trainer = _trainer(smol_tokenizer, tmp_path_factory.mktemp("play"), 1)
    solver_only = dataclasses.replace(GAMES["search"], plays_proposer=lambda config: False)
    played = play_iteration(solver_only, trainer.generator, trainer.config, 0, trainer.rng, trainer.replay["search"])
    # The random policy answers nothing right: rewards that differ make the advantages (and the gradient) nonzero.
    # It also uses every turn's whole token budget, so a task's episodes are as long as each other: each is cut
    # at its own length (a prefix of a real buffer, the last turn's action tokens ending early).
    out = [dataclasses.replace(r, episode=_cut(r.episode, 16 * i), reward=float(i % 2),
                               turn_rewards=[0.0] * len(r.turn_rewards))
           for i, r in enumerate(played.rollouts)]  # fmt: skip
    lengths = {len(r.episode.token_ids) for r in out}
    assert len(out) == 6 and len(lengths) == 6, f"the episodes should differ in length: {lengths}"
    assert all(sum(r.episode.action_mask) >= 8 for r in out)
    return out


def _cut(episode: Any, drop: int) -> Any:
    """A copy of ``episode`` without the last ``drop`` tokens of its buffer."""
    keep = len(episode.token_ids) - drop
    return dataclasses.replace(
        episode,
        token_ids=episode.token_ids[:keep],
        token_turn=episode.token_turn[:keep],
        action_mask=episode.action_mask[:keep],
        logprobs=episode.logprobs[:keep],
    )


@pytest.mark.parametrize(
    ("share", "attention"),
    [(False, "sdpa"), (True, "sdpa"), (True, "eager")],
    ids=["padded-rows", "shared-prompt-rows", "shared-prompt-rows-eager"],
)
def test_a_batch_scores_each_episode_as_its_own_forward(
    smol_tokenizer: Any, rollouts: list[Rollout], share: bool, attention: str
) -> None:
    """Per-token logprobs and entropies of one pass equal each episode's own unpadded pass.

    Padded rows: the short rows are padded by hundreds of tokens, so a pad that reached a scored
    position (in the attention or in the kept logits) would change their logprobs, and a logit row
    taken from a pad position would misalign every row after it. Shared-prompt rows: an attempt's
    tokens that saw another attempt's, or kept the position they have in the row instead of their
    own episode's, would change its logprobs. SDPA takes the mask as booleans, the eager attention adds it.
    """
    model = tiny_model(smol_tokenizer).eval()
    model.set_attn_implementation(attention)
    seqs = [to_sequence(r.episode, [1.0] * len(r.episode.token_ids)) for r in rollouts]
    lengths = sorted(len(s.input_ids) for s in seqs)
    assert bucket(lengths[-1]) - lengths[0] >= 64  # the shortest row is mostly padding
    rows = packed_rows(seqs, share)
    assert [len(members) for _, members in rows] == ([3, 3] if share else [1] * 6)
    assert not share or all(prefix >= 32 for prefix, _ in rows)
    with torch.no_grad():
        batched = batch_scores(model, seqs, temperature=0.7, share=share)
        for seq, (logp, entropy) in zip(seqs, batched, strict=True):
            ids = seq.input_ids.unsqueeze(0)
            logits = model(input_ids=ids, use_cache=False).logits[0, seq.targets - 1].float() / 0.7
            plain = torch.distributions.Categorical(logits=logits)
            assert logp.shape == (seq.tokens,) and seq.tokens > 0
            assert torch.allclose(logp, plain.log_prob(seq.input_ids[seq.targets]), atol=LOGPROB_ATOL)
            assert torch.allclose(entropy, plain.entropy(), atol=LOGPROB_ATOL)


@pytest.mark.parametrize("share", [False, True], ids=["padded-rows", "shared-prompt-rows"])
def test_token_batches_fit_the_budget_and_take_every_episode_once(rollouts: list[Rollout], share: bool) -> None:
    seqs = [to_sequence(r.episode, [1.0] * len(r.episode.token_ids)) for r in rollouts]
    longest = bucket(max(len(s.input_ids) for s in seqs))

    def row_tokens(group: list[Any], prefix: int, members: list[int]) -> int:  # the prefix once, then each rest
        return prefix + sum(len(group[i].input_ids) - prefix for i in members)

    def cost(group: list[Any]) -> int:  # what the pass pads to: rows × the longest row, bucketed
        rows = packed_rows(group, share)
        return len(rows) * bucket(max(row_tokens(group, p, m) for p, m in rows))

    for budget in (1, longest, 2 * longest, 100 * longest):
        groups = token_batches(seqs, budget, share)
        assert sorted(id(s) for g in groups for s in g) == sorted(id(s) for s in seqs)
        assert all(len(g) == 1 or cost(g) <= budget for g in groups)
    assert len(token_batches(seqs, 1, share)) == len(seqs) and len(token_batches(seqs, 100 * longest, share)) == 1
    assert len(token_batches(seqs, 2 * longest, share)) < len(seqs)
    # one pass of all six: two rows of a prompt and three rests each, or six rows of whole episodes
    whole = token_batches(seqs, 100 * longest, share)[0]
    rows = packed_rows(whole, share)
    shared = sum(p * (len(m) - 1) for p, m in rows)
    assert sum(len(s.input_ids) for s in seqs) - shared == sum(row_tokens(whole, p, m) for p, m in rows)
    assert (shared > 0) == share


def _update(
    tokenizer: Any, tmp_path: Path, rollouts: list[Rollout], budget: int, share: bool = False
) -> tuple[Any, list[list[Any]]]:
    """One ``reinforce`` (two optimizer steps, KL on) and the gradients each step took."""
    trainer = _trainer(tokenizer, tmp_path / str(share), budget, "updates_per_iteration=2", "kl_coef=0.1", "lr=1e-7",
                       "max_grad_norm=0", "std_scale=false", f"update_shared_prefix={str(share).lower()}")  # fmt: skip
    trainer.freeze_reference()
    grads: list[list[Any]] = []
    trainer.optimizer.optimizer.register_step_pre_hook(  # the torch optimizer accelerate wraps
        lambda *_: grads.append([p.grad.clone() for p in trainer.policy_model.parameters()])
    )
    return trainer.reinforce(rollouts), grads


@pytest.mark.parametrize("share", [False, True], ids=["padded-rows", "shared-prompt-rows"])
def test_micro_batched_loss_and_gradients_equal_one_forward_per_episode(
    smol_tokenizer: Any, tmp_path: Path, rollouts: list[Rollout], share: bool
) -> None:
    """Old logprobs, KL reference and trained pass micro-batched: the same loss, gradients and statistics.

    With shared-prompt rows the prompt's activations take the gradients of three attempts at once.
    """
    single, single_grads = _update(smol_tokenizer, tmp_path, rollouts, budget=1)
    batched, batched_grads = _update(smol_tokenizer, tmp_path, rollouts, budget=1 << 16, share=share)
    assert single.tokens == batched.tokens > 0 and single.sequences == batched.sequences == 6
    assert batched.loss == pytest.approx(single.loss, rel=1e-5, abs=1e-7) and single.loss != 0.0
    assert len(single_grads) == len(batched_grads) == 2
    for step_single, step_batched in zip(single_grads, batched_grads, strict=True):
        assert any(g.abs().max() > 1e-4 for g in step_single)  # a real gradient, not zeros compared to zeros
        for a, b in zip(step_single, step_batched, strict=True):
            assert torch.allclose(a, b, rtol=GRAD_RTOL, atol=GRAD_ATOL), float((a - b).abs().max())
    for key in ("ratio_mean", "ratio_dev", "kl", "tis_mean", "entropy", "clip_frac_low", "clip_frac_high"):
        assert (batched.extra or {})[key] == pytest.approx((single.extra or {})[key], rel=1e-4, abs=1e-6), key


def test_an_attention_without_4d_masks_is_not_given_shared_rows(smol_tokenizer: Any) -> None:
    """Flash attention takes no 4-D mask, so the trainer and ``batch_scores`` keep one padded row per episode
    for it (``can_share``); SDPA and the eager attention take one."""
    model = tiny_model(smol_tokenizer).eval()
    assert can_share(model)
    model.set_attn_implementation("eager")
    assert can_share(model)
    model.config._attn_implementation_internal = "flash_attention_2"  # named only: nothing here runs it
    assert model.config._attn_implementation == "flash_attention_2" and not can_share(model)
    model.config._attn_implementation_internal = "sdpa"
    assert can_share(model)
