package orpheus

import (
	"slices"
	"testing"

	ttsv1 "github.com/orpheus-svc/orpheus-svc/clients/go/gen/orpheus/tts/v1"
)

func TestSplitTargetListRecognisesReplicaLists(t *testing.T) {
	cases := []struct {
		target string
		want   []string
	}{
		{"localhost:50051", nil},
		{"dns:///tts.internal:50051", nil},
		{"ipv4:10.0.0.1:1,10.0.0.2:2", nil},
		{"10.0.0.1:1, 10.0.0.2:2", []string{"10.0.0.1:1", "10.0.0.2:2"}},
		{"tts-a:50051,tts-b:50051,", []string{"tts-a:50051", "tts-b:50051"}},
		{"[::1]:1,[::1]:2", []string{"[::1]:1", "[::1]:2"}},
	}
	for _, c := range cases {
		got, err := SplitTargetList(c.target)
		if err != nil || !slices.Equal(got, c.want) {
			t.Errorf("SplitTargetList(%q) = %q, %v; want %q", c.target, got, err, c.want)
		}
	}
}

func TestSplitTargetListRefusesAddressesWithoutPort(t *testing.T) {
	if _, err := SplitTargetList("10.0.0.1:1,10.0.0.2"); err == nil {
		t.Fatal("want an error for an address without a port")
	}
	if _, err := Dial("10.0.0.1:1,nope"); err == nil {
		t.Fatal("Dial should refuse the bad list")
	}
}

func TestToEventConvertsEveryResponseKind(t *testing.T) {
	msgs := []*ttsv1.SynthesizeResponse{
		{Response: &ttsv1.SynthesizeResponse_SegmentStart{SegmentStart: &ttsv1.SegmentStart{Text: "Hi."}}},
		{Response: &ttsv1.SynthesizeResponse_Audio{Audio: &ttsv1.AudioChunk{Audio: []byte{1, 2}, NumSamples: 1, SequenceNumber: 7}}},
		{Response: &ttsv1.SynthesizeResponse_SegmentEnd{SegmentEnd: &ttsv1.SegmentEnd{NumTokens: 14, FinishReason: "stop"}}},
		{Response: &ttsv1.SynthesizeResponse_Summary{Summary: &ttsv1.SynthesisSummary{NumSamples: 1, SessionId: "s"}}},
		{},
	}
	var kinds []string
	for _, m := range msgs {
		switch e := toEvent(m).(type) {
		case *SegmentStart:
			kinds = append(kinds, "start:"+e.Text)
		case *AudioChunk:
			if e.SequenceNumber != 7 || len(e.Audio) != 2 {
				t.Errorf("chunk %+v", e)
			}
			kinds = append(kinds, "audio")
		case *SegmentEnd:
			kinds = append(kinds, "end:"+e.FinishReason)
		case *Summary:
			kinds = append(kinds, "summary:"+e.SessionID)
		case nil:
			kinds = append(kinds, "nil")
		}
	}
	want := []string{"start:Hi.", "audio", "end:stop", "summary:s", "nil"}
	if !slices.Equal(kinds, want) {
		t.Fatalf("kinds %q, want %q", kinds, want)
	}
}

func TestSynthOptionsDefaultsAndSeed(t *testing.T) {
	o := newSynthOptions(nil)
	if o.encoding != ttsv1.AudioEncoding_AUDIO_ENCODING_PCM16 || o.outputRate() != 24000 {
		t.Fatalf("defaults %+v", o)
	}
	temp := float32(0.3)
	o = newSynthOptions([]SynthOption{WithSampling(&ttsv1.SamplingOptions{Temperature: &temp}), WithSeed(9),
		WithEncoding(ttsv1.AudioEncoding_AUDIO_ENCODING_MULAW)})
	if o.sampling.GetSeed() != 9 || o.sampling.GetTemperature() != temp || o.outputRate() != 8000 {
		t.Fatalf("options %+v", o)
	}
	if newSynthOptions([]SynthOption{WithSampleRate(16000)}).outputRate() != 16000 {
		t.Fatal("WithSampleRate ignored")
	}
}
