package orpheus

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"
)

// Live tests run against a real orpheus-svc (CI starts it with the demo model):
//
//	ORPHEUS_SERVER_ADDR=localhost:50051 go test ./...
//
// Without ORPHEUS_SERVER_ADDR they skip. ORPHEUS_LIVE_TIMEOUT (a Go duration, default 5m)
// bounds each test; the demo model on a CPU is slow.

const frameSamples = 2048 // one Orpheus/SNAC frame at 24 kHz

func liveClient(t *testing.T) (*Client, context.Context) {
	t.Helper()
	addr := os.Getenv("ORPHEUS_SERVER_ADDR")
	if addr == "" {
		t.Skip("ORPHEUS_SERVER_ADDR is not set: skipping live test against a running orpheus-svc " +
			"(e.g. ORPHEUS_SERVER_ADDR=localhost:50051 go test ./...)")
	}
	timeout := 5 * time.Minute
	if s := os.Getenv("ORPHEUS_LIVE_TIMEOUT"); s != "" {
		d, err := time.ParseDuration(s)
		if err != nil {
			t.Fatalf("ORPHEUS_LIVE_TIMEOUT=%q: %v", s, err)
		}
		timeout = d
	}
	c, err := Dial(addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	t.Cleanup(cancel)
	return c, ctx
}

func TestLiveSynthesizeHelloThere(t *testing.T) {
	c, ctx := liveClient(t)
	res, err := c.Synthesize(ctx, "Hello there.", "tara")
	if err != nil {
		t.Fatal(err)
	}
	ends := checkEvents(t, res.Events) // summary last, sequence numbers contiguous, ...
	if res.SampleRate != 24000 || len(res.Audio)%2 != 0 {
		t.Fatalf("want PCM16 at 24 kHz, got %d bytes at %d Hz", len(res.Audio), res.SampleRate)
	}
	n := len(res.Audio) / 2
	if n == 0 || n%frameSamples != 0 {
		t.Fatalf("%d samples: want > 0 and a multiple of %d", n, frameSamples)
	}
	if len(ends) == 0 || res.Summary.NumSamples != uint64(n) {
		t.Fatalf("%d segments, summary %+v, %d samples", len(ends), res.Summary, n)
	}
	t.Logf("%d samples (%.2f s) in %d chunks, client TTFB %v, summary %+v",
		n, float64(n)/24000, len(res.Events)-2*len(ends)-1, res.TTFB, res.Summary)
}

func TestLiveStreamingFragmentsAndFlush(t *testing.T) {
	c, ctx := liveClient(t)
	res, err := c.SynthesizeStream(ctx, "tara", []string{"Hel", "lo the", "re. How are", " you?", Flush, "Bye now."})
	if err != nil {
		t.Fatal(err)
	}
	ends := checkEvents(t, res.Events)
	if got := strings.Join(segmentTexts(ends), " "); got != "Hello there. How are you? Bye now." {
		t.Fatalf("segments %q", segmentTexts(ends))
	}
	for _, e := range ends {
		if e.NumSamples == 0 || e.NumSamples%frameSamples != 0 {
			t.Fatalf("segment %d has %d samples, want a positive multiple of %d", e.SegmentIndex, e.NumSamples, frameSamples)
		}
	}
}

func TestLiveUnknownVoiceIsInvalidArgument(t *testing.T) {
	c, ctx := liveClient(t)
	_, err := c.Synthesize(ctx, "Hello there.", "nobody")
	if status.Code(err) != codes.InvalidArgument {
		t.Fatalf("Synthesize with voice nobody: %v, want InvalidArgument", err)
	}
	if msg := status.Convert(err).Message(); !strings.Contains(msg, "tara") {
		t.Errorf("message %q should list the known voices", msg)
	}
	_, err = c.SynthesizeStream(ctx, "nobody", []string{"Hello there."})
	if status.Code(err) != codes.InvalidArgument {
		t.Fatalf("Stream with voice nobody: %v, want InvalidArgument", err)
	}
}

func TestLiveListVoicesHasTara(t *testing.T) {
	c, ctx := liveClient(t)
	resp, err := c.ListVoices(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, v := range resp.GetVoices() {
		if v.GetName() == "tara" {
			return
		}
	}
	t.Fatalf("tara not in %v", resp.GetVoices())
}

func TestLiveHealthServingAndStatus(t *testing.T) {
	c, ctx := liveClient(t)
	h, err := c.Health(ctx, "")
	if err != nil || h != healthpb.HealthCheckResponse_SERVING {
		t.Fatalf("Health: %v %v, want SERVING", h, err)
	}
	st, err := c.Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if st.GetTotalSlots() == 0 || st.GetFreeSlots() > st.GetTotalSlots() {
		t.Fatalf("status slots: free %d of %d", st.GetFreeSlots(), st.GetTotalSlots())
	}
}

// TestLiveDrainingReplicaRefusalIsRetried runs when tests/e2e/test_replicas.py sets
// ORPHEUS_DRAINING_REPLICAS to "draining,serving" (two real servers, the first draining:
// NOT_SERVING but still listening). Without health checks round_robin sends every other
// session to the draining replica, which refuses it with UNAVAILABLE before accepting; the
// session's own retry carries every fragment, in order, to the other replica.
func TestLiveDrainingReplicaRefusalIsRetried(t *testing.T) {
	addrs := os.Getenv("ORPHEUS_DRAINING_REPLICAS")
	if addrs == "" {
		t.Skip("ORPHEUS_DRAINING_REPLICAS is not set (tests/e2e/test_replicas.py sets it)")
	}
	c, err := Dial(addrs, WithHealthCheck(false))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	for i := range 4 { // round_robin: at least two of them go to the draining replica first
		res, err := c.SynthesizeStream(ctx, "", []string{"Hel", "lo ", "the", "re."})
		if err != nil {
			t.Fatalf("session %d: %v", i, err)
		}
		if len(res.Segments) != 1 || res.Segments[0].Text != "Hello there." {
			t.Fatalf("session %d: segments %+v", i, res.Segments)
		}
	}
}

// liveResumeSentences: five sentences, the second long enough (about 2 s of audio) that the
// replica serving it can be killed while it is being spoken.
var liveResumeSentences = []string{"Hello there. ", "This second sentence runs a good while longer. ",
	"Short third. ", "And a fourth. ", "The fifth."}

// LiveResumeReady is printed (on its own line, to stdout) when the session's second segment
// has started to play: tests/e2e/test_resume.py then kills (SIGKILL) the replica serving it.
const LiveResumeReady = "ORPHEUS-RESUME-READY"

// TestLiveResumeAfterReplicaKilled runs when tests/e2e/test_resume.py sets
// ORPHEUS_RESUME_REPLICAS to a list of real servers. A session pushes five sentences while
// its audio plays (the next one at each segment's start); once its second segment plays,
// the test process kills the replica serving it. The session is resumed on another replica:
// the ended segment once, the cut one again from its start, every later one once, with
// contiguous sequence numbers and offsets, and a summary saying it resumed once.
func TestLiveResumeAfterReplicaKilled(t *testing.T) {
	addrs := os.Getenv("ORPHEUS_RESUME_REPLICAS")
	if addrs == "" {
		t.Skip("ORPHEUS_RESUME_REPLICAS is not set (tests/e2e/test_resume.py sets it)")
	}
	c, err := Dial(addrs) // a replica list: health checks and resume are on by default
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	s, err := c.OpenSession(ctx, "", WithSeed(1))
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Send(liveResumeSentences[0]); err != nil {
		t.Fatal(err)
	}
	next, ready := 1, false
	var events []Event
	for ev, err := range s.Events() {
		if err != nil {
			t.Fatalf("after %d events: %v", len(events), err)
		}
		events = append(events, ev)
		switch e := ev.(type) {
		case *SegmentStart: // the next sentence as this one starts to play (not again on a repeat)
			if int(e.SegmentIndex) == next-1 && next < len(liveResumeSentences) {
				if err := s.Send(liveResumeSentences[next]); err != nil {
					t.Fatal(err)
				}
				if next++; next == len(liveResumeSentences) {
					_ = s.End()
				}
			}
		case *AudioChunk:
			if e.SegmentIndex == 1 && !ready {
				ready = true
				fmt.Println(LiveResumeReady)
			}
		}
	}
	if cut := checkResumedEvents(t, events, len(liveResumeSentences), 1); cut[0] != 1 {
		t.Fatalf("segment %d was cut, want 1 (the replica was killed while it played)", cut[0])
	}
	var want []string
	for _, s := range liveResumeSentences {
		want = append(want, strings.TrimSpace(s))
	}
	var got []string
	for _, ev := range events {
		if e, ok := ev.(*SegmentEnd); ok {
			got = append(got, e.Text)
		}
	}
	if !slices.Equal(got, want) {
		t.Fatalf("segments %q, want %q", got, want)
	}
}
