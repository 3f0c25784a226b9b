package orpheus

import (
	ttsv1 "github.com/orpheus-svc/orpheus-svc/clients/go/gen/orpheus/tts/v1"
)

// Event is one message of a synthesis stream: *AudioChunk, *SegmentStart, *SegmentEnd,
// *WordTimings (WithWordTimestamps) or *Summary (always last). Use a type switch.
type Event interface{ isEvent() }

// AudioChunk carries encoded audio of one segment. Offsets and counts are at the output rate.
type AudioChunk struct {
	Audio          []byte
	SegmentIndex   uint32
	SequenceNumber uint64 // counts chunks in the call from 0, without gaps
	SampleOffset   uint64 // first sample of this chunk within the call's audio
	NumSamples     uint32
}

// SegmentStart precedes a segment's audio; Text is the segment as the server cut it.
type SegmentStart struct {
	SegmentIndex uint32
	Text         string
	SampleOffset uint64
	// Cause is why the segment ended (known when it is cut); UNSPECIFIED from an older server.
	Cause ttsv1.SegmentEndCause
	// TextStart and TextEnd: the segment's range in the session's text (all fragments
	// concatenated), in Unicode code points: []rune(text)[TextStart:TextEnd].
	TextStart, TextEnd uint64
	// FlushID is the Flush id that closed the segment ("" if none).
	FlushID string
}

// SegmentEnd follows a segment's audio.
type SegmentEnd struct {
	SegmentIndex uint32
	Text         string
	NumSamples   uint64
	NumTokens    uint32
	FinishReason string // "stop" or "length"
	// Cause, TextStart, TextEnd, FlushID: as in SegmentStart.
	Cause              ttsv1.SegmentEndCause
	TextStart, TextEnd uint64
	FlushID            string
}

// WordTiming is where one word of the text sent is in the call's audio: Text is
// []rune(sessionText)[CharStart:CharEnd] (code points of all fragments concatenated), its
// audio [StartSample, EndSample) in the call's sample offsets at the output rate. Final: scaled
// to its segment's real length (its audio ended); the place inside the segment is estimated
// from the text either way.
type WordTiming struct {
	Text                   string
	CharStart, CharEnd     uint64
	StartSample, EndSample uint64
	Final                  bool
}

// WordTimings are one segment's words: estimates (Final false) before its first audio chunk,
// then final times before its SegmentEnd if any moved.
type WordTimings struct {
	SegmentIndex uint32
	Words        []WordTiming
	Final        bool
}

// Summary is the last event of a call (server-side figures; Resumes is the client's).
type Summary struct {
	SessionID          string
	TimeToFirstAudioMs float64
	AudioMs            float64
	NumTokens          uint64
	NumSegments        uint32
	NumSamples         uint64
	WallMs             float64
	// Resumes counts the times the client resumed the session on another replica
	// (WithResume): the figures above then cover the whole session as the caller received
	// it, except TimeToFirstAudioMs, WallMs and SessionID, which are the last replica's.
	Resumes int
}

func (*AudioChunk) isEvent()   {}
func (*SegmentStart) isEvent() {}
func (*SegmentEnd) isEvent()   {}
func (*WordTimings) isEvent()  {}
func (*Summary) isEvent()      {}

// response is what StreamingSynthesizeResponse and SynthesizeResponse have in common.
type response interface {
	GetAudio() *ttsv1.AudioChunk
	GetSegmentStart() *ttsv1.SegmentStart
	GetSegmentEnd() *ttsv1.SegmentEnd
	GetWordTimings() *ttsv1.WordTimings
	GetSummary() *ttsv1.SynthesisSummary
}

// toEvent converts a response message; nil for a kind this client does not know.
func toEvent(m response) Event {
	if a := m.GetAudio(); a != nil {
		return &AudioChunk{Audio: a.GetAudio(), SegmentIndex: a.GetSegmentIndex(),
			SequenceNumber: a.GetSequenceNumber(), SampleOffset: a.GetSampleOffset(),
			NumSamples: a.GetNumSamples()}
	}
	if s := m.GetSegmentStart(); s != nil {
		return &SegmentStart{SegmentIndex: s.GetSegmentIndex(), Text: s.GetText(),
			SampleOffset: s.GetSampleOffset(), Cause: s.GetCause(), TextStart: s.GetTextStart(),
			TextEnd: s.GetTextEnd(), FlushID: s.GetFlushId()}
	}
	if e := m.GetSegmentEnd(); e != nil {
		return &SegmentEnd{SegmentIndex: e.GetSegmentIndex(), Text: e.GetText(),
			NumSamples: e.GetNumSamples(), NumTokens: e.GetNumTokens(),
			FinishReason: e.GetFinishReason(), Cause: e.GetCause(), TextStart: e.GetTextStart(),
			TextEnd: e.GetTextEnd(), FlushID: e.GetFlushId()}
	}
	if t := m.GetWordTimings(); t != nil {
		ev := &WordTimings{SegmentIndex: t.GetSegmentIndex(), Final: t.GetFinal()}
		for _, w := range t.GetWords() {
			ev.Words = append(ev.Words, WordTiming{Text: w.GetText(), CharStart: w.GetCharStart(),
				CharEnd: w.GetCharEnd(), StartSample: w.GetStartSample(),
				EndSample: w.GetEndSample(), Final: w.GetFinal()})
		}
		return ev
	}
	if s := m.GetSummary(); s != nil {
		return &Summary{SessionID: s.GetSessionId(), TimeToFirstAudioMs: s.GetTimeToFirstAudioMs(),
			AudioMs: s.GetAudioMs(), NumTokens: s.GetNumTokens(), NumSegments: s.GetNumSegments(),
			NumSamples: s.GetNumSamples(), WallMs: s.GetWallMs()}
	}
	return nil
}
