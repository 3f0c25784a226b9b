package orpheus

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"os"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
)

// apiKey sends "authorization: Bearer <key>" with every call (docs/security.md).
type apiKey string

func (k apiKey) GetRequestMetadata(context.Context, ...string) (map[string]string, error) {
	return map[string]string{"authorization": "Bearer " + string(k)}, nil
}

// RequireTransportSecurity is false so a key can also be used against a plaintext server on
// localhost; use TLS anywhere else, or the key travels in clear.
func (apiKey) RequireTransportSecurity() bool { return false }

// WithAPIKey sends the server's API key with every call.
func WithAPIKey(key string) DialOption {
	return WithGRPCDialOptions(grpc.WithPerRPCCredentials(apiKey(key)))
}

// TLSCredentials builds TLS transport credentials: caFile is the CA to trust ("" = the
// system roots), certFile/keyFile this client's certificate for mTLS ("" = none), and
// serverName the name to check the server's certificate against ("" = the target's host).
func TLSCredentials(caFile, certFile, keyFile, serverName string) (credentials.TransportCredentials, error) {
	cfg := &tls.Config{ServerName: serverName, MinVersion: tls.VersionTLS12}
	if caFile != "" {
		pem, err := os.ReadFile(caFile)
		if err != nil {
			return nil, fmt.Errorf("CA file: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("CA file %s: no PEM certificate in it", caFile)
		}
		cfg.RootCAs = pool
	}
	if (certFile == "") != (keyFile == "") {
		return nil, fmt.Errorf("a client certificate needs both the cert and the key file")
	}
	if certFile != "" {
		pair, err := tls.LoadX509KeyPair(certFile, keyFile)
		if err != nil {
			return nil, fmt.Errorf("client certificate: %w", err)
		}
		cfg.Certificates = []tls.Certificate{pair}
	}
	return credentials.NewTLS(cfg), nil
}
