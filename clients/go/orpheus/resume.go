package orpheus

import (
	"strings"
	"time"
	"unicode/utf8"

	"google.golang.org/protobuf/proto"

	ttsv1 "github.com/orpheus-svc/orpheus-svc/clients/go/gen/orpheus/tts/v1"
)

// Resuming a session on another replica when the one serving it fails mid-session.
//
// A StreamingSynthesize call the server accepted can still end with UNAVAILABLE: its replica
// was killed (node lost, OOM, a deploy without a drain), its engine died, or the connection
// broke. With resume on, the session opens the call again on the connection's health-checked
// round robin (so on another replica), with the same config, and sends the text again from
// the first segment that had not ended (SegmentEnd), with the same flush ids. What the caller
// reads goes on as one session:
//
//	caller sees:  seg 0 ........ end | seg 1 ...... end | seg 2 ..X  (replica dies)
//	resumed call:                                          seg 0' ....... end | seg 1' ...
//	caller sees:                                           seg 2 again ... end | seg 3 ...
//
//   - segment indices continue: the resumed call's segment k is the caller's ended+k, where
//     ended is how many segments had ended; segment text ranges move by the cut (the code
//     point where the first unended segment's text starts);
//   - sequence numbers and sample offsets continue from what the caller had received: the
//     cut segment's partial audio was delivered, and its audio from the start follows (the
//     segment is spoken again from its start, under a second SegmentStart with its index);
//   - a seeded session's seed moves by the same number of segments, so the caller's segment i
//     still runs with seed+i (docs/api.md);
//   - the Summary covers the whole session as the caller saw it (segments, samples, audio,
//     tokens of the segments it got whole) and counts Resumes; TimeToFirstAudioMs, WallMs and
//     SessionID are the last replica's.
//
// Bounds: at most MaxAttempts calls are opened to resume one session over its whole life (a
// text that takes down every replica it reaches is not carried to all of them), and a new
// call is opened only within Within of the failure it replaces; the session's context still
// covers every attempt. Past a bound the caller gets the failed call's status.

// Default resume bounds (WithResumeLimits): a replica lost or two in one session is
// covered, and 10 s is time for health checks and DNS to move on from a lost replica, and
// no longer than a listener would wait in silence.
const (
	DefaultResumeAttempts = 3
	DefaultResumeWithin   = 10 * time.Second
)

type resumePolicy struct {
	attempts int
	within   time.Duration
}

// WithResume turns resuming of streaming sessions on or off (see resume.go). Default: on for
// targets that name replicas (a comma list or dns:///..., as WithHealthCheck), off for a
// single host:port, where there is no other replica to go to.
func WithResume(on bool) DialOption { return func(o *dialOptions) { o.resume = &on } }

// WithResumeLimits bounds resuming (and turns it on unless WithResume(false) is given too):
// at most attempts calls opened to resume one session, each within `within` of the failure
// it replaces. Defaults: DefaultResumeAttempts, DefaultResumeWithin.
func WithResumeLimits(attempts int, within time.Duration) DialOption {
	return func(o *dialOptions) {
		o.resumeLimits = &resumePolicy{attempts: attempts, within: within}
	}
}

// textLength is the code points a request adds to the session's text (the server counts
// the same).
func textLength(req *ttsv1.StreamingSynthesizeRequest) uint64 {
	if t, ok := req.GetRequest().(*ttsv1.StreamingSynthesizeRequest_Text); ok {
		return uint64(utf8.RuneCountInString(t.Text))
	}
	return 0
}

func isText(req *ttsv1.StreamingSynthesizeRequest) bool {
	_, ok := req.GetRequest().(*ttsv1.StreamingSynthesizeRequest_Text)
	return ok
}

// sentEntry is a request sent after the config, at code point start of the session's text.
type sentEntry struct {
	start uint64
	req   *ttsv1.StreamingSynthesizeRequest
}

// endedBefore: the entry lies wholly before the cut, so a resumed call needs none of it. A
// flush exactly at the cut counts as before it: it closed the last ended segment, or came
// when that segment had ended without it and so had nothing to close.
func (e sentEntry) endedBefore(cut uint64) bool {
	end := e.start + textLength(e.req)
	return end < cut || (end == cut && (e.start < cut || !isText(e.req)))
}

// sentLog keeps the requests a session sent after its config for a new attempt: with resume,
// those from the cut on (segmentEnded moves it); without, all of them until accept, then
// none (a call the server accepted is never sent again).
type sentLog struct {
	resume  bool
	keep    bool
	entries []sentEntry
	pos     uint64
	cut     uint64
}

func (l *sentLog) add(req *ttsv1.StreamingSynthesizeRequest) {
	if l.keep {
		l.entries = append(l.entries, sentEntry{l.pos, req})
	}
	l.pos += textLength(req)
}

func (l *sentLog) accept() {
	if !l.resume {
		l.keep, l.entries = false, nil
	}
}

func (l *sentLog) segmentEnded(textEnd uint64) {
	l.cut = max(l.cut, textEnd)
	n := 0
	for n < len(l.entries) && l.entries[n].endedBefore(l.cut) {
		n++
	}
	l.entries = l.entries[n:]
}

// replay is what a new attempt is sent after its config: every entry from the cut on, a
// text that straddles the cut cut to its part from the cut.
func (l *sentLog) replay() []*ttsv1.StreamingSynthesizeRequest {
	var out []*ttsv1.StreamingSynthesizeRequest
	for _, e := range l.entries {
		if e.endedBefore(l.cut) {
			continue
		}
		req := e.req
		if e.start < l.cut {
			req = &ttsv1.StreamingSynthesizeRequest{Request: &ttsv1.StreamingSynthesizeRequest_Text{
				Text: fromRune(req.GetText(), l.cut-e.start)}}
		}
		out = append(out, req)
	}
	return out
}

// fromRune is s from its n-th code point on.
func fromRune(s string, n uint64) string {
	for i := range s {
		if n == 0 {
			return s[i:]
		}
		n--
	}
	return ""
}

// speakable: the requests carry text to speak (the server refuses a session without any).
func speakable(reqs []*ttsv1.StreamingSynthesizeRequest) bool {
	for _, r := range reqs {
		if isText(r) && strings.TrimSpace(r.GetText()) != "" {
			return true
		}
	}
	return false
}

// resumedConfig is the config for a call that resumes at the caller's segment `ended`: the
// same, with a seed moved by ended (the server seeds its segment k with seed+k).
func resumedConfig(config *ttsv1.StreamingSynthesizeRequest, ended uint32) *ttsv1.StreamingSynthesizeRequest {
	if sampling := config.GetConfig().GetSampling(); ended == 0 || sampling == nil || sampling.Seed == nil {
		return config
	}
	out := proto.Clone(config).(*ttsv1.StreamingSynthesizeRequest)
	seed := out.GetConfig().GetSampling().GetSeed() + uint64(ended) // wraps as the server's uint64
	out.GetConfig().GetSampling().Seed = &seed
	return out
}

// continuity is the caller's view of a session over its attempts: it maps each attempt's
// events into one numbering and tracks what has ended.
type continuity struct {
	sampleRate int
	resumes    int
	ended      uint32 // segments whose SegmentEnd the caller got
	cut        uint64 // code point where the first unended segment's text starts
	tokens     uint64 // tokens of the ended segments
	chunks     uint64 // audio chunks the caller got
	samples    uint64 // samples the caller got
	// what the current attempt's numbers start from, in the caller's numbering
	segBase                    uint32
	seqBase, offBase, textBase uint64
	tokenBase                  uint64
}

// resumed: a new attempt replaces a failed one that the server had accepted.
func (v *continuity) resumed() {
	v.resumes++
	v.segBase, v.seqBase, v.offBase, v.textBase, v.tokenBase = v.ended, v.chunks, v.samples, v.cut, v.tokens
}

func (v *continuity) event(ev Event) Event {
	switch e := ev.(type) {
	case *AudioChunk:
		v.chunks++
		v.samples += uint64(e.NumSamples)
		e.SegmentIndex += v.segBase
		e.SequenceNumber += v.seqBase
		e.SampleOffset += v.offBase
	case *SegmentStart:
		e.SegmentIndex += v.segBase
		e.SampleOffset += v.offBase
		e.TextStart += v.textBase
		e.TextEnd += v.textBase
	case *WordTimings: // the words move like their segment's text and audio
		e.SegmentIndex += v.segBase
		for i := range e.Words {
			w := &e.Words[i]
			w.CharStart += v.textBase
			w.CharEnd += v.textBase
			w.StartSample += v.offBase
			w.EndSample += v.offBase
		}
	case *SegmentEnd:
		e.SegmentIndex += v.segBase
		e.TextStart += v.textBase
		e.TextEnd += v.textBase
		v.ended = e.SegmentIndex + 1
		v.cut = max(v.cut, e.TextEnd)
		v.tokens += uint64(e.NumTokens)
	case *Summary:
		e.NumSegments += v.segBase
		e.NumSamples += v.offBase
		e.AudioMs += float64(v.offBase) * 1000 / float64(v.sampleRate)
		e.NumTokens += v.tokenBase
		e.Resumes = v.resumes
	}
	return ev
}

// localSummary ends a session whose text had all been spoken when its replica failed (there
// is nothing to resume and no server summary to wait for): the caller's own figures; the
// server-side times are unknown (0).
func (v *continuity) localSummary(sessionID string) *Summary {
	return &Summary{SessionID: sessionID, AudioMs: float64(v.samples) * 1000 / float64(v.sampleRate),
		NumTokens: v.tokens, NumSegments: v.ended, NumSamples: v.samples, Resumes: v.resumes}
}
