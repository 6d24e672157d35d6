package k8s

import (
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/kyaml/filesys"
	"sigs.k8s.io/yaml"
)

// manifests is one rendered overlay, every object decoded into its k8s.io/api type.
type manifests struct {
	deployments  []*appsv1.Deployment
	jobs         []*batchv1.Job
	services     []*corev1.Service
	configMaps   map[string]*corev1.ConfigMap
	secrets      []*corev1.Secret
	pdbs         []*policyv1.PodDisruptionBudget
	netpols      []*networkingv1.NetworkPolicy
	hpas         []*autoscalingv2.HorizontalPodAutoscaler
	namespaces   []*corev1.Namespace
	serviceAccts []*corev1.ServiceAccount
	podMonitors  []*podMonitor
}

// podMonitor is Prometheus Operator's monitoring.coreos.com/v1 PodMonitor, the fields the
// manifests use (components/monitoring): strict decoding refuses any other, so a new field is
// taught here before it is used, and checked.
type podMonitor struct {
	APIVersion string            `json:"apiVersion"`
	Kind       string            `json:"kind"`
	Metadata   metav1.ObjectMeta `json:"metadata"`
	Spec       struct {
		Selector  metav1.LabelSelector `json:"selector"`
		Endpoints []struct {
			Port          string `json:"port"`
			Path          string `json:"path"`
			Authorization *struct {
				Type        string                    `json:"type"`
				Credentials *corev1.SecretKeySelector `json:"credentials"`
			} `json:"authorization,omitempty"`
			Relabelings []struct {
				TargetLabel string `json:"targetLabel"`
				Replacement string `json:"replacement"`
			} `json:"relabelings,omitempty"`
		} `json:"podMetricsEndpoints"`
	} `json:"spec"`
}

// render builds the kustomization at dir on fsys and decodes what it makes. Decoding is
// strict: a field the API type does not have (a typo, a field of another API version) is
// an error, as the API server would refuse it (or, worse, silently drop it).
func render(fsys filesys.FileSystem, dir string) (*manifests, error) {
	res, err := krusty.MakeKustomizer(krusty.MakeDefaultOptions()).Run(fsys, dir)
	if err != nil {
		return nil, fmt.Errorf("kustomize build %s: %w", dir, err)
	}
	m := &manifests{configMaps: map[string]*corev1.ConfigMap{}}
	for _, r := range res.Resources() {
		y, err := r.AsYAML()
		if err != nil {
			return nil, fmt.Errorf("%s/%s: %w", r.GetKind(), r.GetName(), err)
		}
		if err := m.add(r.GetApiVersion(), r.GetKind(), y); err != nil {
			return nil, fmt.Errorf("decode %s %s: %w", r.GetKind(), r.GetName(), err)
		}
	}
	return m, nil
}

func (m *manifests) add(apiVersion, kind string, y []byte) error {
	var obj any
	switch apiVersion + " " + kind {
	case "apps/v1 Deployment":
		d := &appsv1.Deployment{}
		m.deployments, obj = append(m.deployments, d), d
	case "batch/v1 Job":
		j := &batchv1.Job{}
		m.jobs, obj = append(m.jobs, j), j
	case "v1 Service":
		s := &corev1.Service{}
		m.services, obj = append(m.services, s), s
	case "v1 ConfigMap":
		c := &corev1.ConfigMap{}
		if err := yaml.UnmarshalStrict(y, c); err != nil {
			return err
		}
		m.configMaps[c.Name] = c
		return nil
	case "v1 Secret":
		s := &corev1.Secret{}
		m.secrets, obj = append(m.secrets, s), s
	case "policy/v1 PodDisruptionBudget":
		p := &policyv1.PodDisruptionBudget{}
		m.pdbs, obj = append(m.pdbs, p), p
	case "networking.k8s.io/v1 NetworkPolicy":
		n := &networkingv1.NetworkPolicy{}
		m.netpols, obj = append(m.netpols, n), n
	case "autoscaling/v2 HorizontalPodAutoscaler":
		h := &autoscalingv2.HorizontalPodAutoscaler{}
		m.hpas, obj = append(m.hpas, h), h
	case "v1 Namespace":
		n := &corev1.Namespace{}
		m.namespaces, obj = append(m.namespaces, n), n
	case "v1 ServiceAccount":
		s := &corev1.ServiceAccount{}
		m.serviceAccts, obj = append(m.serviceAccts, s), s
	case "monitoring.coreos.com/v1 PodMonitor":
		p := &podMonitor{}
		m.podMonitors, obj = append(m.podMonitors, p), p
	default:
		// A kind the rules do not know is a kind nobody checked: teach the test first.
		return fmt.Errorf("kind %s %s: not known to the manifests test", apiVersion, kind)
	}
	return yaml.UnmarshalStrict(y, obj)
}

// onDiskTree copies the manifests (base/, overlays/, components/) into an in-memory file
// system, so a test can add a broken overlay next to the real ones without touching the tree.
func onDiskTree(t *testing.T) filesys.FileSystem {
	t.Helper()
	mem := filesys.MakeFsInMemory()
	for _, top := range []string{"base", "overlays", "components"} {
		err := filepath.WalkDir(top, func(path string, d fs.DirEntry, err error) error {
			if err != nil || d.IsDir() {
				return err
			}
			data, err := os.ReadFile(path)
			if err != nil {
				return err
			}
			return mem.WriteFile("/"+filepath.ToSlash(path), data)
		})
		if err != nil {
			t.Fatalf("copy %s: %v", top, err)
		}
	}
	return mem
}
