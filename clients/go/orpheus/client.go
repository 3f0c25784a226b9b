// Package orpheus is a small Go client for orpheus-svc, the streaming Orpheus TTS gRPC
// service (orpheus.tts.v1.TTSService).
//
//	c, err := orpheus.Dial("localhost:50051")               // or "dns:///tts:50051", "h1:p,h2:p"
//	defer c.Close()
//	res, err := c.Synthesize(ctx, "Hello there.", "tara")   // PCM16, 24 kHz
//
//	text := make(chan string)
//	s, err := c.Stream(ctx, "tara", text)
//	go func() { text <- "Hello the"; text <- "re. How are"; text <- orpheus.Flush; close(text) }()
//	for ev, err := range s.Events() { ... }                 // *AudioChunk, *SegmentStart, ...
//
// Errors are gRPC status errors as the server sent them: use status.Code(err) and
// status.Convert(err).Message() (e.g. codes.InvalidArgument, "unknown voice ...").
package orpheus

import (
	"context"
	"fmt"
	"net"
	"regexp"
	"strings"
	"sync/atomic"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	_ "google.golang.org/grpc/health" // registers client-side health checking
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/resolver"
	"google.golang.org/grpc/resolver/manual"

	ttsv1 "github.com/orpheus-svc/orpheus-svc/clients/go/gen/orpheus/tts/v1"
)

// DefaultTarget is where Dial connects when given "".
const DefaultTarget = "localhost:50051"

// DefaultLBPolicy spreads calls (sessions) over every address of the target.
const DefaultLBPolicy = "round_robin"

// DefaultRetries is how many extra attempts a call refused with UNAVAILABLE before the server
// accepted it gets (WithRetries); MaxRetries is the most gRPC allows (5 attempts in all).
const (
	DefaultRetries = 2
	MaxRetries     = 4
)

// Client is a connection to one orpheus-svc deployment; safe for concurrent use.
type Client struct {
	retries int
	resume  *resumePolicy // nil: off
	conn    *grpc.ClientConn
	probe   *grpc.ClientConn // without health checking: reaches a NOT_SERVING server; nil = conn
	tts     ttsv1.TTSServiceClient
	health  healthpb.HealthClient
	status  ttsv1.TTSServiceClient
	target  string
}

type dialOptions struct {
	retries      int
	lbPolicy     string
	healthCheck  *bool
	resume       *bool
	resumeLimits *resumePolicy
	creds        credentials.TransportCredentials
	extra        []grpc.DialOption
}

// HealthCheckService is the service whose health the client watches when health checking
// is on: a replica that reports NOT_SERVING (loading, draining) gets no new calls.
const HealthCheckService = "orpheus.tts.v1.TTSService"

// WithHealthCheck turns client-side health checking on or off. Default: on for targets that
// name replicas (a comma list or dns:///...), off for a single host:port, so that a lone
// server's own "still loading" message reaches the caller instead of a generic UNAVAILABLE.
func WithHealthCheck(on bool) DialOption { return func(o *dialOptions) { o.healthCheck = &on } }

// WithRetries sets the extra attempts (0..MaxRetries, default DefaultRetries) for a call
// refused with UNAVAILABLE before the server accepted it, e.g. by a replica that has just
// begun draining; with round_robin the retry goes to the next replica. gRPC retries the
// calls with one request; the client retries StreamingSynthesize sessions itself, sending
// the new attempt every message the refused one was sent, in order (gRPC's own replay of
// client-streaming calls lost text in the Python client; docs/deploy.md). 0 turns it off.
func WithRetries(n int) DialOption { return func(o *dialOptions) { o.retries = n } }

// DialOption configures Dial.
type DialOption func(*dialOptions)

// WithLBPolicy sets the gRPC load-balancing policy (default "round_robin"); "" leaves
// gRPC's default, pick_first, which sends every call to one address.
func WithLBPolicy(policy string) DialOption { return func(o *dialOptions) { o.lbPolicy = policy } }

// WithTransportCredentials enables TLS (default: plaintext).
func WithTransportCredentials(c credentials.TransportCredentials) DialOption {
	return func(o *dialOptions) { o.creds = c }
}

// WithGRPCDialOptions passes extra options to grpc.NewClient.
func WithGRPCDialOptions(opts ...grpc.DialOption) DialOption {
	return func(o *dialOptions) { o.extra = append(o.extra, opts...) }
}

// hostPort is "host:port" or "[v6]:port" with a numeric port.
var hostPort = regexp.MustCompile(`^(\[[^\]]+\]|[^:\[\]/]+):[0-9]+$`)

var staticSchemeSeq atomic.Uint64

// SplitTargetList returns the addresses of a comma-separated "h1:p1,h2:p2" target, or nil
// when target is a single address or a gRPC target with a scheme ("dns:///h:p", ...).
func SplitTargetList(target string) ([]string, error) {
	if !strings.Contains(target, ",") {
		return nil, nil
	}
	parts := strings.Split(target, ",")
	if !hostPort.MatchString(strings.TrimSpace(parts[0])) {
		return nil, nil // e.g. "ipv4:1.2.3.4:5,1.2.3.5:6" - gRPC's own syntax
	}
	var addrs []string
	for _, p := range parts {
		p = strings.TrimSpace(p)
		if p == "" {
			continue
		}
		if !hostPort.MatchString(p) {
			return nil, fmt.Errorf("orpheus: bad address %q in target list: want host:port", p)
		}
		if _, _, err := net.SplitHostPort(p); err != nil {
			return nil, fmt.Errorf("orpheus: bad address %q in target list: %v", p, err)
		}
		addrs = append(addrs, p)
	}
	return addrs, nil
}

// Dial creates a client (connections are made lazily, on the first call).
//
// target is "host:port" (resolved by DNS, every address used), "dns:///host:port", any
// other gRPC target, or a comma list "h1:p1,h2:p2" of replicas (a static list; each name
// is resolved when connecting). With the default round_robin policy successive calls go
// to successive replicas.
func Dial(target string, opts ...DialOption) (*Client, error) {
	o := dialOptions{retries: DefaultRetries, lbPolicy: DefaultLBPolicy, creds: insecure.NewCredentials()}
	for _, opt := range opts {
		opt(&o)
	}
	if o.retries < 0 || o.retries > MaxRetries {
		return nil, fmt.Errorf("orpheus: retries must be 0..%d (gRPC allows 5 attempts), got %d",
			MaxRetries, o.retries)
	}
	if target == "" {
		target = DefaultTarget
	}
	addrs, err := SplitTargetList(target)
	if err != nil {
		return nil, err
	}
	replicas := addrs != nil || strings.HasPrefix(target, "dns:")
	healthCheck := replicas
	if o.healthCheck != nil {
		healthCheck = *o.healthCheck
	}
	resume, err := o.resumePolicy(replicas)
	if err != nil {
		return nil, err
	}
	dopts := []grpc.DialOption{grpc.WithTransportCredentials(o.creds)}
	if sc := serviceConfig(o.lbPolicy, healthCheck, o.retries); sc != "" {
		dopts = append(dopts, grpc.WithDefaultServiceConfig(sc))
	}
	probeOpts := []grpc.DialOption{grpc.WithTransportCredentials(o.creds)}
	if sc := serviceConfig(o.lbPolicy, false, o.retries); sc != "" {
		probeOpts = append(probeOpts, grpc.WithDefaultServiceConfig(sc))
	}
	grpcTarget := target
	if addrs != nil {
		// A private manual resolver holds the static list; its scheme is unique per client.
		r := manual.NewBuilderWithScheme(fmt.Sprintf("orpheus-static-%d", staticSchemeSeq.Add(1)))
		state := resolver.State{}
		for _, a := range addrs {
			state.Endpoints = append(state.Endpoints,
				resolver.Endpoint{Addresses: []resolver.Address{{Addr: a}}})
		}
		r.InitialState(state)
		dopts = append(dopts, grpc.WithResolvers(r))
		probeOpts = append(probeOpts, grpc.WithResolvers(r))
		grpcTarget = r.Scheme() + ":///replicas"
	}
	conn, err := grpc.NewClient(grpcTarget, append(dopts, o.extra...)...)
	if err != nil {
		return nil, fmt.Errorf("orpheus: dial %q: %w", target, err)
	}
	c := &Client{retries: o.retries, resume: resume, conn: conn, tts: ttsv1.NewTTSServiceClient(conn), target: target}
	probe := conn
	if healthCheck {
		if probe, err = grpc.NewClient(grpcTarget, append(probeOpts, o.extra...)...); err != nil {
			conn.Close()
			return nil, fmt.Errorf("orpheus: dial %q: %w", target, err)
		}
		c.probe = probe
	}
	c.health, c.status = healthpb.NewHealthClient(probe), ttsv1.NewTTSServiceClient(probe)
	return c, nil
}

// resumePolicy is the resume bounds for these options, or nil when resuming is off: by
// default on where the target names replicas.
func (o dialOptions) resumePolicy(replicas bool) (*resumePolicy, error) {
	on := replicas || o.resumeLimits != nil
	if o.resume != nil {
		on = *o.resume
	}
	if !on {
		return nil, nil
	}
	p := &resumePolicy{attempts: DefaultResumeAttempts, within: DefaultResumeWithin}
	if o.resumeLimits != nil {
		p = o.resumeLimits
	}
	if p.attempts < 1 || p.within <= 0 {
		return nil, fmt.Errorf("orpheus: resume limits must be at least 1 attempt within a positive "+
			"time, got %d within %v", p.attempts, p.within)
	}
	return p, nil
}

// serviceConfig is the JSON service config for the policy, health checking and retries
// ("" = none). gRPC retries every method but StreamingSynthesize, which the session retries
// itself (session.go); the most specific name wins.
func serviceConfig(lbPolicy string, healthCheck bool, retries int) string {
	var parts []string
	if lbPolicy != "" {
		parts = append(parts, fmt.Sprintf(`"loadBalancingConfig":[{%q:{}}]`, lbPolicy))
	}
	if healthCheck {
		parts = append(parts, fmt.Sprintf(`"healthCheckConfig":{"serviceName":%q}`, HealthCheckService))
	}
	if retries > 0 {
		svc := ttsv1.TTSService_ServiceDesc.ServiceName
		parts = append(parts, fmt.Sprintf(`"methodConfig":[{"name":[{"service":%q,"method":"StreamingSynthesize"}]},`+
			`{"name":[{"service":%q}],"retryPolicy":{"maxAttempts":%d,"initialBackoff":"0.05s",`+
			`"maxBackoff":"1s","backoffMultiplier":2,"retryableStatusCodes":["UNAVAILABLE"]}}]`,
			svc, svc, retries+1))
	}
	if len(parts) == 0 {
		return ""
	}
	return "{" + strings.Join(parts, ",") + "}"
}

// Close closes the connection(s).
func (c *Client) Close() error {
	if c.probe != nil {
		c.probe.Close()
	}
	return c.conn.Close()
}

// Conn is the underlying connection (for other services on the same server).
func (c *Client) Conn() *grpc.ClientConn { return c.conn }

// Raw is the generated TTSService client.
func (c *Client) Raw() ttsv1.TTSServiceClient { return c.tts }

// ListVoices returns the voices and emotion tags the server's model knows.
func (c *Client) ListVoices(ctx context.Context) (*ttsv1.ListVoicesResponse, error) {
	return c.tts.ListVoices(ctx, &ttsv1.ListVoicesRequest{})
}

// Status returns the server's scheduler and KV slot figures (GetStatus).
func (c *Client) Status(ctx context.Context) (*ttsv1.GetStatusResponse, error) {
	return c.status.GetStatus(ctx, &ttsv1.GetStatusRequest{})
}

// Health runs grpc.health.v1.Health/Check; service "" is the whole server.
func (c *Client) Health(ctx context.Context, service string) (healthpb.HealthCheckResponse_ServingStatus, error) {
	resp, err := c.health.Check(ctx, &healthpb.HealthCheckRequest{Service: service})
	if err != nil {
		return healthpb.HealthCheckResponse_UNKNOWN, err
	}
	return resp.GetStatus(), nil
}
