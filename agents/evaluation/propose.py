"""``sparring eval search-propose``: the proposer role of the search game, its valid-question rate.

Each instance is one greedy :class:`~sparring.envs.search.propose_env.SearchProposeEnv` episode:
the policy gets a seed answer (draw ``i`` with seed ``i`` from the corpus's seeds, the pool
training draws from), searches, and writes a question. The question scores 1 when it passes the
rule filters and RAG validation, as in training: a validator answers it from the proposer's
documents plus noise documents, and must give one of the seed's accepted answers.

Who validates is ``--validator``:

* ``self`` (the default): the evaluated model, as the trainer's game does. Before and after
  training, this measures the proposer and the validator together, as training's valid-question
  rate does.
* a model SPEC (``default``, a local folder, a training checkpoint, ``openai:URL#MODEL``): a
  fixed validator, so two proposers are compared under the same judge of their questions.
* ``grounding``: model-free; the seed answer must occur in a retrieved document (it does not read
  the question).

There is no held-out split: the held-out answers' entries are withheld from the corpus, so no
proposer could find them. A training run draws a few dozen of the 69,399 seeds, at random seeds of
its own, so an evaluation of 200 draws shares about one seed with it.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from sparring import SparringError
from sparring.agents.episodes import Episode
from sparring.agents.evaluation.config import check_ranges, out_dir, run_identity, runner_config
from sparring.agents.evaluation.records import Instance, play
from sparring.agents.evaluation.reports import headline, write_report
from sparring.agents.evaluation.search import SearchSettings, draws, question_source, require_seeds
from sparring.agents.evaluation.specs import load_policy, parse_spec
from sparring.agents.runner import EpisodeSpec
from sparring.envs.core import reason_name

__all__ = ["ProposeEvalConfig", "evaluate_propose", "propose_instances", "run_propose_eval", "validator_for"]

DOMAIN = "search-propose"


@dataclass
class ProposeEvalConfig(SearchSettings):
    """What ``sparring eval search-propose`` runs."""

    split: str = "train"
    """train: seed answers drawn from the corpus's seeds (the only split a proposer has)."""
    validator: str = "self"
    """Who answers each question from the proposer's documents: self (the evaluated model, as in training), a
    model SPEC (default, a local folder or checkpoint, openai:URL#MODEL) to hold the judge fixed, or grounding."""


def _check(config: ProposeEvalConfig) -> None:
    check_ranges(config)
    if config.split != "train":
        raise SparringError(
            f"--split {config.split!r} has no proposer tasks: the held-out answers' entries are withheld from the "
            "corpus, so no proposer can find them; use --split train (the default)."
        )


def propose_instances(config: ProposeEvalConfig, validator: Any) -> list[Instance]:
    """Draws ``0..limit-1`` of the proposer env, each validated by ``validator``."""
    from sparring.envs.search.propose_env import SearchProposeEnv

    _check(config)
    require_seeds(config.corpus)

    def make_env() -> SearchProposeEnv:
        return SearchProposeEnv(
            max_turns=config.max_turns,
            validator=validator,
            corpus=config.corpus,
            retriever=config.retriever,
            topk=config.topk,
        )

    return [
        Instance(f"propose-{i:04d}", EpisodeSpec(make_env, seed=i), "seeds", "seed") for i in range(draws(config.limit))
    ]


def _reason(outcome: dict[str, Any], error: str | None) -> str | None:
    if error:
        return "error"
    if outcome.get("valid"):
        return None
    reasons = outcome.get("reasons") or ["no_question"]
    return reason_name(reasons[0])


def _record(instance: Instance, episode: Episode) -> dict[str, Any]:
    outcome = dict(episode.outcome)
    task = episode.task or {}
    valid = bool(outcome.get("valid")) and episode.error is None
    return {
        "group": question_source(task),
        "kind": f"{task.get('hops', '?')}-hop",
        "solved": valid,
        "score": 1.0 if valid else 0.0,
        "question": outcome.get("question"),
        "answer": outcome.get("answer", task.get("answer")),
        "answers": list(outcome.get("answers") or task.get("answers") or []),
        "validator_answer": outcome.get("validator_answer"),
        "searches": len(outcome.get("queries") or []),
        "reason": _reason(outcome, episode.error),
        "reasons": list(outcome.get("reasons") or []),
    }


def validator_for(text: str, policy: Any, config: ProposeEvalConfig) -> Any:
    """The validator ``--validator`` names, over ``policy`` for ``self``.

    Raises:
        SparringError: ``self`` with a scripted policy (it has no model to answer with), or a SPEC
            that is not a model.
    """
    from sparring.agents.answering import generator_answer_fn, openai_answer_fn
    from sparring.envs.search.validation import GroundingValidator, PolicyValidator

    if text == "grounding":
        return GroundingValidator()
    if text == "self":
        if not (hasattr(policy, "generate") or hasattr(policy, "chat")):  # a factory of scripted agents
            raise SparringError(
                f"{config.model} is a scripted agent with no model to validate its questions; pass --validator SPEC "
                "(a model) or --validator grounding."
            )
        return PolicyValidator(generator_answer_fn(policy))
    spec = parse_spec(text)
    if spec.kind == "scripted":
        raise SparringError(
            f"--validator {text!r} is a scripted agent; a validator is a model SPEC, self or grounding."
        )
    if spec.kind == "openai":
        from sparring.agents.evaluation.specs import probe_endpoint

        probe_endpoint(spec.target, config.request_timeout)
        return PolicyValidator(openai_answer_fn(spec.target, str(spec.model), timeout_s=config.request_timeout))
    return PolicyValidator(generator_answer_fn(load_policy(spec, "search", device=config.device)))


def evaluate_propose(policy: Any, validator: Any, config: ProposeEvalConfig) -> dict[str, Any]:
    """Play ``policy`` as the proposer on the drawn seeds into the evaluation folder; the report."""
    instances = propose_instances(config, validator)
    out = out_dir(config, DOMAIN, f"n{len(instances)}", f"v-{config.validator}")
    settings = {"corpus": config.corpus, "topk": config.topk, "validator": config.validator}
    run = run_identity(config, DOMAIN, **settings)
    records = play(instances, policy, runner_config(config), out, run, _record)
    return write_report(out, run, records, plots=config.plots)


def run_propose_eval(config: ProposeEvalConfig) -> dict[str, Any]:
    """``sparring eval search-propose``: load the SPECs, evaluate, write the report, print its summary as JSON."""
    spec = parse_spec(config.model)
    propose_instances(config, None)  # a missing corpus or a bad split is one sentence before a model loads
    if config.validator not in ("self", "grounding"):
        parse_spec(config.validator)  # a malformed validator SPEC too
    policy = load_policy(
        spec, DOMAIN, chat_only=config.chat_only, timeout_s=config.request_timeout, device=config.device
    )
    validator = validator_for(config.validator, policy, config)
    report = evaluate_propose(policy, validator, config)
    print(json.dumps(headline(report)))
    return report
