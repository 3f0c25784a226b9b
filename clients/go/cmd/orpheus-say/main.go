// Command orpheus-say speaks text into a WAV file through an orpheus-svc server.
//
//	orpheus-say "Hello there." -o hello.wav [--voice tara] [--server host:port] [--rate 24000]
//	my-llm | orpheus-say --stream -o reply.wav     # each stdin line is sent as it arrives
//
// Without --stream the whole text (the argument, or all of stdin when it is absent or "-")
// goes in one Synthesize call. With --stream a StreamingSynthesize session sends the
// argument (if any) and then every stdin line the moment it is read; the server ends a
// segment at each line break. The WAV (16-bit mono PCM) is written as audio arrives and a
// short summary goes to stderr. On an error the server's message is printed, the partial
// file removed, and the exit status is 1 (2 for usage errors).
package main

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"time"

	"google.golang.org/grpc/status"

	ttsv1 "github.com/orpheus-svc/orpheus-svc/clients/go/gen/orpheus/tts/v1"
	"github.com/orpheus-svc/orpheus-svc/clients/go/orpheus"
	"github.com/orpheus-svc/orpheus-svc/clients/go/wav"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	code := run(ctx, os.Args[1:], os.Stdin, os.Stderr)
	stop()
	os.Exit(code)
}

type config struct {
	text, output, voice, server, lbPolicy string
	stream, quiet                         bool
	rate                                  int
	timeout                               time.Duration
	seed                                  int64
	apiKey, caFile, certFile, keyFile     string
	serverName                            string
	tls                                   bool
}

// parseArgs accepts flags before and after the text (Go's flag package stops at the first
// non-flag argument, so the rest is parsed again).
func parseArgs(args []string, stderr io.Writer) (*config, error) {
	c := &config{}
	fs := flag.NewFlagSet("orpheus-say", flag.ContinueOnError)
	fs.SetOutput(stderr)
	defServer := os.Getenv("ORPHEUS_SERVER_ADDR")
	if defServer == "" {
		defServer = orpheus.DefaultTarget
	}
	fs.StringVar(&c.output, "o", "out.wav", "WAV file to write")
	fs.StringVar(&c.output, "output", "out.wav", "WAV file to write (same as -o)")
	fs.StringVar(&c.voice, "voice", "", "voice, any case (default: the served model's default voice)")
	fs.StringVar(&c.server, "server", defServer, "host:port, dns:///host:port or h1:p1,h2:p2 (default $ORPHEUS_SERVER_ADDR)")
	fs.BoolVar(&c.stream, "stream", false, "stream stdin line by line through StreamingSynthesize")
	fs.IntVar(&c.rate, "rate", 24000, "output sample rate: 24000, 48000, 16000 or 8000")
	fs.DurationVar(&c.timeout, "timeout", 0, "deadline for the call (0: none)")
	fs.Int64Var(&c.seed, "seed", -1, "sampling seed (-1: server default)")
	fs.StringVar(&c.lbPolicy, "lb-policy", orpheus.DefaultLBPolicy, "gRPC load-balancing policy")
	fs.BoolVar(&c.quiet, "q", false, "no summary on stderr")
	// TLS and API key (docs/security.md)
	fs.StringVar(&c.apiKey, "api-key", os.Getenv("ORPHEUS_API_KEY"), "API key, sent as 'authorization: Bearer' (default $ORPHEUS_API_KEY)")
	fs.BoolVar(&c.tls, "tls", false, "connect with TLS (implied by -ca-file/-cert-file)")
	fs.StringVar(&c.caFile, "ca-file", "", "CA certificate (PEM) to trust instead of the system roots")
	fs.StringVar(&c.certFile, "cert-file", "", "client certificate (PEM) for mTLS")
	fs.StringVar(&c.keyFile, "key-file", "", "client private key (PEM) for mTLS")
	fs.StringVar(&c.serverName, "server-name", "", "name to check the server certificate against")
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: orpheus-say [flags] [text]   (text \"-\" or absent: stdin)")
		fs.PrintDefaults()
	}
	var positional []string
	for {
		if err := fs.Parse(args); err != nil {
			return nil, err
		}
		if fs.NArg() == 0 {
			break
		}
		positional = append(positional, fs.Arg(0))
		args = fs.Args()[1:]
	}
	if len(positional) > 1 {
		return nil, fmt.Errorf("orpheus-say: one text argument expected, got %d (quote the text)", len(positional))
	}
	if len(positional) == 1 {
		c.text = positional[0]
	}
	switch c.rate {
	case 24000, 48000, 16000, 8000:
	default:
		return nil, fmt.Errorf("orpheus-say: --rate must be 24000, 48000, 16000 or 8000, got %d", c.rate)
	}
	return c, nil
}

// stdinLines sends each line (with its newline) as soon as it is read, then closes out.
func stdinLines(ctx context.Context, first string, stdin io.Reader, out chan<- string) {
	defer close(out)
	send := func(s string) bool {
		select {
		case out <- s:
			return true
		case <-ctx.Done():
			return false
		}
	}
	if first != "" && first != "-" {
		if !strings.HasSuffix(first, "\n") {
			first += "\n"
		}
		if !send(first) {
			return
		}
	}
	r := bufio.NewReader(stdin)
	for {
		line, err := r.ReadString('\n')
		if line != "" && !send(line) {
			return
		}
		if err != nil {
			return
		}
	}
}

func run(ctx context.Context, args []string, stdin io.Reader, stderr io.Writer) int {
	ctx, cancel := context.WithCancel(ctx) // also stops the stdin reader's sends
	defer cancel()
	c, err := parseArgs(args, stderr)
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	if err != nil {
		fmt.Fprintln(stderr, err)
		return 2
	}
	opts := []orpheus.SynthOption{
		orpheus.WithEncoding(ttsv1.AudioEncoding_AUDIO_ENCODING_PCM16), orpheus.WithSampleRate(c.rate)}
	if c.seed >= 0 {
		opts = append(opts, orpheus.WithSeed(uint64(c.seed)))
	}
	var text string
	if !c.stream {
		text = c.text
		if text == "" || text == "-" {
			b, err := io.ReadAll(stdin)
			if err != nil {
				fmt.Fprintf(stderr, "orpheus-say: error: reading stdin: %v\n", err)
				return 1
			}
			text = string(b)
		}
		if strings.TrimSpace(text) == "" {
			fmt.Fprintln(stderr, "orpheus-say: error: no text (give it as an argument or on stdin)")
			return 2
		}
	}
	dial := []orpheus.DialOption{orpheus.WithLBPolicy(c.lbPolicy)}
	if c.tls || c.caFile != "" || c.certFile != "" {
		creds, err := orpheus.TLSCredentials(c.caFile, c.certFile, c.keyFile, c.serverName)
		if err != nil {
			fmt.Fprintf(stderr, "orpheus-say: error: %v\n", err)
			return 2
		}
		dial = append(dial, orpheus.WithTransportCredentials(creds))
	}
	if c.apiKey != "" {
		dial = append(dial, orpheus.WithAPIKey(c.apiKey))
	}
	client, err := orpheus.Dial(c.server, dial...)
	if err != nil {
		fmt.Fprintf(stderr, "orpheus-say: error: %v\n", err)
		return 2
	}
	defer client.Close()
	if c.timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, c.timeout)
		defer cancel()
	}

	started := time.Now()
	var session *orpheus.Session
	if c.stream {
		lines := make(chan string)
		go stdinLines(ctx, c.text, stdin, lines)
		session, err = client.Stream(ctx, c.voice, lines, opts...)
	} else {
		session, err = client.SynthesizeEvents(ctx, text, c.voice, opts...)
	}
	if err != nil {
		return fail(stderr, c.output, err)
	}
	defer session.Close()

	f, err := os.Create(c.output)
	if err != nil {
		fmt.Fprintf(stderr, "orpheus-say: error: %v\n", err)
		return 1
	}
	w, err := wav.NewWriter(f, c.rate)
	if err != nil {
		f.Close()
		return fail(stderr, c.output, err)
	}
	var ttfb time.Duration
	segments, chunks := 0, 0
	var summary *orpheus.Summary
	for ev, err := range session.Events() {
		if err != nil {
			f.Close()
			return fail(stderr, c.output, err)
		}
		switch e := ev.(type) {
		case *orpheus.AudioChunk:
			if chunks == 0 {
				ttfb = time.Since(started)
			}
			chunks++
			if _, err := w.Write(e.Audio); err != nil {
				f.Close()
				return fail(stderr, c.output, err)
			}
		case *orpheus.SegmentEnd:
			segments++
		case *orpheus.Summary:
			summary = e
		}
	}
	if err := w.Close(); err != nil {
		f.Close()
		return fail(stderr, c.output, err)
	}
	if err := f.Close(); err != nil {
		return fail(stderr, c.output, err)
	}
	if !c.quiet {
		server := ""
		if summary != nil {
			server = fmt.Sprintf(" (server %.0f ms)", summary.TimeToFirstAudioMs)
		}
		plural := "s"
		if segments == 1 {
			plural = ""
		}
		fmt.Fprintf(stderr, "orpheus-say: TTFB %d ms%s, audio %.2f s, %d segment%s, %d chunks, wall %.2f s -> %s\n",
			ttfb.Milliseconds(), server, float64(w.NumSamples())/float64(c.rate), segments, plural,
			chunks, time.Since(started).Seconds(), c.output)
	}
	return 0
}

// fail prints the error (for a gRPC status: CODE: the server's message), removes the
// partial output and returns exit status 1.
func fail(stderr io.Writer, output string, err error) int {
	if s, ok := status.FromError(err); ok {
		fmt.Fprintf(stderr, "orpheus-say: error: %s: %s\n", codeName(s.Code().String()), s.Message())
	} else {
		fmt.Fprintf(stderr, "orpheus-say: error: %v\n", err)
	}
	_ = os.Remove(output)
	return 1
}

// codeName turns grpc-go's "InvalidArgument" into the canonical "INVALID_ARGUMENT".
func codeName(camel string) string {
	var b strings.Builder
	for i, r := range camel {
		if i > 0 && r >= 'A' && r <= 'Z' {
			b.WriteByte('_')
		}
		b.WriteRune(r)
	}
	return strings.ToUpper(b.String())
}
