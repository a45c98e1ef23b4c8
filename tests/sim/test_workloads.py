import numpy as np
import pytest

from uniradix.sim.ideal import ideal_hits
from uniradix.sim.workloads import (
    WORKLOADS,
    agentic,
    generate_workload,
    long_doc_qa,
    multi_turn,
    shared_prefix,
)


@pytest.mark.parametrize("name", sorted(WORKLOADS))
def test_workload_is_deterministic_and_seeded(name: str) -> None:
    a, b = generate_workload(name, seed=3), generate_workload(name, seed=3)
    c = generate_workload(name, seed=4)
    assert [s.rid for s in a] == list(range(len(a)))
    for x, y in zip(a, b, strict=True):
        assert np.array_equal(x.prompt.token_ids(), y.prompt.token_ids())
        assert np.array_equal(x.output_ids, y.output_ids)
        assert x.after == y.after
    assert not np.array_equal(a[0].prompt.token_ids(), c[0].prompt.token_ids())
    assert len(generate_workload(name, seed=3, max_requests=5)) == 5


def test_unknown_workload_is_rejected() -> None:
    with pytest.raises(ValueError, match="nope"):
        generate_workload("nope")


def test_shared_prefix_groups_share_their_system_prompt() -> None:
    specs = shared_prefix(seed=1, groups=2, questions=3, system_len=10, question_len=4)
    assert len(specs) == 6
    prompts = [s.prompt.token_ids() for s in specs]
    # interleaved: requests 0, 2, 4 are group 0; 1, 3, 5 group 1
    assert all(np.array_equal(prompts[i][:10], prompts[0][:10]) for i in (2, 4))
    assert all(np.array_equal(prompts[i][:10], prompts[1][:10]) for i in (3, 5))
    assert prompts[0][0] != prompts[1][0]


def test_multi_turn_extends_previous_prompt_and_answer() -> None:
    specs = multi_turn(seed=2, conversations=2, turns=3, system_len=8)
    assert len(specs) == 6
    for s in specs[2:]:
        assert s.after == s.rid - 2
        prev = specs[s.rid - 2]
        sent = np.concatenate([prev.prompt.token_ids(), prev.output_ids])
        assert np.array_equal(s.prompt.token_ids()[: len(sent)], sent)
        assert len(s.prompt) > len(sent)
    assert specs[0].after is None and specs[1].after is None
    assert np.array_equal(specs[0].prompt.token_ids()[:8], specs[1].prompt.token_ids()[:8])


def test_agentic_has_retries_and_branches() -> None:
    specs = agentic(seed=0, agents=4, steps=10)
    prompts = [s.prompt.token_ids() for s in specs]
    retries = [
        s for s in specs if s.after is not None and np.array_equal(prompts[s.rid], prompts[s.after])
    ]
    assert retries, "no retry (same context resent)"
    hits = ideal_hits(specs)
    assert sum(hits) > 0.5 * sum(len(p) for p in prompts)


def test_long_doc_qa_shares_documents() -> None:
    specs = long_doc_qa(seed=0, documents=2, questions=3, document_len=100)
    hits = ideal_hits(specs)
    assert hits[:2] == [0, 0]
    assert all(h >= 100 for h in hits[2:])


def test_random_prompts_do_not_share() -> None:
    specs = generate_workload("random", seed=0)
    assert sum(ideal_hits(specs)) == 0
