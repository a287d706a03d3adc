"""Answer leaks in proposed questions: every class of encoding, through the real env, and the honest controls.

The seed is the corpus's real seed answer "Sinewy" (the draw of ``SearchPropose-v0`` ``reset(seed=3)``
in corpus format 3), given to ``reset`` as its task; each question goes through ``step`` as a
``<question>`` action after two real searches.
"""

from __future__ import annotations

import codecs
import json
from typing import Any

import gymnasium as gym
import pytest

import sparring  # noqa: F401  (registers the envs)
from sparring.envs.search.corpus import Corpus
from sparring.envs.search.filters import gives_away
from sparring.envs.search.leaks import leak, skeleton
from sparring.envs.search.propose_env import SearchProposeEnv
from sparring.envs.search.validation import PolicyValidator, Proposal, validate_safely

ANSWER = "Sinewy"

#: Each class with variants of it, on the seed answer "Sinewy".
LEAKS = {
    "spelt": [
        "Which adjective is Sin ewy, more or less?",
        "Which word is si-new-y when hyphenated?",
        "Which adjective is ꜱɪɴᴇᴡʏ in small capitals?",  # Latin small capitals
        "Which adjective is written ѕіոеԝу here?",  # Cyrillic, Armenian
        "Which adjective is written 𝐬𝐢𝐧𝐞𝐰𝐲 in bold?",
        "Which adjective is written s\u0308i\u0301newy with marks?",
        "Which adjective is sin\u3164ewy with a filler?",
        "Which adjective is ꮪꭵnꬲꮃꭹ in Cherokee letters?",
        "Which adjective do the flags 🇸🇮🇳🇪🇼🇾 spell?",
        "Which adjective is ⠎⠊⠝⠑⠺⠽ in Braille?",
    ],
    "reversed": [
        "Which word, read backwards, is ywenis?",
        "Which word is y-w-e-n-i-s backwards?",
        "Which word is Y W E N I S reversed?",
        "Which word is YWE NIS read from the end?",
        "Which word is y.w.e.n.i.s from right to left?",
    ],
    "split": [
        "Which adjective starts with sin and ends with ewy?",
        "Which adjective ends with ewy and starts with sin?",
        "Which adjective is 'sine' followed by 'wy'?",
        "Which adjective is “si” then “newy”, joined?",
        'Which adjective is "sinew" plus "y", about tendons?',
        'Which word joins "s", "in", "ew" and "y" into one?',
        "Which adjective is sin, e and wy put together?",
    ],
    "substitution": [
        f"Which word is {codecs.encode('sinewy', 'rot13')} under ROT13?",
        "Which word is tjofxz shifted back by one?",
        "Which word is rhmdvx shifted forward by one?",
        "Which word is hrmvdb under Atbash?",
        "Which word is domreu typed one key to the right?",
        "Which word is aubwqt typed one key to the left?",
        f"Which word is {' '.join(codecs.encode('SINEWY', 'rot13'))} decoded?",
        f"Which word is {codecs.encode('ywenis', 'rot13')} in ROT13 backwards?",
    ],
    "leetspeak": [
        "Which adjective is written s1n3wy online?",
        "Which adjective is written $!n3wy online?",
        "Which adjective is written 5|N3WY online?",
        "Which adjective is written s i n 3 w y online?",
        "Which adjective is written yw3n1s backwards?",
    ],
    "numbers": [
        "Which word is 19 9 14 5 23 25 with A=1?",
        "Which word is 19-9-14-5-23-25?",
        "Which word is letters 19, 9, 14, 5, 23 and 25?",
        "Which word is 18 8 13 4 22 24 counting from A=0?",
        "Which word is 8 18 13 22 4 2 counting from Z=1?",
        "Which word is nineteen, nine, fourteen, five, twenty-three, twenty-five?",
        "Which word is the 19th 9th 14th 5th 23rd 25th letters?",
        "Which word is code 190914052325 in pairs?",
        "Which word is 25 23 5 14 9 19 read backwards?",
        "Which word has the character codes 115 105 110 101 119 121?",
    ],
    "acrostic": [
        "Spell Sierra India November Echo Whiskey Yankee: which adjective?",
        "Spell Sugar Item Nan Easy William Yoke: which adjective?",
        "Sam, Ida, Nora, Edward, William, Young: which adjective?",
        "Some idle newts enjoy warm yards; the initials name which adjective?",
        "Which adjective do cats ski run ice saw my end in?",
    ],
    "phonetic": [
        "S as in Sierra, I as in India, N as in November, E as in Echo, W as in Whiskey, Y as in Yankee?",
        "Which word is sierra-india-november-echo-whiskey-yankee?",
        "Which adjective: Sierra, then India, then November, Echo, Whiskey, Yankee?",
    ],
    "letters": [
        "Which word: S as in sugar, I as in ink, N as in nut, E as in egg, W as in wax, Y as in yak?",
        "Which word has the letters S, then I, then N, then E, W and Y in order?",
        "Which word starts with (S), goes on with (I) (N) (E), and ends with (W) (Y)?",
    ],
    "anagram": [
        "Which word is an anagram of wysine?",
        "Which adjective can newsyi be rearranged into?",
        "Which adjective do the letters of ENWISY make?",
        "Which adjective is wise yn reordered?",
        "Which word is an anagram of w1syn3?",
    ],
    "interleaved": [
        "Which word is sxixnxexwxy without the x's?",
        "Which word is every other letter of sQiQnQeQwQy?",
        "Which word is ssiinneewwyy with the doubles undone?",
        "Which word is s.x.i.x.n.x.e.x.w.x.y less the x's?",
        "Which word is every third letter of sabiabnabeabwaby?",
    ],
    "encoding": [
        "Which word is c2luZXd5 once decoded?",
        "Which word is U2luZXd5 once decoded?",
        "Which word is 73 69 6e 65 77 79 in hex?",
        "Which word is 0x53 0x49 0x4E 0x45 0x57 0x59 in hex?",
        "Which word is 01110011 01101001 01101110 01100101 01110111 01111001?",
        "Which word is ... .. -. . .-- -.-- in Morse?",
        "Which word is ••• •• –• • •–– –•–– in Morse?",
        "Which word is $:?6HJ under ROT47?",
    ],
}

#: Honest questions whose answer is the seed: none may be taken for a leak.
HONEST = [
    "Which adjective means lean and muscular, like a tendon?",
    "What word describes someone wiry and strong, with prominent tendons?",
    "Which adjective describes meat that is tough and stringy?",
    "Which word, from Middle English, describes a body that is all cords and no fat?",
    "Which adjective might a novelist use for the arms of a blacksmith?",
]


@pytest.fixture(scope="module")
def seed_task(corpus: Corpus) -> dict[str, Any]:
    """The corpus's own seed record of the answer (its accepted answers as the corpus lists them)."""
    with (corpus.folder / "seeds.jsonl").open(encoding="utf-8") as f:
        found = next((json.loads(line) for line in f if f'"answer": "{ANSWER}"' in line), None)
    assert found is not None and found["answer"] == ANSWER, f"the corpus has no seed answer {ANSWER!r}"
    return found


@pytest.fixture(scope="module")
def env(corpus: Corpus) -> Any:
    return gym.make("sparring/SearchPropose-v0")


def _submit(env: Any, task: dict[str, Any], question: str) -> dict[str, Any]:
    """Reset to the seed, search twice, submit ``question``; the outcome."""
    obs, info = env.reset(seed=0, options={"task": task})
    assert info["task"]["answer"] == ANSWER
    env.step("<search>tough stringy adjective</search>")
    env.step("<search>sinew tendon</search>")
    _, reward, terminated, _, info = env.step(f"<question>{question}</question>")
    assert terminated
    return dict(info["outcome"], reward=reward)


@pytest.mark.parametrize(("kind", "question"), [(k, q) for k, qs in LEAKS.items() for q in qs])
def test_every_encoding_of_the_seed_answer_is_rejected_through_the_env(
    env: Any, seed_task: dict[str, Any], kind: str, question: str
):
    assert leak(ANSWER, question) == kind or (kind == "spelt" and gives_away(ANSWER, question))
    outcome = _submit(env, seed_task, question)
    assert not outcome["valid"] and "answer_in_question" in outcome["reasons"], outcome["reasons"]
    assert outcome["reward"] == 0.0


@pytest.mark.parametrize("question", HONEST)
def test_honest_questions_about_the_seed_pass_the_leak_filter(env: Any, seed_task: dict[str, Any], question: str):
    assert leak(ANSWER, question) is None
    outcome = _submit(env, seed_task, question)
    assert "answer_in_question" not in outcome["reasons"] and outcome["valid"], outcome["reasons"]


def test_the_skeleton_reads_look_alikes_beyond_cyrillic_and_greek():
    # Armenian, Cherokee, Lisu, Latin small capitals and IPA letters, mathematical and full-width forms
    assert skeleton("օɡᴏꓲ𝐬Ｓ") == "ogolss"
    assert skeleton("a\u200b\u00adb\u3164c") == "abc"  # invisible characters are dropped


def test_short_answers_are_not_found_by_chance(corpus: Corpus):
    # A three-letter answer reversed, shifted or as initials is a word in any question by chance.
    assert leak("dog", "Which god of the sea had a trident?") is None
    assert leak("iron", "Which element lies in the environment?") is None
    assert leak("rat", "Is the tar pit old?") is None and leak("tar", "Which rat ran?") is None
    assert gives_away("Fe", "Which metal is F e?")  # short answers are still caught written out


def _false_positives(pairs: list[tuple[list[str], str]]) -> float:
    """The share of honest pairs (no accepted answer written out) that the leak filter flags."""
    honest = [(answers, q) for answers, q in pairs if not any(_written_out(a, q) for a in answers)]
    flagged = [(answers, q) for answers, q in honest if any(gives_away(a, q) for a in answers)]
    return len(flagged) / len(honest)


def _written_out(answer: str, question: str) -> bool:
    """What the filter caught before it read codes: the answer as whole words, however spelt."""
    from sparring.envs.search.filters import _plain
    from sparring.envs.search.scoring import answer_in_text

    needle = _plain(answer)
    return answer_in_text(answer, question) or bool(needle.strip()) and f" {needle} " in f" {_plain(question)} "


def test_the_leak_filter_rarely_flags_the_held_out_questions(corpus: Corpus):
    rows = [json.loads(line) for line in (corpus.folder / "heldout.jsonl").read_text().splitlines()]
    rate = _false_positives([(r["answers"], r["question"]) for r in rows])
    assert len(rows) == 1000 and rate <= 0.012, rate  # measured: 8 of 978, 0.82% (compounds defined by their parts)


@pytest.mark.slow
def test_the_leak_filter_rarely_flags_the_scripted_proposers_questions(corpus: Corpus):
    from sparring.agents.demonstrators import DefinitionProposerAgent

    env = SearchProposeEnv()
    agent = DefinitionProposerAgent()
    pairs = []
    for seed in range(300):
        obs, info = env.reset(seed=1000 + seed)
        agent.reset(obs, info)
        for _ in range(3):
            obs, _, terminated, _, info = env.step(agent.act(obs, info))
        question = info["outcome"]["question"]
        if question:
            pairs.append((info["outcome"]["answers"], question))
    assert len(pairs) >= 250
    # Measured: 0.63% of 1,432 such questions (corpus format 3) and 1.0% of 579 (format 4, seeds
    # 1000-1599), every one a compound its definition names by its parts; 300 draws are noisy (5 here).
    assert _false_positives(pairs) <= 0.025


def _model(knows_unaided: bool) -> Any:
    """A model that answers from its documents, and also without them when it ``knows_unaided``."""
    calls: list[list[str]] = []

    def answer_fn(prompts: list[str]) -> list[str]:
        calls.append(prompts)
        return [
            "<answer>Sinewy</answer>" if knows_unaided or "Doc 1" in p else "<answer>tough</answer>" for p in prompts
        ]

    answer_fn.calls = calls  # type: ignore[attr-defined]
    return answer_fn


HONEST_QUESTION = HONEST[0]


def test_a_question_answered_without_retrieval_is_rejected(corpus: Corpus, seed_task: dict[str, Any]):
    answer_fn = _model(knows_unaided=True)
    env = gym.make("sparring/SearchPropose-v0", validator=PolicyValidator(answer_fn))
    outcome = _submit(env, seed_task, HONEST_QUESTION)
    assert not outcome["valid"] and outcome["reasons"] == ["answerable_without_search"] and outcome["reward"] == 0.0
    rag, unaided = answer_fn.calls
    assert "Doc 1" in rag[0] and "Doc" not in unaided[0] and HONEST_QUESTION in unaided[0]


def test_a_question_that_needs_its_documents_is_valid_and_the_check_can_be_turned_off(
    corpus: Corpus, seed_task: dict[str, Any]
):
    answer_fn = _model(knows_unaided=False)
    env = gym.make("sparring/SearchPropose-v0", validator=PolicyValidator(answer_fn))
    outcome = _submit(env, seed_task, HONEST_QUESTION)
    assert outcome["valid"] and outcome["reasons"] == [] and len(answer_fn.calls) == 2
    off = _model(knows_unaided=True)
    env = gym.make("sparring/SearchPropose-v0", validator=PolicyValidator(off, closed_book=False))
    assert _submit(env, seed_task, HONEST_QUESTION)["valid"]
    assert all("Doc 1" in p for call in off.calls for p in call)  # off: no prompt without documents


def test_the_unaided_check_fails_closed(corpus: Corpus, seed_task: dict[str, Any]):
    def half_broken(prompts: list[str]) -> list[str]:
        if "Doc 1" in prompts[0]:
            return ["<answer>Sinewy</answer>"] * len(prompts)
        raise ConnectionError("endpoint went away")

    proposal = Proposal(HONEST_QUESTION, "Sinewy", [{"id": "x", "contents": '"Sinewy"\nTough, like a tendon.'}])
    (verdict,) = validate_safely(PolicyValidator(half_broken), [proposal])
    assert not verdict.valid and verdict.reasons == ["validator_error: ConnectionError: endpoint went away"]
    env = gym.make("sparring/SearchPropose-v0", validator=PolicyValidator(half_broken))
    outcome = _submit(env, seed_task, HONEST_QUESTION)
    assert not outcome["valid"] and outcome["reasons"][0].startswith("validator_error: ConnectionError")


@pytest.mark.timeout(60)
def test_a_huge_question_of_letters_and_quotes_is_judged_in_linear_time(env: Any, seed_task: dict[str, Any]):
    # Runs of every length over single letters and quoted fragments were quadratic: minutes of `step`.
    outcome = _submit(env, seed_task, " ".join(["a b c d e f", '"s" "in"'] * 10000))
    assert not outcome["valid"] and "question_too_long" in outcome["reasons"]
