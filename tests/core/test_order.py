"""The batch choice on its own (core/order.py): rows in key order within the batch size and
the prefill token budget, and the shortcut's test of whether everything fits."""

from orpheus_svc.core.order import all_fit, choose

from .sched_helpers import make_gen


def _keyed(*specs):
    """(key, prompt length, needs prefill) per generation -> choose's input, and the gens."""
    gens = [make_gen(prompt_len=n) for _, n, _ in specs]
    prefill = {g.gen_id for g, (_, _, p) in zip(gens, specs) if p}
    return [(k, g.gen_id, g) for g, (k, _, _) in zip(gens, specs)], gens, prefill


def test_rows_go_in_key_order_up_to_the_batch_size():
    keyed, g, new = _keyed(((2, 0.5), 8, False), ((1, 0.0), 8, False), ((0, -3), 8, True),
                           ((2, 0.1), 8, False))
    prefill, decode, left_out = choose(keyed, 3, 4096, lambda x: x.gen_id in new)
    assert prefill == [g[2]]                 # aged first
    assert decode == [g[1], g[3]]            # then TTFB, then the least slack
    assert left_out == [g[0]]                # the batch is full


def test_the_first_prompt_always_goes_and_later_ones_fit_what_is_left():
    keyed, g, new = _keyed(((1, 0.0), 500, True), ((1, 1.0), 200, True), ((1, 2.0), 40, True),
                           ((1, 3.0), 61, True), ((2, 0.0), 9999, False))
    prefill, decode, left_out = choose(keyed, 8, 100, lambda x: x.gen_id in new)
    # the oldest goes however long, and spends the budget: no other prompt fits after it
    assert prefill == [g[0]] and left_out == [g[1], g[2], g[3]]
    assert decode == [g[4]]                  # decode rows spend no prefill budget
    keyed, g, new = _keyed(((1, 0.0), 30, True), ((1, 1.0), 80, True), ((1, 2.0), 50, True))
    prefill, _, left_out = choose(keyed, 8, 100, lambda x: x.gen_id in new)
    assert prefill == [g[0], g[2]] and left_out == [g[1]]  # a shorter later one still fits
    keyed, g, new = _keyed(((1, 0.0), 60, True), ((1, 1.0), 40, True), ((1, 2.0), 1, True))
    prefill, _, left_out = choose(keyed, 8, 100, lambda x: x.gen_id in new)
    assert prefill == [g[0], g[1]] and left_out == [g[2]]  # exactly the budget, then none


def test_everything_fits_only_within_the_batch_and_the_prefill_budget():
    a, b, c = make_gen(prompt_len=60), make_gen(prompt_len=40), make_gen(prompt_len=5000)
    key = {a.gen_id: (1, 2.0), b.gen_id: (1, 1.0), c.gen_id: (0, 0)}.__getitem__
    assert all_fit(4, [a, b], 4, 100, lambda g: key(g.gen_id)) == [b, a]  # in batch order
    assert all_fit(5, [a, b], 4, 100, lambda g: key(g.gen_id)) is None    # over the batch
    assert all_fit(4, [a, b], 4, 99, lambda g: key(g.gen_id)) is None     # over the budget
    assert all_fit(4, [c], 4, 100, lambda g: key(g.gen_id)) == [c]        # one prompt: goes
    assert all_fit(1, [], 1, 1, lambda g: key(g.gen_id)) == []
