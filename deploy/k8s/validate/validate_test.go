package validate

import (
	"math"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/intstr"
	"sigs.k8s.io/yaml"
)

// k8sRoot is deploy/k8s, seen from this package's directory (go test runs tests there).
const k8sRoot = ".."

const (
	containerName   = "orpheus-svc"
	headlessService = "orpheus-svc-headless" // the name docs and README give clients
	metricsPort     = 9090
	sessionsMetric  = "orpheus_sessions_active"
	gpuResource     = corev1.ResourceName("nvidia.com/gpu")
	// Time to stop the engine and flusher after the last call ended, on top of
	// server.drain_delay_seconds + server.grace_seconds.
	shutdownMarginSeconds = 5
)

// kustomization is one directory `kubectl apply -k` takes, and what it must provide.
type kustomization struct {
	name              string
	dir               string
	gpu               bool
	minStartupSeconds int32 // model load + warm-up allowance before liveness takes over
	// keda: a KEDA ScaledObject (components/keda) scales it instead of the base's HPA. Its
	// dir is its sibling's with "-keda" added, and it must scale as that sibling's HPA does.
	keda bool
}

var kustomizations = []kustomization{
	{name: "base", dir: "base", gpu: false, minStartupSeconds: 120},
	{name: "gpu", dir: "overlays/gpu", gpu: true, minStartupSeconds: 600},
	{name: "cpu-demo", dir: "overlays/cpu-demo", gpu: false, minStartupSeconds: 120},
	{name: "gpu-keda", dir: "overlays/gpu-keda", gpu: true, minStartupSeconds: 600, keda: true},
	{name: "cpu-demo-keda", dir: "overlays/cpu-demo-keda", gpu: false, minStartupSeconds: 120, keda: true},
}

func TestEveryOverlayIsListedHere(t *testing.T) {
	entries, err := os.ReadDir(filepath.Join(k8sRoot, "overlays"))
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if !e.IsDir() {
			continue
		}
		dir := path.Join("overlays", e.Name())
		if !slices.ContainsFunc(kustomizations, func(k kustomization) bool { return k.dir == dir }) {
			t.Errorf("%s is not checked: add it to kustomizations in validate_test.go", dir)
		}
	}
	for _, k := range kustomizations {
		if k.keda != strings.HasSuffix(k.dir, "-keda") {
			t.Errorf("%s: keda is %v, but a KEDA overlay, and only one, is named <sibling>-keda", k.dir, k.keda)
		}
		if k.keda {
			sibling(t, k)
		}
	}
}

// TestEveryManifestFileDecodesStrictly reads every YAML file under deploy/k8s: each
// kustomization.yaml into kustomize's type, each file a configMapGenerator names as a YAML
// mapping (tests/deploy loads it with the server's config loader), and every document of
// every other file (resources and patches) into the Kubernetes type of its kind.
func TestEveryManifestFileDecodesStrictly(t *testing.T) {
	generated := map[string]bool{}
	var manifests []string
	err := filepath.WalkDir(k8sRoot, func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && p == filepath.Join(k8sRoot, "validate") {
			return filepath.SkipDir
		}
		if d.IsDir() || (filepath.Ext(p) != ".yaml" && filepath.Ext(p) != ".yml") {
			return nil
		}
		if d.Name() != "kustomization.yaml" {
			manifests = append(manifests, p)
			return nil
		}
		data, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		k, err := DecodeKustomization(data)
		if err != nil {
			t.Errorf("%s: %v", p, err)
			return nil
		}
		for _, g := range k.ConfigMapGenerator {
			for _, f := range g.FileSources {
				_, file, found := strings.Cut(f, "=") // "key=path" or "path"
				if !found {
					file = f
				}
				generated[filepath.Join(filepath.Dir(p), file)] = true
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(manifests) < 10 {
		t.Fatalf("found only %d YAML files under %s: wrong directory?", len(manifests), k8sRoot)
	}
	decoded := 0
	for _, p := range manifests {
		data, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		if generated[p] {
			var m map[string]any
			if err := yaml.UnmarshalStrict(data, &m); err != nil || len(m) == 0 {
				t.Errorf("%s (a configMapGenerator file): not a YAML mapping: %v", p, err)
			}
			continue
		}
		docs, err := SplitDocuments(data)
		if err != nil {
			t.Errorf("%s: %v", p, err)
			continue
		}
		if len(docs) == 0 {
			t.Errorf("%s: no YAML document", p)
		}
		for i, doc := range docs {
			if _, err := DecodeStrict(doc); err != nil {
				t.Errorf("%s, document %d: %v", p, i+1, err)
			}
			decoded++
		}
	}
	t.Logf("%d documents decoded strictly, %d generator files", decoded, len(generated))
}

func TestStrictDecodingRejectsUnknownAndDuplicateFields(t *testing.T) {
	for name, doc := range map[string]string{
		"misspelt field":  "apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: x}\nspec:\n  replica: 2\n",
		"duplicate field": "apiVersion: v1\nkind: Service\nmetadata: {name: x}\nspec:\n  clusterIP: None\n  clusterIP: None\n",
		"unknown top-level field": "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: x}\n" +
			"data: {a: b}\nport: 1\n",
		"unknown kind": "apiVersion: v1\nkind: Pod\nmetadata: {name: x}\n",
		"HPA v1 fields under v2": "apiVersion: autoscaling/v2\nkind: HorizontalPodAutoscaler\n" +
			"metadata: {name: x}\nspec:\n  targetCPUUtilizationPercentage: 50\n",
		"misspelt ScaledObject field": scaledObjectDoc("  minReplicas: 2\n", "threshold: \"3\""),
		"ScaledObject field this package does not declare": scaledObjectDoc(
			"  fallback: {failureThreshold: 3, replicas: 2}\n", "threshold: \"3\""),
		"ScaledObject trigger metadata not a string": scaledObjectDoc("", "threshold: 3"),
		"misspelt prometheus metadata key":           scaledObjectDoc("", "threshold: \"3\", ignoreNullValue: \"false\""),
	} {
		if _, err := DecodeStrict([]byte(doc)); err == nil {
			t.Errorf("%s: decoded without error", name)
		}
	}
	if _, err := DecodeKustomization([]byte("resources: [a.yaml]\nresource: [b.yaml]\n")); err == nil {
		t.Error("kustomization with a misspelt field decoded without error")
	}
	if _, err := DecodeStrict([]byte(scaledObjectDoc("", "threshold: \"3\""))); err != nil {
		t.Errorf("the ScaledObject the cases above spoil does not decode: %v", err)
	}
}

// scaledObjectDoc is a ScaledObject with spec lines added and the prometheus trigger's
// metadata ending in meta (YAML flow mapping entries).
func scaledObjectDoc(spec, meta string) string {
	return "apiVersion: keda.sh/v1alpha1\nkind: ScaledObject\nmetadata: {name: x}\nspec:\n" +
		"  scaleTargetRef: {name: x}\n" + spec +
		"  triggers:\n    - type: prometheus\n      metadata: {serverAddress: http://p:9090, query: q, " +
		meta + "}\n"
}

// rendered is one kustomization, built and decoded, with the pieces the checks share.
type rendered struct {
	*Objects
	deploy    *appsv1.Deployment
	container *corev1.Container
	configMap *corev1.ConfigMap
	configKey string
	settings  ServerSettings
	maxSess   int
}

func render(t *testing.T, k kustomization) *rendered {
	t.Helper()
	stream, err := Render(filepath.Join(k8sRoot, k.dir))
	if err != nil {
		t.Fatalf("kustomize build %s: %v", k.dir, err)
	}
	objs, err := DecodeAll(stream)
	if err != nil {
		t.Fatalf("kustomize build %s: rendered output: %v", k.dir, err)
	}
	r := &rendered{Objects: objs}
	// One autoscaler: the base's HPA, or a ScaledObject, whose HPA KEDA makes in the cluster.
	wantHPAs, wantScaledObjects := 1, 0
	if k.keda {
		wantHPAs, wantScaledObjects = 0, 1
	}
	if len(objs.Deployments) != 1 || len(objs.ConfigMaps) != 1 || len(objs.PDBs) != 1 ||
		len(objs.HPAs) != wantHPAs || len(objs.ScaledObjects) != wantScaledObjects ||
		len(objs.Services) != 2 || len(objs.ServiceAccounts) != 1 {
		t.Fatalf("want 1 Deployment, ConfigMap, PDB, ServiceAccount, 2 Services, %d HPA and %d ScaledObject; "+
			"got %d, %d, %d, %d, %d, %d and %d", wantHPAs, wantScaledObjects,
			len(objs.Deployments), len(objs.ConfigMaps), len(objs.PDBs), len(objs.ServiceAccounts),
			len(objs.Services), len(objs.HPAs), len(objs.ScaledObjects))
	}
	r.deploy = objs.Deployments[0]
	spec := &r.deploy.Spec.Template.Spec
	for i := range spec.Containers {
		if spec.Containers[i].Name == containerName {
			r.container = &spec.Containers[i]
		}
	}
	if r.container == nil {
		t.Fatalf("no container %q", containerName)
	}
	r.configMap, r.configKey = mountedConfig(t, r)
	data := []byte(r.configMap.Data[r.configKey])
	r.settings, err = EffectiveServerSettings(data, r.container.Env, r.container.Args)
	if err != nil {
		t.Fatal(err)
	}
	r.maxSess = maxSessions(t, data)
	return r
}

// mountedConfig finds the ConfigMap and key that `--config PATH` reads through a volume.
func mountedConfig(t *testing.T, r *rendered) (*corev1.ConfigMap, string) {
	t.Helper()
	args := r.container.Args
	i := slices.Index(args, "--config")
	if i < 0 || i+1 >= len(args) {
		t.Fatalf("container args %q have no --config PATH", args)
	}
	configPath := args[i+1]
	for _, m := range r.container.VolumeMounts {
		key, ok := strings.CutPrefix(configPath, strings.TrimSuffix(m.MountPath, "/")+"/")
		if !ok {
			continue
		}
		for _, v := range r.deploy.Spec.Template.Spec.Volumes {
			if v.Name != m.Name || v.ConfigMap == nil {
				continue
			}
			for _, cm := range r.ConfigMaps {
				if cm.Name == v.ConfigMap.Name {
					if _, ok := cm.Data[key]; !ok {
						t.Fatalf("ConfigMap %s has no key %q (--config %s)", cm.Name, key, configPath)
					}
					return cm, key
				}
			}
			t.Fatalf("volume %s refers to ConfigMap %s, which is not rendered", v.Name, v.ConfigMap.Name)
		}
	}
	t.Fatalf("--config %s is not inside a ConfigMap volume mount", configPath)
	return nil, ""
}

func maxSessions(t *testing.T, configYAML []byte) int {
	t.Helper()
	var tree struct {
		Engine struct {
			MaxSessions *int `json:"max_sessions"`
		} `json:"engine"`
	}
	if err := yaml.Unmarshal(configYAML, &tree); err != nil {
		t.Fatal(err)
	}
	if tree.Engine.MaxSessions == nil {
		return 32 // both profiles' default (orpheus_svc/config.py)
	}
	return *tree.Engine.MaxSessions
}

func containerPort(t *testing.T, c *corev1.Container, name string) int32 {
	t.Helper()
	for _, p := range c.Ports {
		if p.Name == name {
			return p.ContainerPort
		}
	}
	t.Fatalf("container %s has no port named %q", c.Name, name)
	return 0
}

func selects(t *testing.T, sel *metav1.LabelSelector, podLabels map[string]string) bool {
	t.Helper()
	s, err := metav1.LabelSelectorAsSelector(sel)
	if err != nil {
		t.Fatal(err)
	}
	return !s.Empty() && s.Matches(labels.Set(podLabels))
}

func TestKustomizations(t *testing.T) {
	for _, k := range kustomizations {
		t.Run(k.name, func(t *testing.T) {
			r := render(t, k)
			c, pod := r.container, &r.deploy.Spec.Template
			grpcPort := containerPort(t, c, "grpc")
			drainAndGrace := r.settings.DrainDelaySeconds + r.settings.GraceSeconds

			t.Run("server port matches the container's grpc port", func(t *testing.T) {
				if int(grpcPort) != r.settings.Port {
					t.Errorf("server.port %d, container port grpc %d", r.settings.Port, grpcPort)
				}
			})

			t.Run("probes are gRPC health checks on the serving port", func(t *testing.T) {
				for name, p := range map[string]*corev1.Probe{
					"startupProbe": c.StartupProbe, "readinessProbe": c.ReadinessProbe,
					"livenessProbe": c.LivenessProbe,
				} {
					switch {
					case p == nil:
						t.Errorf("%s missing", name)
					case p.GRPC == nil:
						t.Errorf("%s is not a grpc probe", name)
					case p.GRPC.Port != grpcPort:
						t.Errorf("%s probes port %d, the server listens on %d", name, p.GRPC.Port, grpcPort)
					case p.GRPC.Service != nil && *p.GRPC.Service != "" &&
						*p.GRPC.Service != "orpheus.tts.v1.TTSService":
						t.Errorf("%s asks for health service %q, which the server does not report",
							name, *p.GRPC.Service)
					}
				}
			})
			if t.Failed() {
				return
			}

			t.Run("startup probe allows model load and warm-up", func(t *testing.T) {
				p := c.StartupProbe
				allowed := p.InitialDelaySeconds + p.PeriodSeconds*p.FailureThreshold
				if allowed < k.minStartupSeconds {
					t.Errorf("startup probe allows %d s (delay %d + %d x %d s), want >= %d s",
						allowed, p.InitialDelaySeconds, p.FailureThreshold, p.PeriodSeconds, k.minStartupSeconds)
				}
			})

			t.Run("termination grace covers the server's drain and grace", func(t *testing.T) {
				want := int64(math.Ceil(drainAndGrace)) + shutdownMarginSeconds
				got := int64(30) // the Kubernetes default
				if pod.Spec.TerminationGracePeriodSeconds != nil {
					got = *pod.Spec.TerminationGracePeriodSeconds
				}
				if got < want {
					t.Errorf("terminationGracePeriodSeconds %d, want >= %d (drain_delay_seconds %g + "+
						"grace_seconds %g + %d)", got, want, r.settings.DrainDelaySeconds,
						r.settings.GraceSeconds, shutdownMarginSeconds)
				}
			})

			t.Run("liveness cannot kill a draining pod", func(t *testing.T) {
				p := c.LivenessProbe
				if window := float64(p.PeriodSeconds * p.FailureThreshold); window < drainAndGrace {
					t.Errorf("liveness fails after %g s of NOT_SERVING, a drain takes up to %g s", window, drainAndGrace)
				}
			})

			t.Run("liveness waits out a slow engine and catches a wedged one", func(t *testing.T) {
				// Health is NOT_SERVING from 2 s into an engine stall. A stall the engine
				// survives lasts less than server.engine_stall_exit_seconds, after which the
				// server exits by itself (its supervisor restarts it with a clear log line):
				// the liveness window must be longer, by one period, so that a slow step never
				// costs the pod a restart and a model load. A process wedged as a whole (no
				// answer to the probe) is caught by the window itself, which is finite.
				p := c.LivenessProbe
				window := float64(p.PeriodSeconds * p.FailureThreshold)
				s := r.settings
				if s.EngineStallExitSeconds > 0 && window < s.EngineStallExitSeconds+float64(p.PeriodSeconds) {
					t.Errorf("liveness fails after %g s of NOT_SERVING, but an engine stall the server "+
						"survives may last up to server.engine_stall_exit_seconds %g (+ one period %d s)",
						window, s.EngineStallExitSeconds, p.PeriodSeconds)
				}
				if window < s.EngineStallTimeoutSeconds+float64(p.PeriodSeconds) {
					t.Errorf("liveness fails after %g s of NOT_SERVING, under server.engine_stall_timeout_seconds "+
						"%g (+ one period %d s)", window, s.EngineStallTimeoutSeconds, p.PeriodSeconds)
				}
				if p.TimeoutSeconds < 1 || p.FailureThreshold < 1 {
					t.Errorf("liveness must time out and fail to catch a wedged process")
				}
				// A process the probe found wedged does not act on SIGTERM (a stopped or
				// hung process never drains): without a grace of the probe's own the kubelet
				// waits the pod's terminationGracePeriodSeconds before SIGKILL, which doubled
				// the restart time on a real kubelet (scripts/k8s-check.sh, docs/deploy.md).
				g := p.TerminationGracePeriodSeconds
				if g == nil || *g > 15 {
					t.Errorf("livenessProbe.terminationGracePeriodSeconds should be set and at most 15 s "+
						"(a wedged process ignores SIGTERM), got %v", g)
				}
			})

			t.Run("readiness drops the pod within the drain delay", func(t *testing.T) {
				p := c.ReadinessProbe
				if window := float64(p.PeriodSeconds * p.FailureThreshold); window > r.settings.DrainDelaySeconds {
					t.Errorf("readiness fails %g s after NOT_SERVING, but the listener closes after "+
						"server.drain_delay_seconds %g", window, r.settings.DrainDelaySeconds)
				}
			})

			t.Run("GPU requested only where meant", func(t *testing.T) {
				req, hasReq := c.Resources.Requests[gpuResource]
				lim, hasLim := c.Resources.Limits[gpuResource]
				one := resource.MustParse("1")
				if k.gpu {
					if !hasReq || !hasLim || req.Cmp(one) != 0 || lim.Cmp(one) != 0 {
						t.Errorf("want %s request and limit 1, got %s / %s", gpuResource, req.String(), lim.String())
					}
					if !slices.ContainsFunc(pod.Spec.Tolerations, func(t corev1.Toleration) bool { return t.Key == string(gpuResource) }) {
						t.Errorf("no toleration for the %s taint", gpuResource)
					}
				} else if hasReq || hasLim {
					t.Errorf("%s asks for %s", k.name, gpuResource)
				}
				if _, ok := c.Resources.Requests[corev1.ResourceMemory]; !ok {
					t.Error("no memory request")
				}
			})

			t.Run("runs as non-root", func(t *testing.T) {
				sc := pod.Spec.SecurityContext
				if sc == nil || sc.RunAsNonRoot == nil || !*sc.RunAsNonRoot {
					t.Error("pod securityContext.runAsNonRoot is not true")
				}
				if c.SecurityContext == nil || c.SecurityContext.AllowPrivilegeEscalation == nil ||
					*c.SecurityContext.AllowPrivilegeEscalation {
					t.Error("container allows privilege escalation")
				}
			})

			t.Run("headless and ClusterIP services select the pods", func(t *testing.T) {
				var headless, clusterIP int
				for _, s := range r.Services {
					sel := &metav1.LabelSelector{MatchLabels: s.Spec.Selector}
					if !selects(t, sel, pod.Labels) {
						t.Errorf("Service %s selector %v does not match the pods %v", s.Name, s.Spec.Selector, pod.Labels)
					}
					if !slices.ContainsFunc(s.Spec.Ports, func(p corev1.ServicePort) bool {
						return p.Port == grpcPort && (p.TargetPort == intstr.FromString("grpc") ||
							p.TargetPort == intstr.FromInt32(grpcPort))
					}) {
						t.Errorf("Service %s has no port %d to the grpc port", s.Name, grpcPort)
					}
					if s.Spec.ClusterIP == corev1.ClusterIPNone {
						headless++
						if s.Name != headlessService {
							t.Errorf("headless Service is %s, clients are told %s", s.Name, headlessService)
						}
						if s.Spec.PublishNotReadyAddresses {
							t.Error("headless Service publishes pods that are not ready")
						}
					} else if s.Spec.Type == "" || s.Spec.Type == corev1.ServiceTypeClusterIP {
						clusterIP++
					}
				}
				if headless != 1 || clusterIP != 1 {
					t.Errorf("want one headless (clusterIP: None) and one ClusterIP Service, got %d and %d", headless, clusterIP)
				}
				if r.deploy.Spec.Selector == nil || !selects(t, r.deploy.Spec.Selector, pod.Labels) {
					t.Error("the Deployment's selector does not match its own pods")
				}
			})

			t.Run("PDB selects the pods", func(t *testing.T) {
				pdb := r.PDBs[0]
				if pdb.Spec.Selector == nil || !selects(t, pdb.Spec.Selector, pod.Labels) {
					t.Error("PodDisruptionBudget does not select the pods")
				}
				if pdb.Spec.MaxUnavailable == nil && pdb.Spec.MinAvailable == nil {
					t.Error("PodDisruptionBudget sets neither maxUnavailable nor minAvailable")
				}
			})

			if k.keda {
				scaledObjectChecks(t, k, r)
			} else {
				hpaChecks(t, r)
			}

			t.Run("metrics port matches config, container, Service and scrape annotation", func(t *testing.T) {
				if r.settings.MetricsPort != metricsPort {
					t.Errorf("server.metrics_port %d, want %d", r.settings.MetricsPort, metricsPort)
				}
				if got := containerPort(t, c, "metrics"); got != metricsPort {
					t.Errorf("container port metrics %d", got)
				}
				if got := pod.Annotations["prometheus.io/port"]; got != strconv.Itoa(metricsPort) {
					t.Errorf("prometheus.io/port annotation %q", got)
				}
				if !slices.ContainsFunc(r.Services, func(s *corev1.Service) bool {
					return s.Spec.ClusterIP != corev1.ClusterIPNone && slices.ContainsFunc(s.Spec.Ports,
						func(p corev1.ServicePort) bool { return p.Port == metricsPort })
				}) {
					t.Error("no ClusterIP Service port for the metrics")
				}
			})
		})
	}
}
