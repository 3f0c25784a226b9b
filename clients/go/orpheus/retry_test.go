package orpheus

import (
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// A replica that has just begun draining refuses a streaming call with UNAVAILABLE while the
// client is still sending. The session retries it, sending the new attempt every message so
// far in order, and every later one.

var retryFragments = []string{"Hel", "lo the", "re. How", " are", Flush, "Bye"}

// callsReach waits (at most 10 s) until calls() is at least n; whether it got there.
func callsReach(n int, calls func() int) bool {
	for deadline := time.Now().Add(10 * time.Second); calls() < n; time.Sleep(2 * time.Millisecond) {
		if time.Now().After(deadline) {
			return false
		}
	}
	return true
}

func waitForCalls(t *testing.T, n int, calls func() int) {
	t.Helper()
	if !callsReach(n, calls) {
		t.Fatalf("the server saw %d calls, want %d", calls(), n)
	}
}

func TestRefusedSessionIsRetriedWithEveryFragmentInOrder(t *testing.T) {
	srv := startFake(t, "a")
	srv.RefuseStreams(1)
	c := dial(t, srv.Addr)
	text := make(chan string)
	s, err := c.Stream(testCtx(t), "leo", text)
	if err != nil {
		t.Fatal(err)
	}
	go func() {
		text <- retryFragments[0]
		text <- retryFragments[1]
		// the rest only once the first attempt has been refused (if it never is, the
		// checks below fail)
		callsReach(1, func() int { return len(srv.Calls()) })
		for _, f := range retryFragments[2:] {
			text <- f
		}
		close(text)
	}()
	res, err := Collect(s)
	if err != nil {
		t.Fatal(err)
	}
	if got := segmentTexts(checkEvents(t, res.Events)); !slices.Equal(got, []string{"Hello there.", "How are", "Bye"}) {
		t.Fatalf("segments %q", got)
	}
	calls := srv.Calls()
	if len(calls) != 2 || calls[0].Method != "StreamingSynthesize (refused)" ||
		calls[1].Method != "StreamingSynthesize" {
		t.Fatalf("calls %+v", calls)
	}
	if !slices.Equal(calls[1].Kinds, []string{"config", "text", "text", "text", "text", "flush", "text"}) ||
		strings.Join(calls[1].Texts, "") != "Hello there. How areBye" {
		t.Fatalf("the retry got %q %q", calls[1].Kinds, calls[1].Texts)
	}
}

func TestHandDrivenSessionKeepsSendingThroughARefusal(t *testing.T) {
	srv := startFake(t, "a")
	srv.RefuseStreams(1)
	c := dial(t, srv.Addr)
	s, err := c.OpenSession(testCtx(t), "tara")
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Send("One. "); err != nil {
		t.Fatal(err)
	}
	waitForCalls(t, 1, func() int { return len(srv.Calls()) })
	for _, f := range []string{"Two", " three. "} { // the refused attempt is gone: kept, not failed
		if err := s.Send(f); err != nil {
			t.Fatalf("Send after the refusal: %v", err)
		}
	}
	if err := s.End(); err != nil {
		t.Fatal(err)
	}
	res, err := Collect(s)
	if err != nil {
		t.Fatal(err)
	}
	if got := segmentTexts(checkEvents(t, res.Events)); !slices.Equal(got, []string{"One.", "Two three."}) {
		t.Fatalf("segments %q", got)
	}
}

func TestSessionRefusedMoreOftenThanItsRetriesFailsUnavailable(t *testing.T) {
	for _, tc := range []struct {
		name     string
		opts     []DialOption
		attempts int
	}{{"default", nil, DefaultRetries + 1}, {"no retries", []DialOption{WithRetries(0)}, 1}} {
		t.Run(tc.name, func(t *testing.T) {
			srv := startFake(t, "a")
			srv.RefuseStreams(10)
			c := dial(t, srv.Addr, tc.opts...)
			_, err := c.SynthesizeStream(testCtx(t), "leo", retryFragments)
			if status.Code(err) != codes.Unavailable {
				t.Fatalf("err %v", err)
			}
			waitForCalls(t, tc.attempts, func() int { return len(srv.Calls()) })
			time.Sleep(100 * time.Millisecond)
			if n := len(srv.Calls()); n != tc.attempts {
				t.Fatalf("%d attempts, want %d", n, tc.attempts)
			}
		})
	}
}

func TestAcceptedSessionThatFailsIsNotRetried(t *testing.T) {
	// The server sent orpheus-session-id: it took the call and may have spoken already.
	srv := startFake(t, "a")
	srv.FailAcceptedStreams(1)
	c := dial(t, srv.Addr)
	_, err := c.SynthesizeStream(testCtx(t), "leo", retryFragments)
	if status.Code(err) != codes.Unavailable {
		t.Fatalf("err %v", err)
	}
	time.Sleep(100 * time.Millisecond)
	if calls := srv.Calls(); len(calls) != 1 || calls[0].Method != "StreamingSynthesize (accepted, failed)" {
		t.Fatalf("calls %+v", calls)
	}
}
