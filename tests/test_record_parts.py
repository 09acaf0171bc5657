"""The recording pipeline's parts, without Frida.

The --detail-io policy (tracer.record.detail_io): when a thread's detail.atf goes direct.
"""

import pytest

from ada.tracer.record import detail_io


def test_detail_io_policies():
    assert detail_io.go_direct_policy("cached") is None
    assert detail_io.go_direct_policy("direct")(0) is True
    assert detail_io.go_direct_policy("auto") is detail_io.worth_going_direct
    with pytest.raises(ValueError):
        detail_io.go_direct_policy("sometimes")


def test_auto_goes_direct_only_for_big_lanes_under_pressure(monkeypatch):
    monkeypatch.setattr(detail_io, "dirty_pressure", lambda: True)
    assert not detail_io.worth_going_direct(0)
    assert detail_io.worth_going_direct(detail_io.MIN_DIRECT_LANE)
    monkeypatch.setattr(detail_io, "dirty_pressure", lambda: False)
    assert not detail_io.worth_going_direct(detail_io.MIN_DIRECT_LANE)


@pytest.mark.parametrize("dirty, expected", [(100, False), (600, True), (900, True)])
def test_dirty_pressure_is_the_kernels_background_threshold(tmp_path, dirty, expected):
    vmstat = tmp_path / "vmstat"
    vmstat.write_text(f"nr_free_pages 5\nnr_dirty {dirty - 50}\nnr_writeback 50\n"
                      "nr_dirty_threshold 1200\nnr_dirty_background_threshold 600\n")
    assert detail_io.dirty_pressure(vmstat) is expected


def test_dirty_pressure_without_vmstat_is_no_pressure(tmp_path):
    assert detail_io.dirty_pressure(tmp_path / "missing") is False
    (tmp_path / "partial").write_text("nr_dirty 5\n")
    assert detail_io.dirty_pressure(tmp_path / "partial") is False
