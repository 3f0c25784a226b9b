import pytest

from orpheus_svc.core.slots import SlotPool, SlotPoolError


def test_pool_exhausts_and_reuses_lowest_slot_first():
    pool = SlotPool(3, 128)
    assert [pool.allocate(g) for g in (1, 2, 3)] == [0, 1, 2]
    assert pool.allocate(4) is None and pool.num_free == 0
    pool.free(1, 2)
    assert pool.allocate(5) == 1 and pool.owner(1) == 5


def test_pool_refuses_double_free_and_foreign_free():
    pool = SlotPool(2, 128)
    slot = pool.allocate(1)
    with pytest.raises(SlotPoolError):
        pool.free(slot, 99)
    pool.free(slot, 1)
    with pytest.raises(SlotPoolError):
        pool.free(slot, 1)


def test_pool_rejects_bad_sizes():
    with pytest.raises(ValueError, match="num_slots"):
        SlotPool(0, 10)
