"""The parking lot on its own (core/parking.py): ids wake at their time, earliest first; one
taken out early, or parked again, never wakes at a stale time."""

import math

from orpheus_svc.core.parking import ParkingLot


def test_parked_generations_wake_at_their_time_earliest_first():
    lot = ParkingLot()
    lot.park(1, 2.0)
    lot.park(2, 1.0)
    lot.park(3, 1.0)
    assert lot.wake(0.99) == [] and len(lot) == 3 and lot.next_wakeup() == 1.0
    assert lot.wake(1.5) == [2, 3] and 2 not in lot and 1 in lot
    assert lot.next_wakeup() == 2.0
    assert lot.wake(2.0) == [1] and not lot and lot.next_wakeup() == math.inf


def test_one_taken_out_early_does_not_wake_later():
    lot = ParkingLot()
    lot.park(1, 1.0)
    lot.park(2, 3.0)
    assert lot.release(1) and not lot.release(1) and not lot.release(9)
    assert lot.next_wakeup() == 3.0  # 1's stale time is skipped
    assert lot.wake(2.0) == [] and lot.wake(3.0) == [2]


def test_parked_again_only_the_latest_time_counts():
    lot = ParkingLot()
    lot.park(1, 1.0)
    lot.release(1)  # judged again, and found far ahead once more
    lot.park(1, 5.0)
    assert lot.next_wakeup() == 5.0 and lot.wake(2.0) == []
    assert lot.wake(5.0) == [1] and lot.wake(9.0) == []


def test_waking_everything_empties_the_lot():
    lot = ParkingLot()
    for gen_id, wake in ((4, 3.0), (1, 9.0), (7, 1.0)):
        lot.park(gen_id, wake)
    assert sorted(lot.wake_all()) == [1, 4, 7]
    assert not lot and lot.next_wakeup() == math.inf and lot.wake(10.0) == []
