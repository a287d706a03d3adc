"""The episode runner: many envs at once, generation batched across every env waiting for an action.

Env resets and steps run in a thread pool (SWE steps wait on containers, search steps on the
retriever); the main thread generates. The runner works in rounds: every episode waiting for an
action goes into one ``generate`` call, and while that call runs the pool keeps stepping the
others. Episodes that end free their slot for the next one.

Each episode records how it was sampled (settings, the generator's weights version) and the group
its spec names, for the trainer (:class:`~sparring.agents.episodes.Episode`).

Example:
    >>> from sparring.agents import EpisodeRunner, EpisodeSpec, RunnerConfig, make_generator
    >>> runner = EpisodeRunner(make_generator("hf"), RunnerConfig(concurrency=8))
    >>> make = lambda: gym.make("sparring/SearchAnswer-v0")
    >>> episodes = runner.run([EpisodeSpec(make, seed=7, group_id="task-7") for _ in range(8)])  # 8 attempts
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import asdict, dataclass, field, replace
from typing import Any

from sparring.agents.chat import ChatFormat, append_tokens, stop_strings, tool_instructions
from sparring.agents.episodes import Episode
from sparring.agents.generation import ChatGenerator, Generation, Generator, SamplingParams
from sparring.agents.scripted import Agent
from sparring.envs.core import Turn

__all__ = ["AGENT_ERROR", "EpisodeRunner", "EpisodeSpec", "RunStats", "RunnerConfig", "run_episodes"]

#: How :attr:`Episode.error` begins when the agent, not the env, failed the episode (a scripted agent
#: that raised, a policy server that refused this episode's request); any other error is the env's.
AGENT_ERROR = "agent: "


class _AgentError(Exception):
    """A scripted agent raised while starting an episode (its message is the episode's error)."""


def _agent_error(e: Exception) -> str:
    """The episode's error when its agent raised ``e``."""
    return f"{AGENT_ERROR}{type(e).__name__}: {e}"


@dataclass
class RunnerConfig:
    """How the runner plays episodes."""

    concurrency: int = 8
    """Episodes played at once (and the largest generation batch)."""
    sampling: SamplingParams = field(default_factory=lambda: SamplingParams(temperature=1.0, max_new_tokens=128))
    """Sampling of every turn; the tools' closing tags are added to its stop strings."""
    max_turns: int | None = None
    """Turn limit per episode (None: the env's own); lowered on the env itself where it has one."""
    max_seconds: float | None = None
    """Wall-clock limit per episode; an episode over it is truncated before its next turn."""
    max_context_tokens: int = 8192
    """An episode whose buffer would not fit another turn in this many tokens is truncated."""
    env_workers: int = 8
    """Threads stepping envs."""
    batch_wait_seconds: float = 0.05
    """How long generation waits for envs still stepping to join the batch."""
    system_prompt: str | None = None
    """Extra system text for token and chat policies."""
    progress: bool = True
    """Show a rich progress bar on stderr."""


@dataclass
class EpisodeSpec:
    """One episode to play."""

    make_env: Callable[[], Any]
    """Builds the env (called in a worker thread; the runner closes it)."""
    seed: int | None = None
    """Seed of ``reset`` (the task draw)."""
    options: dict[str, Any] | None = None
    """Options of ``reset`` (e.g. ``{"task": ...}``)."""
    env_id: str = ""
    """Name recorded in the episode (default: the env's spec id or class name)."""
    group_id: str | None = None
    """Group recorded in the episode: episodes a trainer compares with each other (e.g. G attempts
    at one task, for a group-relative advantage)."""


@dataclass
class RunStats:
    """What a run cost."""

    wall_seconds: float = 0.0
    generate_seconds: float = 0.0
    env_wait_seconds: float = 0.0
    """Main-thread time blocked on envs with nothing to generate."""
    generated_tokens: int = 0
    generate_calls: int = 0
    episodes: int = 0
    failed: int = 0


@dataclass
class _Live:
    """An episode in flight."""

    index: int
    spec: EpisodeSpec
    episode: Episode
    started: float
    env: Any = None
    observation: str = ""
    info: dict[str, Any] = field(default_factory=dict)
    tools: list[dict[str, Any]] = field(default_factory=list)
    messages: list[dict[str, Any]] = field(default_factory=list)
    agent: Agent | None = None
    action_closed_by: str | None = None


class EpisodeRunner:
    """Plays episodes with a token generator, a chat-only generator or scripted agents.

    Args:
        policy: A :class:`Generator` (token-exact episodes), a :class:`ChatGenerator` (text only,
            for evaluation) or a factory of scripted :class:`Agent`s, called with each episode's spec.
        config: Runner settings.
        on_episode: Called with each episode's index and the episode the moment it ends (before
            the run does), e.g. to record finished episodes of a long run as they come.
    """

    def __init__(
        self,
        policy: Generator | ChatGenerator | Callable[[EpisodeSpec], Agent],
        config: RunnerConfig | None = None,
        on_episode: Callable[[int, Episode], None] | None = None,
    ):
        """Remember the policy; a token policy's chat template is probed once here."""
        self.policy = policy
        self.config = config or RunnerConfig()
        self.on_episode = on_episode
        if self.config.concurrency < 1:
            from sparring import SparringError

            raise SparringError(f"concurrency must be at least 1 episode at once, not {self.config.concurrency}.")
        self.stats = RunStats()
        self.chat: ChatFormat | None = None
        if isinstance(policy, Generator):
            self.chat = ChatFormat(policy.tokenizer, system_prompt=self.config.system_prompt)
            self.mode = "token"
        elif isinstance(policy, ChatGenerator):
            self.mode = "chat"
        elif callable(policy):
            self.mode = "scripted"
        else:
            raise TypeError(f"not a generator or an agent factory: {policy!r}")
        self._round = 0

    # -- public ---------------------------------------------------------------------------

    def run(self, specs: Sequence[EpisodeSpec]) -> list[Episode]:
        """Play every spec; the episodes come back in the order of ``specs``."""
        from rich.console import Console
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

        stats = self.stats = RunStats()
        t0 = time.perf_counter()
        results: list[Episode | None] = [None] * len(specs)
        queue = list(enumerate(specs))
        pending: dict[Future, tuple[str, _Live]] = {}
        ready: list[_Live] = []
        live: list[_Live] = []
        progress = Progress(
            TextColumn("[bold]episodes"),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn("{task.fields[detail]}"),
            TimeElapsedColumn(),
            disable=not self.config.progress,
            transient=False,
            console=Console(stderr=True),  # stdout stays for what commands print (JSON reports)
        )
        bar = progress.add_task("episodes", total=len(specs), detail="")
        pool = ThreadPoolExecutor(max_workers=max(1, self.config.env_workers), thread_name_prefix="sparring-env")
        try:
            with progress:
                while queue or live:
                    while queue and len(live) < self.config.concurrency:
                        index, spec = queue.pop(0)
                        state = _Live(index, spec, _blank_episode(spec), time.perf_counter())
                        live.append(state)
                        pending[pool.submit(self._reset, state)] = ("reset", state)
                    if pending and (not ready or len(ready) < len(live)):
                        # Let envs still stepping join the batch, but never idle with nothing to do.
                        timeout = self.config.batch_wait_seconds if ready else None
                        t_wait = time.perf_counter()
                        done, _ = wait(list(pending), timeout=timeout, return_when=FIRST_COMPLETED)
                        if not ready:
                            stats.env_wait_seconds += time.perf_counter() - t_wait
                        for fut in done:
                            kind, state = pending.pop(fut)
                            finished = self._after_env(kind, state, fut)
                            if finished:
                                live.remove(state)
                                results[state.index] = self._finalize(state)
                                progress.advance(bar)
                            else:
                                ready.append(state)
                        if pending and len(ready) < len(live) and done:
                            continue  # more may arrive within the wait window
                    acted: list[tuple[_Live, str]] = []
                    if ready:
                        batch, ready = ready, []
                        acted = list(zip(batch, self._act(batch), strict=True))
                    for state, action in acted:
                        if state.episode.error:  # its scripted agent raised: it ends, the others go on
                            live.remove(state)
                            results[state.index] = self._finalize(state)
                            progress.advance(bar)
                            continue
                        pending[pool.submit(self._step, state, action)] = ("step", state)
                    detail = (
                        f"live {len(live)} · tokens {stats.generated_tokens} · generate calls {stats.generate_calls}"
                    )
                    progress.update(bar, detail=detail)
        finally:
            for state in live:
                _close(state)
            pool.shutdown(wait=True, cancel_futures=True)
            stats.wall_seconds = time.perf_counter() - t0
        episodes = [ep for ep in results if ep is not None]
        stats.episodes = len(episodes)
        stats.failed = sum(1 for ep in episodes if ep.error)
        return episodes

    # -- env side (worker threads) --------------------------------------------------------

    def _reset(self, state: _Live) -> tuple[str, dict[str, Any]]:
        t0 = time.perf_counter()
        state.env = state.spec.make_env()
        inner = getattr(state.env, "unwrapped", state.env)
        if self.config.max_turns is not None and hasattr(inner, "max_turns"):
            inner.max_turns = min(int(inner.max_turns), self.config.max_turns)
        out = state.env.reset(seed=state.spec.seed, options=state.spec.options)
        state.episode.timings["reset"] = time.perf_counter() - t0
        return out

    def _step(self, state: _Live, action: str) -> tuple[str, float, bool, bool, dict[str, Any], float]:
        t0 = time.perf_counter()
        obs, reward, terminated, truncated, info = state.env.step(action)
        return obs, float(reward), bool(terminated), bool(truncated), info, time.perf_counter() - t0

    # -- main thread ----------------------------------------------------------------------

    def _after_env(self, kind: str, state: _Live, fut: Future) -> bool:
        """Record a finished reset or step; True when the episode is over."""
        try:
            return self._record_env_result(kind, state, fut.result())
        except _AgentError as e:  # a scripted agent's reset
            state.episode.error = str(e)
            return True
        except Exception as e:  # an env (or a tokenizer) that raises fails its own episode only
            state.episode.error = f"{type(e).__name__}: {e}"
            return True

    def _record_env_result(self, kind: str, state: _Live, result: Any) -> bool:
        ep = state.episode
        if kind == "reset":
            obs, info = result
            state.observation, state.info = obs, info
            state.tools = list(info.get("tools") or [])
            ep.prompt = obs
            ep.role = str(info.get("role", ep.role))
            ep.domain = str(info.get("domain", ep.domain))
            ep.task_id = str(info.get("task_id", ep.task_id))
            ep.task = dict(info.get("task") or {})
            self._start(state)
        else:
            obs, reward, terminated, truncated, info, seconds = result
            turn = ep.turns[-1]
            turn.observation, turn.reward, turn.seconds = obs, reward, seconds
            turn.error, turn.tool = info.get("error"), info.get("tool")
            ep.timings["env"] = ep.timings.get("env", 0.0) + seconds
            state.observation, state.info = obs, info
            if terminated or truncated:
                ep.terminated, ep.truncated = terminated, truncated
                ep.outcome = dict(info.get("outcome") or {})
                return True
            self._observe(state, obs)
        return self._over_limits(state)

    def _over_limits(self, state: _Live) -> bool:
        """Truncate an episode that ran out of turns, time or context before its next turn."""
        ep, cfg = state.episode, self.config
        reason = None
        if cfg.max_turns is not None and len(ep.turns) >= cfg.max_turns:
            reason = "turn_limit"
        elif cfg.max_seconds is not None and time.perf_counter() - state.started > cfg.max_seconds:
            reason = "time_limit"
        elif self.mode == "token" and len(ep.token_ids) + cfg.sampling.max_new_tokens > self._context_tokens():
            reason = "context_limit"
        if reason:
            ep.truncated = True
            ep.outcome = {"status": reason}
        return reason is not None

    def _context_tokens(self) -> int:
        """The longest prompt plus turn an episode may reach: ``max_context_tokens``, or less where the generator's
        engine accepts less (vLLM's ``max_model_len``), so a long episode ends instead of the engine refusing it."""
        engine = getattr(self.policy, "max_model_len", None)
        limit = self.config.max_context_tokens
        return min(limit, engine) if isinstance(engine, int) else limit

    def _start(self, state: _Live) -> None:
        if self.mode == "scripted":
            try:
                state.agent = self.policy(state.spec)  # type: ignore[operator,call-arg]
                assert state.agent is not None
                state.agent.reset(state.observation, state.info)
            except Exception as e:
                raise _AgentError(_agent_error(e)) from e
            return
        if self.chat is not None:
            state.messages = self.chat.prompt_messages(state.observation, state.tools)
            ids = self.chat.encode(self.chat.prompt_text(state.messages, state.tools))
            append_tokens(state.episode, ids, -1, action=False)
        else:
            parts = [p for p in (self.config.system_prompt, tool_instructions(state.tools) if state.tools else "") if p]
            system = [{"role": "system", "content": "\n\n".join(parts)}] if parts else []
            state.messages = system + [{"role": "user", "content": state.observation}]
        state.episode.sampling = _sampling_record(self._sampling([state], self.config.sampling.seed))

    def _observe(self, state: _Live, observation: str) -> None:
        if self.mode == "scripted":
            return
        role = self.chat.observation_role if self.chat is not None else "user"
        if self.chat is not None:
            text = self.chat.observation_text(observation, action_closed_by=state.action_closed_by)
            append_tokens(state.episode, self.chat.encode(text), len(state.episode.turns), action=False)
        state.messages.append({"role": role, "content": observation})

    def _sampling(self, batch: list[_Live], seed: int | None) -> SamplingParams:
        """The configured sampling, with the batch's tools' closing tags as stop strings."""
        sampling = self.config.sampling
        return replace(sampling, stop=(*sampling.stop, *stop_strings(_batch_tools(batch))), seed=seed)

    def _act(self, batch: list[_Live]) -> list[str]:
        """One action per episode of the batch, recorded as a new turn."""
        version = self._weights_version()
        if self.mode == "scripted":
            gens = [Generation([], [], _scripted_action(s), "stop") for s in batch]
        else:
            base = self.config.sampling.seed
            sampling = self._sampling(batch, None if base is None else base + self._round)
            self._round += 1
            t0 = time.perf_counter()
            if self.mode == "token":
                assert isinstance(self.policy, Generator)
                gens = self.policy.generate([s.episode.token_ids for s in batch], sampling)
            else:
                assert isinstance(self.policy, ChatGenerator)
                tools = _batch_tools(batch)
                gens = self.policy.chat([s.messages for s in batch], sampling, tools=tools or None)
            seconds = time.perf_counter() - t0
            self.stats.generate_seconds += seconds
            self.stats.generate_calls += 1
            total = sum(max(1, len(g.token_ids) or len(g.text)) for g in gens)
            for s, g in zip(batch, gens, strict=True):
                # Each episode is charged its share of the batch's time.
                share = seconds * max(1, len(g.token_ids) or len(g.text)) / total
                s.episode.timings["generate"] = s.episode.timings.get("generate", 0.0) + share
        for s, g in zip(batch, gens, strict=True):
            if g.extra.get("error") and not s.episode.error:  # the backend could not act for this episode alone
                s.episode.error = f"{AGENT_ERROR}{g.extra['error']}"
            if not s.episode.error:
                self._record_action(s, g, version)
        return [g.text for g in gens]

    def _weights_version(self) -> int | None:
        """The token generator's weights version now (None for chat-only and scripted policies)."""
        return self.policy.weights_version if isinstance(self.policy, Generator) else None

    def _record_action(self, s: _Live, g: Generation, weights: int | None) -> None:
        """Append the generated turn to the episode (tokens, logprobs, message, turn record).

        ``weights`` is the generator's weights version when the turn started; the episode keeps
        the oldest, the bound a trainer needs on how stale its logprobs are.
        """
        if weights is not None:
            old = s.episode.weights_version
            s.episode.weights_version = weights if old is None else min(old, weights)
        turn_index = len(s.episode.turns)
        if self.mode == "token":
            append_tokens(s.episode, g.token_ids, turn_index, action=True, logprobs=g.logprobs)
            self.stats.generated_tokens += len(g.token_ids)
            tokenizer = self.policy.tokenizer  # type: ignore[union-attr]
            closed = g.finish_reason == "stop" and g.token_ids and g.token_ids[-1] in tokenizer.all_special_ids
            s.action_closed_by = tokenizer.decode(g.token_ids[-1:]) if closed else None
        if self.mode != "scripted":
            s.messages.append({"role": "assistant", "content": g.text})
        s.episode.turns.append(Turn(action=g.text, observation="", reward=0.0))

    def _finalize(self, state: _Live) -> Episode:
        ep = state.episode
        ep.reward = sum(ep.turn_rewards)
        ep.timings["wall"] = time.perf_counter() - state.started
        if ep.env_id == "" and state.env is not None:
            spec = getattr(state.env, "spec", None)
            ep.env_id = spec.id if spec is not None else type(getattr(state.env, "unwrapped", state.env)).__name__
        _close(state)
        if self.on_episode is not None:
            self.on_episode(state.index, ep)
        return ep


def _batch_tools(batch: list[_Live]) -> list[dict[str, Any]]:
    """The tool schemas of a batch's episodes, each tool once."""
    return list({t.get("function", t)["name"]: t for s in batch for t in s.tools}.values())


def _blank_episode(spec: EpisodeSpec) -> Episode:
    return Episode(
        env_id=spec.env_id, role="", domain="", task_id="", task={}, prompt="", seed=spec.seed, group_id=spec.group_id
    )


def _sampling_record(sampling: SamplingParams) -> dict[str, Any]:
    """The settings an episode records (plain JSON types; ``seed`` is the run's base seed)."""
    return asdict(sampling) | {"stop": list(sampling.stop)}


def _close(state: _Live) -> None:
    if state.env is None:
        return
    try:
        state.env.close()
    except Exception as e:  # a failing close must not hide the episode's own result
        state.episode.error = state.episode.error or f"close failed: {type(e).__name__}: {e}"
    state.env = None


def run_episodes(
    policy: Generator | ChatGenerator | Callable[[EpisodeSpec], Agent],
    specs: Sequence[EpisodeSpec],
    config: RunnerConfig | None = None,
) -> list[Episode]:
    """Play ``specs`` with ``policy`` (see :class:`EpisodeRunner`)."""
    return EpisodeRunner(policy, config).run(specs)


def _scripted_action(state: _Live) -> str:
    """The scripted agent's next action; an agent that raises fails its own episode (empty action)."""
    assert state.agent is not None
    try:
        return str(state.agent.act(state.observation, state.info))
    except Exception as e:
        state.episode.error = _agent_error(e)
        return ""
