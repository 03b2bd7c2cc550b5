"""Per-layer expert cache policies (issue 34, section 2): Belady exact on hand-checked cases and equal to an
exhaustive optimum, the fast simulator equal to the plain per-layer classes (what a session's cache runs),
and LFU and static equal to brute-force references written here, on small random traces."""
from __future__ import annotations

import functools
import re
from itertools import combinations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from workbench.errors import ParamError
from workbench.expert.policies import parse_policy
from workbench.expert.policies.simulate import belady_fraction, simulate, simulate_reference
from workbench.expert.routing import RoutingTrace, synthetic_trace

POLICIES = ["lru", "fifo", "lfu", "lfu:3", "arc", "static", "belady"]


def _trace(tokens: list[list[list[int]]], n_experts: int) -> RoutingTrace:
    """A trace from ``tokens[t][layer] = [experts]``."""
    arr = np.asarray(tokens, dtype=np.int32)
    arr.setflags(write=False)
    return RoutingTrace(arr, tuple(range(arr.shape[1])), n_experts, "test")


def _one_layer(seq: list[list[int]], n_experts: int) -> RoutingTrace:
    return _trace([[row] for row in seq], n_experts)


def _hits(trace: RoutingTrace, policy: str, n: int) -> int:
    return next(sum(r.hits) for r in simulate(trace, [policy], [n]) if r.policy == policy)


def test_belady_hand_checked_farthest_next_use_leaves():
    # c=2, k=1: a b c a b. At c, a is next used at 3 and b at 4: b leaves, a hits; b misses. LRU drops a, then b.
    tr = _one_layer([[0], [1], [2], [0], [1]], 3)
    assert _hits(tr, "belady", 2) == 1
    assert _hits(tr, "lru", 2) == 0


def test_belady_hand_checked_with_a_token_of_two():
    # c=3, k=2: (0,1) (2,3) (0,2) (1,3). At 3 (token 1) 0 and 1 may leave; 0 returns first, so 1 leaves;
    # token 2 hits twice; at token 3, 1 misses (0 or 2 leaves: neither returns) and 3 hits: 3 hits in all.
    tr = _one_layer([[0, 1], [2, 3], [0, 2], [1, 3]], 4)
    assert _hits(tr, "belady", 3) == 3


def test_the_tokens_own_experts_are_pinned_while_it_is_served():
    # c=3, k=2: (0,1) (2,3) (4,1). At token 2, 4 misses while 1 — the least recently used — is routed to the
    # same token: 2 leaves instead, and 1 hits. Unpinned LRU would evict 1 and miss it right after.
    # FIFO likewise (1, loaded first, is the oldest: 2 leaves instead, as 1 is routed to the token). Then
    # (2, 0): 2 left, so both miss; a cache that evicted 1 and kept 2 would hit it.
    tr = _one_layer([[0, 1], [2, 3], [4, 1], [2, 0]], 5)
    for policy in ("lru", "fifo"):
        assert _hits(tr, policy, 3) == 1, policy
        assert simulate_reference(tr, policy, 3).hits == (1,), policy


def _optimum(seq: tuple[tuple[int, ...], ...], c: int) -> int:
    """The most hits any eviction choice gets (every miss loaded, the token's experts pinned): exhaustive."""
    @functools.lru_cache(maxsize=None)
    def best(t: int, cache: frozenset) -> int:
        if t == len(seq):
            return 0
        token = seq[t]
        hits = sum(e in cache for e in token)
        loaded = cache | set(token)
        over = len(loaded) - c
        if over <= 0:
            return hits + best(t + 1, frozenset(loaded))
        outs = [best(t + 1, frozenset(loaded - set(drop))) for drop in combinations(sorted(cache - set(token)), over)]
        return hits + max(outs)
    return best(0, frozenset())


@st.composite
def _small_layer(draw, max_tokens=8, max_experts=5):
    n_experts = draw(st.integers(2, max_experts))
    k = draw(st.integers(1, min(2, n_experts)))
    tokens = draw(st.integers(1, max_tokens))
    seq = [draw(st.permutations(range(n_experts)))[:k] for _ in range(tokens)]
    c = draw(st.integers(k, n_experts))
    return seq, n_experts, c


@settings(max_examples=150, deadline=None)
@given(_small_layer())
def test_belady_is_the_exhaustive_optimum(case):
    seq, n_experts, c = case
    tr = _one_layer(seq, n_experts)
    best = _optimum(tuple(tuple(r) for r in seq), c)
    assert _hits(tr, "belady", c) == best
    for policy in ("lru", "fifo", "lfu", "arc"):  # a policy that loads every miss never beats it
        assert _hits(tr, policy, c) <= best


def _lfu_brute(seq: list[list[int]], c: int, age: int) -> int:
    uses: dict[int, int] = {}
    last: dict[int, int] = {}
    hits, pos = 0, 0
    for t, token in enumerate(seq):
        if t and t % age == 0:
            uses = {e: u // 2 for e, u in uses.items()}
        for e in token:
            if e in uses:
                hits += 1
                uses[e] += 1
            else:
                if len(uses) == c:
                    victim = min((e2 for e2 in uses if e2 not in token), key=lambda e2: (uses[e2], last[e2]))
                    del uses[victim]
                uses[e] = 1
            last[e] = pos
            pos += 1
    return hits


def _static_brute(seq: list[list[int]], n_experts: int, c: int) -> int:
    counts = [sum(row.count(e) for row in seq) for e in range(n_experts)]
    hot = sorted(range(n_experts), key=lambda e: (-counts[e], e))[:c]
    seen: set[int] = set()
    hits = 0
    for token in seq:
        for e in token:
            hits += e in hot and e in seen
            seen.add(e)
    return hits


@st.composite
def _small_trace(draw):
    n_experts = draw(st.integers(2, 9))
    k = draw(st.integers(1, min(3, n_experts)))
    layers = draw(st.integers(1, 3))
    tokens = draw(st.integers(1, 40))
    arr = [[draw(st.permutations(range(n_experts)))[:k] for _ in range(layers)] for _ in range(tokens)]
    sizes = draw(st.lists(st.integers(k, n_experts), min_size=1, max_size=3))
    return _trace(arr, n_experts), sizes


@settings(max_examples=120, deadline=None)
@given(_small_trace())
def test_simulator_equals_the_per_layer_classes_and_brute_force(case):
    tr, sizes = case
    results = simulate(tr, POLICIES, sizes)
    for r in results:
        ref = simulate_reference(tr, r.policy, r.cache_experts)
        assert r.hits == ref.hits, (r.policy, r.cache_experts)
        for i in range(len(tr.layers)):
            seq = tr.experts[:, i, :].tolist()
            if r.policy.startswith("lfu"):
                assert r.hits[i] == _lfu_brute(seq, r.cache_experts, parse_policy(r.policy).age_tokens)
            if r.policy == "static":
                assert r.hits[i] == _static_brute(seq, tr.n_experts, r.cache_experts)


def test_results_per_layer_and_as_a_fraction_of_belady():
    tr = synthetic_trace(400, 3, 8, 2, distribution="zipf", seed=5)
    res = simulate(tr, ["lru", "static"], [2, 4, 8])
    assert [r.policy for r in res][:3] == ["belady"] * 3  # the bound first, every size
    frac = belady_fraction(res)
    for r in res:
        assert len(r.layer_rates) == 3 and r.lookups == 400 * 3 * 2
        assert abs(np.mean(r.layer_rates) - r.hit_rate) < 1e-12
        if r.policy == "lru":
            assert 0 < frac[("lru", r.cache_experts)] <= 1
    # a cache of k holds the previous token's experts whatever the policy (the overlap of consecutive tokens);
    # one of every expert misses only the first use of each
    pairs = [(a, b) for i in range(3) for a, b in zip(tr.experts[:-1, i].tolist(), tr.experts[1:, i].tolist())]
    overlap = sum(len(set(a) & set(b)) for a, b in pairs)
    assert {sum(r.hits) for r in res if r.cache_experts == 2 and r.policy != "static"} == {overlap}
    assert {sum(r.hits) for r in res if r.cache_experts == 8} == {400 * 3 * 2 - _distinct(tr)}


def _distinct(tr: RoutingTrace) -> int:
    return sum(len(np.unique(tr.experts[:, i])) for i in range(len(tr.layers)))


@pytest.mark.parametrize("sizes, policy, detail", [
    ([1], "lru", "must be in [2, 8]"), ([9], "lru", "must be in [2, 8]"), ([4], "mru", "is not one of"),
    ([4], "lfu:0", "aging period"), ([4], "arc:2", "only lfu takes"), ([], "lru", "at least one"),
])
def test_bad_sizes_and_policies_are_one_line(sizes, policy, detail):
    tr = synthetic_trace(10, 2, 8, 2, seed=0)
    with pytest.raises(ParamError, match=re.escape(detail)) as err:
        simulate(tr, [policy], sizes)
    assert "\n" not in str(err.value)


@pytest.mark.parametrize("distribution, seed", [("zipf", 1), ("zipf", 2), ("uniform", 3)])
def test_simulator_equals_the_classes_on_longer_traces(distribution, seed):
    # long enough for ARC's ghost lists to fill and its target to move both ways many times
    tr = synthetic_trace(600, 2, 16, 2, distribution=distribution, zipf_s=0.9, seed=seed)
    for r in simulate(tr, ["lru", "fifo", "lfu:16", "arc", "static"], [3, 5, 8, 12]):
        assert r.hits == simulate_reference(tr, r.policy, r.cache_experts).hits, (r.policy, r.cache_experts)
