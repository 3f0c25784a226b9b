package orpheus

import (
	"errors"
	"slices"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

func TestFakeOpenSessionSendFlushEnd(t *testing.T) {
	srv := startFake(t, "a")
	c := dial(t, srv.Addr)
	s, err := c.OpenSession(testCtx(t), "leo")
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"Hel", "lo the", "re. How", "", " are"} {
		if err := s.Send(f); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Flush(); err != nil {
		t.Fatal(err)
	}
	if err := s.Send("Bye"); err != nil {
		t.Fatal(err)
	}
	if err := s.End(); err != nil {
		t.Fatal(err)
	}
	if err := s.End(); err != nil {
		t.Fatalf("second End: %v", err)
	}
	if err := s.Send("late"); !errors.Is(err, ErrEnded) {
		t.Fatalf("Send after End: %v", err)
	}
	var events []Event
	for ev, err := range s.Events() {
		if err != nil {
			t.Fatal(err)
		}
		events = append(events, ev)
	}
	ends := checkEvents(t, events)
	if got := segmentTexts(ends); !slices.Equal(got, []string{"Hello there.", "How are", "Bye"}) {
		t.Fatalf("segments %q", got)
	}
	if k := srv.Calls()[0].Kinds; !slices.Equal(k, []string{"config", "text", "text", "text", "text", "flush", "text"}) {
		t.Fatalf("server saw %q", k)
	}
}

func TestFakeOpenSessionReadsBeforeTheNextSend(t *testing.T) {
	srv := startFake(t, "a")
	c := dial(t, srv.Addr)
	s, err := c.OpenSession(testCtx(t), "tara")
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Send("First sentence. "); err != nil {
		t.Fatal(err)
	}
	// The first segment's audio arrives while the input is still open.
	for {
		ev, err := s.Recv()
		if err != nil {
			t.Fatal(err)
		}
		if _, ok := ev.(*AudioChunk); ok {
			break
		}
	}
	if err := s.Send("Second one."); err != nil {
		t.Fatal(err)
	}
	if err := s.End(); err != nil {
		t.Fatal(err)
	}
	var last Event
	for ev, err := range s.Events() {
		if err != nil {
			t.Fatal(err)
		}
		last = ev
	}
	if _, ok := last.(*Summary); !ok {
		t.Fatalf("last event %T, want *Summary", last)
	}
}

func TestFakeOpenSessionCancelStopsTheCall(t *testing.T) {
	srv := startFake(t, "a")
	c := dial(t, srv.Addr)
	s, err := c.OpenSession(testCtx(t), "tara")
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Send("First sentence. "); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Recv(); err != nil {
		t.Fatal(err)
	}
	s.Cancel()
	// Messages already buffered may still come out; then the call's status is Canceled and
	// no summary was sent.
	for {
		ev, err := s.Recv()
		if err != nil {
			if status.Code(err) != codes.Canceled {
				t.Fatalf("Recv after Cancel: %v, want Canceled", err)
			}
			break
		}
		if _, ok := ev.(*Summary); ok {
			t.Fatal("a cancelled session got its summary")
		}
	}
}

func TestSynthesizeSessionRefusesText(t *testing.T) {
	srv := startFake(t, "a")
	c := dial(t, srv.Addr)
	s, err := c.SynthesizeEvents(testCtx(t), "Hi.", "tara")
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if err := s.Send("more"); !errors.Is(err, ErrNotStreaming) {
		t.Fatalf("Send on a Synthesize session: %v", err)
	}
}
