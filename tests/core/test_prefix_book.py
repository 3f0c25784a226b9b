"""core/prefix_book.py: where each prefix lives in a prefix pool."""

import pytest

from orpheus_svc.core.prefix_book import PrefixBook, PrefixPoolFull


def ids(start, n):
    return tuple(range(start, start + n))


def test_ranges_are_placed_first_fit_and_a_freed_gap_is_reused():
    book = PrefixBook(100, "engine.prefix_pool_mb 1")
    a, b, c = ids(0, 30), ids(100, 40), ids(200, 30)
    assert [book.place(x) for x in (a, b, c)] == [(0, 30), (30, 40), (70, 30)]
    assert book.used == 100 and len(book) == 3
    assert book.remove(b)
    assert book.find(b) is None and b not in book
    assert book.place(ids(300, 25)) == (30, 25)   # the first gap that fits
    assert book.place(ids(400, 15)) == (55, 15)   # what is left of it, exactly
    with pytest.raises(PrefixPoolFull) as err:
        book.place(ids(500, 1))
    assert "engine.prefix_pool_mb 1" in str(err.value) and "100 of its 100" in str(err.value)
    assert len(book) == 4 and book.used == 100  # nothing changed


def test_a_prefix_placed_twice_has_one_range_until_both_let_go():
    book = PrefixBook(50)
    a = ids(0, 20)
    assert book.place(a) == book.place(list(a)) == (0, 20)
    assert book.used == 20
    assert not book.remove(a) and a in book
    assert book.remove(a) and a not in book
    assert not book.remove(a)


def test_a_prefix_longer_than_every_gap_is_refused_though_the_total_would_fit():
    book = PrefixBook(60)
    book.place(ids(0, 20))
    book.place(ids(100, 20))
    book.place(ids(200, 20))
    book.remove(ids(100, 20))   # a gap of 20 in the middle
    with pytest.raises(PrefixPoolFull):
        book.place(ids(300, 21))
    with pytest.raises(ValueError):
        book.place(())
