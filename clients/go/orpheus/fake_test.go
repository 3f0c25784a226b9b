package orpheus

import (
	"context"
	"encoding/json"
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"

	"github.com/orpheus-svc/orpheus-svc/clients/go/internal/fakeserver"
)

// These tests run the client against internal/fakeserver (in process, no model).

func startFake(t *testing.T, name string) *fakeserver.Server {
	t.Helper()
	s, err := fakeserver.Start(name)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Stop)
	return s
}

func dial(t *testing.T, target string, opts ...DialOption) *Client {
	t.Helper()
	c, err := Dial(target, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func TestFakeStreamSendsFragmentsAndFlushInOrder(t *testing.T) {
	srv := startFake(t, "a")
	c := dial(t, srv.Addr)
	res, err := c.SynthesizeStream(testCtx(t), "leo", []string{"Hel", "lo the", "re. How", " are", Flush, "Bye", ""})
	if err != nil {
		t.Fatal(err)
	}
	ends := checkEvents(t, res.Events)
	if got := segmentTexts(ends); !slices.Equal(got, []string{"Hello there.", "How are", "Bye"}) {
		t.Fatalf("segments %q", got)
	}
	call := srv.Calls()[0]
	if !slices.Equal(call.Kinds, []string{"config", "text", "text", "text", "text", "flush", "text"}) {
		t.Fatalf("server saw %q", call.Kinds)
	}
	n := fakeserver.ChunkSamples(24000)
	if len(res.Audio) != 2*3*fakeserver.ChunksPerSegment*n || res.SampleRate != 24000 || res.TTFB <= 0 {
		t.Fatalf("result: %d bytes at %d Hz, ttfb %v", len(res.Audio), res.SampleRate, res.TTFB)
	}
	if string(res.Audio[2*n:4*n]) != string(fakeserver.ChunkPCM(1, n)) {
		t.Fatal("audio bytes are not the chunks in order")
	}
}

func TestFakeStreamIsInteractive(t *testing.T) {
	srv := startFake(t, "a")
	c := dial(t, srv.Addr)
	text := make(chan string)
	s, err := c.Stream(testCtx(t), "tara", text)
	if err != nil {
		t.Fatal(err)
	}
	text <- "First sentence. "
	// The audio for the first sentence arrives while the input is still open.
	for {
		ev, err := s.Recv()
		if err != nil {
			t.Fatal(err)
		}
		if _, ok := ev.(*AudioChunk); ok {
			break
		}
	}
	text <- "Second one."
	close(text)
	chunks := 1
	for ev, err := range s.Events() {
		if err != nil {
			t.Fatal(err)
		}
		if _, ok := ev.(*AudioChunk); ok {
			chunks++
		}
	}
	if chunks != 2*fakeserver.ChunksPerSegment {
		t.Fatalf("%d chunks", chunks)
	}
}

func TestFakeSynthesizeAtAnotherRate(t *testing.T) {
	srv := startFake(t, "a")
	c := dial(t, srv.Addr)
	res, err := c.Synthesize(testCtx(t), "Hello there. General Kenobi!", "", WithSampleRate(16000), WithSeed(3))
	if err != nil {
		t.Fatal(err)
	}
	ends := checkEvents(t, res.Events)
	if len(ends) != 2 || res.SampleRate != 16000 || res.Summary.NumSamples != uint64(len(res.Audio)/2) {
		t.Fatalf("segments %d rate %d summary %+v", len(ends), res.SampleRate, res.Summary)
	}
}

func TestFakeErrorsAreStatusErrorsWithTheServersMessage(t *testing.T) {
	srv := startFake(t, "a")
	c := dial(t, srv.Addr)
	ctx := testCtx(t)
	_, err := c.Synthesize(ctx, "Hi.", "nobody")
	if status.Code(err) != codes.InvalidArgument || !strings.Contains(status.Convert(err).Message(), "known voices: tara") {
		t.Fatalf("Synthesize: %v", err)
	}
	_, err = c.SynthesizeStream(ctx, "nobody", []string{"Hi."})
	if status.Code(err) != codes.InvalidArgument {
		t.Fatalf("Stream: %v", err)
	}
	_, err = c.Synthesize(ctx, "  ", "tara")
	if status.Code(err) != codes.InvalidArgument {
		t.Fatalf("empty text: %v", err)
	}
}

func TestFakeInfoCalls(t *testing.T) {
	srv := startFake(t, "a")
	c := dial(t, srv.Addr)
	ctx := testCtx(t)
	voices, err := c.ListVoices(ctx)
	if err != nil || len(voices.GetVoices()) != len(fakeserver.Voices) || voices.GetVoices()[0].GetName() != "tara" {
		t.Fatalf("ListVoices: %v %v", voices, err)
	}
	st, err := c.Status(ctx)
	if err != nil || st.GetModel() != "a" || st.GetTotalSlots() != 4 {
		t.Fatalf("Status: %v %v", st, err)
	}
	h, err := c.Health(ctx, "")
	if err != nil || h != healthpb.HealthCheckResponse_SERVING {
		t.Fatalf("Health: %v %v", h, err)
	}
}

func TestFakeDNSTarget(t *testing.T) {
	srv := startFake(t, "a")
	c := dial(t, "dns:///"+srv.Addr)
	if _, err := c.Status(testCtx(t)); err != nil {
		t.Fatal(err)
	}
}

func TestFakeRoundRobinSpreadsSessionsOverAReplicaList(t *testing.T) {
	a, b := startFake(t, "a"), startFake(t, "b")
	_, portB, _ := strings.Cut(b.Addr, ":")
	c := dial(t, a.Addr+",localhost:"+portB)
	ctx := testCtx(t)
	// until the second replica is connected, round_robin uses the one that is
	for i := 0; i < 200 && (len(a.Calls()) == 0 || len(b.Calls()) == 0); i++ {
		if _, err := c.Synthesize(ctx, "Hi.", "tara"); err != nil {
			t.Fatal(err)
		}
		time.Sleep(5 * time.Millisecond)
	}
	na, nb := len(a.Calls()), len(b.Calls())
	if na == 0 || nb == 0 {
		t.Fatalf("calls not spread: %d / %d", na, nb)
	}
	for range 10 {
		if _, err := c.SynthesizeStream(ctx, "tara", []string{"Hi."}); err != nil {
			t.Fatal(err)
		}
	}
	if da, db := len(a.Calls())-na, len(b.Calls())-nb; da != 5 || db != 5 {
		t.Fatalf("10 sessions split %d / %d, want 5 / 5", da, db)
	}
}

func TestFakePickFirstKeepsSessionsOnOneReplica(t *testing.T) {
	a, b := startFake(t, "a"), startFake(t, "b")
	c := dial(t, a.Addr+","+b.Addr, WithLBPolicy("pick_first"))
	for range 6 {
		if _, err := c.Synthesize(testCtx(t), "Hi.", "tara"); err != nil {
			t.Fatal(err)
		}
	}
	counts := []int{len(a.Calls()), len(b.Calls())}
	slices.Sort(counts)
	if !slices.Equal(counts, []int{0, 6}) {
		t.Fatalf("pick_first spread calls: %v", counts)
	}
}

func TestFakeReplicaReportingNotServingGetsNoNewSessions(t *testing.T) {
	a, b := startFake(t, "a"), startFake(t, "b")
	c := dial(t, a.Addr+","+b.Addr)
	ctx := testCtx(t)
	for i := 0; i < 200 && (len(a.Calls()) == 0 || len(b.Calls()) == 0); i++ {
		if _, err := c.Synthesize(ctx, "Hi.", "tara"); err != nil {
			t.Fatal(err)
		}
		time.Sleep(5 * time.Millisecond)
	}
	b.SetServing(false) // draining: health checking takes it out of the rotation
	for i := 0; i < 200; i++ {
		if st, err := c.Health(ctx, HealthCheckService); err == nil && st != healthpb.HealthCheckResponse_SERVING {
			break // seen through the probe connection; the watch stream sees it too
		}
		time.Sleep(5 * time.Millisecond)
	}
	time.Sleep(100 * time.Millisecond)
	nb := len(b.Calls())
	for range 8 {
		if _, err := c.Synthesize(ctx, "Hi.", "tara"); err != nil {
			t.Fatal(err)
		}
	}
	if got := len(b.Calls()) - nb; got != 0 {
		t.Fatalf("%d sessions went to the NOT_SERVING replica", got)
	}
	if _, err := c.Status(ctx); err != nil { // the probe still reaches whichever replica
		t.Fatal(err)
	}
}

func TestServiceConfigCombinesPolicyAndHealthCheck(t *testing.T) {
	if got := serviceConfig("round_robin", true, 0); got != `{"loadBalancingConfig":[{"round_robin":{}}],"healthCheckConfig":{"serviceName":"orpheus.tts.v1.TTSService"}}` {
		t.Fatal(got)
	}
	if serviceConfig("", false, 0) != "" {
		t.Fatal("empty config expected")
	}
	// gRPC retries every method but StreamingSynthesize, which the session retries itself
	var sc struct {
		MethodConfig []struct {
			Name        []struct{ Service, Method string }
			RetryPolicy *struct {
				MaxAttempts          int
				RetryableStatusCodes []string
			}
		}
	}
	if err := json.Unmarshal([]byte(serviceConfig("round_robin", false, 2)), &sc); err != nil {
		t.Fatal(err)
	}
	mc := sc.MethodConfig
	if len(mc) != 2 || mc[0].Name[0].Method != "StreamingSynthesize" || mc[0].RetryPolicy != nil ||
		mc[1].Name[0].Method != "" || mc[1].Name[0].Service != HealthCheckService ||
		mc[1].RetryPolicy.MaxAttempts != 3 || !slices.Equal(mc[1].RetryPolicy.RetryableStatusCodes, []string{"UNAVAILABLE"}) {
		t.Fatalf("%+v", sc)
	}
	if _, err := Dial("localhost:1", WithRetries(MaxRetries+1)); err == nil {
		t.Fatal("retries above MaxRetries accepted")
	}
}
