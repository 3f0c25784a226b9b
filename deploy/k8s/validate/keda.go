package validate

import (
	"encoding/json"
	"fmt"
	"sort"
	"strings"

	autoscalingv2 "k8s.io/api/autoscaling/v2"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"
)

// ScaledObject is the part of KEDA's keda.sh/v1alpha1 ScaledObject that these manifests use,
// with KEDA's JSON field names (github.com/kedacore/keda apis/keda/v1alpha1,
// scaledobject_types.go and scaletriggers_types.go). It is declared here so that the module
// needs no KEDA dependency; decoding is strict, so a field KEDA has but this type lacks
// (fallback, cooldownPeriod, ...) is an error: declare it here when a manifest needs it.
type ScaledObject struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`
	Spec              ScaledObjectSpec `json:"spec"`
}

// ScaledObjectSpec is KEDA's ScaledObjectSpec, in part.
type ScaledObjectSpec struct {
	ScaleTargetRef  *ScaleTarget    `json:"scaleTargetRef"`
	PollingInterval *int32          `json:"pollingInterval,omitempty"`
	MinReplicaCount *int32          `json:"minReplicaCount,omitempty"`
	MaxReplicaCount *int32          `json:"maxReplicaCount,omitempty"`
	Advanced        *AdvancedConfig `json:"advanced,omitempty"`
	Triggers        []ScaleTrigger  `json:"triggers"`
}

// ScaleTarget is the workload KEDA scales.
type ScaleTarget struct {
	Name       string `json:"name"`
	APIVersion string `json:"apiVersion,omitempty"`
	Kind       string `json:"kind,omitempty"`
}

// AdvancedConfig is KEDA's AdvancedConfig, in part.
type AdvancedConfig struct {
	HorizontalPodAutoscalerConfig *HorizontalPodAutoscalerConfig `json:"horizontalPodAutoscalerConfig,omitempty"`
}

// HorizontalPodAutoscalerConfig names the HPA KEDA creates and sets its behaviour.
type HorizontalPodAutoscalerConfig struct {
	Name     string                                         `json:"name,omitempty"`
	Behavior *autoscalingv2.HorizontalPodAutoscalerBehavior `json:"behavior,omitempty"`
}

// ScaleTrigger is one of a ScaledObject's triggers. Metadata values are strings in KEDA's
// CRD schema: the API server refuses a bare number or boolean, which decoding into this
// type would quietly turn into a string (checkFields refuses it).
type ScaleTrigger struct {
	Type       string                         `json:"type"`
	Name       string                         `json:"name,omitempty"`
	MetricType autoscalingv2.MetricTargetType `json:"metricType,omitempty"`
	Metadata   map[string]string              `json:"metadata"`
}

// prometheusMetadataKeys are the trigger metadata keys KEDA's prometheus scaler reads
// (pkg/scalers/prometheus_scaler.go, and the authentication keys it takes from trigger
// metadata). KEDA ignores any other key, so a misspelt optional one would do nothing.
var prometheusMetadataKeys = map[string]bool{
	"serverAddress": true, "query": true, "queryParameters": true, "threshold": true,
	"activationThreshold": true, "namespace": true, "customHeaders": true,
	"ignoreNullValues": true, "unsafeSsl": true, "awsRegion": true, "timeout": true,
	"identityOwner": true, "authModes": true, "authMode": true, "apiKey": true, "method": true,
	"keyParamName": true,
}

// checkFields refuses what strict decoding of doc into s cannot see: a trigger metadata
// value that is not a YAML string, and a prometheus trigger's metadata key that KEDA does
// not read.
func (s *ScaledObject) checkFields(doc []byte) error {
	var untyped struct {
		Spec struct {
			Triggers []struct {
				Metadata map[string]any `json:"metadata"`
			} `json:"triggers"`
		} `json:"spec"`
	}
	j, err := yaml.YAMLToJSON(doc) // no target type: a number stays a number
	if err != nil {
		return err
	}
	if err := json.Unmarshal(j, &untyped); err != nil {
		return fmt.Errorf("ScaledObject %s: %w", s.Name, err)
	}
	for i, tr := range untyped.Spec.Triggers {
		for key, v := range tr.Metadata {
			if _, ok := v.(string); !ok {
				return fmt.Errorf("ScaledObject %s trigger %d: metadata %s is %v, not a string (quote it)",
					s.Name, i, key, v)
			}
		}
	}
	for i, tr := range s.Spec.Triggers {
		if tr.Type != "prometheus" {
			continue
		}
		var unknown []string
		for key := range tr.Metadata {
			if !prometheusMetadataKeys[key] {
				unknown = append(unknown, key)
			}
		}
		if len(unknown) > 0 {
			sort.Strings(unknown)
			return fmt.Errorf("ScaledObject %s trigger %d (prometheus): unknown metadata %s",
				s.Name, i, strings.Join(unknown, ", "))
		}
	}
	return nil
}
