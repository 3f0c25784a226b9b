package orpheus

import (
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	ttsv1 "github.com/orpheus-svc/orpheus-svc/clients/go/gen/orpheus/tts/v1"
	"github.com/orpheus-svc/orpheus-svc/clients/go/internal/fakeserver"
)

// A session that a replica accepted and then failed (UNAVAILABLE after audio went out, as
// when its engine dies) is resumed on another replica from its first segment that had not
// ended (resume.go). tests/e2e/test_resume.py kills a real replica process instead and runs
// TestLiveResumeAfterReplicaKilled.

// resumeFragments make five segments, the third closed by a flush with an id.
var resumeFragments = []string{"One two. ", "Three four five. ", "Six seven", Flush, " Nine ten. ", "Eleven."}

const resumeText = "One two. Three four five. Six seven Nine ten. Eleven."

func textReq(t string) *ttsv1.StreamingSynthesizeRequest {
	return &ttsv1.StreamingSynthesizeRequest{Request: &ttsv1.StreamingSynthesizeRequest_Text{Text: t}}
}

func flushReq(id string) *ttsv1.StreamingSynthesizeRequest {
	return &ttsv1.StreamingSynthesizeRequest{Request: &ttsv1.StreamingSynthesizeRequest_Flush{Flush: &ttsv1.Flush{Id: id}}}
}

func reqStrings(reqs []*ttsv1.StreamingSynthesizeRequest) []string {
	var out []string
	for _, r := range reqs {
		if isText(r) {
			out = append(out, r.GetText())
		} else {
			out = append(out, "flush:"+r.GetFlush().GetId())
		}
	}
	return out
}

// checkResumedEvents checks that the caller saw one session resumed `resumes` times: every
// SegmentEnd once and in order, each cut segment started again from its start (a second
// SegmentStart with its index), sequence numbers and sample offsets without a gap, and the
// summary last, covering all of it. It returns the cut segments' indices.
func checkResumedEvents(t *testing.T, events []Event, segments, resumes int) []uint32 {
	t.Helper()
	summary, ok := events[len(events)-1].(*Summary)
	if !ok {
		t.Fatalf("last event is %T, want *Summary", events[len(events)-1])
	}
	var seq, offset uint64
	var ends []uint32
	var cut []uint32
	var current *SegmentStart
	for i, ev := range events[:len(events)-1] {
		switch e := ev.(type) {
		case *Summary:
			t.Fatalf("event %d: summary before the end", i)
		case *SegmentStart:
			if current != nil && e.SegmentIndex == current.SegmentIndex {
				cut = append(cut, e.SegmentIndex) // spoken again from its start
			} else if current != nil || e.SegmentIndex != uint32(len(ends)) {
				t.Fatalf("event %d: bad SegmentStart %+v after %d ended segments", i, e, len(ends))
			}
			if e.SampleOffset != offset {
				t.Fatalf("event %d: SegmentStart at %d, audio so far %d", i, e.SampleOffset, offset)
			}
			current = e
		case *AudioChunk:
			if current == nil || e.SegmentIndex != current.SegmentIndex {
				t.Fatalf("event %d: chunk of segment %d outside it", i, e.SegmentIndex)
			}
			if e.SequenceNumber != seq || e.SampleOffset != offset {
				t.Fatalf("event %d: chunk seq %d offset %d, want %d %d", i, e.SequenceNumber, e.SampleOffset, seq, offset)
			}
			seq++
			offset += uint64(e.NumSamples)
		case *SegmentEnd:
			if current == nil || e.SegmentIndex != current.SegmentIndex {
				t.Fatalf("event %d: SegmentEnd %+v outside its segment", i, e)
			}
			ends = append(ends, e.SegmentIndex)
			current = nil
		}
	}
	if len(ends) != segments || len(cut) != resumes {
		t.Fatalf("%d segments ended (want %d), %d started again (want %d)", len(ends), segments, len(cut), resumes)
	}
	if summary.NumSamples != offset || summary.NumSegments != uint32(segments) || summary.Resumes != resumes {
		t.Fatalf("summary %+v, but the caller got %d samples in %d segments, %d resumes", summary, offset, segments, resumes)
	}
	return cut
}

func TestSentLogKeepsWhatAResumedCallNeedsFromTheCut(t *testing.T) {
	l := sentLog{resume: true, keep: true}
	for _, r := range []*ttsv1.StreamingSynthesizeRequest{textReq("Ünø. Twö Thr"), flushReq("x"), textReq("ee.")} {
		l.add(r)
	}
	l.segmentEnded(4) // "Ünø." ended: code points, not bytes
	if got := reqStrings(l.replay()); !slices.Equal(got, []string{" Twö Thr", "flush:x", "ee."}) {
		t.Fatalf("replay %q", got)
	}
	l.segmentEnded(12) // the flush closed "Twö Thr": it is not sent again
	if got := reqStrings(l.replay()); !slices.Equal(got, []string{"ee."}) || len(l.entries) != 1 {
		t.Fatalf("replay %q, %d kept", got, len(l.entries))
	}
	plain := sentLog{keep: true}
	plain.add(textReq("One."))
	plain.accept() // without resume an accepted call is never sent again: nothing kept
	if len(plain.entries) != 0 {
		t.Fatal("kept input after the call was accepted")
	}
}

func TestResumedConfigKeepsSegmentIOnSeedPlusI(t *testing.T) {
	seed := uint64(7)
	config := &ttsv1.StreamingSynthesizeRequest{Request: &ttsv1.StreamingSynthesizeRequest_Config{
		Config: &ttsv1.SynthesisConfig{Voice: "tara", Sampling: &ttsv1.SamplingOptions{Seed: &seed}}}}
	if got := resumedConfig(config, 2).GetConfig(); got.GetSampling().GetSeed() != 9 || got.GetVoice() != "tara" {
		t.Fatalf("resumed config %v", got)
	}
	if config.GetConfig().GetSampling().GetSeed() != 7 {
		t.Fatal("the original config changed")
	}
}

func TestResumeIsOnByDefaultWhereAnotherReplicaCanTakeOver(t *testing.T) {
	for _, tc := range []struct {
		target string
		opts   []DialOption
		want   *resumePolicy
	}{
		{"127.0.0.1:1,127.0.0.1:2", nil, &resumePolicy{DefaultResumeAttempts, DefaultResumeWithin}},
		{"dns:///tts:50051", nil, &resumePolicy{DefaultResumeAttempts, DefaultResumeWithin}},
		{"127.0.0.1:1", nil, nil},
		{"127.0.0.1:1,127.0.0.1:2", []DialOption{WithResume(false)}, nil},
		{"127.0.0.1:1", []DialOption{WithResumeLimits(1, time.Second)}, &resumePolicy{1, time.Second}},
	} {
		c := dial(t, tc.target, tc.opts...)
		if (c.resume == nil) != (tc.want == nil) || (c.resume != nil && *c.resume != *tc.want) {
			t.Errorf("%s %d options: resume %+v, want %+v", tc.target, len(tc.opts), c.resume, tc.want)
		}
	}
	if _, err := Dial("127.0.0.1:1", WithResumeLimits(0, time.Second)); err == nil {
		t.Fatal("0 resume attempts accepted")
	}
}

// runResumable sends resumeFragments by hand (the flush with id "f-2") and collects.
func runResumable(t *testing.T, target string, opts ...DialOption) (*Result, error) {
	t.Helper()
	c := dial(t, target, opts...)
	s, err := c.OpenSession(testCtx(t), "tara")
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range resumeFragments {
		if f == Flush {
			err = s.FlushWithID("f-2")
		} else {
			err = s.Send(f)
		}
		if err != nil {
			t.Fatalf("send %q: %v", f, err)
		}
	}
	if err := s.End(); err != nil {
		t.Fatal(err)
	}
	return Collect(s)
}

func breakingPair(t *testing.T, atSegment int) (*fakeserver.Server, *fakeserver.Server) {
	var budget atomic.Int32 // the first session either serves breaks
	budget.Store(1)
	a, b := startFake(t, "a"), startFake(t, "b")
	a.BreakStreams(&budget, atSegment)
	b.BreakStreams(&budget, atSegment)
	return a, b
}

func TestSessionBrokenMidSegmentIsResumedWithoutLosingText(t *testing.T) {
	// cut in its third segment: two have ended, and the text of the first lies wholly before
	// the cut (TestLiveResumeAfterReplicaKilled cuts the second, at a real kill)
	a, b := breakingPair(t, 2)
	res, err := runResumable(t, a.Addr+","+b.Addr)
	if err != nil {
		t.Fatal(err)
	}
	if cut := checkResumedEvents(t, res.Events, 5, 1); cut[0] != 2 {
		t.Fatalf("segment %d was cut, want 2", cut[0])
	}
	if got := segmentTexts(res.Segments); !slices.Equal(got, []string{"One two.", "Three four five.", "Six seven", "Nine ten.", "Eleven."}) {
		t.Fatalf("segments %q", got)
	}
	for _, e := range res.Segments { // the session's ranges, as if one replica had spoken it all
		if r := []rune(resumeText); string(r[e.TextStart:e.TextEnd]) != e.Text {
			t.Fatalf("segment %d range [%d, %d) is not its text %q", e.SegmentIndex, e.TextStart, e.TextEnd, e.Text)
		}
	}
	if res.Segments[2].FlushID != "f-2" {
		t.Fatalf("flush id %q", res.Segments[2].FlushID)
	}
	calls := append(a.Calls(), b.Calls()...)
	var resumed *fakeserver.Call
	for i := range calls {
		if calls[i].Method == "StreamingSynthesize" {
			resumed = &calls[i]
		}
	}
	if len(calls) != 2 || resumed == nil {
		t.Fatalf("calls %+v", calls)
	}
	// from the first segment that had not ended, with the same flush id, nothing before
	if strings.Join(resumed.Texts, "") != resumeText[len("One two. Three four five."):] || !slices.Contains(resumed.Kinds, "flush") {
		t.Fatalf("the resumed call got %q %q", resumed.Kinds, resumed.Texts)
	}
}

func TestWithoutResumeTheCallerGetsTheFailure(t *testing.T) {
	a, b := breakingPair(t, 1)
	if _, err := runResumable(t, a.Addr+","+b.Addr, WithResume(false)); status.Code(err) != codes.Unavailable {
		t.Fatalf("err %v", err)
	}
}

func TestResumeAttemptsExhaustedGiveTheCallerTheError(t *testing.T) {
	srv := startFake(t, "broken")
	var budget atomic.Int32
	budget.Store(100) // every session breaks after its first audio
	srv.BreakStreams(&budget, 0)
	_, err := runResumable(t, srv.Addr, WithResumeLimits(2, 10*time.Second))
	if status.Code(err) != codes.Unavailable || !strings.Contains(status.Convert(err).Message(), "engine is gone") {
		t.Fatalf("err %v", err)
	}
	if n := len(srv.Calls()); n != 3 {
		t.Fatalf("%d calls, want 3 (two resumes)", n)
	}
}

func TestResumeTimeExhaustedGivesTheCallerTheError(t *testing.T) {
	// the session breaks, and then its replica refuses every new call (it began draining)
	srv := startFake(t, "draining")
	var budget atomic.Int32
	budget.Store(1)
	srv.BreakStreams(&budget, 1)
	srv.RefuseStreams(1000)
	started := time.Now()
	_, err := runResumable(t, srv.Addr, WithResumeLimits(100, 500*time.Millisecond))
	if status.Code(err) != codes.Unavailable {
		t.Fatalf("err %v", err)
	}
	if n := len(srv.Calls()); n < 2 || n >= 100 || time.Since(started) > 10*time.Second {
		t.Fatalf("%d calls in %v: not stopped by the time", n, time.Since(started))
	}
}

func TestReplicaLostAfterTheLastSegmentEndsTheSessionWithItsSummary(t *testing.T) {
	// all text spoken, the input ended, then the replica fails before its summary: there is
	// nothing to resume (a new call would be refused for want of text)
	a, b := breakingPair(t, -1)
	res, err := runResumable(t, a.Addr+","+b.Addr)
	if err != nil {
		t.Fatal(err)
	}
	checkResumedEvents(t, res.Events, 5, 0)
	if n := len(a.Calls()) + len(b.Calls()); n != 1 {
		t.Fatalf("%d calls, want 1", n)
	}
}
