package orpheus

import (
	"io"
	"reflect"
	"testing"

	ttsv1 "github.com/orpheus-svc/orpheus-svc/clients/go/gen/orpheus/tts/v1"
)

func timings(index uint32, final bool, words ...WordTiming) *ttsv1.StreamingSynthesizeResponse {
	msg := &ttsv1.WordTimings{SegmentIndex: index, Final: final}
	for _, w := range words {
		msg.Words = append(msg.Words, &ttsv1.WordTiming{Text: w.Text, CharStart: w.CharStart,
			CharEnd: w.CharEnd, StartSample: w.StartSample, EndSample: w.EndSample, Final: final})
	}
	return &ttsv1.StreamingSynthesizeResponse{
		Response: &ttsv1.StreamingSynthesizeResponse_WordTimings{WordTimings: msg}}
}

func TestWordTimingsMessageBecomesAWordTimingsEvent(t *testing.T) {
	got := toEvent(timings(2, true, WordTiming{"Hi,", 4, 7, 100, 900, false}))
	want := &WordTimings{SegmentIndex: 2, Final: true,
		Words: []WordTiming{{"Hi,", 4, 7, 100, 900, true}}}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("got %+v, want %+v", got, want)
	}
}

func TestCollectKeepsEachSegmentsLatestWordTimesInOrder(t *testing.T) {
	msgs := []*ttsv1.StreamingSynthesizeResponse{
		timings(0, false, WordTiming{"One", 0, 3, 10, 50, false}),
		timings(0, true, WordTiming{"One", 0, 3, 10, 40, true}),
		timings(1, false, WordTiming{"Two", 4, 7, 60, 90, false}),
	}
	s := &Session{recv: func() (Event, error) {
		if len(msgs) == 0 {
			return nil, io.EOF
		}
		m := msgs[0]
		msgs = msgs[1:]
		return toEvent(m), nil
	}, cancel: func() {}}
	r, err := Collect(s)
	if err != nil {
		t.Fatal(err)
	}
	want := []WordTiming{{"One", 0, 3, 10, 40, true}, {"Two", 4, 7, 60, 90, false}}
	if !reflect.DeepEqual(r.Words, want) {
		t.Fatalf("got %+v, want %+v", r.Words, want)
	}
}

func TestResumedSessionMovesItsWordsLikeItsSegments(t *testing.T) {
	v := continuity{sampleRate: 24000}
	v.event(&SegmentStart{SegmentIndex: 0, TextStart: 0, TextEnd: 4})
	v.event(&AudioChunk{NumSamples: 100})
	v.event(&SegmentEnd{SegmentIndex: 0, NumSamples: 100, TextStart: 0, TextEnd: 4})
	v.resumed()
	got := v.event(&WordTimings{Words: []WordTiming{{"Two.", 1, 5, 10, 80, false}}})
	want := &WordTimings{SegmentIndex: 1, Words: []WordTiming{{"Two.", 5, 9, 110, 180, false}}}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("got %+v, want %+v", got, want)
	}
}
