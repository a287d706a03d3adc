"""Episodes as training sequences, and the policy's logprobs of their action tokens.

An episode's token buffer (prompt, then per turn the sampled ids and the observation's ids) is
fed to the model as one sequence; only the action tokens are scored. The model computes logits
only at the positions that predict an action token (``logits_to_keep``), so a 2,000-token
episode with 200 action tokens costs 200 rows of the 49k-wide vocabulary, not 2,000: that keeps
a CPU run of SmolLM2 within a few GiB.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from sparring.envs.core import Episode

__all__ = ["Sequence", "action_logprobs", "action_scores", "bucket", "to_sequence"]


@dataclass
class Sequence:
    """One episode ready for the loss: ids, the positions of its action tokens and their per-token data."""

    input_ids: torch.Tensor
    """[T] the episode's whole buffer."""
    targets: torch.Tensor
    """[N] indices t of the action tokens (predicted from position t − 1)."""
    behaviour_logprobs: torch.Tensor
    """[N] the generator's logprobs of those tokens when it sampled them."""
    advantages: torch.Tensor
    """[N] advantage of each action token."""
    weight: float = 1.0
    """Loss weight of this episode's tokens (per-role weights)."""

    @property
    def tokens(self) -> int:
        return int(self.targets.numel())


def to_sequence(episode: Episode, token_advantages: list[float] | None = None, weight: float = 1.0) -> Sequence:
    """The action tokens of ``episode`` (the first token is never one: a prompt comes first).

    Args:
        episode: A token-exact episode (its ``token_ids``, ``action_mask`` and ``logprobs``).
        token_advantages: One advantage per token of the buffer (0 where unused); None for zeros
            (supervised warm start).
        weight: Loss weight of the episode's tokens.
    """
    mask = torch.tensor(episode.action_mask, dtype=torch.bool)
    mask[0] = False  # nothing predicts the first token
    targets = torch.nonzero(mask).flatten()
    adv = torch.tensor(token_advantages, dtype=torch.float32)[targets] if token_advantages is not None else None
    return Sequence(
        input_ids=torch.tensor(episode.token_ids, dtype=torch.long),
        targets=targets,
        behaviour_logprobs=torch.tensor(episode.logprobs, dtype=torch.float32)[targets],
        advantages=adv if adv is not None else torch.zeros(len(targets)),
        weight=weight,
    )


def action_logprobs(model: torch.nn.Module, seq: Sequence, temperature: float = 1.0) -> torch.Tensor:
    """[N] the model's logprobs of ``seq``'s action tokens (with grad when grad is enabled).

    ``temperature`` scales the logits as the generator did when sampling, so the ratio to the
    behaviour logprobs compares like with like.
    """
    return action_scores(model, seq, temperature, entropy=False)[0]


def action_scores(
    model: torch.nn.Module, seq: Sequence, temperature: float = 1.0, entropy: bool = True
) -> tuple[torch.Tensor, torch.Tensor]:
    """[N] logprobs of ``seq``'s action tokens, as :func:`action_logprobs`, and [N] the policy's entropy there.

    The entropy ``H = -Σ_v p(v) log p(v)`` of the next-token distribution at each action position
    is computed without grad (a metric: it shows the policy collapsing or staying spread), 256
    positions at a time so it adds no [N, vocabulary] temporaries; an empty tensor when
    ``entropy`` is False.
    """
    ids = seq.input_ids.unsqueeze(0).to(_device(model))
    count, length = int(seq.targets.numel()), ids.shape[1]
    positions = (seq.targets - 1).to(ids.device)  # the position whose logits predict each target
    # Padded to a few shapes (see bucket): the padding tokens come after every scored position,
    # so causal attention keeps them out of the logits that are kept.
    padded = ids
    if length:
        padded = torch.cat([ids, ids[:, -1:].expand(1, bucket(length) - length)], dim=1)
    if count:
        positions = torch.cat([positions, positions[-1:].expand(bucket(count) - count)])
    out = model(input_ids=padded, logits_to_keep=positions, use_cache=False)
    logits = out.logits[0, :count].float()
    if temperature and temperature != 1.0:
        logits = logits / temperature
    logprobs = torch.log_softmax(logits, dim=-1)
    spread = torch.empty(0)
    if entropy:
        with torch.no_grad():
            spread = torch.cat([-(part.exp() * part).sum(-1) for part in logprobs.detach().split(256)])
    return logprobs.gather(-1, ids[0, seq.targets.to(ids.device)].unsqueeze(-1)).squeeze(-1), spread


def bucket(n: int) -> int:
    """``n`` rounded up to one of a few sizes: 4 steps of 64 to 256, then 4 to 8 per doubling.

    oneDNN (and ideep above it) keep the primitives they build for every matmul shape they meet,
    with their buffers: on a CPU with AMX-BF16 that is about 16 MiB per sequence length, so a warm
    start over a hundred distinct lengths held 1.4 GiB more after its steps than before them.
    Rounding the length (and the number of scored positions) up costs at most an eighth more
    tokens above 512 and bounds the shapes to 24 up to 2,048.
    """
    step = max(64, (1 << max(0, n - 1).bit_length()) // 16)
    return -(-n // step) * step


def _device(model: torch.nn.Module) -> torch.device:
    return next(model.parameters()).device
