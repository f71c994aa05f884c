"""The Search envs end to end: a scripted search-then-answer policy, Search-R1 observations, QA files."""

import json

import gymnasium as gym
import pytest

import toolgym
from toolgym.search import sources
from toolgym.search.world import KnowledgeWorld
from toolgym.testing.scripted import play_script

SEARCH, MULTIHOP = "toolgym/Search-v0", "toolgym/SearchMultiHop-v0"


def test_a_search_then_answer_policy_finds_every_fact_and_scores_one():
    """Search each entity on the path; each observation must show its document and the next name to search
    (or the answer), then the answer scores 1.0."""
    env = gym.make(SEARCH)
    for seed in range(12):
        obs, info = env.reset(seed=seed)
        task = env.unwrapped.task
        assert obs == task.prompt and info["task_id"] == task.id
        next_steps = [[q] for q in task.data["queries"][1:]] + [task.data["golden_answers"]]
        for query, needed in zip(task.data["queries"], next_steps, strict=True):
            obs, reward, terminated, truncated, info = env.step(f"<search>{query}</search>")
            assert obs.startswith("<information>\nDoc 1 (Title: ") and obs.endswith("</information>")
            assert f"(Title: {query})" in obs and any(n in obs for n in needed)
            assert (reward, terminated, truncated) == (0.0, False, False)
        _, reward, terminated, _, info = env.step(f"<think>found it</think><answer>{task.answer}</answer>")
        assert reward == 1.0 and terminated and info["verdict"].details["em"] == 1.0


def test_the_multi_hop_env_asks_two_or_three_hop_questions():
    env = gym.make(MULTIHOP)
    hops = set()
    for seed in range(20):
        env.reset(seed=seed)
        hops.add(env.unwrapped.task.data["hops"])
    assert hops == {2, 3} and env.unwrapped.max_turns == 8


def test_f1_reward_gives_partial_credit():
    env = gym.make(SEARCH, reward="f1", hops=1)
    env.reset(seed=0)
    task = env.unwrapped.task
    answer = f"{task.answer} probably"
    _, reward, terminated, _, info = env.step(f"<answer>{answer}</answer>")
    assert terminated and 0.0 < reward < 1.0 and not info["verdict"].passed


def test_world_kwargs_choose_the_world_and_tasks_are_deterministic():
    a = gym.make(SEARCH, world_size=500, world_seed=3)
    b = gym.make(SEARCH, world_size=500, world_seed=3)
    c = gym.make(SEARCH, world_size=500, world_seed=4)
    prompts = [a.reset(seed=s)[0] for s in range(5)]
    assert prompts == [b.reset(seed=s)[0] for s in range(5)] != [c.reset(seed=s)[0] for s in range(5)]
    assert a.unwrapped.task.id.startswith("kworld-s3-n500-h123/")
    assert a.unwrapped.tools["search"].retriever is b.unwrapped.tools["search"].retriever  # one shared index


def test_the_default_world_index_is_small_and_built_once_per_process():
    """What keeps ``gym.make`` quick: the default index holds a few thousand documents, built on first use and
    shared by every later env. Its build time is measured by ``benchmarks/bench_latency.py``."""
    sources._world_index.cache_clear()
    first, second = gym.make(SEARCH), gym.make(SEARCH)
    assert sources._world_index.cache_info()[:2] == (1, 1)  # (hits, misses): built once, then reused
    index = first.unwrapped.tools["search"].retriever
    assert index is second.unwrapped.tools["search"].retriever
    assert len(index) == sources.DEFAULT_WORLD_SIZE <= 5_000


def test_observations_respect_topk_and_document_cut():
    env = gym.make(SEARCH, topk=1, max_doc_chars=40)
    env.reset(seed=0)
    obs, *_ = env.step(f"<search>{env.unwrapped.task.data['queries'][0]}</search>")
    assert obs.count("Doc ") == 1 and "Doc 2" not in obs and "…" in obs


def test_other_formats_show_plain_documents():
    env = gym.make(SEARCH, action_format="hermes")
    env.reset(seed=0)
    query = env.unwrapped.task.data["queries"][0]
    call = f"<tool_call>{json.dumps({'name': 'search', 'arguments': {'query': query}})}</tool_call>"
    _, _, _, _, info = env.step(call)
    assert info["messages"][-1]["role"] == "tool"
    assert info["messages"][-1]["content"].startswith(f"Doc 1 (Title: {query})")


def _qa_files(tmp_path):
    corpus = tmp_path / "corpus.jsonl"
    docs = [
        {"id": "0", "contents": '"Vellmora"\nVellmora is a harbour town whose lighthouse was built in 1821.'},
        {"id": "1", "contents": '"Ostrel"\nOstrel is a mountain village known for its blue cheese.'},
    ]
    corpus.write_text("".join(json.dumps(d) + "\n" for d in docs), encoding="utf-8")
    questions = tmp_path / "qa.jsonl"
    rows = [
        {"id": "q1", "question": "When was the lighthouse of Vellmora built?", "golden_answers": ["1821"]},
        {
            "id": "q2",
            "question": "What is Ostrel known for?",
            "golden_answers": ["blue cheese", "its cheese"],
        },
    ]
    questions.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return questions, corpus


def test_qa_files_with_a_corpus(tmp_path):
    questions, corpus = _qa_files(tmp_path)
    env = gym.make(SEARCH, tasks=str(questions), corpus=str(corpus))
    obs, _ = env.reset(options={"task_id": "q2"})
    assert obs == "What is Ostrel known for?"
    script = [toolgym.ToolCall(name="search", arguments={"query": "Ostrel"}), "Blue cheese."]
    summary = play_script(env, script, options={"task_id": "q2"})
    assert summary.reward == 1.0 and summary.tool_errors == 0


def test_qa_files_with_a_retriever_service(tmp_path, world, service_url):
    questions = tmp_path / "world_qa.jsonl"
    picked = [world.question(s, hops=1) for s in range(3)]
    rows = [{"question": q.text, "golden_answers": q.golden_answers} for q in picked]
    questions.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    env = gym.make(SEARCH, tasks=str(questions), retriever=service_url)
    for i, q in enumerate(picked):
        env.reset(options={"task_id": f"world_qa/{i}"})
        obs, *_ = env.step(f"<search>{q.queries[0]}</search>")
        assert f"(Title: {q.queries[0]})" in obs and q.answer in obs
        assert env.step(f"<answer>{q.answer}</answer>")[1] == 1.0
    env.close()


def test_an_unreachable_retriever_is_flagged_in_info_and_the_episode_goes_on(closed_port_url, tmp_path):
    questions, _ = _qa_files(tmp_path)
    env = gym.make(SEARCH, tasks=str(questions), retriever=closed_port_url)
    env.unwrapped.tools["search"].retriever.retries = 0
    env.reset(seed=0)
    obs, reward, terminated, truncated, info = env.step("<search>Ostrel</search>")
    (result,) = info["tool_results"]
    assert result.status == "infra_error" and "search service failed" in obs
    assert (reward, terminated, truncated) == (0.0, False, False)


def test_documents_must_come_from_one_place(tmp_path):
    questions, corpus = _qa_files(tmp_path)
    with pytest.raises(ValueError, match="need documents to search"):
        gym.make(SEARCH, tasks=str(questions))
    with pytest.raises(ValueError, match="one document source"):
        gym.make(SEARCH, corpus=str(corpus), retriever="http://127.0.0.1:1")


def test_a_saved_index_can_back_the_world_tasks(tmp_path):
    world = KnowledgeWorld(300, seed=9)
    from toolgym.search.bm25 import BM25Index

    BM25Index.build(world.documents()).save(tmp_path / "idx")
    env = gym.make(MULTIHOP, world_size=300, world_seed=9, index=str(tmp_path / "idx"))
    env.reset(seed=1)
    task = env.unwrapped.task
    script = [toolgym.ToolCall(name="search", arguments={"query": q}) for q in task.data["queries"]]
    assert play_script(env, [*script, task.answer], options={"task": task}).reward == 1.0
