"""TurnWords: which words of a turn a voice-agent plugin hands over, when, and at what time
(orpheus_tts_client/_word_clock.py). Pure: events in, units out; no server, no clock."""

from orpheus_tts_client._word_clock import LengthCalibration, Playout, TurnWords
from orpheus_tts_client.types import AudioChunk, SegmentEnd, SegmentStart, WordTiming, WordTimings

RATE = 1000  # samples per second: a sample is a millisecond


def start(index, text, at, sent_at):
    return SegmentStart(index, text, at, text_start=sent_at, text_end=sent_at + len(text))


def words(index, spans, final=False, at=0):
    """WordTimings for (text, start, end) sample spans; char offsets made up from `at`."""
    out, c = [], at
    for text, s, e in spans:
        out.append(WordTiming(text, c, c + len(text), s, e, final))
        c += len(text) + 1
    return WordTimings(index, tuple(out), final)


def audio(index, n, at=0):
    return AudioChunk(b"\0\0" * n, index, 0, at, n)


def end(index, text, n):
    return SegmentEnd(index, text, n, 0, "stop")


def names(units):
    return [u.text for u in units]


def test_words_are_handed_over_as_playback_nears_their_estimated_start():
    t = TurnWords(RATE)
    t.sent("Hi there friend.")
    t.segment_start(start(0, "Hi there friend.", 0, 0))
    t.word_timings(words(0, [("Hi", 100, 400), ("there", 400, 700), ("friend.", 700, 1000)]))
    t.audio(audio(0, 200))
    assert names(t.due(0.0, 0.25)) == ["Hi"]  # starts at 0.1 s: within the lead
    assert t.due(0.1, 0.25) == []
    assert t.next_due_s(0.25) == 0.4 - 0.25
    (there,) = t.due(0.2, 0.25)
    assert (there.text, there.start_s, there.word) == ("there", 0.4, True)
    assert names(t.due(0.5, 0.25)) == ["friend."]
    assert t.due(5.0, 0.25) == [] and t.next_due_s(0.25) is None


def test_a_segment_running_past_its_estimate_stretches_the_words_not_yet_handed_over():
    t = TurnWords(RATE)
    t.segment_start(start(0, "a b c d", 0, 0))
    t.word_timings(words(0, [("a", 0, 250), ("b", 250, 500), ("c", 500, 750), ("d", 750, 1000)]))
    t.audio(audio(0, 2000))  # twice the expected 1000 samples already, and not ended
    (a, b) = t.due(0.3, 0.25)
    assert (a.start_s, b.start_s) == (0.0, 0.5)  # b: 250 -> 500, at least the audio sent
    assert t.next_due_s(0.25) == 1.0 - 0.25


def test_final_times_replace_the_estimate_and_are_handed_over_at_once():
    t = TurnWords(RATE)
    t.segment_start(start(0, "a b c", 0, 0))
    t.word_timings(words(0, [("a", 0, 300), ("b", 300, 600), ("c", 600, 900)]))
    t.audio(audio(0, 1800))
    t.word_timings(words(0, [("a", 0, 600), ("b", 600, 1200), ("c", 1200, 1800)], final=True))
    units = t.due(0.0, 0.25)
    assert [(u.text, u.start_s) for u in units] == [("a", 0.0), ("b", 0.6), ("c", 1.2)]


def test_an_ended_segment_without_a_final_message_keeps_its_estimate_and_teaches_the_ratio():
    cal = LengthCalibration()
    t = TurnWords(RATE, cal)
    t.segment_start(start(0, "a b", 0, 0))
    t.word_timings(words(0, [("a", 0, 500), ("b", 500, 1000)]))
    t.audio(audio(0, 1000))
    t.segment_end(end(0, "a b", 1000))
    assert [(u.text, u.start_s) for u in t.due(0.0, 0.0)] == [("a", 0.0), ("b", 0.5)]
    assert cal.ratio == 1.0
    # a later turn of the same voice, whose segment came out three times its expected length
    t2 = TurnWords(RATE, cal)
    t2.segment_start(start(0, "c d", 0, 0))
    t2.word_timings(words(0, [("c", 0, 500), ("d", 500, 1000)]))
    t2.audio(audio(0, 3000))
    t2.word_timings(words(0, [("c", 0, 1500), ("d", 1500, 3000)], final=True))
    t2.segment_end(end(0, "c d", 3000))
    assert cal.ratio == (1000 + 3000) / (1000 + 1000)
    # the next turn's estimate is stretched by that ratio before any of its audio runs long
    t3 = TurnWords(RATE, cal)
    t3.segment_start(start(0, "e f", 0, 0))
    t3.word_timings(words(0, [("e", 0, 500), ("f", 500, 1000)]))
    t3.audio(audio(0, 100))
    assert names(t3.due(0.0, 0.25)) == ["e"]
    assert t3.next_due_s(0.25) == 1.0 - 0.25  # f: 0.5 s * 2


def test_a_segment_without_word_timings_is_one_unit_at_its_first_sample():
    t = TurnWords(RATE)
    t.sent("Hello there. How are you?")
    t.segment_start(start(0, "Hello there.", 0, 0))
    assert t.due(0.0, 0.25) == [] and t.next_due_s(0.25) is None  # not known yet
    t.audio(audio(0, 1500))
    (u,) = t.due(0.0, 0.25)
    assert (u.text, u.start_s, u.end_s, u.word) == ("Hello there.", 0.0, None, False)
    t.segment_end(end(0, "Hello there.", 1500))
    t.segment_start(start(1, "How are you?", 1500, 13))
    t.audio(audio(1, 500, 1500))
    # handed over at once: its start is exact, and the framework holds it until then
    (v,) = t.due(0.0, 0.25)
    assert (v.text, v.start_s) == ("How are you?", 1.5)


def test_the_segment_text_is_the_clients_own_slice():
    t = TurnWords(RATE)
    t.sent("I paid $3.50 today.")
    t.segment_start(SegmentStart(0, "I paid three dollars and fifty cents today.", 0,
                                 text_start=0, text_end=19))
    t.audio(audio(0, 10))
    assert names(t.due(0.0, 0.0)) == ["I paid $3.50 today."]


def test_units_come_out_once_in_order_and_never_go_back_in_time():
    t = TurnWords(RATE)
    t.segment_start(start(0, "a b", 0, 0))
    t.word_timings(words(0, [("a", 0, 500), ("b", 500, 1000)]))
    t.audio(audio(0, 1000))
    assert names(t.due(0.3, 0.25)) == ["a", "b"]
    # segment 1's final moves its first word before the last start handed out
    t.segment_start(start(1, "c", 1000, 4))
    t.word_timings(words(1, [("c", 1100, 2000)]))
    t.word_timings(words(1, [("c", 400, 2000)], final=True))
    (c,) = t.due(0.0, 0.0)
    assert c.start_s == 0.5
    assert t.due(9.0, 9.0) == [] and t.rest() == []


def test_rest_hands_over_everything_left_at_its_best_time():
    t = TurnWords(RATE)
    t.segment_start(start(0, "a b c", 0, 0))
    t.word_timings(words(0, [("a", 0, 300), ("b", 300, 600), ("c", 600, 900)]))
    t.audio(audio(0, 900))
    assert names(t.due(0.0, 0.1)) == ["a"]
    t.segment_end(end(0, "a b c", 900))
    assert [(u.text, u.start_s) for u in t.rest()] == [("b", 0.3), ("c", 0.6)]


def test_a_segment_of_only_tags_falls_back_to_its_text():
    t = TurnWords(RATE)
    t.sent("<laugh>")
    t.segment_start(start(0, "<laugh>", 0, 0))
    t.audio(audio(0, 100))  # the server sends no word timings for it
    assert names(t.due(0.0, 0.0)) == ["<laugh>"]


def test_playout_runs_in_real_time_and_stalls_without_audio():
    p = Playout()
    assert p.played(5.0) == 0.0 and p.lag(5.0) == 0.0  # nothing arrived: nothing plays
    p.arrive(10.0, 1.0)
    assert p.played(10.5) == 0.5 and p.lag(10.5) == 0.0
    assert p.played(12.0) == 1.0  # ran dry at 11.0
    assert p.lag(12.0) == 1.0
    p.arrive(12.0, 2.0)
    assert p.played(13.0) == 2.0 and p.lag(13.0) == 1.0
    p.arrive(13.0, 5.0)  # a fast server: audio ahead of playback does not move it
    assert p.played(14.0) == 3.0 and p.lag(14.0) == 1.0
