// Package k8s holds the Kubernetes manifests' tests (the manifests are base/, overlays/ and
// components/ beside this file). It is its own module so kustomize and k8s.io/api stay out of
// the services' go.mod; .ci/lint runs it. The tests render each overlay with kustomize's
// krusty, decode every object strictly into its k8s.io/api type and check the rules
// docs/kubernetes.md promises, without a cluster.
package k8s
