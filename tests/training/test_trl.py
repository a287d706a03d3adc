"""A Sparring solver env trains one real step under ``trl.GRPOTrainer(environment_factory=...)``.

The policy is a tiny random Llama with SmolLM2's tokenizer (tests/training/conftest.py): SmolLM2
itself takes minutes for one GRPO step on a shared 2-core machine. The env is SearchAnswer-v0 on
the default corpus, the chat template the tool-capable ChatML one (SmolLM2's own renders no tools,
and TRL refuses it).
"""

from __future__ import annotations

import os

import pytest

from tests.conftest import cpu_grpo_config, default_corpus_built, require
from tests.training.conftest import tiny_model

pytestmark = [pytest.mark.slow, pytest.mark.model]


def test_grpo_trains_one_step_on_search_answer(tmp_path, smol_tokenizer):
    require(default_corpus_built(), "the default corpus")
    os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
    torch = pytest.importorskip("torch")
    datasets = pytest.importorskip("datasets")
    trl = pytest.importorskip("trl")
    import copy

    from sparring.envs.trl import chatml_tool_template, trl_environment_factory

    torch.set_num_threads(min(2, torch.get_num_threads()))
    tokenizer = copy.deepcopy(smol_tokenizer)
    tokenizer.chat_template = chatml_tool_template()
    tokenizer.padding_side = "left"
    model = tiny_model(tokenizer)
    before = {name: p.detach().clone() for name, p in model.named_parameters()}

    made = []
    factory = trl_environment_factory("sparring/SearchAnswer-v0", max_turns=2)

    def environment():
        made.append(factory())
        return made[-1]

    system = {"role": "system", "content": "You are a helpful AI assistant named SmolLM, trained by Hugging Face"}
    rows = [{"prompt": [system, {"role": "user", "content": ""}], "seed": seed} for seed in (1, 2)]

    def token_hash(completion_ids, **kwargs):
        # The env's reward is 0 for every rollout of a random model: no advantage, no update. A hash
        # of the sampled tokens differs between rollouts, which gives the step a signal.
        return [sum(ids) % 101 / 100 for ids in completion_ids]

    args = cpu_grpo_config(
        tmp_path,
        per_device_train_batch_size=4,
        num_generations=2,
        max_completion_length=16,
        max_tool_calling_iterations=1,
        learning_rate=1e-2,
        shuffle_dataset=False,
    )
    trainer = trl.GRPOTrainer(
        model=model,
        reward_funcs=[token_hash],
        args=args,
        train_dataset=datasets.Dataset.from_list(rows),
        processing_class=tokenizer,
        environment_factory=environment,
    )
    # TRL offers exactly the env's tools.
    assert sorted(tool.__name__ for tool in trainer.tools) == ["answer", "search"]
    trainer.train()

    assert trainer.state.global_step == 1
    logged = trainer.state.log_history[0]
    assert "rewards/TRLSearchAnswerEnv/mean" in logged  # the env's get_reward was a reward source
    # Every rollout reset its own env on a task drawn from its row's seed; the G rollouts of a row share it.
    questions = [env._env.task["question"] for env in made]
    assert len(made) == 4 and all(questions)
    assert questions[0] == questions[1] and questions[2] == questions[3] and questions[0] != questions[2]
    changed = [name for name, p in model.named_parameters() if not torch.equal(before[name], p.detach())]
    assert changed, "the GRPO step left every parameter as it was"
