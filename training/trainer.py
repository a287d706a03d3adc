"""The co-trainer: one policy plays proposer and solver in every game and learns from all of them.

Per iteration and game (:mod:`sparring.training.game`): play, assign rewards, then

1. credit (:mod:`sparring.training.credit`): outcome advantages per group (never mixing domains or
   roles), turn advantages from the turn rewards, ``A = A^O + λ·A^T`` on every action token;
2. optionally drop groups whose rewards are all equal (no signal);
3. PPO-clip updates (:mod:`sparring.training.loss`) over the iteration's episodes, a few episodes per
   forward pass (right-padded micro-batches of at most ``update_tokens_per_batch`` tokens) that scores only
   their action tokens (:mod:`sparring.training.sequences`), gradients accumulated to a token-level mean
   over the mini-batch of every rank;
4. the generator samples from the new weights from then on (``update_weights``: vLLM's engine reloads
   its copy of the weights; the HF reference, which shares the trainer's model, drops its cache).

The generator runs in the trainer's process: vLLM's engine with its own copy of the weights (``backend: vllm``,
the default), or the HF reference sharing the policy's model (under ``distributed: fsdp`` it holds whole weights
gathered from the sharded policy, :mod:`sparring.training.fsdp`); ``backend: server`` samples from another process.
The trainer runs on accelerate from the start, so ``torchrun`` or ``accelerate launch`` with a plain multi-process
config (``scripts/accelerate/``; one env pool and generator per rank) needs no other code: each rank plays its own
episodes, the ranks' gradients are summed into one token-level mean, metrics are reduced by name. The run's
config, not the launcher's, decides sharding and precision (:func:`check_launcher`). Ranks hold different amounts
of work; :mod:`sparring.training.ranks` keeps their collectives in step.
"""

from __future__ import annotations

import contextlib
import copy
import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from sparring import SparringError
from sparring.envs.core import Episode
from sparring.training.backends import build_generator
from sparring.training.config import TrainConfig
from sparring.training.credit import outcome_advantages, token_advantages, turn_advantages, zero_variance_groups
from sparring.training.fsdp import IDLE, GatheredWeights, idle_passes, is_sharded, replica, shard
from sparring.training.game import GAMES, ReplayBuffer, Rollout, play_iteration
from sparring.training.loss import LossConfig, policy_loss
from sparring.training.memory import release
from sparring.training.pipeline import AsyncRollouts, fresh_enough
from sparring.training.ranks import all_max, all_sum, mean_by_key, sum_gradients
from sparring.training.sequences import Sequence, batch_scores, can_share, to_sequence, token_batches

__all__ = ["Trainer", "UpdateStats", "check_launcher", "mini_batches", "training_device", "weights_dtype"]


@dataclass
class UpdateStats:
    """What one update did."""

    loss: float = 0.0
    tokens: int = 0
    sequences: int = 0
    seconds: float = 0.0
    dropped_zero_variance: int = 0
    extra: dict[str, float] | None = None


class Trainer:
    """Co-trains one policy on the games of ``config``; see the module docstring.

    Args:
        config: The run's settings.
        model: An already loaded causal LM to train (tests pass a tiny one), moved to the run's device; None loads
            ``config.model``.
        tokenizer: Its tokenizer, with ``model``.
    """

    def __init__(self, config: TrainConfig, model: Any = None, tokenizer: Any = None):
        """Load the policy, build the generator on the same weights, the optimizer and the run folder."""
        from accelerate import Accelerator
        from accelerate.utils import set_seed

        from sparring.agents.model import load_model, load_tokenizer

        self.config = config
        device = training_device(config.device)
        check_launcher(config, device)
        if config.threads:
            torch.set_num_threads(config.threads)
        self.accelerator = Accelerator(cpu=device == "cpu", mixed_precision="bf16" if config.bf16 else "no")
        self.rank = self.accelerator.process_index
        set_seed(config.seed + self.rank)
        self.out = Path(config.out)
        self.out.mkdir(parents=True, exist_ok=True)
        name = None if config.model in ("", "default") else config.model
        self.tokenizer = tokenizer if tokenizer is not None else load_tokenizer(name)
        dtype = weights_dtype(config.dtype, device)
        # a model passed in goes where a loaded one would (the generator is built on it before any wrapper moves it)
        loaded = (
            model.to(self.accelerator.device)
            if model is not None
            else load_model(name, device=str(self.accelerator.device), dtype=dtype)
        )
        self.policy_model: Any  # the HF model (sharded under fsdp), whichever wrapper ``self.model`` is
        self.sampled_model: Any  # the model the generator was built on: the policy, or a copy it samples from
        sharded = config.distributed == "fsdp" and self.accelerator.num_processes > 1
        # The HF generator samples from a copy of its own where it must not see the trainer's weights: sharded
        # ones, or ones a concurrent update is changing (async_rollouts); sync_generator pushes them.
        self.generator_copy = config.backend == "hf" and (sharded or config.async_rollouts)
        trained = copy.deepcopy(loaded) if self.generator_copy else loaded
        if sharded:
            # The generator samples from whole weights (gathered after every update, sync_generator): the HF
            # backend from its copy, vLLM from its engine's (loaded before the policy is sharded).
            self.sampled_model = loaded
            self.generator = build_generator(config, loaded, self.tokenizer, str(self.accelerator.device))
            self.model = self.policy_model = shard(trained)
            self.optimizer = self.accelerator.prepare(_optimizer(config, trained.parameters()))
        else:
            self.optimizer = _optimizer(config, trained.parameters())
            self.model, self.optimizer = self.accelerator.prepare(trained, self.optimizer)
            self.policy_model = self.accelerator.unwrap_model(self.model)
            self.sampled_model = loaded if self.generator_copy else self.policy_model
            self.generator = build_generator(config, self.sampled_model, self.tokenizer, str(self.accelerator.device))
        self.loss_config = LossConfig(config.clip_low, config.clip_high, config.kl_coef, config.tis_cap)
        # a group's shared prompt once per row where the attention takes the 4-D mask (update_shared_prefix)
        self.share_prefix = config.update_shared_prefix and can_share(self.policy_model)
        self.reference: torch.nn.Module | None = None
        self.rng = np.random.default_rng(config.seed + 1000 * self.rank)
        self.replay = {name: ReplayBuffer(config.replay_clear_every) for name in config.games}
        self.iteration = 0
        self.warm_started = False
        self.seconds_before = 0.0  # the run's time in earlier processes (a resumed run's checkpoint)
        self.longest_iteration = 0.0
        self.weight_sync_seconds = 0.0  # the last sync_generator's (the weight push into vLLM or a server)
        self._started = time.perf_counter()
        self.pipeline = AsyncRollouts(self) if config.async_rollouts else None

    def elapsed(self) -> float:
        """Seconds this run has taken so far, the parts before a resume included."""
        return self.seconds_before + time.perf_counter() - self._started

    # ------------------------------------------------------------------------------- updates

    @contextlib.contextmanager
    def _training(self, concurrent: bool = False) -> Any:
        """Autograd-capable layers for the update, then the generator moves to the new weights.

        Args:
            concurrent: The generator is playing meanwhile (``async_rollouts``): it neither sleeps nor takes
                the new weights here; :class:`~sparring.training.pipeline.AsyncRollouts` pushes them once
                its play is done.
        """
        from sparring.agents.model import set_activation_checkpointing

        checkpointing = self.config.gradient_checkpointing and set_activation_checkpointing(self.policy_model, True)
        # A colocated vLLM engine on CUDA sleeps through the update: the GPU memory is the trainer's meanwhile.
        if not concurrent:
            getattr(self.generator, "sleep", lambda: None)()
        self.model.train()
        try:
            yield
        finally:
            self.model.eval()
            if checkpointing:
                set_activation_checkpointing(self.policy_model, False)
            if not concurrent:
                getattr(self.generator, "wake_up", lambda: None)()
                self.sync_generator()

    def sync_generator(self) -> None:
        """The generator samples from the policy's current weights from now on.

        HF: nothing to drop (a copy of its own, under async_rollouts, loads the policy's weights); vLLM: reloads
        its copy. A sharded policy's whole weights are gathered for it first (every rank calls this). Its seconds
        are kept in ``weight_sync_seconds``.
        """
        t0 = time.perf_counter()
        if is_sharded(self.policy_model):
            # the engine's reload, the HF copy's load, or the server's pusher writing a layer at a time (the other
            # ranks reading along) reads each weight once, in order, on every rank: gathered one at a time as read
            self.generator.update_weights(GatheredWeights(self.policy_model))
        else:
            self.generator.update_weights(self.policy_model.state_dict() if self.generator_copy else None)
        self.weight_sync_seconds = time.perf_counter() - t0

    def _autocast(self, bf16: bool) -> Any:
        """A bfloat16 autocast context when ``bf16`` (with ``config.bf16`` accelerate autocasts every pass already)."""
        if bf16 and not self.config.bf16:
            return torch.autocast(self.accelerator.device.type, dtype=torch.bfloat16)
        return contextlib.nullcontext()

    def _set_lr(self, lr: float) -> None:
        for group in self.optimizer.param_groups:
            group["lr"] = lr

    def _step(self, sequences: list[Sequence], score: Any) -> tuple[float, int]:
        """One optimizer step over this rank's ``sequences``: ``score(batch, token_count)``, a micro-batch's loss share.

        The micro-batches are :func:`~sparring.training.sequences.token_batches` of ``update_tokens_per_batch``
        tokens; each is one forward and one backward pass.

        The token count is every rank's together and the ranks' gradients are summed, so the step follows
        the token-level mean over all ranks' tokens (a rank with more tokens weighs more). Every rank calls
        this the same number of times, with or without sequences; the forwards run on the unwrapped model,
        so no rank waits for another's forward (see :mod:`sparring.training.ranks`).

        Returns:
            The loss over every rank's tokens and this rank's token count.
        """
        local_tokens = sum(s.tokens for s in sequences)
        device = self.accelerator.device
        total_tokens = int(all_sum([float(local_tokens)], device)[0])
        local_loss = 0.0
        self.optimizer.zero_grad(set_to_none=True)
        batches = token_batches(sequences, self.config.update_tokens_per_batch, self.share_prefix)
        # fsdp (or the KL reference sharded under ddp): each pass meets the other ranks, so all make as many as the
        # busiest (counted before any pass)
        for batch in batches + [[IDLE]] * idle_passes(len(batches), self.policy_model, self.reference):
            loss = score(batch, total_tokens)
            if batch[0] is IDLE:
                loss = loss * 0
            self.accelerator.backward(loss)
            local_loss += float(loss.detach())
        sum_gradients(self.policy_model.parameters())
        total_loss = all_sum([local_loss], device)[0]
        if self.config.max_grad_norm > 0:
            self.accelerator.clip_grad_norm_(self.model.parameters(), self.config.max_grad_norm)
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)  # the gradients (the model's size again) are not kept for play
        release()  # a long sequence's activations and gradients go back to the system, not to a free list
        return total_loss, local_tokens

    def supervised(self, episodes: list[Episode], epochs: int, lr: float) -> UpdateStats:
        """The warm start's update: mean negative log-likelihood of the action tokens (token-level)."""
        sequences = [to_sequence(ep) for ep in episodes if any(ep.action_mask)]
        stats = UpdateStats(extra={})
        t0 = time.perf_counter()
        self._set_lr(lr)
        batch, steps = max(1, self.config.warm_start_batch), 0
        autocast = self._autocast(self.config.warm_start_bf16)
        with self._training():
            for epoch in range(epochs):
                order = self.rng.permutation(len(sequences))
                chunks = _chunks([sequences[i] for i in order], batch)
                # Ranks hold different numbers of demonstrations: all take the most steps any takes.
                chunks += [[] for _ in range(all_max(len(chunks), self.accelerator.device) - len(chunks))]
                for chunk in chunks:

                    def nll(batch: list[Sequence], count: int) -> torch.Tensor:
                        with autocast:
                            scores = batch_scores(self.policy_model, batch, entropy=False, share=self.share_prefix)
                        return -torch.cat([logp for logp, _ in scores]).sum() / max(1, count)

                    loss, tokens = self._step(chunk, nll)
                    stats.loss, stats.tokens = loss, stats.tokens + tokens
                    steps += 1
                assert stats.extra is not None
                stats.extra[f"epoch{epoch}_nll"] = stats.loss
        self._set_lr(self.config.lr)
        assert stats.extra is not None
        stats.extra["optimizer_steps"] = steps
        stats.sequences, stats.seconds = len(sequences), time.perf_counter() - t0
        return stats

    def credit(self, rollouts: list[Rollout]) -> tuple[list[Rollout], list[np.ndarray], int]:
        """Token advantages of ``rollouts``: masked ones left out first (of the loss and of their groups'
        baselines), then zero-variance groups when configured."""
        cfg = self.config
        dropped = 0
        rollouts = [r for r in rollouts if not r.masked]  # the game decided which have no reward
        if cfg.drop_zero_variance and rollouts:
            flat = zero_variance_groups([r.reward for r in rollouts], [r.group for r in rollouts])
            flat -= {r.group for r in rollouts if any(r.turn_rewards)}  # equal outcomes, yet turns that differ
            dropped = len(flat)
            rollouts = [r for r in rollouts if r.group not in flat]
        rollouts = [r for r in rollouts if r.episode.token_ids]
        if not rollouts:
            return [], [], dropped
        groups = [r.group for r in rollouts]
        a_out = outcome_advantages([r.reward for r in rollouts], groups, std_scale=cfg.std_scale)
        a_turn = turn_advantages([r.turn_rewards for r in rollouts], groups, gamma=cfg.gamma, std_scale=cfg.std_scale)
        tokens = token_advantages(
            [r.episode.token_turn for r in rollouts], [r.episode.action_mask for r in rollouts], a_out, a_turn, cfg.lam
        )
        return rollouts, tokens, dropped

    def reinforce(self, rollouts: list[Rollout]) -> UpdateStats:
        """PPO-clip updates on one iteration's rollouts (with ``async_rollouts``, while the next ones are played)."""
        if self.pipeline is not None:
            return self.pipeline.update(rollouts)
        return self.update(rollouts, self.rng)

    def update(self, rollouts: list[Rollout], rng: np.random.Generator, concurrent: bool = False) -> UpdateStats:
        """PPO-clip updates on ``rollouts``, mini-batches drawn with ``rng``; see :meth:`_training` for ``concurrent``.

        Groups holding an episode more than ``max_staleness`` weights versions older than the weights being
        stepped are dropped first (the generator holds the policy's weights at every update's start).
        """
        cfg = self.config
        t0 = time.perf_counter()
        rollouts, staleness = fresh_enough(rollouts, self.generator.weights_version, cfg.max_staleness)
        kept, advantages, dropped = self.credit(rollouts)
        weight = {"proposer": cfg.proposer_weight, "solver": cfg.solver_weight}
        sequences = [
            to_sequence(r.episode, list(a), weight.get(r.role, 1.0)) for r, a in zip(kept, advantages, strict=True)
        ]
        extra: dict[str, float] = dict(staleness)
        stats = UpdateStats(dropped_zero_variance=dropped, sequences=len(sequences), extra=extra)
        if sequences:  # the token advantages A^O + λ·A^T on the action tokens trained on
            adv = torch.cat([s.advantages for s in sequences])
            extra |= {
                "adv_mean": float(adv.mean()),
                "adv_std": float(adv.std()) if adv.numel() > 1 else 0.0,
                "adv_abs_max": float(adv.abs().max()) if adv.numel() else 0.0,
                "adv_zero_frac": float((adv == 0).float().mean()) if adv.numel() else 0.0,
            }
        temperature = cfg.temperature if cfg.temperature > 0 else 1.0
        with self._training(concurrent):
            parts = mini_batches(len(sequences), cfg.updates_per_iteration, rng)
            # The first mini-batch's are its own trained pass's (detached) unless dropout makes that pass noisy.
            needed = parts[1:] if not _has_dropout(self.policy_model) else parts
            old = self.old_logprobs([sequences[int(i)] for part in needed for i in part], temperature)
            for part in parts:
                chunk = [sequences[int(i)] for i in part]
                collected: list[dict[str, float]] = []

                def ppo(batch: list[Sequence], count: int, collected: list = collected) -> torch.Tensor:
                    with self._autocast(cfg.update_bf16):
                        scores = batch_scores(self.policy_model, batch, temperature, share=self.share_prefix)
                    # The micro-batch's action tokens side by side, [1, N]: the loss sums over tokens, so one row
                    # holds what one row per sequence would, with no padding to mask.
                    logp = torch.cat([lp for lp, _ in scores]).unsqueeze(0)
                    # the logprobs before this iteration's first step
                    before = torch.cat([old.get(id(s), lp.detach()) for s, (lp, _) in zip(batch, scores, strict=True)])
                    ref = None
                    if self.reference is not None:  # in the trained pass's precision: the KL starts at 0
                        with torch.no_grad(), self._autocast(cfg.update_bf16):
                            scores_ref = batch_scores(self.reference, batch, temperature, False, self.share_prefix)
                            ref = torch.cat([lp for lp, _ in scores_ref])
                        ref = ref.unsqueeze(0)
                    device = logp.device
                    loss, info = policy_loss(
                        logp,
                        before.unsqueeze(0),
                        torch.cat([s.behaviour_logprobs for s in batch]).unsqueeze(0).to(device),
                        torch.cat([s.advantages for s in batch]).unsqueeze(0).to(device),
                        torch.ones_like(logp, dtype=torch.bool),
                        weights=torch.cat([torch.full((s.tokens,), s.weight) for s in batch]).unsqueeze(0).to(device),
                        ref_logprobs=ref,
                        config=self.loss_config,
                        token_count=count,
                    )
                    entropy = torch.cat([e for _, e in scores])
                    collected.append(info | {"weight": float(logp.numel()), "entropy": float(entropy.mean())})
                    return loss

                loss, tokens = self._step(chunk, ppo)
                stats.loss += loss
                stats.tokens += tokens
                assert stats.extra is not None
                for key in ("clip_frac_low", "clip_frac_high", "ratio_mean", "ratio_dev", "kl", "tis_mean", "entropy"):
                    values = [(c.get(key, 0.0), c["weight"]) for c in collected]
                    total = sum(w for _, w in values)
                    if total:
                        stats.extra[key] = sum(v * w for v, w in values) / total
                if collected:  # the largest importance weight of the step's tokens, before the cap
                    stats.extra["tis_max"] = max(stats.extra.get("tis_max", 0.0), *(c["tis_max"] for c in collected))
        extra["weight_sync_seconds"] = self.weight_sync_seconds  # the push after this update (in stats.seconds)
        stats.seconds = time.perf_counter() - t0
        return stats

    def old_logprobs(self, sequences: list[Sequence], temperature: float) -> dict[int, torch.Tensor]:
        """The logprobs of ``sequences`` before this iteration's first step, by ``id``: the PPO ratio's denominator.

        Computed with the model in eval mode (dropout off, as the generator sampled), train mode restored after.
        """
        batches = token_batches(sequences, self.config.update_tokens_per_batch, self.share_prefix)
        idle = idle_passes(len(batches), self.policy_model)
        if not batches and not idle:
            return {}
        was_training = self.model.training
        self.model.eval()
        try:
            old: dict[int, torch.Tensor] = {}
            with torch.no_grad(), self._autocast(self.config.update_bf16):
                for batch in batches + [[IDLE]] * idle:
                    scores = batch_scores(self.policy_model, batch, temperature, entropy=False, share=self.share_prefix)
                    if batch[0] is not IDLE:
                        old |= {id(seq): logp for seq, (logp, _) in zip(batch, scores, strict=True)}
            return old
        finally:
            self.model.train(was_training)

    # ------------------------------------------------------------------------------- the run

    def play(self, game_name: str, iteration: int | None = None) -> tuple[list[Rollout], dict[str, float]]:
        """One iteration (by default the current one) of one game with the generator's weights.

        With ``async_rollouts`` the rollouts played during the previous update come back when they are this
        game's and iteration's (their stats then hold ``seconds_play``, the time their play took).
        """
        if iteration is None and self.pipeline is not None:
            return self.pipeline.take(game_name)
        result = play_iteration(
            GAMES[game_name], self.generator, self.config, self.iteration if iteration is None else iteration,
            self.rng, self.replay[game_name],
        )  # fmt: skip
        self.generation_done()
        return result.rollouts, result.stats

    def generation_done(self) -> None:
        """This rank generates no more until the next play: a generator whose engine several ranks run as one
        (``vllm_tensor_parallel_size``) serves the other ranks' calls until they are done too. Every rank calls
        this at the same points."""
        getattr(self.generator, "drain", lambda: None)()

    def freeze_reference(self, load_start: Callable[[torch.nn.Module], None] | None = None) -> None:
        """Keep a frozen copy of the policy at the start of self-play as the KL reference (only when the KL is on).

        Args:
            load_start: Loads the weights of the policy at the start of self-play (the warm start's checkpoint)
                into the copy, whatever the policy has become since (a resumed run). None: the policy as it is.
        """
        if self.config.kl_coef > 0 and self.reference is None:
            # Several ranks: sharded across them (under ddp too, where the policy is whole on each), so no rank
            # holds a whole second copy; one process keeps a whole one.
            if is_sharded(self.policy_model) or self.accelerator.num_processes > 1:
                self.reference = replica(self.policy_model)
                if load_start is not None:
                    load_start(self.reference)
                return
            self.reference = copy.deepcopy(self.policy_model).eval()
            if load_start is not None:
                load_start(self.reference)
            for p in self.reference.parameters():
                p.requires_grad_(False)

    def reduce(self, values: dict[str, float]) -> dict[str, float]:
        """Each metric's mean over the ranks that logged it (the same on every rank)."""
        return mean_by_key(values, self.accelerator.device)


def training_device(setting: str) -> str:
    """The device type for config key ``device``: ``auto`` is ``cuda`` when there is one.

    Raises:
        SparringError: ``cuda`` is asked for and no CUDA device is visible (never a silent CPU run).
    """
    if setting == "cuda" and not torch.cuda.is_available():
        raise SparringError(
            "device=cuda but torch sees no CUDA device (a CPU build of torch, no driver, or CUDA_VISIBLE_DEVICES "
            "empty); install a CUDA build of torch on a GPU machine, or set device=cpu."
        )
    if setting == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    return setting


def check_launcher(config: TrainConfig, device: str, environ: dict[str, str] | None = None) -> None:
    """Refuse what ``accelerate launch`` asked of accelerate that this trainer would not do.

    The launcher passes its config (``accelerate config``'s default file, or ``--config_file``) to the
    processes as ``ACCELERATE_*`` variables, which ``Accelerator()`` reads. The trainer shards the policy
    itself (``distributed``: its FSDP2 sums the ranks' gradients, :mod:`sparring.training.fsdp`), runs its
    passes on the unwrapped model and takes its precision from ``bf16``; accelerate's FSDP, DeepSpeed or
    Megatron plugins, its torch.compile, fp16 or bf16 against the run's ``bf16`` and its CPU flag against
    ``device=cuda`` would each wrap the model differently or be dropped without a word, and its gradient
    accumulation steps would divide every loss the trainer backpropagates. ``mixed_precision:
    'no'`` passes: it is also what the launcher sends when its config names none.

    Raises:
        SparringError: One sentence naming the launcher's setting and the run's key to use instead.
    """
    env = os.environ if environ is None else environ

    def on(name: str) -> bool:  # the spellings accelerate's own flag parsing takes as true
        return env.get(name, "").strip().lower() in ("1", "true", "t", "yes", "y", "on")

    if config.vllm_tensor_parallel_size > 1:  # before minutes of loading: the engines' groups must divide the ranks
        from sparring.agents.vllm_backend import check_group_size

        check_group_size(config.vllm_tensor_parallel_size, int(env.get("WORLD_SIZE") or 1))
    use = "scripts/accelerate/one-node.yaml or multi-node.yaml"
    for name, plugin, instead in (
        ("ACCELERATE_USE_FSDP", "FSDP", "set distributed=fsdp (the trainer shards the policy itself)"),
        ("ACCELERATE_USE_DEEPSPEED", "DeepSpeed", "set distributed=fsdp to shard the policy"),
        ("ACCELERATE_USE_MEGATRON_LM", "Megatron-LM", "set distributed=fsdp to shard the policy"),
    ):
        if on(name):
            raise SparringError(
                f"accelerate launch was configured for {plugin}, which this trainer does not use; launch with "
                f"distributed_type MULTI_GPU ({use}) and {instead}."
            )
    precision = env.get("ACCELERATE_MIXED_PRECISION", "no").lower()
    if precision not in ("no", "bf16") or (precision == "bf16" and not config.bf16):
        raise SparringError(
            f"accelerate launch asks for mixed_precision {precision} but the run's bf16 is {config.bf16}; the run's "
            "config decides the precision: set mixed_precision 'no' in the accelerate config (and bf16=true for "
            "bfloat16 autocast; fp16 and fp8 are not supported)."
        )
    dynamo = env.get("ACCELERATE_DYNAMO_BACKEND", "no").lower()
    if dynamo not in ("no", ""):
        raise SparringError(
            f"accelerate launch asks for torch.compile (dynamo_backend {dynamo}), which this trainer's passes do not "
            "use; set dynamo_backend 'no' in the accelerate config."
        )
    steps = env.get("ACCELERATE_GRADIENT_ACCUMULATION_STEPS", "1").strip() or "1"
    if steps != "1":
        raise SparringError(
            f"accelerate launch asks for gradient_accumulation_steps {steps}, which would divide every loss this "
            "trainer backpropagates; leave it at 1 (each optimizer step already takes its whole mini-batch, and "
            "updates_per_iteration sets how many steps an iteration takes)."
        )
    if device == "cuda" and on("ACCELERATE_USE_CPU"):
        raise SparringError(
            "accelerate launch was told to run on CPU (--cpu or use_cpu) but the run's device is cuda; drop the "
            "launcher's CPU setting, or set device=cpu."
        )


def weights_dtype(setting: str, device: str = "cpu") -> str:
    """The weights' torch dtype name for config key ``dtype`` on ``device``: ``auto`` is bfloat16 on a GPU that has it.

    On CPU ``auto`` stays float32: the CPU runs were measured in float32, and bfloat16 weights without a
    float32 copy lose small updates.

    Example:
        >>> weights_dtype("float32")
        'float32'
    """
    if setting != "auto":
        return setting
    return "bfloat16" if device == "cuda" and torch.cuda.is_bf16_supported() else "float32"


def _optimizer(config: TrainConfig, parameters: Any) -> torch.optim.Optimizer:
    """The optimizer ``config.optimizer`` names, at ``config.lr`` (the warm start sets its own rate)."""
    if config.optimizer == "adafactor":
        from transformers import Adafactor

        return Adafactor(parameters, lr=config.lr, weight_decay=config.weight_decay, scale_parameter=False,
                         relative_step=False, warmup_init=False)  # fmt: skip
    return torch.optim.AdamW(parameters, lr=config.lr, weight_decay=config.weight_decay)


def mini_batches(count: int, parts: int, rng: np.random.Generator) -> list[np.ndarray]:
    """Indices of ``count`` sequences shuffled with ``rng`` and split into ``parts`` mini-batches.

    Rollouts come in play order (proposers, then solvers, group by group): contiguous slices would make each
    optimizer step one role's or a few groups' alone.

    Example:
        >>> sorted(int(i) for part in mini_batches(5, 2, np.random.default_rng(0)) for i in part)
        [0, 1, 2, 3, 4]
    """
    if parts == 1:  # one step takes them all: nothing to shuffle, and the run's random stream stays as it was
        return [np.arange(count)]
    return np.array_split(rng.permutation(count), parts)


def _has_dropout(model: Any) -> bool:
    """Whether the model drops anything in train mode (a dropout module or a dropout rate in its config)."""
    if any(isinstance(m, torch.nn.Dropout) and m.p > 0 for m in model.modules()):
        return True
    settings: dict[str, Any] = getattr(getattr(model, "config", None), "to_dict", dict)()
    return any(isinstance(v, float) and v > 0 and ("dropout" in k or "pdrop" in k) for k, v in settings.items())


def _chunks(sequences: list[Sequence], size: int) -> list[list[Sequence]]:
    """Consecutive groups of ``size`` sequences (the last may be smaller): one optimizer step each."""
    return [sequences[i : i + size] for i in range(0, len(sequences), size)]
