package main

import (
	"bytes"
	"context"
	"encoding/binary"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/orpheus-svc/orpheus-svc/clients/go/internal/fakeserver"
)

func startFake(t *testing.T) *fakeserver.Server {
	t.Helper()
	s, err := fakeserver.Start("cli")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Stop)
	return s
}

// readWAV checks the 44-byte PCM16 mono header and returns the rate and sample bytes.
func readWAV(t *testing.T, path string) (int, []byte) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	le := binary.LittleEndian
	if len(b) < 44 || string(b[:4]) != "RIFF" || string(b[8:12]) != "WAVE" || le.Uint16(b[20:]) != 1 ||
		le.Uint16(b[22:]) != 1 || le.Uint16(b[34:]) != 16 || string(b[36:40]) != "data" ||
		int(le.Uint32(b[40:])) != len(b)-44 || int(le.Uint32(b[4:])) != len(b)-8 {
		t.Fatalf("not a complete PCM16 mono WAV: % x", b[:min(len(b), 44)])
	}
	return int(le.Uint32(b[24:])), b[44:]
}

func TestCLIWritesAValidWAVAndASummary(t *testing.T) {
	srv := startFake(t)
	out := filepath.Join(t.TempDir(), "hello.wav")
	var stderr bytes.Buffer
	// flags after the text, as in `orpheus-say "text" -o out.wav`
	code := run(context.Background(), []string{"Hello there. How are you?", "-o", out, "--server", srv.Addr,
		"--voice", "leah", "--rate", "16000"}, strings.NewReader(""), &stderr)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr.String())
	}
	rate, data := readWAV(t, out)
	n := fakeserver.ChunkSamples(16000)
	var want []byte
	for i := range 2 * fakeserver.ChunksPerSegment {
		want = append(want, fakeserver.ChunkPCM(uint64(i), n)...)
	}
	if rate != 16000 || !bytes.Equal(data, want) {
		t.Fatalf("rate %d, %d bytes", rate, len(data))
	}
	if s := stderr.String(); !strings.Contains(s, "TTFB") || !strings.Contains(s, "2 segments") {
		t.Fatalf("summary %q", s)
	}
}

func TestCLIErrorPrintsTheServersMessage(t *testing.T) {
	srv := startFake(t)
	out := filepath.Join(t.TempDir(), "x.wav")
	var stderr bytes.Buffer
	code := run(context.Background(), []string{"-o", out, "--server", srv.Addr, "--voice", "nobody", "Hi."},
		strings.NewReader(""), &stderr)
	if code != 1 || !strings.Contains(stderr.String(), "INVALID_ARGUMENT: unknown voice \"nobody\"") {
		t.Fatalf("exit %d: %q", code, stderr.String())
	}
	if _, err := os.Stat(out); !os.IsNotExist(err) {
		t.Fatal("partial output left behind")
	}
}

func TestCLIUsageErrors(t *testing.T) {
	var stderr bytes.Buffer
	if code := run(context.Background(), []string{"a", "b"}, strings.NewReader(""), &stderr); code != 2 {
		t.Fatalf("two texts: exit %d", code)
	}
	if code := run(context.Background(), []string{"--rate", "44100", "x"}, strings.NewReader(""), &stderr); code != 2 {
		t.Fatalf("bad rate: exit %d", code)
	}
}

func TestCLIStreamSendsEachStdinLineAsItArrives(t *testing.T) {
	srv := startFake(t)
	out := filepath.Join(t.TempDir(), "s.wav")
	pr, pw := io.Pipe()
	done := make(chan int, 1)
	var stderr bytes.Buffer
	go func() {
		done <- run(context.Background(), []string{"--stream", "-o", out, "--server", srv.Addr}, pr, &stderr)
	}()
	if _, err := io.WriteString(pw, "Hello there\n"); err != nil {
		t.Fatal(err)
	}
	// The second line is written only once the first line's audio went out: the run can
	// only get here if the CLI sent the first line while stdin was still open.
	select {
	case <-srv.SegmentSent:
	case <-time.After(10 * time.Second):
		t.Fatal("the first line was not streamed before stdin closed")
	}
	io.WriteString(pw, "How are you?\n")
	pw.Close()
	select {
	case code := <-done:
		if code != 0 {
			t.Fatalf("exit %d: %s", code, stderr.String())
		}
	case <-time.After(10 * time.Second):
		t.Fatal("CLI did not finish")
	}
	call := srv.Calls()[0]
	if !slices.Equal(call.Texts, []string{"Hello there\n", "How are you?\n"}) {
		t.Fatalf("server got %q", call.Texts)
	}
	if _, data := readWAV(t, out); len(data) != 2*2*fakeserver.ChunksPerSegment*fakeserver.ChunkSamples(24000) {
		t.Fatalf("%d audio bytes", len(data))
	}
}
