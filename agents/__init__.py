"""Policies that act in the envs: generation backends, token-exact episodes, the episode runner.

Nothing here imports torch at import time; the HF and vLLM backends load it when built.
"""

from __future__ import annotations

from sparring.agents.chat import ChatFormat, token_roles
from sparring.agents.episodes import SCHEMA_VERSION, Episode, episodes_to_dataset, read_jsonl, write_jsonl
from sparring.agents.factory import BACKENDS, make_generator
from sparring.agents.generation import (
    ChatGenerator,
    Generation,
    Generator,
    SamplingParams,
    require_token_exact,
)
from sparring.agents.runner import EpisodeRunner, EpisodeSpec, RunnerConfig, RunStats, run_episodes
from sparring.agents.scripted import Agent, RandomToolAgent, ReplayAgent

__all__ = [
    "BACKENDS",
    "SCHEMA_VERSION",
    "Agent",
    "ChatFormat",
    "ChatGenerator",
    "Episode",
    "EpisodeRunner",
    "EpisodeSpec",
    "Generation",
    "Generator",
    "RandomToolAgent",
    "ReplayAgent",
    "RunStats",
    "RunnerConfig",
    "SamplingParams",
    "episodes_to_dataset",
    "make_generator",
    "read_jsonl",
    "require_token_exact",
    "run_episodes",
    "token_roles",
    "write_jsonl",
]
