"""Route-ahead prefetch where the host computes (issue 34 §3 with §4): a layer planned to run on the host
(``--miss host``, or an ``auto`` token the host computes) stages nothing to the device; what the predictor
named there is counted as skipped, and precision and recall are over the layers staged for only. The
fetched path stages, scores and verifies its bytes as before."""
from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from workbench.cli import main
from workbench.expert.miss.chooser import TokenChooser
from workbench.expert.session import ExpertSession, SessionConfig
from workbench.ledger import Ledger
from workbench.upload.host import HostDevice

TURNS, TOKENS, LAYERS = 3, 4, 2
ASKED = TOKENS * LAYERS - 1  # a turn's first layer is never staged for


@pytest.fixture(scope="module")
def moe64(synth_model):
    return synth_model("gguf", "moe", alignment=64, size=16 << 20, experts=64)


def _session(index, **kw):
    cfg = SessionConfig(**({"turns": TURNS, "tokens": TOKENS, "cache_mib": 2, "experts_per_token": 4, "lanes": 2,
                            "overlap": True, "verify": True} | kw))
    with ExpertSession(index, HostDevice(), cfg) as s:
        records = list(s.turns())
        return records, s.report(), s


def _expert_bytes(index, layer, expert):
    return sum(b.slices[expert][1] for b in index.blobs if b.layer == layer)


def test_a_host_session_stages_nothing_and_counts_what_it_skipped(moe64):
    records, report, s = _session(moe64, miss="host", prefetch="previous")
    trace = s.trace
    named = nbytes = 0  # the previous token's experts, every layer asked: all of them skipped, none live
    for t in range(TURNS * TOKENS):
        for i in range(LAYERS):
            if t % TOKENS == 0 and i == 0 or t == 0:
                continue  # a turn's first layer is not asked; token 0 has no previous token to name
            experts = set(trace.experts[t - 1, i].tolist())
            named += len(experts)
            nbytes += sum(_expert_bytes(moe64, trace.layers[i], e) for e in experts)
    for r in records:
        assert r.prefetch_bytes == 0 and r.bytes_read == 0 and r.miss_fetched == 0  # nothing read to the device
        assert (r.prefetch_layers, r.prefetch_skipped_layers) == (0, ASKED)
        assert (r.prefetch_named, r.prefetch_routed) == (0, 0)  # skipped layers are not scored
    sm = report.summary
    assert (sm.prefetch_skipped_named, sm.prefetch_skipped_bytes) == (named, nbytes) and named > 0
    assert (sm.prefetch_precision, sm.prefetch_recall) == (None, None)


def _host_is_cheaper(monkeypatch, ways):
    """A fake cost source: a layer run fetch costs 10 ms, one run on the host 1 ms, whatever the clock
    says; ``ways`` collects (token, way) of each layer as auto learns it."""
    learn = TokenChooser.layer_done

    def priced(self, t, way, wall_s, last):
        ways.append((t, way))
        return learn(self, t, way, 0.010 if way == "fetch" else 0.001, last)
    monkeypatch.setattr(TokenChooser, "layer_done", priced)


def test_auto_skips_staging_for_host_tokens_once_the_host_is_the_cheaper_way(moe64, monkeypatch):
    ways: list[tuple[int, str]] = []
    _host_is_cheaper(monkeypatch, ways)
    records, report, s = _session(moe64, miss="auto", prefetch="oracle")  # the exact oracle: names the routing
    assert len(ways) == TURNS * TOKENS * LAYERS
    ran = {(t, n % LAYERS): way for n, (t, way) in enumerate(ways)}
    for turn, r in enumerate(records):
        asked = [(t, i) for t in range(turn * TOKENS, (turn + 1) * TOKENS) for i in range(LAYERS)][1:]
        host = sum(ran[step] == "host" for step in asked)
        assert (r.prefetch_skipped_layers, r.prefetch_layers) == (host, ASKED - host)  # skipped iff run on the host
    first, later = records[0], records[1:]
    assert first.prefetch_layers > 0 and first.prefetch_bytes > 0 and first.prefetch_skipped_layers > 0
    for r in later:  # after the warm-up every token runs on the host: nothing staged, nothing fetched
        assert (r.prefetch_skipped_layers, r.prefetch_bytes, r.miss_fetched, r.bytes_read) == (ASKED, 0, 0, 0)
        assert r.prefetch_skipped_named == ASKED * 4  # the exact oracle names the 4 routed experts
    sm = report.summary
    assert sm.prefetch_precision == 1.0 and sm.prefetch_recall == 1.0  # over the fetched layers only
    assert sm.prefetch_routed == first.prefetch_layers * 4
    assert sm.verified_slices > 0  # what the fetch tokens landed, byte-exact against the file


def test_fetch_sessions_stage_and_score_every_layer_asked(moe64):
    records, report, _ = _session(moe64, prefetch="oracle:precision=0.5,recall=0.8,seed=3")
    for r in records:
        assert (r.prefetch_layers, r.prefetch_skipped_layers, r.prefetch_skipped_named, r.prefetch_skipped_bytes) \
            == (ASKED, 0, 0, 0)
        assert r.prefetch_routed == ASKED * 4 and r.prefetch_bytes > 0
    assert report.summary.verified_slices > 0 and report.summary.prefetch_precision is not None


def test_the_skip_is_said_in_the_text_json_ledger_and_ab(moe64, tmp_path):
    ledger = tmp_path / "l.sqlite"
    common = [moe64.path, "--tokens", "3", "--cache-mib", "2", "--experts-per-token", "4",
              "--lanes", "2", "--overlap", "--miss", "host", "--ledger", str(ledger)]
    result = CliRunner().invoke(main, ["session", *common, "--turns", "2", "--prefetch", "previous"], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    assert "over the 0 layers staged for; 10 layers run on the host skipped" in result.stdout
    with Ledger(ledger) as led:
        extra = led.turns()["extra"].iloc[-1]
    assert (extra["prefetch_skipped_layers"], extra["prefetch_layers"]) == (5, 0)
    md = tmp_path / "s.md"
    CliRunner().invoke(main, ["ledger", "--ledger", str(ledger), "export", "--markdown", str(md)])
    assert "layers run on the host skipped" in md.read_text()
    result = CliRunner().invoke(main, ["session", *common, "--turns", "3", "--ab", "prefetch=none", "--ab",
                                       "prefetch=previous", "--rounds", "1", "--json"], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)
    figures = [c["figures"] for c in doc["cells"]]
    assert [f["skipped share"] for f in figures] == [1.0, 1.0] and figures[1]["skipped MiB/token"] > 0
    assert all(c["summary"]["prefetch_skipped_layers"] == 3 * 5 for c in doc["cells"])
