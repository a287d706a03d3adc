"""SearchPropose-v0 and SearchAnswer-v0: the env contract, rule filters, validation, rewards."""

from __future__ import annotations

from collections.abc import Sequence

import gymnasium as gym
import pytest
from gymnasium.utils.env_checker import check_env

import sparring  # noqa: F401  (registers the envs)
from sparring import SparringError
from sparring.agents.chat import tool_instructions
from sparring.envs.search.answer_env import EXAMPLE_ANSWER, SearchAnswerEnv
from sparring.envs.search.corpus import Corpus
from sparring.envs.search.filters import gives_away
from sparring.envs.search.heldout import accepted_answers, is_heldout
from sparring.envs.search.propose_env import EXAMPLE_QUESTION, NoisePool, SearchProposeEnv
from sparring.envs.search.rewards import SearchRewards
from sparring.envs.search.scoring import normalize_answer
from sparring.envs.search.search_env import EXAMPLE_QUERY
from sparring.envs.search.validation import GroundingValidator, PolicyValidator, Proposal, Verdict
from sparring.training.game import GAMES

JARGON = {"id": "propose:jargon", "answer": "Jargon File", "hops": 1, "doc": "foldoc:Jargon File"}
QUESTION = "Which on-line collection of hacker slang definitions is maintained by Eric S. Raymond?"


@pytest.mark.parametrize("env_id", ["sparring/SearchPropose-v0", "sparring/SearchAnswer-v0"])
def test_check_env_passes(corpus: Corpus, env_id: str):
    env = gym.make(env_id)
    check_env(env.unwrapped)
    obs, info = env.reset(seed=7)
    assert info["role"] in {"proposer", "solver"} and info["turn"] == 0 and info["task"]["id"] == info["task_id"]
    assert {t["function"]["name"] for t in info["tools"]} >= {"search"}
    env.close()


def _propose(env: SearchProposeEnv, actions: list[str]) -> tuple[float, dict]:
    env.reset(seed=0, options={"task": JARGON})
    for action in actions:
        obs, reward, terminated, truncated, info = env.step(action)
        if terminated or truncated:
            return reward, info
    raise AssertionError("the episode did not end")


def test_a_scripted_proposer_is_accepted_by_a_real_validator(corpus: Corpus):
    env = SearchProposeEnv(validator=GroundingValidator(), noise_pool=NoisePool())
    reward, info = _propose(
        env,
        [
            "<search>Eric S. Raymond hacker dictionary</search>",
            '<tool_call>{"name": "search", "arguments": {"query": "hacker slang collection"}}</tool_call>',
            f"<question>{QUESTION}</question>",
        ],
    )
    outcome = info["outcome"]
    assert outcome["valid"] and outcome["reasons"] == []
    assert outcome["queries"] == ["Eric S. Raymond hacker dictionary", "hacker slang collection"]
    assert any("Jargon File" in d["contents"] for d in outcome["documents"])  # the evidence it was accepted on
    assert reward == 0.0 and env.get_reward() == 0.0


def test_seeds_are_drawn_from_the_chosen_sources(corpus: Corpus):
    env = SearchProposeEnv(seed_sources=("foldoc", "jargon"))
    for seed in range(5):
        obs, info = env.reset(seed=seed)
        assert info["task"]["doc"].split(":")[0] in {"foldoc", "jargon"} and 1 <= info["task"]["hops"] <= 3
        assert info["task"]["answer"] in obs


def test_the_proposer_reward_is_one_minus_the_solve_rate():
    rewards = SearchRewards(proposer_invalid=-0.5)
    assert rewards.proposer(True, 0.25) == 0.75 and rewards.proposer(False, None) == -0.5
    assert rewards.unfinished("proposer") == -0.5 and rewards.unfinished("solver") == rewards.solver_wrong


@pytest.mark.parametrize(
    ("actions", "reason"),
    [
        (
            [
                "<search>hacker slang</search>",
                "<search>Raymond</search>",
                "<question>What is the jargon file of hackers?</question>",
            ],
            "answer_in_question",
        ),
        (
            [f"<search>hacker slang</search><question>{QUESTION}</question>", f"<question>{QUESTION}</question>"],
            "too_few_searches",
        ),
        (
            ["<search>hacker slang</search>", "<search>Hacker  slang</search>", f"<question>{QUESTION}</question>"],
            "duplicated_query",
        ),
        (
            ["<search>hacker slang</search>", "<search>raymond</search>", "<question>Which?</question>"],
            "question_too_short",
        ),
    ],
)
def test_rule_filters_reject_with_their_reason(corpus: Corpus, actions: list[str], reason: str):
    env = SearchProposeEnv(rewards=SearchRewards(proposer_invalid=-0.5))
    reward, info = _propose(env, actions)
    assert not info["outcome"]["valid"] and reason in info["outcome"]["reasons"]
    assert reward == -0.5  # invalid questions get the configured invalid reward


def test_no_question_by_the_turn_limit_is_rejected(corpus: Corpus):
    env = SearchProposeEnv(max_turns=2)
    reward, info = _propose(env, ["<search>hacker slang</search>", "I am still thinking"])
    assert info["outcome"]["reasons"] == ["no_question", "too_few_searches"] and reward == 0.0


class BrokenValidator:
    """A validator whose model endpoint is down."""

    name = "broken"

    def validate(self, proposals: Sequence[Proposal]) -> list[Verdict]:
        raise ConnectionError("judge endpoint unreachable")


def test_a_validator_error_rejects_the_question(corpus: Corpus):
    env = SearchProposeEnv(validator=BrokenValidator())
    reward, info = _propose(
        env, ["<search>Eric S. Raymond</search>", "<search>hacker slang</search>", f"<question>{QUESTION}</question>"]
    )
    assert not info["outcome"]["valid"]
    assert info["outcome"]["reasons"] == ["validator_error: ConnectionError: judge endpoint unreachable"]
    assert reward == 0.0


def test_validation_sees_the_proposer_documents_and_noise_from_other_proposals(corpus: Corpus):
    seen: list[Proposal] = []

    class Recorder:
        name = "recorder"

        def validate(self, proposals: Sequence[Proposal]) -> list[Verdict]:
            seen.extend(proposals)
            return [Verdict(True) for _ in proposals]

    pool = NoisePool()
    env = SearchProposeEnv(validator=Recorder(), noise_pool=pool)
    actions = ["<search>Eric S. Raymond</search>", "<search>hacker slang</search>", f"<question>{QUESTION}</question>"]
    _propose(env, actions)
    first = {d["id"] for d in seen[0].documents}
    assert len(seen[0].noise) == 4 and not first & {d["id"] for d in seen[0].noise}  # random documents
    other = SearchProposeEnv(validator=Recorder(), noise_pool=pool)
    other.reset(seed=1, options={"task": {"id": "p2", "answer": "iron", "hops": 1}})
    other.step("<search>element symbol Fe</search>")
    other.step("<search>atomic number 26</search>")
    other.step("<question>Which metallic element has atomic number 26 and symbol Fe?</question>")
    assert {d["id"] for d in seen[1].noise} <= first  # noise now comes from the first proposal


def test_the_solver_is_rewarded_by_exact_match(corpus: Corpus):
    env = SearchAnswerEnv()
    task = {"id": "q1", "question": "Which chemical element has the symbol Fe?", "answers": ["iron"]}
    obs, info = env.reset(options={"task": task})
    assert task["question"] in obs and info["role"] == "solver"
    obs, reward, terminated, truncated, info = env.step("<search>element symbol Fe</search>")
    assert obs.startswith("<information>") and "iron" in obs.lower() and reward == 0.0 and not terminated
    obs, reward, terminated, truncated, info = env.step("<think>the element doc</think><answer> Iron. </answer>")
    assert terminated and reward == 1.0 and info["outcome"]["em"] == 1.0 and info["outcome"]["f1"] == 1.0
    env.reset(options={"task": task})
    *_, info = env.step("<answer>cast iron</answer>")
    assert env.get_reward() == 0.0 and info["outcome"]["f1"] == pytest.approx(2 / 3)
    f1_env = SearchAnswerEnv(rewards=SearchRewards(solver_metric="f1"))
    f1_env.reset(options={"task": task})
    assert f1_env.step("<answer>cast iron</answer>")[1] == pytest.approx(2 / 3)


@pytest.mark.parametrize("answer", ["", "the", ".", "A", '{"name": "answer", "arguments": {"answer": ""}}'])
def test_an_answer_that_normalises_to_nothing_scores_nothing(corpus: Corpus, answer: str):
    # WordNet lists "A" as a synonym of adenine; SQuAD normalisation makes it an empty string
    env = SearchAnswerEnv()
    env.reset(options={"task": {"id": "t", "question": "Which base pairs with thymine?", "answers": ["adenine", "A"]}})
    action = f"<tool_call>{answer}</tool_call>" if answer.startswith("{") else f"<answer>{answer}</answer>"
    _, reward, terminated, _, info = env.step(action)
    assert terminated and reward == 0.0 and info["outcome"]["em"] == 0.0
    assert not [s for s in corpus.seeds() if any(not normalize_answer(a) for a in s["answers"])]


def test_a_drawn_question_accepts_what_a_held_out_one_would(corpus: Corpus):
    # A drawn WordNet question used to accept only its seed's headword: a synonym that shares the
    # quoted gloss scored 0 in training and 1 in evaluation.
    index = {s["doc"]: int(s["index"]) for s in corpus.seeds()}
    env = SearchAnswerEnv()
    with_synonyms = []
    for seed in range(60):
        env.reset(seed=seed)
        task = dict(env._task or {})
        doc = corpus.document(index[task["id"].removeprefix("answer:")])
        assert task["answers"] == accepted_answers(doc | {"title": task["answers"][0]})
        assert not any(map(is_heldout, task["answers"]))
        assert not any(gives_away(a, task["question"]) for a in task["answers"])  # nothing to copy
        if len(task["answers"]) > 1:
            with_synonyms.append(seed)
    assert with_synonyms
    env.reset(seed=with_synonyms[0])
    task = dict(env._task or {})
    _, reward, terminated, *_ = env.step(f"<answer>{task['answers'][-1]}</answer>")
    assert terminated and reward == 1.0


def _seed_with_synonyms(corpus: Corpus) -> dict:
    return next(s for s in corpus.seeds() if s["doc"].startswith("wn:") and len(s["answers"]) >= 3)


def test_a_proposed_question_is_validated_and_solved_by_the_seeds_accepted_answers(corpus: Corpus):
    # A proposed question used to accept only the seed's headword, while the synonyms of a WordNet
    # seed share its gloss: a solver answering a synonym scored 0, which paid the proposer for a
    # question with two right answers. Validation and the solver's task now accept the same set.
    seed = _seed_with_synonyms(corpus)
    synonym = seed["answers"][-1]
    env = SearchProposeEnv(
        # A model that answers from the documents and knows nothing unaided.
        validator=PolicyValidator(lambda ps: [f"<answer>{synonym if 'Doc 1' in p else '?'}</answer>" for p in ps]),
    )
    obs, info = env.reset(seed=0, options={"task": {"answer": seed["answer"], "answers": seed["answers"]}})
    assert info["task_id"].startswith("task:")  # a given task without an id gets one from its content
    env.step(f"<search>{seed['answer']}</search>")
    env.step("<search>meaning</search>")
    # (not "the thing described here": a question pointing at the validator's documents is not self-contained)
    question = "Which city was Charlemagne's northern capital?"
    _, reward, terminated, _, info = env.step(f"<question>{question}</question>")
    outcome = info["outcome"]
    assert terminated and outcome["valid"] and outcome["validator_answer"] == synonym and reward == 0.0
    assert outcome["answers"] == seed["answers"]

    task = GAMES["search"].solver_task(outcome)  # what the trainer's solver groups play
    assert task is not None and task["answers"] == seed["answers"]
    solver = SearchAnswerEnv()
    solver.reset(options={"task": task})
    assert solver.step(f"<answer>{synonym}</answer>")[1] == 1.0


def test_a_question_naming_any_accepted_answer_is_rejected(corpus: Corpus):
    seed = _seed_with_synonyms(corpus)
    env = SearchProposeEnv()
    env.reset(seed=0, options={"task": {"answer": seed["answer"], "answers": seed["answers"]}})
    env.step("<search>first words</search>")
    env.step("<search>second words</search>")
    _, reward, terminated, _, info = env.step(f"<question>Which other name does {seed['answers'][1]} have?</question>")
    assert terminated and "answer_in_question" in info["outcome"]["reasons"] and reward == 0.0


def test_a_drawn_proposer_task_carries_its_seeds_answers(corpus: Corpus):
    by_doc = {s["doc"]: s for s in corpus.seeds()}
    env = SearchProposeEnv()
    for seed in range(20):
        _, info = env.reset(seed=seed)
        task = info["task"]
        assert task["answers"] == by_doc[task["doc"]]["answers"] and task["answers"][0] == task["answer"]


def test_a_proposer_task_with_malformed_answers_is_one_clear_error(corpus: Corpus):
    env = SearchProposeEnv()
    with pytest.raises(SparringError, match='"answers"'):
        env.reset(options={"task": {"answer": "iron", "answers": "iron"}})


def test_a_malformed_action_is_an_observation_and_the_turn_counts(corpus: Corpus):
    env = SearchAnswerEnv(max_turns=2)
    env.reset(seed=3)
    obs, reward, terminated, truncated, info = env.step("I think the answer is iron")
    assert "no tool call" in obs and f"<answer>{EXAMPLE_ANSWER}</answer>" in obs and info["turn"] == 1
    obs, reward, terminated, truncated, info = env.step("<search></search>")
    assert truncated and info["outcome"]["status"] == "turn_limit" and reward == 0.0


def test_gym_make_max_turns_is_the_turn_limit(corpus: Corpus):
    # A registered TimeLimit at the default (6) used to cut this 8-turn episode at step 6, without an outcome.
    task = {"id": "q1", "question": "Which chemical element has the symbol Fe?", "answers": ["iron"]}
    env = gym.make("sparring/SearchAnswer-v0", max_turns=8)
    assert env.spec is not None and env.spec.max_episode_steps == 8
    obs, _ = env.reset(options={"task": task})
    assert obs.endswith("[8 turns left]")
    for turn in range(1, 8):
        obs, _, terminated, truncated, info = env.step(f"<search>element symbol Fe {turn}</search>")
        left = f"[{8 - turn} turn{'s' * (turn < 7)} left]"
        assert not (terminated or truncated) and "outcome" not in info and obs.endswith(left)
    obs, reward, terminated, truncated, info = env.step("<search>element symbol Fe</search>")
    assert truncated and not terminated and info["turn"] == 8 and info["outcome"]["status"] == "turn_limit"
    env.close()
    # Gymnasium's own knob still works: a looser TimeLimit leaves the env's limit in charge, a tighter one cuts.
    loose = gym.make("sparring/SearchAnswer-v0", max_episode_steps=20)
    loose.reset(options={"task": task})
    steps = [loose.step("<search>iron</search>") for _ in range(6)]
    assert steps[-1][3] and steps[-1][4]["outcome"]["status"] == "turn_limit"
    tight = gym.make("sparring/SearchAnswer-v0", max_episode_steps=2)
    assert tight.spec is not None and tight.spec.max_episode_steps == 2
    tight.reset(options={"task": task})
    tight.step("<search>iron</search>")
    assert tight.step("<search>iron</search>")[3]


def test_every_example_the_model_is_shown_is_a_real_call(corpus: Corpus):
    for env in (SearchAnswerEnv(), SearchProposeEnv(noise_pool=NoisePool())):
        obs, info = env.reset(seed=0)
        shown = obs + "\n" + env.step("no call")[0] + "\n" + tool_instructions(info["tools"])
        assert "..." not in shown and "<search>keywords</search>" not in shown
        assert f"<search>{EXAMPLE_QUERY}</search>" in shown


def test_the_example_query_searches_nothing_and_the_turn_counts(corpus: Corpus):
    env = SearchAnswerEnv(max_turns=3)
    env.reset(options={"task": {"id": "q1", "question": "Which element has the symbol Fe?", "answers": ["iron"]}})
    obs, reward, terminated, truncated, info = env.step(f"<search> {EXAMPLE_QUERY.upper()} </search>")
    assert "example query" in obs and "<information>" not in obs and obs.endswith("[2 turns left]")
    assert (reward, terminated, info["turn"], env.queries, env.retrieved) == (0.0, False, 1, [], {})


def test_the_example_answer_scores_nothing(corpus: Corpus):
    env = SearchAnswerEnv()
    env.reset(options={"task": {"id": "q1", "question": "Which element has the symbol Fe?", "answers": ["iron"]}})
    _, reward, terminated, _, info = env.step(f"<answer>{EXAMPLE_ANSWER.lower()}.</answer>")
    assert terminated and reward == 0.0 and info["outcome"]["copied_example"] and info["outcome"]["f1"] == 0.0
    # where the example happens to be the task's answer, it is an answer like any other
    env.reset(options={"task": {"id": "q2", "question": "Who created Python?", "answers": [EXAMPLE_ANSWER]}})
    assert env.step(f"<answer>{EXAMPLE_ANSWER}</answer>")[1] == 1.0


def test_the_example_question_is_rejected(corpus: Corpus):
    env = SearchProposeEnv(validator=GroundingValidator(), noise_pool=NoisePool())
    reward, info = _propose(
        env,
        ["<search>Eric S. Raymond hacker dictionary</search>", "<search>hacker slang collection</search>",
         f"<question>{EXAMPLE_QUESTION}</question>"],
    )  # fmt: skip
    assert not info["outcome"]["valid"] and "copied_example" in info["outcome"]["reasons"] and reward == 0.0


def test_the_solver_works_through_the_trl_adapter(corpus: Corpus):
    from sparring.envs.trl import trl_environment_factory

    env = trl_environment_factory("sparring/SearchAnswer-v0")()
    task = {"id": "q1", "question": "Which chemical element has the symbol Fe?", "answers": ["iron"]}
    assert task["question"] in env.reset(task=task)
    assert env.search("element symbol Fe").startswith("<information>")
    env.answer("Iron")
    assert env.get_reward() == 1.0


def test_a_proposer_task_without_a_seed_answer_is_one_clear_error(corpus: Corpus):
    env = SearchProposeEnv(noise_pool=NoisePool())
    with pytest.raises(SparringError, match=r'a proposer task needs "answer"'):
        env.reset(options={"task": {"id": "p", "hops": 2}})
    env.close()
