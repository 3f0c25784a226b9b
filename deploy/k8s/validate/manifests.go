// Package validate checks the Kubernetes manifests in deploy/k8s: every YAML document
// decodes strictly (unknown or duplicate fields fail) into the Kubernetes API type of its
// kind (KEDA's ScaledObject into a local type, keda.go), the kustomize overlays render,
// and the rendered objects agree with each other and with the server's config (probes,
// drain timing, GPUs, Services, autoscaling).
//
//	cd deploy/k8s/validate && go test ./...
package validate

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"strings"

	appsv1 "k8s.io/api/apps/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/kustomize/api/krusty"
	kustypes "sigs.k8s.io/kustomize/api/types"
	"sigs.k8s.io/kustomize/kyaml/filesys"
	"sigs.k8s.io/yaml"
)

// newObject returns an empty typed object for apiVersion and kind, or an error naming the
// kinds this package knows (add a kind here when a manifest needs a new one).
func newObject(apiVersion, kind string) (any, error) {
	switch apiVersion + " " + kind {
	case "apps/v1 Deployment":
		return &appsv1.Deployment{}, nil
	case "v1 Service":
		return &corev1.Service{}, nil
	case "v1 ConfigMap":
		return &corev1.ConfigMap{}, nil
	case "v1 ServiceAccount":
		return &corev1.ServiceAccount{}, nil
	case "policy/v1 PodDisruptionBudget":
		return &policyv1.PodDisruptionBudget{}, nil
	case "autoscaling/v2 HorizontalPodAutoscaler":
		return &autoscalingv2.HorizontalPodAutoscaler{}, nil
	case "networking.k8s.io/v1 NetworkPolicy":
		return &networkingv1.NetworkPolicy{}, nil
	case "keda.sh/v1alpha1 ScaledObject":
		return &ScaledObject{}, nil
	}
	return nil, fmt.Errorf("unsupported apiVersion %q kind %q (known: apps/v1 Deployment, "+
		"v1 Service, v1 ConfigMap, v1 ServiceAccount, policy/v1 PodDisruptionBudget, "+
		"autoscaling/v2 HorizontalPodAutoscaler, networking.k8s.io/v1 NetworkPolicy, "+
		"keda.sh/v1alpha1 ScaledObject)", apiVersion, kind)
}

// SplitDocuments returns the non-empty YAML documents of a multi-document stream.
func SplitDocuments(data []byte) ([][]byte, error) {
	r := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(data)))
	var docs [][]byte
	for {
		doc, err := r.Read()
		if errors.Is(err, io.EOF) {
			return docs, nil
		}
		if err != nil {
			return nil, err
		}
		if isBlank(doc) {
			continue
		}
		docs = append(docs, doc)
	}
}

// isBlank: only whitespace and comments.
func isBlank(doc []byte) bool {
	for _, line := range strings.Split(string(doc), "\n") {
		line = strings.TrimSpace(line)
		if line != "" && !strings.HasPrefix(line, "#") {
			return false
		}
	}
	return true
}

// DecodeStrict decodes one YAML document into the typed object of its apiVersion and kind;
// an unknown field, a duplicate field or a wrong type is an error (and, in a ScaledObject,
// what keda.go's checkFields refuses).
func DecodeStrict(doc []byte) (any, error) {
	var head struct {
		APIVersion string `json:"apiVersion"`
		Kind       string `json:"kind"`
	}
	if err := yaml.Unmarshal(doc, &head); err != nil {
		return nil, fmt.Errorf("not YAML: %w", err)
	}
	if head.APIVersion == "" || head.Kind == "" {
		return nil, errors.New("document has no apiVersion/kind")
	}
	obj, err := newObject(head.APIVersion, head.Kind)
	if err != nil {
		return nil, err
	}
	if err := yaml.UnmarshalStrict(doc, obj); err != nil {
		return nil, fmt.Errorf("%s: %w", head.Kind, err)
	}
	if c, ok := obj.(interface{ checkFields(doc []byte) error }); ok {
		if err := c.checkFields(doc); err != nil {
			return nil, err
		}
	}
	return obj, nil
}

// DecodeKustomization decodes a kustomization.yaml strictly into kustomize's own type.
func DecodeKustomization(data []byte) (*kustypes.Kustomization, error) {
	k := &kustypes.Kustomization{}
	if err := yaml.UnmarshalStrict(data, k); err != nil {
		return nil, err
	}
	return k, nil
}

// Render builds a kustomization directory (as `kustomize build dir` does) and returns the
// YAML stream.
func Render(dir string) ([]byte, error) {
	k := krusty.MakeKustomizer(krusty.MakeDefaultOptions())
	m, err := k.Run(filesys.MakeFsOnDisk(), dir)
	if err != nil {
		return nil, err
	}
	return m.AsYaml()
}

// Objects are the typed objects of one rendered kustomization.
type Objects struct {
	Deployments     []*appsv1.Deployment
	Services        []*corev1.Service
	ConfigMaps      []*corev1.ConfigMap
	ServiceAccounts []*corev1.ServiceAccount
	PDBs            []*policyv1.PodDisruptionBudget
	HPAs            []*autoscalingv2.HorizontalPodAutoscaler
	ScaledObjects   []*ScaledObject
}

// DecodeAll decodes every document of a stream strictly and sorts the objects by kind.
func DecodeAll(stream []byte) (*Objects, error) {
	docs, err := SplitDocuments(stream)
	if err != nil {
		return nil, err
	}
	out := &Objects{}
	for i, doc := range docs {
		obj, err := DecodeStrict(doc)
		if err != nil {
			return nil, fmt.Errorf("document %d: %w", i+1, err)
		}
		switch o := obj.(type) {
		case *appsv1.Deployment:
			out.Deployments = append(out.Deployments, o)
		case *corev1.Service:
			out.Services = append(out.Services, o)
		case *corev1.ConfigMap:
			out.ConfigMaps = append(out.ConfigMaps, o)
		case *corev1.ServiceAccount:
			out.ServiceAccounts = append(out.ServiceAccounts, o)
		case *policyv1.PodDisruptionBudget:
			out.PDBs = append(out.PDBs, o)
		case *autoscalingv2.HorizontalPodAutoscaler:
			out.HPAs = append(out.HPAs, o)
		case *ScaledObject:
			out.ScaledObjects = append(out.ScaledObjects, o)
		}
	}
	return out, nil
}
