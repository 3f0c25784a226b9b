// Package fakeserver is an in-process stand-in for orpheus-svc used by this module's unit
// tests (no model): text is cut at line breaks, sentence ends followed by whitespace, Flush
// and half-close; each segment becomes SegmentStart, ChunksPerSegment deterministic PCM16
// chunks and SegmentEnd (with the segment's code point range in the session's text, as the
// server's); a summary ends the call. Voice "nobody" (any unknown voice) is
// INVALID_ARGUMENT, an empty text too. It also serves grpc.health.v1.
package fakeserver

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"regexp"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"unicode/utf8"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	ttsv1 "github.com/orpheus-svc/orpheus-svc/clients/go/gen/orpheus/tts/v1"
)

// SessionHeader is the header orpheus-svc sends as it accepts a streaming call.
const SessionHeader = "orpheus-session-id"

// Voices the fake knows; tara is the default.
var Voices = []string{"tara", "leah", "jess", "leo", "dan", "mia", "zac", "zoe"}

const (
	// ChunksPerSegment audio chunks are sent per segment.
	ChunksPerSegment = 2
	// TokensPerSegment is reported per segment.
	TokensPerSegment = 14
)

var cut = regexp.MustCompile(`\n|[.!?]+\s`)

// ChunkSamples is the samples per chunk at rate (one 2048-sample frame at 24 kHz).
func ChunkSamples(rate int) int { return 2048 * rate / 24000 }

// ChunkPCM is the deterministic audio of chunk seq (n PCM16 samples).
func ChunkPCM(seq uint64, n int) []byte {
	b := make([]byte, 2*n)
	for j := range n {
		v := int16(((int(seq)*7+j)%200 - 100) * 100)
		binary.LittleEndian.PutUint16(b[2*j:], uint16(v))
	}
	return b
}

// Server is a running fake on a localhost port.
type Server struct {
	ttsv1.UnimplementedTTSServiceServer
	Name string
	Addr string
	grpc *grpc.Server

	health *health.Server
	mu     sync.Mutex
	calls  []Call
	// StreamingSynthesize calls still to refuse (RefuseStreams) or to accept and then fail
	// (FailAcceptedStreams), both with UNAVAILABLE
	refuse, failAccepted int
	// sessions to break mid-way (BreakStreams): shared by fakes, and where
	breaks  *atomic.Int32
	breakAt int
	// SegmentSent receives a value each time a segment's SegmentEnd has been sent.
	SegmentSent chan struct{}
}

// Call is what the fake saw of one RPC.
type Call struct {
	Method string
	Kinds  []string // StreamingSynthesize: "config", "text", "flush" in arrival order
	Texts  []string
}

// Start serves a new fake on 127.0.0.1 with a free port.
func Start(name string) (*Server, error) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	s := &Server{Name: name, Addr: lis.Addr().String(), grpc: grpc.NewServer(),
		SegmentSent: make(chan struct{}, 1024)}
	ttsv1.RegisterTTSServiceServer(s.grpc, s)
	s.health = health.NewServer() // "" is SERVING
	s.health.SetServingStatus(ttsv1.TTSService_ServiceDesc.ServiceName, healthpb.HealthCheckResponse_SERVING)
	healthpb.RegisterHealthServer(s.grpc, s.health)
	go func() { _ = s.grpc.Serve(lis) }()
	return s, nil
}

// SetServing sets the health of "" and the TTS service, as the real server does while it
// loads (false) or drains (false).
func (s *Server) SetServing(on bool) {
	st := healthpb.HealthCheckResponse_NOT_SERVING
	if on {
		st = healthpb.HealthCheckResponse_SERVING
	}
	s.health.SetServingStatus("", st)
	s.health.SetServingStatus(ttsv1.TTSService_ServiceDesc.ServiceName, st)
}

// RefuseStreams makes the next n StreamingSynthesize calls end with UNAVAILABLE after
// reading the config and one more message, as a replica that has just begun draining
// refuses a call while the client is still sending. No header is sent.
func (s *Server) RefuseStreams(n int) {
	s.mu.Lock()
	s.refuse = n
	s.mu.Unlock()
}

// FailAcceptedStreams makes the next n StreamingSynthesize calls send the orpheus-session-id
// header (the server has accepted the call) and then end with UNAVAILABLE.
func (s *Server) FailAcceptedStreams(n int) {
	s.mu.Lock()
	s.failAccepted = n
	s.mu.Unlock()
}

// BreakStreams makes the fake break sessions after accepting them, as a replica whose
// engine dies does: UNAVAILABLE right after segment atSegment's first audio chunk (-1: in
// place of the summary, once every segment has ended), while budget (which fakes may
// share) is positive; each break takes one from it. It is checked before RefuseStreams.
func (s *Server) BreakStreams(budget *atomic.Int32, atSegment int) {
	s.mu.Lock()
	s.breaks, s.breakAt = budget, atSegment
	s.mu.Unlock()
}

// breaking: whether this call is to break (taking one from the budget), and where.
func (s *Server) breaking() (bool, int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.breaks == nil {
		return false, 0
	}
	for {
		n := s.breaks.Load()
		if n <= 0 {
			return false, 0
		}
		if s.breaks.CompareAndSwap(n, n-1) {
			return true, s.breakAt
		}
	}
}

// errBroken is how a broken session ends.
var errBroken = status.Error(codes.Unavailable, "the engine is gone")

// take decrements *n if it is positive; whether it was.
func (s *Server) take(n *int) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if *n > 0 {
		*n--
		return true
	}
	return false
}

// Stop stops the server now.
func (s *Server) Stop() { s.grpc.Stop() }

// Calls returns a copy of the calls seen so far.
func (s *Server) Calls() []Call {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.calls)
}

func (s *Server) record(c Call) {
	s.mu.Lock()
	s.calls = append(s.calls, c)
	s.mu.Unlock()
}

type session struct {
	srv         *Server
	rate        int
	seq, offset uint64
	index       uint32
	at          uint64 // code point of the session's text where the pending text starts
	breakAt     int    // break after this segment's first chunk (-1: at the summary)
	breaking    bool
	send        func(*ttsv1.StreamingSynthesizeResponse) error
}

func newSession(srv *Server, voice string, f *ttsv1.AudioFormat, send func(*ttsv1.StreamingSynthesizeResponse) error) (*session, error) {
	if voice == "" {
		voice = "tara"
	}
	if !slices.Contains(Voices, voice) {
		return nil, status.Errorf(codes.InvalidArgument, "unknown voice %q; known voices: %s",
			voice, strings.Join(Voices, ", "))
	}
	rate := int(f.GetSampleRateHz())
	if rate == 0 {
		rate = 24000
	}
	enc := f.GetEncoding()
	if (enc != ttsv1.AudioEncoding_AUDIO_ENCODING_UNSPECIFIED && enc != ttsv1.AudioEncoding_AUDIO_ENCODING_PCM16) ||
		!slices.Contains([]int{24000, 48000, 16000, 8000}, rate) {
		return nil, status.Errorf(codes.InvalidArgument, "the fake serves PCM16 at 24000/48000/16000/8000 Hz only")
	}
	return &session{srv: srv, rate: rate, send: send}, nil
}

// segment sends one segment of raw (the pending text, which starts at code point ss.at and
// which this segment consumes); flushID is the flush that closed it, if one did.
func (ss *session) segment(raw, flushID string) error {
	start := ss.at + uint64(utf8.RuneCountInString(raw)-utf8.RuneCountInString(strings.TrimLeftFunc(raw, isSpace)))
	ss.at += uint64(utf8.RuneCountInString(raw))
	text := strings.TrimSpace(raw)
	if text == "" {
		return nil
	}
	end := start + uint64(utf8.RuneCountInString(text))
	n := ChunkSamples(ss.rate)
	msgs := []*ttsv1.StreamingSynthesizeResponse{{Response: &ttsv1.StreamingSynthesizeResponse_SegmentStart{
		SegmentStart: &ttsv1.SegmentStart{SegmentIndex: ss.index, Text: text, SampleOffset: ss.offset,
			TextStart: start, TextEnd: end, FlushId: flushID}}}}
	for range ChunksPerSegment {
		msgs = append(msgs, &ttsv1.StreamingSynthesizeResponse{Response: &ttsv1.StreamingSynthesizeResponse_Audio{
			Audio: &ttsv1.AudioChunk{Audio: ChunkPCM(ss.seq, n), SegmentIndex: ss.index,
				SequenceNumber: ss.seq, SampleOffset: ss.offset, NumSamples: uint32(n)}}})
		ss.seq++
		ss.offset += uint64(n)
	}
	msgs = append(msgs, &ttsv1.StreamingSynthesizeResponse{Response: &ttsv1.StreamingSynthesizeResponse_SegmentEnd{
		SegmentEnd: &ttsv1.SegmentEnd{SegmentIndex: ss.index, Text: text,
			NumSamples: uint64(ChunksPerSegment * n), NumTokens: TokensPerSegment, FinishReason: "stop",
			TextStart: start, TextEnd: end, FlushId: flushID}}})
	index := ss.index
	ss.index++
	for i, m := range msgs {
		if err := ss.send(m); err != nil {
			return err
		}
		if i == 1 && ss.breaking && ss.breakAt == int(index) {
			return errBroken
		}
	}
	select {
	case ss.srv.SegmentSent <- struct{}{}:
	default:
	}
	return nil
}

// cutAll sends every complete segment in buf and returns the rest.
func (ss *session) cutAll(buf string) (string, error) {
	for {
		loc := cut.FindStringIndex(buf)
		if loc == nil {
			return buf, nil
		}
		if err := ss.segment(buf[:loc[1]], ""); err != nil {
			return "", err
		}
		buf = buf[loc[1]:]
	}
}

func isSpace(r rune) bool { return strings.TrimSpace(string(r)) == "" }

func (ss *session) summary() error {
	if ss.breaking && ss.breakAt < 0 {
		return errBroken
	}
	return ss.send(&ttsv1.StreamingSynthesizeResponse{Response: &ttsv1.StreamingSynthesizeResponse_Summary{
		Summary: &ttsv1.SynthesisSummary{SessionId: "fake-session", TimeToFirstAudioMs: 1,
			AudioMs: float64(ss.offset) * 1000 / float64(ss.rate), NumTokens: uint64(TokensPerSegment * ss.index),
			NumSegments: ss.index, NumSamples: ss.offset, WallMs: 2}}})
}

// StreamingSynthesize implements the bidi RPC.
func (s *Server) StreamingSynthesize(stream grpc.BidiStreamingServer[ttsv1.StreamingSynthesizeRequest, ttsv1.StreamingSynthesizeResponse]) error {
	var call Call
	call.Method = "StreamingSynthesize"
	defer func() { s.record(call) }()
	breaking, breakAt := s.breaking()
	if breaking {
		call.Method = "StreamingSynthesize (broken)"
		// accepted, as orpheus-svc says it: before any audio
		if err := stream.SendHeader(metadata.Pairs(SessionHeader, s.Name+"-session")); err != nil {
			return err
		}
	} else if s.take(&s.refuse) {
		call.Method = "StreamingSynthesize (refused)"
		for range 2 {
			req, err := stream.Recv()
			if err != nil {
				break
			}
			call.Kinds = append(call.Kinds, kind(req))
		}
		return status.Error(codes.Unavailable, "the server is shutting down")
	}
	if s.take(&s.failAccepted) {
		call.Method = "StreamingSynthesize (accepted, failed)"
		if err := stream.SendHeader(metadata.Pairs(SessionHeader, "fake")); err != nil {
			return err
		}
		return status.Error(codes.Unavailable, "the engine failed")
	}
	var ss *session
	buf := ""
	for {
		req, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return err
		}
		switch r := req.GetRequest().(type) {
		case *ttsv1.StreamingSynthesizeRequest_Config:
			call.Kinds = append(call.Kinds, "config")
			if ss != nil {
				return status.Error(codes.FailedPrecondition, "config may only be the first message")
			}
			if ss, err = newSession(s, r.Config.GetVoice(), r.Config.GetAudioFormat(), stream.Send); err != nil {
				return err
			}
			ss.breaking, ss.breakAt = breaking, breakAt
		case *ttsv1.StreamingSynthesizeRequest_Text:
			call.Kinds = append(call.Kinds, "text")
			call.Texts = append(call.Texts, r.Text)
			if ss == nil {
				return status.Error(codes.FailedPrecondition, "the first message must be a config")
			}
			if buf, err = ss.cutAll(buf + r.Text); err != nil {
				return err
			}
		case *ttsv1.StreamingSynthesizeRequest_Flush:
			call.Kinds = append(call.Kinds, "flush")
			if ss == nil {
				return status.Error(codes.FailedPrecondition, "the first message must be a config")
			}
			if err := ss.segment(buf, r.Flush.GetId()); err != nil {
				return err
			}
			buf = ""
		}
	}
	if ss == nil {
		return status.Error(codes.FailedPrecondition, "no config received")
	}
	if err := ss.segment(buf, ""); err != nil {
		return err
	}
	return ss.summary()
}

func kind(req *ttsv1.StreamingSynthesizeRequest) string {
	switch req.GetRequest().(type) {
	case *ttsv1.StreamingSynthesizeRequest_Config:
		return "config"
	case *ttsv1.StreamingSynthesizeRequest_Text:
		return "text"
	default:
		return "flush"
	}
}

// Synthesize implements the server-streaming RPC.
func (s *Server) Synthesize(req *ttsv1.SynthesizeRequest, stream grpc.ServerStreamingServer[ttsv1.SynthesizeResponse]) error {
	s.record(Call{Method: "Synthesize", Texts: []string{req.GetText()}})
	if strings.TrimSpace(req.GetText()) == "" {
		return status.Error(codes.InvalidArgument, "text is empty")
	}
	send := func(m *ttsv1.StreamingSynthesizeResponse) error {
		out := &ttsv1.SynthesizeResponse{}
		switch r := m.GetResponse().(type) {
		case *ttsv1.StreamingSynthesizeResponse_Audio:
			out.Response = &ttsv1.SynthesizeResponse_Audio{Audio: r.Audio}
		case *ttsv1.StreamingSynthesizeResponse_SegmentStart:
			out.Response = &ttsv1.SynthesizeResponse_SegmentStart{SegmentStart: r.SegmentStart}
		case *ttsv1.StreamingSynthesizeResponse_SegmentEnd:
			out.Response = &ttsv1.SynthesizeResponse_SegmentEnd{SegmentEnd: r.SegmentEnd}
		case *ttsv1.StreamingSynthesizeResponse_Summary:
			out.Response = &ttsv1.SynthesizeResponse_Summary{Summary: r.Summary}
		}
		return stream.Send(out)
	}
	ss, err := newSession(s, req.GetVoice(), req.GetAudioFormat(), send)
	if err != nil {
		return err
	}
	rest, err := ss.cutAll(req.GetText())
	if err != nil {
		return err
	}
	if err := ss.segment(rest, ""); err != nil {
		return err
	}
	return ss.summary()
}

// ListVoices implements the RPC.
func (s *Server) ListVoices(context.Context, *ttsv1.ListVoicesRequest) (*ttsv1.ListVoicesResponse, error) {
	s.record(Call{Method: "ListVoices"})
	resp := &ttsv1.ListVoicesResponse{EmotionTags: []string{"<laugh>", "<sigh>"}}
	for _, v := range Voices {
		resp.Voices = append(resp.Voices, &ttsv1.Voice{Name: v, Language: "en", IsDefault: v == "tara"})
	}
	return resp, nil
}

// GetStatus implements the RPC; Model is the fake's name.
func (s *Server) GetStatus(context.Context, *ttsv1.GetStatusRequest) (*ttsv1.GetStatusResponse, error) {
	s.record(Call{Method: "GetStatus"})
	return &ttsv1.GetStatusResponse{Serving: true, Backend: "fake", Model: s.Name, TotalSlots: 4, FreeSlots: 4}, nil
}

// String names the fake.
func (s *Server) String() string { return fmt.Sprintf("fake %s at %s", s.Name, s.Addr) }
