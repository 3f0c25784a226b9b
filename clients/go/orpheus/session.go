package orpheus

import (
	"context"
	"errors"
	"io"
	"iter"
	"math/rand/v2"
	"sync"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	ttsv1 "github.com/orpheus-svc/orpheus-svc/clients/go/gen/orpheus/tts/v1"
)

// Flush, sent on a Stream's text channel, ends the current segment now (a Flush message).
const Flush = "\x00orpheus:flush\x00"

type synthOptions struct {
	encoding   ttsv1.AudioEncoding
	sampleRate int32
	sampling   *ttsv1.SamplingOptions
	words      bool
}

// SynthOption sets the audio format or sampling of one call.
type SynthOption func(*synthOptions)

// WithEncoding selects the audio encoding (default PCM16).
func WithEncoding(e ttsv1.AudioEncoding) SynthOption {
	return func(o *synthOptions) { o.encoding = e }
}

// WithSampleRate selects the output rate in Hz (default 24000; 8000 for mu-law).
func WithSampleRate(hz int) SynthOption {
	return func(o *synthOptions) { o.sampleRate = int32(hz) }
}

// WithSampling overrides sampling parameters for the call.
func WithSampling(s *ttsv1.SamplingOptions) SynthOption {
	return func(o *synthOptions) { o.sampling = s }
}

// WithSeed makes the tokens and the PCM reproducible for the same text, voice and settings
// on the same server, backend and device (segment i uses seed+i; docs/api.md); keeps
// other overrides.
func WithSeed(seed uint64) SynthOption {
	return func(o *synthOptions) {
		if o.sampling == nil {
			o.sampling = &ttsv1.SamplingOptions{}
		}
		o.sampling.Seed = &seed
	}
}

// WithWordTimestamps asks for each segment's word timings (*WordTimings events): every
// word's range in the text sent and its span in the audio, estimated from the text
// (docs/api.md says how far off).
func WithWordTimestamps(on bool) SynthOption {
	return func(o *synthOptions) { o.words = on }
}

func newSynthOptions(opts []SynthOption) synthOptions {
	o := synthOptions{encoding: ttsv1.AudioEncoding_AUDIO_ENCODING_PCM16}
	for _, opt := range opts {
		opt(&o)
	}
	return o
}

func (o synthOptions) format() *ttsv1.AudioFormat {
	return &ttsv1.AudioFormat{Encoding: o.encoding, SampleRateHz: o.sampleRate}
}

// outputRate is the rate the server will send at.
func (o synthOptions) outputRate() int {
	switch {
	case o.sampleRate != 0:
		return int(o.sampleRate)
	case o.encoding == ttsv1.AudioEncoding_AUDIO_ENCODING_MULAW,
		o.encoding == ttsv1.AudioEncoding_AUDIO_ENCODING_ALAW:
		return 8000
	default:
		return 24000
	}
}

// Session is one running synthesis call. Read it with Recv or Events until io.EOF (or an
// error); Close (or Cancel) cancels it early and frees the server's slot.
//
// A session from OpenSession is also driven by hand: Send, Flush, End (half-close), Cancel.
// Sending and reading may happen in different goroutines; Send, Flush and End are safe to call
// from several goroutines.
type Session struct {
	recv       func() (Event, error) // the next event; nil for a message kind to skip
	cancel     context.CancelFunc
	started    time.Time
	encoding   ttsv1.AudioEncoding
	sampleRate int
	done       bool
	closeOnce  sync.Once

	// input side; nil for sessions that are not driven by hand
	stream ttsv1.TTSService_StreamingSynthesizeClient // the current attempt's (under sendMu)
	sendMu sync.Mutex
	ended  bool
	ctx    context.Context // the call's, across attempts
	retry  *streamRetry    // nil: neither retries nor resume
	view   continuity      // the caller's numbering (the reader's; resumed under sendMu)
	over   bool            // the session ended with a summary of the client's own
}

// streamRetry starts new attempts of a StreamingSynthesize call, with gRPC's rule for a call
// refused with UNAVAILABLE before the server accepted it (sent a response, or the
// orpheus-session-id header), and the resume policy (resume.go) for one that fails with
// UNAVAILABLE after. Everything sent after the config is kept in log for a new attempt, as
// the rules need it, so no text is lost or reordered. Its fields are under Session.sendMu.
type streamRetry struct {
	open        func() (ttsv1.TTSService_StreamingSynthesizeClient, error)
	config      *ttsv1.StreamingSynthesizeRequest
	left        int           // retries left for refusals before the session is accepted
	backoff     time.Duration // the next wait's upper bound (gRPC's: random below it)
	resume      *resumePolicy // nil: off
	resumes     int           // attempts opened to resume the session
	accepted    bool          // the current attempt was accepted
	wasAccepted bool          // some attempt was
	failedAt    time.Time     // when the accepted attempt to replace failed
	log         sentLog
}

// SessionIDHeader is the header the server sends when it accepts a streaming call.
const SessionIDHeader = "orpheus-session-id"

const (
	retryFirstBackoff = 50 * time.Millisecond
	retryMaxBackoff   = time.Second
)

// ErrNotStreaming is returned by Send, Flush and End on a session that was not opened by
// OpenSession (a Synthesize call, or a Stream fed from a channel).
var ErrNotStreaming = errors.New("orpheus: this session does not take text (use OpenSession)")

// ErrEnded is returned by Send and Flush after End.
var ErrEnded = errors.New("orpheus: the session's input has ended (End was called)")

// OpenSession starts a StreamingSynthesize call and sends its config; then Send text
// fragments (any size; mid-word is fine), Flush to end a segment now, End when there is no
// more text, and read the events with Recv or Events. Cancelling ctx or calling Cancel stops
// the call and frees the server's slot.
//
// A call refused with UNAVAILABLE before the server accepted it is retried (WithRetries);
// one that fails with UNAVAILABLE after is resumed on another replica (WithResume, resume.go).
func (c *Client) OpenSession(ctx context.Context, voice string, opts ...SynthOption) (*Session, error) {
	o := newSynthOptions(opts)
	ctx, cancel := context.WithCancel(ctx)
	open := func() (ttsv1.TTSService_StreamingSynthesizeClient, error) {
		return c.tts.StreamingSynthesize(ctx)
	}
	stream, err := open()
	if err != nil {
		cancel()
		return nil, err
	}
	s := &Session{cancel: cancel, started: time.Now(), encoding: o.encoding,
		sampleRate: o.outputRate(), stream: stream, ctx: ctx}
	s.view.sampleRate = s.sampleRate
	s.recv = s.recvStream
	config := &ttsv1.StreamingSynthesizeRequest{Request: &ttsv1.StreamingSynthesizeRequest_Config{
		Config: &ttsv1.SynthesisConfig{Voice: voice, AudioFormat: o.format(), Sampling: o.sampling,
			WordTimestamps: o.words}}}
	if c.retries > 0 || c.resume != nil {
		s.retry = &streamRetry{open: open, config: config, left: c.retries,
			backoff: retryFirstBackoff, resume: c.resume,
			log: sentLog{resume: c.resume != nil, keep: true}}
	}
	if err := stream.Send(config); err != nil && !errors.Is(err, io.EOF) {
		cancel()
		return nil, err
	}
	return s, nil
}

// Send sends one text fragment; an empty one is skipped. io.EOF means the call has already
// ended: Recv reports its status.
func (s *Session) Send(text string) error {
	if text == "" {
		return nil
	}
	return s.send(&ttsv1.StreamingSynthesizeRequest{
		Request: &ttsv1.StreamingSynthesizeRequest_Text{Text: text}})
}

// Flush ends the current segment now, even mid-sentence.
func (s *Session) Flush() error { return s.FlushWithID("") }

// FlushWithID is Flush with an id that comes back as FlushID on the SegmentStart and
// SegmentEnd of the segment it closes (docs/api.md: a flush with nothing pending).
func (s *Session) FlushWithID(id string) error {
	return s.send(&ttsv1.StreamingSynthesizeRequest{
		Request: &ttsv1.StreamingSynthesizeRequest_Flush{Flush: &ttsv1.Flush{Id: id}}})
}

// End half-closes the input: the server speaks what is left and sends the summary.
// Calling it again is a no-op.
func (s *Session) End() error {
	if s.stream == nil {
		return ErrNotStreaming
	}
	s.sendMu.Lock()
	defer s.sendMu.Unlock()
	if s.ended {
		return nil
	}
	s.ended = true
	return s.stream.CloseSend()
}

// Cancel stops the call now and frees the server's slot (same as Close).
func (s *Session) Cancel() { s.Close() }

func (s *Session) send(req *ttsv1.StreamingSynthesizeRequest) error {
	if s.stream == nil {
		return ErrNotStreaming
	}
	s.sendMu.Lock()
	defer s.sendMu.Unlock()
	if s.ended {
		return ErrEnded
	}
	r := s.retry
	if r != nil {
		r.log.add(req)
	}
	err := s.stream.Send(req)
	if errors.Is(err, io.EOF) && r != nil && r.mayGoOn() {
		return nil // this attempt has ended; if Recv starts another, it is sent req too
	}
	return err
}

// mayGoOn: a new attempt may follow the current one, as far as the sending side knows
// (Recv, which sees how it ended, decides).
func (r *streamRetry) mayGoOn() bool {
	if r.accepted || r.wasAccepted {
		return r.resume != nil && r.resumes < r.resume.attempts
	}
	return r.left > 0
}

// recvStream is Recv's source for a StreamingSynthesize session: the current attempt's
// next event in the caller's numbering; a failed attempt is retried or resumed here, where
// its status is read.
func (s *Session) recvStream() (Event, error) {
	if s.over {
		return nil, io.EOF
	}
	for {
		s.sendMu.Lock()
		stream := s.stream
		s.sendMu.Unlock()
		m, err := stream.Recv()
		if err == nil {
			return s.deliver(m), nil
		}
		if errors.Is(err, io.EOF) {
			return nil, err
		}
		wait, finish, ok := s.next(stream, err)
		if finish {
			s.over = true
			return s.view.localSummary(sessionID(stream)), nil
		}
		if !ok {
			return nil, err
		}
		if s.sleep(wait) != nil {
			return nil, err // cancelled or out of time while waiting: the failure is why
		}
		if rerr := s.reopen(); rerr != nil {
			return nil, rerr
		}
	}
}

// deliver maps a message of the current attempt into the caller's view.
func (s *Session) deliver(m *ttsv1.StreamingSynthesizeResponse) Event {
	s.accept()
	ev := toEvent(m)
	if ev == nil {
		return nil
	}
	ev = s.view.event(ev)
	if e, ok := ev.(*SegmentEnd); ok && s.retry != nil {
		s.sendMu.Lock()
		s.retry.log.segmentEnded(e.TextEnd)
		s.sendMu.Unlock()
	}
	return ev
}

// accept: the server accepted the current attempt.
func (s *Session) accept() {
	s.sendMu.Lock()
	if r := s.retry; r != nil && !r.accepted {
		r.accepted, r.wasAccepted, r.failedAt = true, true, time.Time{}
		r.backoff = retryFirstBackoff
		r.log.accept()
	}
	s.sendMu.Unlock()
}

// next decides after the current attempt failed with err: (the backoff before a new
// attempt, nothing is left to speak, a new attempt may start).
func (s *Session) next(stream ttsv1.TTSService_StreamingSynthesizeClient, err error) (time.Duration, bool, bool) {
	code := status.Code(err)
	if s.ctx.Err() != nil || s.retry == nil {
		return 0, false, false
	}
	if md, herr := stream.Header(); herr == nil && len(md.Get(SessionIDHeader)) > 0 {
		s.accept() // the server took the call, then failed it: it may have spoken already
	}
	s.sendMu.Lock()
	defer s.sendMu.Unlock()
	r := s.retry
	if r.accepted { // this attempt failed after it was accepted: a resume, if any, starts now
		r.failedAt = time.Now()
	}
	resuming := r.resume != nil && (s.view.resumes > 0 || (r.accepted && code == codes.Unavailable))
	if resuming && s.ended && (code == codes.Unavailable || code == codes.InvalidArgument) &&
		!speakable(r.log.replay()) {
		// every segment ended, and the input too: a new call could only be refused (the
		// server wants text), so the session ends with the caller's own summary
		return 0, true, false
	}
	if code != codes.Unavailable || !r.mayGoOn() {
		return 0, false, false
	}
	bound := r.backoff
	r.backoff = min(2*bound, retryMaxBackoff)
	wait := time.Duration(rand.Int64N(int64(bound)))
	if r.wasAccepted && time.Since(r.failedAt)+wait >= r.resume.within {
		return 0, false, false
	}
	return wait, false, true
}

// sleep waits d; an error if the call's context ends first.
func (s *Session) sleep(d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-s.ctx.Done():
		return s.ctx.Err()
	case <-t.C:
		return nil
	}
}

// reopen starts the next attempt and sends it the config and what the log keeps (for a
// resume, from the cut), in order, then the half-close if End was called. Sends wait
// meanwhile (sendMu), so none is missed or reordered.
func (s *Session) reopen() error {
	s.sendMu.Lock()
	defer s.sendMu.Unlock()
	r := s.retry
	if r.accepted {
		s.view.resumed() // the caller's numbering goes on from here
	}
	if r.wasAccepted {
		r.resumes++
	} else {
		r.left--
	}
	r.accepted = false
	stream, err := r.open()
	if err != nil {
		return err
	}
	s.stream = stream
	for _, m := range append([]*ttsv1.StreamingSynthesizeRequest{resumedConfig(r.config, s.view.ended)},
		r.log.replay()...) {
		if err := stream.Send(m); err != nil {
			return nil // this attempt ended too: its Recv says how
		}
	}
	if s.ended {
		_ = stream.CloseSend()
	}
	return nil
}

func sessionID(stream ttsv1.TTSService_StreamingSynthesizeClient) string {
	if md, err := stream.Header(); err == nil {
		if v := md.Get(SessionIDHeader); len(v) > 0 {
			return v[0]
		}
	}
	return ""
}

// SampleRate is the output sample rate of this session's audio.
func (s *Session) SampleRate() int { return s.sampleRate }

// Encoding is the audio encoding of this session's chunks.
func (s *Session) Encoding() ttsv1.AudioEncoding { return s.encoding }

// Recv returns the next event; io.EOF after the summary, or the call's gRPC status error.
func (s *Session) Recv() (Event, error) {
	if s.done {
		return nil, io.EOF
	}
	for {
		ev, err := s.recv()
		if err != nil {
			s.done = true
			s.Close()
			return nil, err
		}
		if ev != nil {
			return ev, nil
		}
	}
}

// Events ranges over the session: for ev, err := range s.Events(). It stops after the
// last event (no io.EOF is yielded) or after yielding an error; breaking out cancels.
func (s *Session) Events() iter.Seq2[Event, error] {
	return func(yield func(Event, error) bool) {
		defer s.Close()
		for {
			ev, err := s.Recv()
			if errors.Is(err, io.EOF) {
				return
			}
			if !yield(ev, err) || err != nil {
				return
			}
		}
	}
}

// Close cancels the call if it is still running; safe to call more than once.
func (s *Session) Close() { s.closeOnce.Do(s.cancel) }

// Stream starts a StreamingSynthesize session: the config first, then every string read
// from text as one text message (fragments of any size; send Flush to end a segment);
// closing text half-closes the input. Cancelling ctx cancels the call. A convenience over
// OpenSession: a goroutine feeds the channel's strings to Send / Flush / End.
func (c *Client) Stream(ctx context.Context, voice string, text <-chan string, opts ...SynthOption) (*Session, error) {
	s, err := c.OpenSession(ctx, voice, opts...)
	if err != nil {
		return nil, err
	}
	go func() {
		// Send errors mean the call has ended; Recv reports its status. (The session's
		// context, not an attempt's: a retried session goes on after its first attempt.)
		for {
			select {
			case <-s.ctx.Done():
				return
			case frag, ok := <-text:
				if !ok {
					_ = s.End()
					return
				}
				var err error
				if frag == Flush {
					err = s.Flush()
				} else {
					err = s.Send(frag)
				}
				if err != nil {
					return
				}
			}
		}
	}()
	// Text comes only from the channel: Send / Flush / End on the returned session would race
	// with the goroutine's order, so they are refused.
	fed := &Session{recv: s.recv, cancel: s.cancel, started: s.started, encoding: s.encoding,
		sampleRate: s.sampleRate}
	return fed, nil
}

// SynthesizeEvents starts a Synthesize call (the whole text in one request).
func (c *Client) SynthesizeEvents(ctx context.Context, text, voice string, opts ...SynthOption) (*Session, error) {
	o := newSynthOptions(opts)
	ctx, cancel := context.WithCancel(ctx)
	stream, err := c.tts.Synthesize(ctx, &ttsv1.SynthesizeRequest{
		Text: text, Voice: voice, AudioFormat: o.format(), Sampling: o.sampling,
		WordTimestamps: o.words})
	if err != nil {
		cancel()
		return nil, err
	}
	recv := func() (Event, error) {
		m, err := stream.Recv()
		if err != nil {
			return nil, err
		}
		return toEvent(m), nil
	}
	return &Session{recv: recv, cancel: cancel,
		started: time.Now(), encoding: o.encoding, sampleRate: o.outputRate()}, nil
}

// Result is a whole call collected.
type Result struct {
	Audio      []byte // as sent, in Encoding (for WAV including the header)
	Encoding   ttsv1.AudioEncoding
	SampleRate int
	Summary    *Summary // nil only if the call ended without one
	Segments   []*SegmentEnd
	// Words: with WithWordTimestamps, every word in order at its latest times (final where
	// they moved, the estimate where they did not).
	Words  []WordTiming
	Events []Event       // every event in arrival order
	TTFB   time.Duration // client-side: call start to first audio chunk
	Wall   time.Duration
}

// Collect reads a session to its end.
func Collect(s *Session) (*Result, error) {
	r := &Result{Encoding: s.encoding, SampleRate: s.sampleRate}
	words := map[uint32][]WordTiming{} // segment -> its latest times
	var order []uint32
	for ev, err := range s.Events() {
		if err != nil {
			return r, err
		}
		r.Events = append(r.Events, ev)
		switch e := ev.(type) {
		case *AudioChunk:
			if r.TTFB == 0 {
				r.TTFB = time.Since(s.started)
			}
			r.Audio = append(r.Audio, e.Audio...)
		case *SegmentEnd:
			r.Segments = append(r.Segments, e)
		case *WordTimings:
			if _, seen := words[e.SegmentIndex]; !seen {
				order = append(order, e.SegmentIndex)
			}
			words[e.SegmentIndex] = e.Words
		case *Summary:
			r.Summary = e
		}
	}
	for _, i := range order {
		r.Words = append(r.Words, words[i]...)
	}
	r.Wall = time.Since(s.started)
	return r, nil
}

// Synthesize speaks a whole text (Synthesize RPC) and returns all its audio.
func (c *Client) Synthesize(ctx context.Context, text, voice string, opts ...SynthOption) (*Result, error) {
	s, err := c.SynthesizeEvents(ctx, text, voice, opts...)
	if err != nil {
		return nil, err
	}
	return Collect(s)
}

// SynthesizeStream runs Stream over the given fragments and collects the result.
func (c *Client) SynthesizeStream(ctx context.Context, voice string, fragments []string, opts ...SynthOption) (*Result, error) {
	text := make(chan string, len(fragments))
	for _, f := range fragments {
		text <- f
	}
	close(text)
	s, err := c.Stream(ctx, voice, text, opts...)
	if err != nil {
		return nil, err
	}
	return Collect(s)
}
