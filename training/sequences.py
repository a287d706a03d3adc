"""Episodes as training sequences, and the policy's logprobs of their action tokens.

An episode's token buffer (prompt, then per turn the sampled ids and the observation's ids) is
fed to the model as one sequence; only the action tokens are scored. The model computes logits
only at the positions that predict an action token (``logits_to_keep``), so a 2,000-token
episode with 200 action tokens costs 200 rows of the 49k-wide vocabulary, not 2,000: that keeps
a CPU run of SmolLM2 within a few GiB.

Several episodes go through the model together (:func:`token_batches` groups them under a token
budget, :func:`batch_scores` scores a group): the rows are right-padded and masked, and the logits
are computed at the columns some row scores, so each row's logprobs are its own forward's.

Episodes of one group share their prompt (the G attempts at one task), and the prompt is most of a
short episode's tokens. With ``share`` (``update_shared_prefix``), the episodes of a pass that share
the tokens before their first scored position go through the model as ONE row: the shared prefix
once, then each episode's own rest, with a 4-D attention mask (each rest sees the prefix and itself,
causally, never another rest) and each token at its own episode's position. Every scored position
sees exactly the tokens its own episode's forward would, so logprobs and gradients are those of one
forward per episode (the prefix's activations take the sum of the gradients of the rests that read
them), for about ``(G - 1) × prefix`` fewer tokens per group.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from sparring.envs.core import Episode

__all__ = [
    "Sequence", "action_logprobs", "action_scores", "batch_scores", "bucket", "can_share", "packed_rows", "to_sequence",
    "token_batches",
]  # fmt: skip


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
    model: torch.nn.Module, seqs: list[Sequence], temperature: float = 1.0, entropy: bool = True, share: bool = True
) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """:func:`action_scores` of every sequence of ``seqs``, from one forward pass over all of them.

    The rows are right-padded to one bucketed length with an attention mask: every pad comes after
    its row's last real token, so under causal attention no scored position sees one, and the mask
    keeps them out of the attention anyway. Positions count from 0 in every row (right padding needs
    no position ids). The logits are computed only at the columns some row scores (``logits_to_keep``
    as a 1-D index), plus unscored ones up to a bucketed count (the output projection meets few
    shapes, as in :func:`action_scores`); the cells no row scores are dropped.

    With ``share``, sequences that share the tokens before their first scored position go as one row
    each (:func:`packed_rows`, module docstring): a 4-D mask and each token's own position.

    Returns:
        Per sequence, in the order given: [N] logprobs of its action tokens (with grad when grad is
        enabled) and [N] entropies (empty when ``entropy`` is False).
    """
    if len(seqs) == 1:
        return [action_scores(model, seqs[0], temperature, entropy)]
    rows = packed_rows(seqs, share and can_share(model))
    if all(len(members) == 1 for _, members in rows):
        return _padded_scores(model, seqs, temperature, entropy)
    return _packed_scores(model, seqs, rows, temperature, entropy)


def _padded_scores(
    model: torch.nn.Module, seqs: list[Sequence], temperature: float, entropy: bool
) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """One row per sequence, right-padded, with a 2-D padding mask (:func:`batch_scores`)."""
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
    cols = _kept_columns(scored, width)
    out = model(
        input_ids=ids.to(device), attention_mask=attention.to(device), logits_to_keep=cols.to(device), use_cache=False
    )
    logits = out.logits[scored[:, cols].to(device)]  # [count, V], row by row, positions ascending
    targets = torch.cat([seq.input_ids[seq.targets] for seq in seqs]).to(device)
    return _scores(logits, targets, [seq.tokens for seq in seqs], temperature, entropy)


def _packed_scores(
    model: torch.nn.Module, seqs: list[Sequence], rows: list[tuple[int, list[int]]], temperature: float, entropy: bool
) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """Rows of :func:`packed_rows`: a shared prefix once, then each member's rest (:func:`batch_scores`).

    The mask takes the form the model's attention takes (:func:`_mask_form`): boolean for SDPA (what
    transformers itself gives SDPA: an additive one of the lowest float is NaN on CUDA's tiled kernels,
    where a tile masked whole has no finite maximum), additive for the eager attention (which adds a
    boolean one as 0 and 1). A pad sees only itself, so no attention row is empty.
    """
    device = _device(model)
    width = bucket(max(_packed_length([seqs[i] for i in members]) for _, members in rows))
    ids = torch.zeros(len(rows), width, dtype=torch.long)
    positions = torch.zeros(len(rows), width, dtype=torch.long)
    allowed = torch.zeros(len(rows), width, width, dtype=torch.bool)
    scored = torch.zeros(len(rows), width, dtype=torch.bool)
    order: list[int] = []  # the sequences in the order their scored cells come, row by row
    for row, (prefix, members) in enumerate(rows):
        ids[row, :prefix] = seqs[members[0]].input_ids[:prefix]
        positions[row, :prefix] = torch.arange(prefix)
        allowed[row, :prefix, :prefix] = torch.ones(prefix, prefix, dtype=torch.bool).tril()
        at = prefix
        for i in members:
            seq = seqs[i]
            n = len(seq.input_ids) - prefix
            ids[row, at : at + n] = seq.input_ids[prefix:]
            positions[row, at : at + n] = torch.arange(prefix, prefix + n)
            allowed[row, at : at + n, :prefix] = True  # the shared prefix
            allowed[row, at : at + n, at : at + n] = torch.ones(n, n, dtype=torch.bool).tril()  # its own rest
            scored[row, seq.targets - 1 - prefix + at] = True
            order.append(i)
            at += n
        ids[row, at:] = ids[row, at - 1]
        pads = torch.arange(at, width)
        allowed[row, pads, pads] = True
    mask: torch.Tensor = allowed.unsqueeze(1)
    if _mask_form(model) == "additive":
        mask = torch.zeros(mask.shape).masked_fill_(~mask, torch.finfo(torch.float32).min)
    cols = _kept_columns(scored, width)
    out = model(
        input_ids=ids.to(device), attention_mask=mask.to(device), position_ids=positions.to(device),
        logits_to_keep=cols.to(device), use_cache=False,
    )  # fmt: skip
    logits = out.logits[scored[:, cols].to(device)]
    targets = torch.cat([seqs[i].input_ids[seqs[i].targets] for i in order]).to(device)
    found = _scores(logits, targets, [seqs[i].tokens for i in order], temperature, entropy)
    by_index = dict(zip(order, found, strict=True))
    return [by_index[i] for i in range(len(seqs))]


def can_share(model: torch.nn.Module) -> bool:
    """Whether ``model``'s attention takes the 4-D mask of shared-prefix rows (:func:`batch_scores`)."""
    return _mask_form(model) is not None


def _mask_form(model: torch.nn.Module) -> str | None:
    """The 4-D mask ``model``'s attention takes: ``"bool"`` (SDPA, transformers' default), ``"additive"``
    (eager), or None for one that takes none (flash attention: :func:`batch_scores` pads rows instead)."""
    implementation = getattr(getattr(model, "config", None), "_attn_implementation", None) or "sdpa"
    return {"sdpa": "bool", "eager": "additive"}.get(implementation)


def _kept_columns(scored: torch.Tensor, width: int) -> torch.Tensor:
    """The columns any row scores, given as a 1-D index (the one form of ``logits_to_keep`` every supported
    transformers release takes; 5.19 has no [B, T] boolean mask), padded with unscored columns to a
    bucketed count so the output projection meets few shapes; the logits of unscored cells are dropped."""
    used = scored.any(0)
    cols = torch.nonzero(used).flatten()
    extra = min(bucket(len(cols)), width) - len(cols)
    if extra > 0:
        cols = torch.sort(torch.cat([cols, torch.nonzero(~used).flatten()[:extra]])).values
    return cols


def _scores(
    logits: torch.Tensor, targets: torch.Tensor, sizes: list[int], temperature: float, entropy: bool
) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """Per sequence (``sizes`` cells each, in order) its targets' logprobs and, with ``entropy``, the entropies."""
    logits = logits.float()
    if temperature and temperature != 1.0:
        logits = logits / temperature
    logprobs = torch.log_softmax(logits, dim=-1)
    taken = logprobs.gather(-1, targets.unsqueeze(-1)).squeeze(-1)
    if not entropy:
        return [(lp, torch.empty(0)) for lp in taken.split(sizes)]
    with torch.no_grad():
        spread = torch.cat([-(part.exp() * part).sum(-1) for part in logprobs.detach().split(256)])
    return list(zip(taken.split(sizes), spread.split(sizes), strict=True))


#: The fewest shared tokens that make episodes share a row (below, each goes as a row of its own).
MIN_SHARED = 32


def _prefix(seq: Sequence) -> int:
    """How many tokens come before ``seq``'s first scored position: what attempts at one task can share."""
    return int(seq.targets[0]) - 1


def _shared_key(seq: Sequence) -> bytes | None:
    """The tokens before ``seq``'s first scored position, as bytes (None when fewer than :data:`MIN_SHARED`)."""
    if not seq.tokens or _prefix(seq) < MIN_SHARED:
        return None
    return seq.input_ids[: _prefix(seq)].numpy().tobytes()


def packed_rows(seqs: list[Sequence], share: bool = True) -> list[tuple[int, list[int]]]:
    """How :func:`batch_scores` lays ``seqs`` out: per row, the length of the prefix its sequences share (0 for a
    row of one) and their indices into ``seqs``, rows in the order of their first sequence.

    Sequences share a row when the tokens before their first scored position are the same (at least
    :data:`MIN_SHARED` of them): the prompt of a group's attempts at one task, but for its last token,
    whose logits score each attempt's first action token.
    """
    rows: list[tuple[int, list[int]]] = []
    where: dict[bytes, int] = {}
    for i, seq in enumerate(seqs):
        key = _shared_key(seq) if share else None
        if key is not None and key in where:
            rows[where[key]][1].append(i)
            continue
        if key is not None:
            where[key] = len(rows)
        rows.append((_prefix(seq) if key is not None else 0, [i]))
    return [(prefix if len(members) > 1 else 0, members) for prefix, members in rows]


def _packed_length(members: list[Sequence]) -> int:
    """Tokens of the row that ``members`` (sequences of one shared prefix, or one sequence) make: the prefix once."""
    prefix = _prefix(members[0]) if len(members) > 1 else 0
    return prefix + sum(len(s.input_ids) - prefix for s in members)


def token_batches(seqs: list[Sequence], budget: int, share: bool = True) -> list[list[Sequence]]:
    """``seqs`` grouped for :func:`batch_scores`: each group's padded size (rows × bucketed longest row) in ``budget``.

    Longest first, so a group's rows are of similar lengths and pad little; a sequence longer than
    the budget is a group of its own. With ``share``, the sequences that share a prefix come one after
    the other (the family whose packed row is longest first) and count as one row of the prefix and
    their rests (:func:`packed_rows`). Sequences without action tokens are left out.

    Example:
        >>> seqs = [Sequence(torch.zeros(n, dtype=torch.long), torch.arange(1, 3), torch.zeros(2), torch.zeros(2))
        ...         for n in (60, 100, 70, 300)]
        >>> [[len(s.input_ids) for s in group] for group in token_batches(seqs, 512)]
        [[300], [100, 70, 60]]
    """
    families: dict[Any, list[Sequence]] = {}
    keys: dict[int, Any] = {}
    for seq in seqs:
        if not seq.tokens:
            continue
        key = _shared_key(seq) if share else None
        keys[id(seq)] = key if key is not None else id(seq)
        families.setdefault(keys[id(seq)], []).append(seq)
    ordered = [sorted(family, key=lambda s: -len(s.input_ids)) for family in families.values()]
    ordered.sort(key=lambda family: -_packed_length(family))
    groups: list[list[Sequence]] = []
    rows: dict[Any, int] = {}  # the current group's rows: their lengths by key
    for seq in (s for family in ordered for s in family):
        key, length = keys[id(seq)], len(seq.input_ids)
        if key in rows:  # a second sequence of a family joins its row: its rest only
            length = rows[key] + length - _prefix(seq)
        widest = max([length, *rows.values()])
        if groups and (len(rows) + (key not in rows)) * bucket(widest) <= budget:
            groups[-1].append(seq)
        else:
            groups.append([seq])
            rows = {}
            length = len(seq.input_ids)
        rows[key] = length
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
