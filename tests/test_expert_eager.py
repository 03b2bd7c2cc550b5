"""schedule=eager (issue 34 §5): a layer's hits are sent first, the next layer is planned (its reads
handed to the lanes) before this layer's misses are waited for, and only then are the misses sent and
the copies drained. Every landed slice is read back against the file over several layouts and
placements, on a device whose asynchronous copies read their source only when waited for; the order of
events is checked against the landed schedule, which does the opposite."""
from __future__ import annotations

import pytest
from device_fakes import DeferredCopyDevice
from moe_layouts import three_layouts

from workbench.errors import ParamError
from workbench.expert.decode import Decoder
from workbench.expert.cache import ExpertCache
from workbench.expert.memory import PAGE
from workbench.expert.session import ExpertSession
from workbench.expert.session_config import SessionConfig, check_config
from workbench.upload.host import HostDevice


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    return three_layouts(tmp_path_factory.mktemp("eager"), seed=11)


def _config(index, **kw):
    """A third of the experts' bytes; a pool at least 30 frames (two layers' routed slices, 2 x 2 experts x
    3 blobs, are pinned at once while the next layer is planned; a token routes 18 of the tiny file's 72)."""
    slices = [n for b in index.blobs for _, n in b.slices]
    frame = -(-max(slices) // PAGE) * PAGE
    cache = max(sum(slices) / 3, 30 * frame) if kw.get("placement") == "pool" else sum(slices) / 3
    base = dict(turns=3, tokens=3, experts_per_token=2, distribution="zipf", lanes=3, overlap=True,
                cache_mib=cache / 2**20, verify=True, verify_end=True)
    return SessionConfig(**{**base, **kw})


def _run(index, device, **kw):
    with ExpertSession(index, device, _config(index, **kw)) as s:
        records = list(s.turns())
        s.finish_checks()
        return records, s.verified_slices


@pytest.mark.parametrize("model", ["page", "odd", "gguf-py"])
@pytest.mark.parametrize("placement", ["pool", "inplace", "bounce"])
def test_every_slice_lands_the_files_bytes(models, model, placement):
    records, verified = _run(models[model], DeferredCopyDevice(), schedule="eager", placement=placement)
    assert sum(r.misses for r in records) > 0 and sum(r.hits for r in records) > 0
    assert sum(r.evictions for r in records) > 0
    assert verified >= sum(r.hits + r.misses for r in records)  # a wrong byte raised VerificationError


@pytest.mark.parametrize("placement", ["pool", "inplace"])
def test_under_lru_it_hits_misses_and_lays_out_the_arena_as_the_landed_schedule_does(models, placement, monkeypatch):
    counts, layouts = {}, {}
    for schedule in ("landed", "eager"):
        layers: list = []
        real = Decoder._landed
        monkeypatch.setattr(Decoder, "_landed", lambda self, landed: (layers.append(list(landed)), real(self, landed)))
        records, _ = _run(models["odd"], HostDevice(), schedule=schedule, placement=placement, turns=4)
        monkeypatch.undo()
        counts[schedule] = [(r.hits, r.misses, r.evictions, r.bytes_read) for r in records]
        layouts[schedule] = layers  # each layer's (key, arena offset, bytes) in routing order
    assert counts["eager"] == counts["landed"]
    assert layouts["eager"] == layouts["landed"] and len(layouts["eager"]) % (4 * 3) == 0 and layouts["eager"]


def _events(index, schedule, monkeypatch):
    """What the decode thread did, in order: ("plan", token, layer position) as a layer is planned,
    ("complete", layer) as a miss's read was waited for and counted, ("view", layer) as a slice is sent."""
    log: list[tuple] = []
    plan, complete, view = Decoder._plan, ExpertCache.complete, ExpertCache.view
    layer_of = {i: b.layer for i, b in enumerate(index.blobs)}

    def logged_plan(self, t, i):
        log.append(("plan", t, self.trace.layers[i]))
        return plan(self, t, i)

    def logged_complete(self, key, outcome, kind=""):
        log.append(("complete", layer_of[key.blob]))
        return complete(self, key, outcome, kind)

    def logged_view(self, key):
        log.append(("view", layer_of[key.blob]))
        return view(self, key)

    monkeypatch.setattr(Decoder, "_plan", logged_plan)
    monkeypatch.setattr(ExpertCache, "view", logged_view)
    monkeypatch.setattr(ExpertCache, "complete", logged_complete)
    cfg = _config(index, schedule=schedule, placement="pool", verify=False, verify_end=False, turns=2)
    with ExpertSession(index, HostDevice(), cfg) as s:
        list(s.turns())
    monkeypatch.undo()
    return log, cfg.tokens


def _before_and_after(log, tokens, what):
    """Over each pair of layers planned one after the other in a turn (A, then B): how many of A's events
    ``what`` ("complete": misses waited for, "view": slices sent) came before B was planned, how many after."""
    plans = [n for n, e in enumerate(log) if e[0] == "plan"]
    before = after = 0
    for a, b in zip(plans, plans[1:]):
        (_, _, layer_a), (_, t_b, _) = log[a], log[b]
        if t_b % tokens == 0 and log[b][2] == log[plans[0]][2]:
            continue  # B begins a turn: nothing is planned ahead across a turn's end
        end = next((p for p in plans if p > b), len(log))
        before += sum(1 for e in log[a:b] if e == (what, layer_a))
        after += sum(1 for e in log[b:end] if e == (what, layer_a))
    return before, after


def test_the_next_layers_reads_are_issued_before_this_layers_misses_are_waited_for(models, monkeypatch):
    log, tokens = _events(models["page"], "eager", monkeypatch)
    assert _before_and_after(log, tokens, "complete")[0] == 0 < _before_and_after(log, tokens, "complete")[1]
    sent_before, sent_after = _before_and_after(log, tokens, "view")
    assert sent_before > 0 and sent_after > 0  # the hits before the next layer is planned, the misses after
    log, tokens = _events(models["page"], "landed", monkeypatch)
    for what in ("complete", "view"):  # landed: the next layer is planned once this one has landed
        assert _before_and_after(log, tokens, what)[0] > 0 == _before_and_after(log, tokens, what)[1]


@pytest.mark.parametrize("kw, needle", [
    (dict(overlap=False), "needs --overlap"),
    (dict(overlap=True, lanes=2, prefetch="previous"), "--prefetch route"),
    (dict(overlap=True, lanes=2, batch_misses=True), "not with --batch-misses"),
    (dict(overlap=True, schedule="soon"), "not one of landed, eager"),
])
def test_what_eager_cannot_do_is_one_line(kw, needle):
    with pytest.raises(ParamError) as err:
        check_config(SessionConfig(turns=1, tokens=1, **{"schedule": "eager", **kw}))
    assert needle in str(err.value) and "\n" not in str(err.value)
