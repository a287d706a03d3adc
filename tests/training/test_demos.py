"""The warm start's RAG validation demonstrations: the prompt the validator is shown, the seed answer."""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import pytest

from sparring.agents.answering import ANSWER_PREFILL, chat_prompt_ids
from sparring.agents.demonstrators import DefinitionProposerAgent, DefinitionSearchAgent, _definition
from sparring.agents.runner import EpisodeRunner, EpisodeSpec, RunnerConfig
from sparring.envs.search.validation import PolicyValidator, Proposal
from sparring.training.demos import validator_demonstrations


def _proposals(n: int) -> list[Any]:
    """``n`` proposer episodes of the scripted proposer (grounding validation: no model needed)."""

    def make() -> Any:
        return gym.make("sparring/SearchPropose-v0", max_turns=3)

    runner = EpisodeRunner(lambda spec: DefinitionProposerAgent(), RunnerConfig(progress=False))
    return runner.run([EpisodeSpec(make, seed=seed) for seed in range(n)])


def test_each_grounded_proposal_becomes_the_prompt_the_validator_sees_and_its_seed_answer(
    corpus: Any, smol_tokenizer: Any
) -> None:
    played = _proposals(6)
    reached = [ep for ep in played if "validator_answer" in ep.outcome]
    assert len(reached) >= 3, "the scripted proposer should reach validation on most seeds"
    demos = validator_demonstrations(smol_tokenizer, played)
    assert demos and len(demos) <= len(reached)
    seen: list[str] = []
    validator = PolicyValidator(lambda prompts: seen.extend(prompts) or ["<answer>x</answer>"] * len(prompts))
    for demo in demos:
        source = next(ep for ep in reached if ep.task_id == demo.task_id)
        o = source.outcome
        assert isinstance(o["order_seed"], int)  # drawn by the env for its validation
        validator.validate([Proposal(o["question"], o["answer"], o["documents"], o["noise"],
                                     order_seed=o["order_seed"])])  # fmt: skip
        assert demo.prompt == seen[-1]  # the very text (documents in the same order) validation shows
        prompt_ids = [t for t, turn in zip(demo.token_ids, demo.token_turn, strict=True) if turn < 0]
        assert prompt_ids == chat_prompt_ids(smol_tokenizer, [{"role": "user", "content": demo.prompt}], ANSWER_PREFILL)
        action = [t for t, a in zip(demo.token_ids, demo.action_mask, strict=True) if a]
        assert smol_tokenizer.decode(action) == f" {o['answer']}</answer>"
        assert _contains(demo.token_ids[: demo.action_mask.index(True)], action[: -_stop_len(smol_tokenizer)])
        assert demo.role == "validator" and demo.domain == "search"


def _stop_len(tokenizer: Any) -> int:
    return len(tokenizer.encode("</answer>", add_special_tokens=False))


def _contains(tokens: list[int], run: list[int]) -> bool:
    """Whether ``run`` occurs in ``tokens`` as a contiguous run."""
    return any(tokens[i : i + len(run)] == run for i in range(len(tokens) - len(run) + 1))


def test_a_solver_demonstration_answers_in_the_tokens_its_search_results_show(corpus: Any, smol_tokenizer: Any) -> None:
    """The copied title is the very token run the model read, which a small model copies without re-spelling it."""
    from sparring.agents.chat import ChatFormat
    from sparring.training.demos import tokenize_episode

    def make() -> Any:
        return gym.make("sparring/SearchAnswer-v0", max_turns=3)

    played = EpisodeRunner(lambda spec: DefinitionSearchAgent(), RunnerConfig(progress=False)).run(
        [EpisodeSpec(make, seed=seed) for seed in range(8)]
    )
    env = make()
    tools = list(env.unwrapped.tools)
    env.close()
    answered = [ep for ep in played if ep.outcome.get("answer")]
    assert len(answered) >= 6
    stop = _stop_len(smol_tokenizer)
    prefix = len(smol_tokenizer.encode("<answer>", add_special_tokens=False))
    for ep in answered:
        tokenize_episode(ChatFormat(smol_tokenizer), ep, tools)
        start = next(i for i, (turn, a) in enumerate(zip(ep.token_turn, ep.action_mask, strict=True))
                     if a and turn == ep.token_turn[-1])  # fmt: skip
        title = ep.token_ids[start + prefix : len(ep.token_ids) - stop]
        assert smol_tokenizer.decode(title) == " " + ep.outcome["answer"]
        shown = smol_tokenizer.convert_ids_to_tokens(title)
        assert _contains(ep.token_ids[:start], title), (ep.outcome["answer"], shown)


def test_proposals_without_the_answer_in_their_evidence_or_without_validation_are_left_out(
    corpus: Any, smol_tokenizer: Any
) -> None:
    played = [ep for ep in _proposals(4) if "validator_answer" in ep.outcome]
    assert played
    ungrounded = played[0]
    ungrounded.outcome = dict(ungrounded.outcome, documents=[{"id": "x", "contents": "Nothing\nunrelated text"}])
    unvalidated = played[-1] if len(played) > 1 else None
    if unvalidated is not None:
        unvalidated.outcome = {k: v for k, v in unvalidated.outcome.items() if k != "validator_answer"}
    demos = validator_demonstrations(smol_tokenizer, played)
    ids = {d.task_id for d in demos}
    assert ungrounded.task_id not in ids
    if unvalidated is not None:
        assert unvalidated.task_id not in ids


@pytest.mark.parametrize(
    ("answer", "entry", "definition"),
    [
        (  # GCIDE: pronunciation, a two-part part of speech, etymology, a numbered sense
            "Stigmatize",
            'Stigmatize \\Stig"ma*tize\\, v. t. [imp. & p. p. Stigmatized.] [F. stigmatiser, Gr. ?.] 1. To mark with a '
            "stigma, or brand; as, the ancients stigmatized their slaves. [1913 Webster]",
            "To mark with a stigma, or brand",
        ),
        (  # GCIDE: the first clause is too short to identify the entry, so the next one joins it
            "Cheerfulness",
            'Cheerfulness \\Cheer"ful*ness\\, n. Good spirits; a state of moderate joy or gayety; alacrity.',
            "Good spirits; a state of moderate joy or gayety",
        ),
        (  # GCIDE: accents nested in the etymology's brackets
            "Noontide",
            'Noontide \\Noon"tide`\\, n. [From noon + tide time; cf. AS. n[=o]nt[imac]d the ninth hour.] The time of '
            "noon; midday. [1913 Webster]",
            "The time of noon",
        ),
        (  # WordNet: the usage example in quotes is not part of the definition
            "cheerfulness",
            'cheerfulness n 1: the quality of being cheerful and dispelling gloom; "flowers added a note of '
            'cheerfulness to the drab room" [syn: cheerfulness, cheer]',
            "the quality of being cheerful and dispelling gloom",
        ),
        ("spitting", "spitting n 1: the act of spitting (forcefully expelling saliva) [syn: spit]", ""),  # names it
    ],
)
def test_the_scripted_proposer_reads_the_definition_out_of_an_entry(answer: str, entry: str, definition: str) -> None:
    assert _definition(entry, answer) == definition


def test_the_scripted_proposer_asks_a_real_question_or_none(corpus: Any) -> None:
    played = _proposals(12)
    asked = [ep for ep in played if ep.outcome.get("question")]
    assert len(asked) >= 10, [ep.outcome.get("answer") for ep in played if ep not in asked]
    for ep in asked:
        question = ep.outcome["question"]
        assert question.startswith('Which term is described as "') and len(question) > 45, question
    for ep in played:  # without a definition it writes an empty question, which the rules reject
        if ep not in asked:
            assert not ep.outcome["valid"] and "no_question" in ep.outcome["reasons"]


@pytest.mark.docker
@pytest.mark.slow
@pytest.mark.timeout(900)
def test_each_swe_role_plays_warm_start_swe_episodes_or_a_quarter_of_the_search_games(smol_tokenizer: Any) -> None:
    import types

    import numpy as np

    from sparring.training.config import load_config
    from sparring.training.demos import demonstrations

    policy = types.SimpleNamespace(tokenizer=smol_tokenizer)
    # the setting wins even where it asks for none (a quarter of 8 would be 2): only the quarter's 2 play a container
    for extra, count in ((["warm_start_swe_episodes=0"], 0), ([], 2)):
        config = load_config(None, ["games=swe", "warm_start_episodes=8", "swe_max_turns=3", *extra])
        _, stats = demonstrations(config, policy, np.random.default_rng(0))
        assert stats.played.get("swe/solver", 0) == count
        assert stats.played.get("swe/proposer", count) == count  # no proposer demonstration without a stored bug


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_more_validator_demonstrations_than_proposer_ones_play_more_proposals_for_them(
    corpus: Any, smol_tokenizer: Any
) -> None:
    """Asking for 8 RAG validation demonstrations with 2 proposer ones plays 10 proposals; 2 teach the proposer."""
    import types

    import numpy as np

    from sparring.training.config import load_config
    from sparring.training.demos import demonstrations

    policy = types.SimpleNamespace(tokenizer=smol_tokenizer)
    settings = ["games=search", "warm_start_episodes=0", "warm_start_proposer_episodes=2", "search_max_turns=3"]
    counts = {}
    for wanted in (1, 8):
        config = load_config(None, [*settings, f"warm_start_validator_demos={wanted}"])
        demos, stats = demonstrations(config, policy, np.random.default_rng(0))
        roles = [d.role for d in demos]
        assert stats.played["search/proposer"] == 2 and roles.count("proposer") == stats.kept["search/proposer"] <= 2
        assert roles.count("validator") == stats.kept["search/validator"] <= wanted
        counts[wanted] = (stats.played["search/validator"], stats.kept["search/validator"])
    assert counts[1][1] == 1 and counts[1][0] <= 2
    assert counts[8][0] > 2 and counts[8][1] >= 6, counts  # about nine in ten proposals reach validation grounded


def test_the_matching_teacher_answers_the_entry_that_holds_the_definition(corpus: Any) -> None:
    """Where the search ranks a related entry first, the teacher reads on to the defined one.

    Held-out questions of the default corpus: two whose defined entry is ranked second, holding the
    definition word for word; one whose right entry (a 1913 dictionary's) words it otherwise, where
    the teacher falls back to the first result; one ranked first.
    """
    from sparring.agents.demonstrators import DefinitionMatchAgent

    tasks = [
        {"id": "denture", "question": 'Which word or phrase means "a dental appliance that artificially replaces '
         'missing teeth"?', "answers": ["denture", "dental plate", "plate"]},
        {"id": "dicot", "question": 'Which word or phrase means "flowering plant with two cotyledons"?',
         "answers": ["dicotyledon", "dicot", "magnoliopsid", "exogen"]},
        {"id": "kremlin", "question": 'Which word or phrase means "citadel of Moscow, housing the offices of the '
         'Russian government"?', "answers": ["Kremlin"]},
        {"id": "porto", "question": 'Which word or phrase means "port city in northwest Portugal"?',
         "answers": ["Porto", "Oporto"]},
    ]  # fmt: skip

    def play(agent: type) -> list[float]:
        def make() -> Any:
            return gym.make("sparring/SearchAnswer-v0", max_turns=3)

        specs = [EpisodeSpec(make, seed=i, options={"task": task}) for i, task in enumerate(tasks)]
        played = EpisodeRunner(lambda spec: agent(), RunnerConfig(progress=False)).run(specs)
        return [ep.outcome.get("em", 0.0) for ep in played]

    assert play(DefinitionSearchAgent) == [0.0, 0.0, 0.0, 1.0]
    assert play(DefinitionMatchAgent) == [1.0, 1.0, 0.0, 1.0]
