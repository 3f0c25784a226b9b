package validate

import (
	"maps"
	"slices"
	"strconv"
	"strings"
	"testing"

	autoscalingv2 "k8s.io/api/autoscaling/v2"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/resource"
)

const (
	// The HPA: the base's, or the one KEDA makes for the ScaledObject (advanced.
	// horizontalPodAutoscalerConfig.name), so that either is `kubectl get hpa orpheus-svc`.
	hpaName = "orpheus-svc"
	// A voice agent's load comes in bursts between turns: a shorter scale-down window would
	// remove pods between two bursts and drain their calls (no flapping).
	minScaleDownWindowSeconds = 300
)

// hpaChecks are the subtests of an overlay the base's HPA scales.
func hpaChecks(t *testing.T, r *rendered) {
	hpa := r.HPAs[0]

	t.Run("HPA targets the deployment", func(t *testing.T) {
		ref := hpa.Spec.ScaleTargetRef
		if ref.Kind != "Deployment" || ref.Name != r.deploy.Name || ref.APIVersion != "apps/v1" {
			t.Errorf("HPA scales %s %s, not Deployment %s", ref.Kind, ref.Name, r.deploy.Name)
		}
		if hpa.Spec.MinReplicas == nil || *hpa.Spec.MinReplicas < 2 {
			t.Error("HPA minReplicas < 2: one disruption would stop the service")
		}
		if r.deploy.Spec.Replicas != nil {
			t.Error("Deployment sets replicas, which every apply would reset under the HPA")
		}
		if hpa.Name != hpaName {
			t.Errorf("HPA is %s, docs and scripts/k8s-check.sh say %s", hpa.Name, hpaName)
		}
	})

	t.Run("HPA scales on active sessions per pod", func(t *testing.T) {
		target := sessionsTarget(t, hpa)
		per := target.AverageValue.AsApproximateFloat64()
		if per <= 0 || per > float64(r.maxSess) {
			t.Errorf("HPA target %g sessions per pod, want (0, engine.max_sessions=%d]", per, r.maxSess)
		}
	})

	t.Run("HPA scales down slowly", func(t *testing.T) {
		checkScaleDown(t, hpa.Spec.Behavior)
	})
}

// sessionsTarget is the HPA's AverageValue target for the Pods metric orpheus_sessions_active.
func sessionsTarget(t *testing.T, hpa *autoscalingv2.HorizontalPodAutoscaler) autoscalingv2.MetricTarget {
	t.Helper()
	i := slices.IndexFunc(hpa.Spec.Metrics, func(m autoscalingv2.MetricSpec) bool {
		return m.Type == autoscalingv2.PodsMetricSourceType && m.Pods != nil &&
			m.Pods.Metric.Name == sessionsMetric
	})
	if i < 0 {
		t.Fatalf("HPA has no Pods metric %s", sessionsMetric)
	}
	target := hpa.Spec.Metrics[i].Pods.Target
	if target.Type != autoscalingv2.AverageValueMetricType || target.AverageValue == nil {
		t.Fatalf("HPA target for %s is not an AverageValue", sessionsMetric)
	}
	return target
}

func checkScaleDown(t *testing.T, b *autoscalingv2.HorizontalPodAutoscalerBehavior) {
	t.Helper()
	if b == nil || b.ScaleDown == nil || b.ScaleDown.StabilizationWindowSeconds == nil {
		t.Fatal("no behavior.scaleDown.stabilizationWindowSeconds (the HPA default is 300 s; say it)")
	}
	if w := *b.ScaleDown.StabilizationWindowSeconds; w < minScaleDownWindowSeconds {
		t.Errorf("scaleDown stabilizationWindowSeconds %d, want >= %d", w, minScaleDownWindowSeconds)
	}
}

// scaledObjectChecks are the subtests of an overlay a KEDA ScaledObject scales: the HPA's,
// on the ScaledObject, and its agreement with the sibling overlay's HPA.
func scaledObjectChecks(t *testing.T, k kustomization, r *rendered) {
	so := r.ScaledObjects[0]
	var hpaConfig *HorizontalPodAutoscalerConfig
	if so.Spec.Advanced != nil {
		hpaConfig = so.Spec.Advanced.HorizontalPodAutoscalerConfig
	}

	t.Run("ScaledObject targets the deployment", func(t *testing.T) {
		ref := so.Spec.ScaleTargetRef
		if ref == nil || ref.Kind != "Deployment" || ref.Name != r.deploy.Name || ref.APIVersion != "apps/v1" {
			t.Errorf("ScaledObject scales %+v, not apps/v1 Deployment %s", ref, r.deploy.Name)
		}
		if so.Spec.MinReplicaCount == nil || *so.Spec.MinReplicaCount < 2 {
			t.Error("ScaledObject minReplicaCount unset (KEDA's default is 0) or < 2: one disruption would stop the service")
		}
		if so.Spec.MaxReplicaCount == nil || so.Spec.MinReplicaCount != nil &&
			*so.Spec.MaxReplicaCount < *so.Spec.MinReplicaCount {
			t.Error("ScaledObject maxReplicaCount unset (KEDA's default is 100) or below minReplicaCount")
		}
		if r.deploy.Spec.Replicas != nil {
			t.Error("Deployment sets replicas, which every apply would reset under KEDA's HPA")
		}
		if hpaConfig == nil || hpaConfig.Name != hpaName {
			t.Errorf("advanced.horizontalPodAutoscalerConfig.name is not %s: KEDA would name its HPA "+
				"keda-hpa-%s", hpaName, so.Name)
		}
	})

	t.Run("ScaledObject scales on active sessions per pod", func(t *testing.T) {
		tr := sessionsTrigger(t, so)
		if q := strings.TrimSpace(tr.Metadata["query"]); !strings.HasPrefix(q, "sum") {
			t.Errorf("query %q is not a sum over the pods: AverageValue divides it by the pod count", q)
		}
		per := threshold(t, tr)
		if per <= 0 || per > float64(r.maxSess) {
			t.Errorf("ScaledObject threshold %g sessions per pod, want (0, engine.max_sessions=%d]", per, r.maxSess)
		}
	})

	t.Run("ScaledObject scales down slowly", func(t *testing.T) {
		if hpaConfig == nil {
			t.Fatal("no advanced.horizontalPodAutoscalerConfig")
		}
		checkScaleDown(t, hpaConfig.Behavior)
	})

	t.Run("ScaledObject scales as the sibling overlay's HPA", func(t *testing.T) {
		sib := sibling(t, k)
		hpa := render(t, sib).HPAs[0]
		if so.Spec.MinReplicaCount == nil || hpa.Spec.MinReplicas == nil ||
			*so.Spec.MinReplicaCount != *hpa.Spec.MinReplicas {
			t.Errorf("minReplicaCount %v, %s's HPA minReplicas %v", deref(so.Spec.MinReplicaCount), sib.dir,
				deref(hpa.Spec.MinReplicas))
		}
		if so.Spec.MaxReplicaCount == nil || *so.Spec.MaxReplicaCount != hpa.Spec.MaxReplicas {
			t.Errorf("maxReplicaCount %v, %s's HPA maxReplicas %d", deref(so.Spec.MaxReplicaCount), sib.dir,
				hpa.Spec.MaxReplicas)
		}
		raw := sessionsTrigger(t, so).Metadata["threshold"]
		want := sessionsTarget(t, hpa).AverageValue
		if got, err := resource.ParseQuantity(raw); err != nil || got.Cmp(*want) != 0 {
			t.Errorf("threshold %q, %s's HPA averageValue %s", raw, sib.dir, want.String())
		}
		if hpaConfig == nil || !apiequality.Semantic.DeepEqual(hpaConfig.Behavior, hpa.Spec.Behavior) {
			t.Errorf("the ScaledObject's HPA behavior differs from %s's HPA", sib.dir)
		}
		if !maps.Equal(so.Labels, hpa.Labels) {
			t.Errorf("ScaledObject labels %v, %s's HPA %v", so.Labels, sib.dir, hpa.Labels)
		}
	})
}

// sessionsTrigger is the ScaledObject's prometheus trigger on orpheus_sessions_active, which
// must be an AverageValue (KEDA's HPA divides the query's value by the pod count).
func sessionsTrigger(t *testing.T, so *ScaledObject) ScaleTrigger {
	t.Helper()
	i := slices.IndexFunc(so.Spec.Triggers, func(tr ScaleTrigger) bool {
		return tr.Type == "prometheus" && strings.Contains(tr.Metadata["query"], sessionsMetric)
	})
	if i < 0 {
		t.Fatalf("ScaledObject has no prometheus trigger whose query uses %s", sessionsMetric)
	}
	tr := so.Spec.Triggers[i]
	if tr.MetricType != autoscalingv2.AverageValueMetricType {
		t.Fatalf("trigger %q has metricType %q, want AverageValue (open calls per pod)", tr.Name, tr.MetricType)
	}
	if tr.Metadata["serverAddress"] == "" {
		t.Fatalf("trigger %q has no serverAddress", tr.Name)
	}
	return tr
}

// threshold parses a prometheus trigger's threshold as KEDA does (a float).
func threshold(t *testing.T, tr ScaleTrigger) float64 {
	t.Helper()
	v, err := strconv.ParseFloat(tr.Metadata["threshold"], 64)
	if err != nil {
		t.Fatalf("trigger %q threshold: %v", tr.Name, err)
	}
	return v
}

// sibling is the kustomization a KEDA overlay adds the component to: its dir without
// "-keda", listed and scaled by the base's HPA.
func sibling(t *testing.T, k kustomization) kustomization {
	t.Helper()
	dir := strings.TrimSuffix(k.dir, "-keda")
	i := slices.IndexFunc(kustomizations, func(s kustomization) bool { return s.dir == dir && !s.keda })
	if i < 0 {
		t.Fatalf("%s has no sibling %s (an HPA overlay) in kustomizations", k.dir, dir)
	}
	return kustomizations[i]
}

func deref(p *int32) any {
	if p == nil {
		return "unset"
	}
	return *p
}
