package validate

import (
	"fmt"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"
)

// ServerSettings are the orpheus-svc settings the manifests must agree with.
type ServerSettings struct {
	Port              int
	MetricsPort       int
	DrainDelaySeconds float64
	GraceSeconds      float64
	// slow is not dead: a stall ends calls, then, at the exit bound, the process (0: never)
	EngineStallTimeoutSeconds float64
	EngineStallExitSeconds    float64
}

// DefaultServerSettings mirrors ServerConfig's defaults in orpheus_svc/config.py.
var DefaultServerSettings = ServerSettings{Port: 50051, MetricsPort: 0, DrainDelaySeconds: 1, GraceSeconds: 20,
	EngineStallTimeoutSeconds: 10, EngineStallExitSeconds: 30}

// EffectiveServerSettings works out the server.* settings a container would run with, in the
// loader's order of precedence: defaults < the YAML config < ORPHEUS_SERVER__* environment
// variables < `--set server.x=v` and `--port` flags. (tests/deploy checks the whole config
// with the real loader; this covers what the Kubernetes objects depend on.)
func EffectiveServerSettings(configYAML []byte, env []corev1.EnvVar, args []string) (ServerSettings, error) {
	s := DefaultServerSettings
	var tree struct {
		Server map[string]any `json:"server"`
	}
	if err := yaml.Unmarshal(configYAML, &tree); err != nil {
		return s, fmt.Errorf("config YAML: %w", err)
	}
	for k, v := range tree.Server {
		if err := s.set(k, fmt.Sprint(v), "config file"); err != nil {
			return s, err
		}
	}
	for _, e := range env {
		key, ok := strings.CutPrefix(e.Name, "ORPHEUS_SERVER__")
		if !ok {
			continue
		}
		if e.ValueFrom != nil {
			return s, fmt.Errorf("env %s comes from valueFrom: cannot check it", e.Name)
		}
		if err := s.set(strings.ToLower(key), e.Value, "env "+e.Name); err != nil {
			return s, err
		}
	}
	for i := 0; i < len(args); i++ {
		arg, value, hasValue := strings.Cut(args[i], "=")
		if arg != "--set" && arg != "--port" {
			continue
		}
		if !hasValue {
			if i+1 >= len(args) {
				return s, fmt.Errorf("flag %s has no value", arg)
			}
			i++
			value = args[i]
		}
		if arg == "--port" {
			value = "server.port=" + value
		}
		dotted, v, ok := strings.Cut(value, "=")
		if !ok {
			return s, fmt.Errorf("--set %q: want section.key=value", value)
		}
		if key, ok := strings.CutPrefix(strings.TrimSpace(dotted), "server."); ok {
			if err := s.set(key, v, "flag --set "+dotted); err != nil {
				return s, err
			}
		}
	}
	return s, nil
}

func (s *ServerSettings) set(key, value, source string) error {
	var err error
	switch key {
	case "port":
		s.Port, err = strconv.Atoi(value)
	case "metrics_port":
		s.MetricsPort, err = strconv.Atoi(value)
	case "drain_delay_seconds":
		s.DrainDelaySeconds, err = strconv.ParseFloat(value, 64)
	case "grace_seconds":
		s.GraceSeconds, err = strconv.ParseFloat(value, 64)
	case "engine_stall_timeout_seconds":
		s.EngineStallTimeoutSeconds, err = strconv.ParseFloat(value, 64)
	case "engine_stall_exit_seconds":
		s.EngineStallExitSeconds, err = strconv.ParseFloat(value, 64)
	}
	if err != nil {
		return fmt.Errorf("%s: server.%s=%q: %w", source, key, value, err)
	}
	return nil
}
