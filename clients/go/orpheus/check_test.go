package orpheus

import (
	"testing"
)

// checkEvents asserts the stream invariants of the API contract on a collected call:
// summary last and only once; every chunk inside its segment's start/end; sequence
// numbers and sample offsets contiguous from 0; PCM16 byte counts; totals that add up.
// It returns the segments' ends in order.
func checkEvents(t *testing.T, events []Event) []*SegmentEnd {
	t.Helper()
	if len(events) == 0 {
		t.Fatal("no events")
	}
	summary, ok := events[len(events)-1].(*Summary)
	if !ok {
		t.Fatalf("last event is %T, want *Summary", events[len(events)-1])
	}
	var seq, offset, segSamples uint64
	var ends []*SegmentEnd
	var current *SegmentStart
	for i, ev := range events[:len(events)-1] {
		switch e := ev.(type) {
		case *Summary:
			t.Fatalf("event %d: summary before the end", i)
		case *SegmentStart:
			if current != nil || e.SegmentIndex != uint32(len(ends)) || e.SampleOffset != offset {
				t.Fatalf("event %d: bad SegmentStart %+v (segments so far %d, offset %d)", i, e, len(ends), offset)
			}
			current, segSamples = e, 0
		case *AudioChunk:
			if current == nil || e.SegmentIndex != current.SegmentIndex {
				t.Fatalf("event %d: chunk of segment %d outside it", i, e.SegmentIndex)
			}
			if e.SequenceNumber != seq || e.SampleOffset != offset {
				t.Fatalf("event %d: chunk seq %d offset %d, want %d %d", i, e.SequenceNumber, e.SampleOffset, seq, offset)
			}
			if len(e.Audio) != 2*int(e.NumSamples) {
				t.Fatalf("event %d: %d bytes for %d PCM16 samples", i, len(e.Audio), e.NumSamples)
			}
			seq++
			offset += uint64(e.NumSamples)
			segSamples += uint64(e.NumSamples)
		case *SegmentEnd:
			if current == nil || e.SegmentIndex != current.SegmentIndex || e.Text != current.Text {
				t.Fatalf("event %d: SegmentEnd %+v does not match its start %+v", i, e, current)
			}
			if e.NumSamples != segSamples {
				t.Fatalf("event %d: segment %d reports %d samples, chunks had %d", i, e.SegmentIndex, e.NumSamples, segSamples)
			}
			ends = append(ends, e)
			current = nil
		}
	}
	if current != nil {
		t.Fatalf("segment %d never ended", current.SegmentIndex)
	}
	if summary.NumSamples != offset || summary.NumSegments != uint32(len(ends)) {
		t.Fatalf("summary %+v, but %d samples in %d segments were sent", summary, offset, len(ends))
	}
	return ends
}

func segmentTexts(ends []*SegmentEnd) []string {
	var out []string
	for _, e := range ends {
		out = append(out, e.Text)
	}
	return out
}
