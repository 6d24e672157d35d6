package k8s

import (
	"errors"
	"os"
	"path"
	"strings"
	"testing"

	"sigs.k8s.io/kustomize/kyaml/filesys"
)

// shapes: what each overlay under overlays/ promises. A new overlay needs a line here, so
// none goes unchecked.
var shapes = map[string]shape{
	"single-node": {minGateways: 1, consumers: [2]int{1, 1}, reconcilers: 1},
	// Production: three gateways at least, one consumer per grab partition at most, the two
	// reconcilers of the lease, spread over nodes.
	"production": {minGateways: 3, consumers: [2]int{2, 0}, reconcilers: 2, spread: true, secure: true, monitored: true},
}

// TestOverlays renders every overlay from the tree on disk and checks the rules.
func TestOverlays(t *testing.T) {
	entries, err := os.ReadDir("overlays")
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if !e.IsDir() {
			continue
		}
		t.Run(e.Name(), func(t *testing.T) {
			want, ok := shapes[e.Name()]
			if !ok {
				t.Fatalf("overlay %s: add its shape to the shapes table", e.Name())
			}
			m, err := render(filesys.MakeFsOnDisk(), path.Join("overlays", e.Name()))
			if err != nil {
				t.Fatal(err)
			}
			for _, err := range check(m, want) {
				t.Error(err)
			}
		})
	}
	for name := range shapes {
		if _, err := os.Stat(path.Join("overlays", name)); err != nil {
			t.Errorf("shape %s: no such overlay: %v", name, err)
		}
	}
}

// TestProductionWithAutoscaler: the optional gateway autoscaler component keeps the rules
// (its minimum counts as the gateways, the Deployment's replicas are gone).
func TestProductionWithAutoscaler(t *testing.T) {
	fsys := onDiskTree(t)
	writeOverlay(t, fsys, `
resources: [../production]
components: [../../components/gateway-hpa]
`, "")
	m, err := render(fsys, "/overlays/test")
	if err != nil {
		t.Fatal(err)
	}
	if len(m.hpas) != 1 {
		t.Fatalf("%d autoscalers, want 1", len(m.hpas))
	}
	for _, err := range check(m, shapes["production"]) {
		t.Error(err)
	}
}

// writeOverlay adds overlays/test: the kustomization and, when not empty, patch.yaml.
func writeOverlay(t *testing.T, fsys filesys.FileSystem, kustomization, patch string) {
	t.Helper()
	if err := fsys.WriteFile("/overlays/test/kustomization.yaml", []byte(kustomization)); err != nil {
		t.Fatal(err)
	}
	if patch != "" {
		if err := fsys.WriteFile("/overlays/test/patch.yaml", []byte(patch)); err != nil {
			t.Fatal(err)
		}
	}
}

// TestRefusesBrokenOverlays: each overlay here breaks one rule on top of production, and the
// test must say so; a check that cannot fail is no check.
func TestRefusesBrokenOverlays(t *testing.T) {
	const withPatch = "resources: [../production]\npatches: [{path: patch.yaml}]\n"
	const gateway = "apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: seckill-gateway}\nspec:\n  template:\n    spec:\n"
	const consumer = "apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: seckill-consumer}\nspec:\n  template:\n    spec:\n"
	config := func(literals ...string) string {
		return "resources: [../production]\nconfigMapGenerator:\n  - name: seckill-config\n    behavior: merge\n    literals: [" + strings.Join(literals, ", ") + "]\n"
	}
	tests := []struct {
		name          string
		kustomization string
		patch         string
		want          string // in the render error or one of the rule errors
	}{
		{"unknown field", withPatch, gateway + "      containers:\n        - name: gateway\n          livenesProbe: {httpGet: {path: /healthz, port: http}}\n",
			`unknown field "livenesProbe"`},
		{"field of the wrong type", withPatch, gateway + "      terminationGracePeriodSeconds: soon\n",
			"cannot unmarshal string"},
		{"literal secret in env", withPatch, gateway + "      containers:\n        - name: gateway\n          env:\n            - {name: SECKILL_JWT_SECRET, value: this-is-not-a-secret-any-more-0123456789}\n",
			"env SECKILL_JWT_SECRET has a literal value"},
		{"new literal secret in env", withPatch, consumer + "      containers:\n        - name: consumer\n          env:\n            - {name: SECKILL_KAFKA_SASL_PASSWORD, value: hunter2}\n",
			"env SECKILL_KAFKA_SASL_PASSWORD has a literal value"},
		{"secret in the ConfigMap", config("SECKILL_REDIS_PASSWORD=hunter2"),
			"", "SECKILL_REDIS_PASSWORD is a secret"},
		{"a Secret object in the manifests", "resources: [../production]\nsecretGenerator:\n  - {name: seckill-gateway, literals: [admin-token=0123456789abcdef0123]}\n",
			"", "Secret object"},
		{"typo in a variable", config("SECKILL_SHUTDOWN_TIMOUT=30s"), "", "SECKILL_SHUTDOWN_TIMOUT=\"30s\" is not a variable"},
		{"grace period too short", withPatch, gateway + "      terminationGracePeriodSeconds: 20\n",
			"terminationGracePeriodSeconds 20 is shorter than its shutdown"},
		{"shutdown timeout raised past the grace period", config("SECKILL_SHUTDOWN_TIMEOUT=30s"), "",
			"terminationGracePeriodSeconds 45 is shorter than its shutdown: preStop 5s + 2 x SECKILL_SHUTDOWN_TIMEOUT 30s"},
		{"value pkg/config refuses", config("SECKILL_BATCH_WAIT=5"), "", `pkg/config refuses its environment: configuration: SECKILL_BATCH_WAIT="5"`},
		{"an HS256 secret in production", withPatch, gateway + "      containers:\n        - name: gateway\n          env:\n            - {name: SECKILL_JWT_SECRET, valueFrom: {secretKeyRef: {name: seckill-gateway, key: jwt-secret}}}\n",
			"sets SECKILL_JWT_SECRET: a gateway holding an HS256 secret can mint any user's token"},
		{"no identity provider's keys", config("SECKILL_JWT_JWKS_URL="), "", "no SECKILL_JWT_JWKS_URL or SECKILL_JWT_JWKS_FILE"},
		{"readiness on the admin port", withPatch, gateway + "      containers:\n        - name: gateway\n          readinessProbe: {httpGet: {path: /healthz, port: admin}}\n",
			"readinessProbe on port admin (8081), want 8080"},
		{"gateway readiness on readyz", withPatch, gateway + "      containers:\n        - name: gateway\n          readinessProbe: {httpGet: {path: /readyz, port: http}}\n",
			`readinessProbe on path "/readyz", want /healthz`},
		{"consumer readiness on healthz", withPatch, consumer + "      containers:\n        - name: consumer\n          readinessProbe: {httpGet: {path: /healthz, port: ops}}\n",
			`readinessProbe on path "/healthz", want /readyz`},
		{"liveness on readyz", withPatch, consumer + "      containers:\n        - name: consumer\n          livenessProbe: {httpGet: {path: /readyz, port: ops}}\n",
			`livenessProbe on path "/readyz"`},
		{"listening on loopback", config("SECKILL_CONSUMER_ADDR=127.0.0.1:8082"), "", "listens on one address only"},
		{"servers left at the loopback default", config("SECKILL_KAFKA_BROKERS=127.0.0.1:19092"), "", "SECKILL_KAFKA_BROKERS=127.0.0.1:19092 is a loopback address"},
		{"root", withPatch, gateway + "      securityContext: {runAsNonRoot: false, runAsUser: 0}\n", "runAsNonRoot is not true"},
		{"writable root filesystem", withPatch, consumer + "      containers:\n        - name: consumer\n          securityContext: {readOnlyRootFilesystem: false}\n",
			"readOnlyRootFilesystem is not true"},
		{"no memory limit", withPatch, consumer + "      containers:\n        - name: consumer\n          resources: {limits: {memory: null}}\n", "no memory limit"},
		{"init container without a memory limit", withPatch,
			"apiVersion: batch/v1\nkind: Job\nmetadata: {name: seckill-migrate}\nspec:\n  template:\n    spec:\n      initContainers:\n        - name: wait\n          image: busybox:1.37.0\n          resources: {requests: {cpu: 10m, memory: 16Mi}, limits: {cpu: 100m}}\n",
			"Job seckill-migrate init container wait: no memory limit"},
		{"admin port open to all", "resources: [../production]\npatches:\n  - target: {kind: NetworkPolicy, name: seckill-gateway}\n    patch: |-\n      - {op: add, path: /spec/ingress/-, value: {ports: [{port: 8081}]}}\n",
			"", "admits port 8081 of seckill-gateway from anywhere"},
		{"admin port open to another namespace", "resources: [../production]\npatches:\n  - target: {kind: NetworkPolicy, name: seckill-gateway}\n    patch: |-\n      - {op: add, path: /spec/ingress/1/from/-, value: {namespaceSelector: {}}}\n",
			"", "other namespaces"},
		{"public port open to every pod", "resources: [../production]\npatches:\n  - target: {kind: NetworkPolicy, name: seckill-gateway}\n    patch: |-\n      - {op: remove, path: /spec/ingress/0/from}\n",
			"", "admits the public port 8080 of seckill-gateway from anywhere"},
		{"public port open to any pod of the ingress namespace", "resources: [../production]\npatches:\n  - target: {kind: NetworkPolicy, name: seckill-gateway}\n    patch: |-\n      - {op: remove, path: /spec/ingress/0/from/0/podSelector}\n",
			"", "every pod of the selected namespaces"},
		{"public port open to an address block", "resources: [../production]\npatches:\n  - target: {kind: NetworkPolicy, name: seckill-gateway}\n    patch: |-\n      - {op: add, path: /spec/ingress/0/from/-, value: {ipBlock: {cidr: 0.0.0.0/0}}}\n",
			"", "public port 8080 of seckill-gateway from an ipBlock"},
		{"production overlay in plaintext", config("SECKILL_KAFKA_TLS=false"), "", `SECKILL_KAFKA_TLS="false", want true`},
		{"production overlay with the development setting", config("SECKILL_INSECURE_DEV=true"), "", "the development setting has no place in this overlay"},
		{"no network policy", "resources: [../production]\npatches:\n  - target: {kind: NetworkPolicy, name: seckill-reconciler}\n    patch: |-\n      $patch: delete\n      apiVersion: networking.k8s.io/v1\n      kind: NetworkPolicy\n      metadata: {name: seckill-reconciler}\n",
			"", "no NetworkPolicy restricts ingress"},
		{"one Service for both gateway ports", "resources: [../production]\npatches:\n  - target: {kind: Service, name: seckill-gateway}\n    patch: |-\n      - {op: add, path: /spec/ports/-, value: {name: admin, port: 8081, targetPort: admin}}\n",
			"", "give each its own Service"},
		{"one reconciler", "resources: [../production]\nreplicas: [{name: seckill-reconciler, count: 1}]\n", "", "1 replicas, want 2"},
		{"more consumers than grab partitions", "resources: [../production]\nreplicas: [{name: seckill-consumer, count: 8}]\n", "", "8 replicas, want 2 to 6"},
		{"no disruption budget", "resources: [../production]\npatches:\n  - target: {kind: PodDisruptionBudget, name: seckill-consumer}\n    patch: |-\n      $patch: delete\n      apiVersion: policy/v1\n      kind: PodDisruptionBudget\n      metadata: {name: seckill-consumer}\n",
			"", "Deployment seckill-consumer (consumer): no PodDisruptionBudget"},
		{"no migration Job", "resources: [../production]\npatches:\n  - target: {kind: Job, name: seckill-migrate}\n    patch: |-\n      $patch: delete\n      apiVersion: batch/v1\n      kind: Job\n      metadata: {name: seckill-migrate}\n",
			"", "want one migration Job"},
		{"migration step without its ConfigMap", "resources: [../production]\npatches:\n  - target: {kind: ConfigMap, name: seckill-config}\n    patch: |-\n      - {op: remove, path: /metadata/labels/seckill.io~1step}\n",
			"", "no label seckill.io/step=migrate, so the migration step would not apply it"},
		{"third-party image by tag only", withPatch, gateway + "      initContainers:\n        - name: wait\n          image: busybox:1.37.0\n",
			"Deployment seckill-gateway container wait: image busybox:1.37.0 is not pinned by digest"},
		{"gateway scraped with the admin token", "resources: [../production]\npatches:\n  - target: {kind: PodMonitor, name: seckill-gateway}\n    patch: |-\n      - {op: replace, path: /spec/podMetricsEndpoints/0/authorization/credentials, value: {name: seckill-gateway, key: admin-token}}\n",
			"", "the gateway's own Secret (the admin token)"},
		{"gateway scraped without a credential", "resources: [../production]\npatches:\n  - target: {kind: PodMonitor, name: seckill-gateway}\n    patch: |-\n      - {op: remove, path: /spec/podMetricsEndpoints/0/authorization}\n",
			"", "without a credential"},
		{"no tokens file", "resources: [../production]\npatches:\n  - target: {kind: Deployment, name: seckill-gateway}\n    patch: |-\n      - {op: remove, path: /spec/template/spec/volumes/1}\n",
			"", "is not in a mounted Secret volume"},
		{"gateway not scraped", "resources: [../production]\npatches:\n  - target: {kind: PodMonitor, name: seckill-gateway}\n    patch: |-\n      $patch: delete\n      apiVersion: monitoring.coreos.com/v1\n      kind: PodMonitor\n      metadata: {name: seckill-gateway}\n",
			"", "no PodMonitor scrapes job seckill-gateway"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			fsys := onDiskTree(t)
			writeOverlay(t, fsys, tc.kustomization, tc.patch)
			m, err := render(fsys, "/overlays/test")
			var errs []error
			if err != nil {
				errs = []error{err}
			} else {
				errs = check(m, shapes["production"])
			}
			if len(errs) == 0 {
				t.Fatalf("accepted; want an error containing %q", tc.want)
			}
			if !strings.Contains(errors.Join(errs...).Error(), tc.want) {
				t.Fatalf("errors:\n%v\nwant one containing %q", errors.Join(errs...), tc.want)
			}
		})
	}
}
