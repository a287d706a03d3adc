"""Episodes as training sequences, and the policy's logprobs of their action tokens.

An episode's token buffer (prompt, then per turn the sampled ids and the observation's ids) is
fed to the model as one sequence; only the action tokens are scored. The model computes logits
only at the positions that predict an action token (``logits_to_keep``), so a 2,000-token
episode with 200 action tokens costs 200 rows of the 49k-wide vocabulary, not 2,000: that keeps
a CPU run of SmolLM2 within a few GiB.

Several episodes go through the model together (:func:`token_batches` groups them under a token
budget, :func:`batch_scores` scores a group): the rows are right-padded and masked, and the logits
are computed at the columns some row scores, so each row's logprobs are its own forward's.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from sparring.envs.core import Episode

__all__ = ["Sequence", "action_logprobs", "action_scores", "batch_scores", "bucket", "to_sequence", "token_batches"]


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


def batch_scores(
    model: torch.nn.Module, seqs: list[Sequence], temperature: float = 1.0, entropy: bool = True
) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """:func:`action_scores` of every sequence of ``seqs``, from one forward pass over all of them.

    The rows are right-padded to one bucketed length with an attention mask: every pad comes after
    its row's last real token, so under causal attention no scored position sees one, and the mask
    keeps them out of the attention anyway. Positions count from 0 in every row (right padding needs
    no position ids). The logits are computed only at the columns some row scores (``logits_to_keep``
    as a 1-D index), plus unscored ones up to a bucketed count (the output projection meets few
    shapes, as in :func:`action_scores`); the cells no row scores are dropped.

    Returns:
        Per sequence, in the order given: [N] logprobs of its action tokens (with grad when grad is
        enabled) and [N] entropies (empty when ``entropy`` is False).
    """
    if len(seqs) == 1:
        return [action_scores(model, seqs[0], temperature, entropy)]
    device = _device(model)
    width = bucket(max(len(s.input_ids) for s in seqs))
    ids = torch.zeros(len(seqs), width, dtype=torch.long)
    attention = torch.zeros(len(seqs), width, dtype=torch.long)
    scored = torch.zeros(len(seqs), width, dtype=torch.bool)
    for row, seq in enumerate(seqs):
        length = len(seq.input_ids)
        ids[row, :length] = seq.input_ids
        ids[row, length:] = seq.input_ids[-1]  # any id: masked, and after every scored position
        attention[row, :length] = 1
        scored[row, seq.targets - 1] = True  # the position whose logits predict each target
    # The columns any row scores, given as a 1-D index (the one form of ``logits_to_keep`` every supported
    # transformers release takes; 5.19 has no [B, T] boolean mask), padded with unscored columns to a
    # bucketed count so the output projection meets few shapes; the logits of unscored cells are dropped.
    used = scored.any(0)
    cols = torch.nonzero(used).flatten()
    extra = min(bucket(len(cols)), width) - len(cols)
    if extra > 0:
        cols = torch.sort(torch.cat([cols, torch.nonzero(~used).flatten()[:extra]])).values
    out = model(
        input_ids=ids.to(device), attention_mask=attention.to(device), logits_to_keep=cols.to(device), use_cache=False
    )
    logits = out.logits[scored[:, cols].to(device)].float()  # [count, V], row by row, positions ascending
    if temperature and temperature != 1.0:
        logits = logits / temperature
    logprobs = torch.log_softmax(logits, dim=-1)
    targets = torch.cat([seq.input_ids[seq.targets] for seq in seqs]).to(device)
    taken = logprobs.gather(-1, targets.unsqueeze(-1)).squeeze(-1)
    spread = torch.empty(0)
    if entropy:
        with torch.no_grad():
            spread = torch.cat([-(part.exp() * part).sum(-1) for part in logprobs.detach().split(256)])
    sizes = [seq.tokens for seq in seqs]
    spreads = spread.split(sizes) if entropy else [torch.empty(0)] * len(seqs)
    return list(zip(taken.split(sizes), spreads, strict=True))


def token_batches(seqs: list[Sequence], budget: int) -> list[list[Sequence]]:
    """``seqs`` grouped for :func:`batch_scores`: each group's padded size (rows × bucketed longest) within ``budget``.

    Longest first, so a group's rows are of similar lengths and pad little; a sequence longer than
    the budget is a group of its own. Sequences without action tokens are left out.

    Example:
        >>> seqs = [Sequence(torch.zeros(n, dtype=torch.long), torch.arange(1, 3), torch.zeros(2), torch.zeros(2))
        ...         for n in (60, 100, 70, 300)]
        >>> [[len(s.input_ids) for s in group] for group in token_batches(seqs, 512)]
        [[300], [100, 70, 60]]
    """
    groups: list[list[Sequence]] = []
    for seq in sorted((s for s in seqs if s.tokens), key=lambda s: -len(s.input_ids)):
        if groups and (len(groups[-1]) + 1) * bucket(len(groups[-1][0].input_ids)) <= budget:
            groups[-1].append(seq)
        else:
            groups.append([seq])
    return groups


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
