"""Issue 34 §5: a layer's misses read and uploaded together (``--batch-misses``): every landed slice
byte for byte the file's, the same hits, misses and bytes as the unbatched session, both arena halves
used, and the settings it cannot run with refused in one line."""
from __future__ import annotations

import pytest

from workbench.errors import ParamError
from workbench.expert.session import ExpertSession
from workbench.expert.session_config import SessionConfig
from workbench.formats import open_index
from workbench.formats.synth import write_synthetic
from workbench.upload.host import HostDevice


@pytest.fixture(scope="module")
def moe(tmp_path_factory):
    path = tmp_path_factory.mktemp("batch") / "moe.gguf"
    write_synthetic(path, format="gguf", layout="moe", size=8 << 20, experts=16, alignment=4096, seed=2)
    return open_index(path)


def _run(index, **kw):
    cfg = SessionConfig(turns=3, tokens=4, experts_per_token=4, cache_mib=3, distribution="zipf", verify=True,
                        verify_end=True, **kw)
    with ExpertSession(index, HostDevice(), cfg) as s:
        ats = []
        if s.decoder.batch is not None:  # every arena offset each layer landed at
            land = s.decoder.batch.land
            s.decoder.batch.land = lambda d, plan: ats.append(sorted(plan.at.values())) or land(d, plan)
        records = list(s.turns())
        s.finish_checks()
        return records, s.verified_slices, ats, s.decoder.batch


@pytest.mark.parametrize("lanes, overlap", [(3, False), (2, True), (4, True)])
@pytest.mark.parametrize("placement", ["inplace", "bounce"])
def test_batched_misses_land_the_files_bytes_as_unbatched_does(moe, lanes, overlap, placement):
    plain, plain_verified, _, _ = _run(moe, lanes=lanes, overlap=overlap, placement=placement)
    batched, verified, ats, batch = _run(moe, lanes=lanes, overlap=overlap, placement=placement, batch_misses=True)
    assert verified == plain_verified > 0  # every upload read back against the file, as many as unbatched
    for a, b in zip(plain, batched):
        assert (a.hits, a.misses, a.bytes_read, a.landed_bytes) == (b.hits, b.misses, b.bytes_read, b.landed_bytes)
    assert sum(r.misses for r in batched) > 0 and sum(r.hits for r in batched) > 0
    half = batch.layer_bytes
    assert {at[0] for at in ats} == {0, half}  # the two halves alternate: one computes while one lands
    assert all(a < half for a in ats[0]) and all(half <= a < 2 * half for a in ats[1])


@pytest.mark.parametrize("uploader, threads", [("pinned", 1), ("pinned", 2), ("pageable", 3)])
def test_batched_uploads_through_staging_or_copy_threads_land_the_files_bytes(moe, uploader, threads):
    """Copy threads copy a slice after its lane issued it: its view must live until the layer's drain."""
    plain, plain_verified, _, _ = _run(moe, lanes=3, overlap=True)
    batched, verified, _, _ = _run(moe, lanes=3, overlap=True, batch_misses=True, uploader=uploader,
                                   upload_threads=threads)
    assert verified == plain_verified > 0
    assert [(r.hits, r.misses, r.landed_bytes) for r in batched] == [(r.hits, r.misses, r.landed_bytes) for r in plain]


@pytest.mark.parametrize("kw, needle", [
    (dict(lanes=1, overlap=False), "needs reader lanes"),
    (dict(lanes=2, overlap=True, prefetch="previous"), "--prefetch route"),
])
def test_settings_batching_cannot_run_with_are_one_line(moe, kw, needle):
    from workbench.expert.session_config import check_config

    with pytest.raises(ParamError) as err:
        check_config(SessionConfig(turns=1, tokens=1, batch_misses=True, **kw))
    assert needle in str(err.value) and "\n" not in str(err.value)

