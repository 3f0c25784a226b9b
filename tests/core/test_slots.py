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


def test_a_confirming_pool_keeps_a_freed_slot_until_the_backend_confirms():
    pool = SlotPool(1, 128, confirm_frees=True)
    slot = pool.allocate(1)
    pool.free(slot, 1)
    assert pool.num_free == 0 and pool.num_draining == 1 and pool.allocate(2) is None
    with pytest.raises(SlotPoolError):
        pool.free(slot, 1)  # draining is not held: a second free is still refused
    pool.confirm(1)
    assert pool.num_free == 1 and pool.num_draining == 0 and pool.allocate(2) == slot


def test_a_confirmation_before_the_free_frees_at_once():
    pool = SlotPool(1, 128, confirm_frees=True)
    slot = pool.allocate(1)
    pool.confirm(1)
    pool.free(slot, 1)
    assert pool.num_free == 1 and pool.num_draining == 0


def test_a_plain_pool_ignores_confirmations():
    pool = SlotPool(1, 128)
    slot = pool.allocate(1)
    pool.confirm(1)
    pool.free(slot, 1)
    assert pool.num_free == 1


def test_freeing_a_slot_someone_else_holds_says_who_holds_it():
    pool = SlotPool(4, 64)
    slot = pool.allocate(7)
    with pytest.raises(SlotPoolError) as err:
        pool.free(slot, 9)
    assert str(err.value) == f"slot {slot} is not held by generation 9 (held by 7)"
