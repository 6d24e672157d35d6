package k8s

import (
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/selection"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/seckill-pipeline/seckill/pkg/config"
)

// accessLabel marks the pods (operators' tools, Prometheus) that may reach the admin and ops
// listeners; base/networkpolicy.yaml admits these values only.
const accessLabel = "seckill.io/access"

var accessValues = []string{"operator", "monitoring"}

// ingressLabel, ingressValue mark the ingress controller (or the proxy in front of the
// gateway): its namespace and its pods both carry them, set by the operator
// (docs/kubernetes.md); base/networkpolicy.yaml admits the gateway's public port from these
// pods only.
const ingressLabel, ingressValue = "seckill.io/ingress", "true"

// stepLabel marks what `kubectl apply -k OVERLAY -l seckill.io/step=migrate` applies before
// the services (docs/kubernetes.md): the migration Job and everything it needs to start.
const stepLabel, stepMigrate = "seckill.io/step", "migrate"

// shutdownMargin is what a grace period keeps beyond the services' own drain budget, for
// closing clients after the drain.
const shutdownMargin = 5 * time.Second

// shape is what an overlay promises about replicas and placement.
type shape struct {
	minGateways int    // replicas, or the autoscaler's minimum
	consumers   [2]int // [min, max]; max 0: the grab topic's partition count
	reconcilers int
	spread      bool // every Deployment spreads its replicas over nodes
	// secure: TLS to Redis, Kafka and MySQL is on in the overlay's own settings, and the
	// development setting that lets pkg/config accept plaintext credentials is not set.
	secure bool
	// monitored: the overlay scrapes every service's pods (components/monitoring), the
	// gateway's admin port with the scrape credential.
	monitored bool
}

// role is what a container runs, from its command line: gateway, consumer, reconciler or
// migrate.
func role(c corev1.Container) string {
	argv := append(slices.Clone(c.Command), c.Args...)
	if len(argv) == 0 {
		return ""
	}
	switch prog := filepath.Base(argv[0]); {
	case prog == "gateway" && len(argv) > 1 && argv[1] == "migrate":
		return "migrate"
	case prog == "gateway" && (len(argv) == 1 || argv[1] == "serve"):
		return "gateway"
	case prog == "consumer" && len(argv) == 1:
		return "consumer"
	case prog == "reconciler" && len(argv) == 1:
		return "reconciler"
	}
	return "unknown: " + strings.Join(argv, " ")
}

// isSecretName says whether an environment variable holds a credential by its name. A
// *_FILE variable names a file (a mounted Secret), not the secret itself.
func isSecretName(name string) bool {
	if strings.HasSuffix(name, "_FILE") {
		return false
	}
	words := strings.Split(name, "_")
	for _, w := range words {
		switch w {
		case "PASSWORD", "PASS", "PASSPHRASE", "SECRET", "TOKEN", "DSN", "CREDENTIALS", "CREDENTIAL":
			return true
		}
	}
	return words[len(words)-1] == "KEY" // a private key, not SECKILL_KEY_GRACE or RATE_MAX_KEYS
}

// knownVariables are the SECKILL_* names pkg/config reads: a ConfigMap key outside them is a
// typo that would leave the default in force without a word.
func knownVariables() (map[string]bool, error) {
	files, err := filepath.Glob("../../pkg/config/*.go")
	if err != nil || len(files) == 0 {
		return nil, fmt.Errorf("read pkg/config: %v (found %d files)", err, len(files))
	}
	re := regexp.MustCompile(`"(SECKILL_[A-Z0-9_]+)"`)
	known := map[string]bool{}
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		src, err := os.ReadFile(f)
		if err != nil {
			return nil, err
		}
		for _, m := range re.FindAllSubmatch(src, -1) {
			known[string(m[1])] = true
		}
	}
	return known, nil
}

// check returns every rule the rendered overlay breaks.
func check(m *manifests, want shape) []error {
	c := &checker{m: m}
	known, err := knownVariables()
	if err != nil {
		return []error{err}
	}
	c.configMaps(known)
	if want.secure {
		c.transport()
	}
	if len(m.secrets) > 0 {
		c.fail("the manifests carry %d Secret object(s) (%s): credentials never live in the repository; the installation creates its Secrets", len(m.secrets), m.secrets[0].Name)
	}
	byRole := map[string][]*appsv1.Deployment{}
	for _, d := range m.deployments {
		c.deployment(d, want, byRole)
	}
	for _, r := range []string{"gateway", "consumer", "reconciler"} {
		if len(byRole[r]) != 1 {
			c.fail("want one %s Deployment, found %d", r, len(byRole[r]))
		}
	}
	c.migrationJob()
	c.scrapes(byRole["gateway"], want)
	c.images()
	for _, d := range m.deployments {
		c.egress("Deployment "+d.Name, d.Spec.Template.Labels)
	}
	for _, j := range m.jobs {
		c.egress("Job "+j.Name, j.Spec.Template.Labels)
	}
	return c.errs
}

// images: every third-party image carries @sha256:<digest> unless ../images-unpinned.txt lists
// it with its reason (issue 39: images pinned by tag, not digest); deploy/docker/check_compose.py
// holds docker-compose.yml and the Dockerfile to the same list. Ours (seckill, by any registry)
// is pinned by the release in the overlay's images: entry (docs/deployment.md).
func (c *checker) images() {
	raw, err := os.ReadFile("../images-unpinned.txt")
	if err != nil {
		c.fail("the unpinned images list: %v", err)
		return
	}
	listed := map[string]bool{}
	for _, line := range strings.Split(string(raw), "\n") {
		if f := strings.Fields(line); len(f) > 1 && !strings.HasPrefix(f[0], "#") {
			listed[f[0]] = true
		}
	}
	digest := regexp.MustCompile(`@sha256:[0-9a-f]{64}$`)
	ours := regexp.MustCompile(`(^|/)seckill(:[\w.-]+)?(@sha256:[0-9a-f]{64})?$`)
	check := func(where string, pod corev1.PodSpec) {
		for _, ctr := range append(pod.InitContainers[:len(pod.InitContainers):len(pod.InitContainers)], pod.Containers...) {
			if !ours.MatchString(ctr.Image) && !digest.MatchString(ctr.Image) && !listed[ctr.Image] {
				c.fail("%s container %s: image %s is not pinned by digest (@sha256:...) and not listed in deploy/images-unpinned.txt", where, ctr.Name, ctr.Image)
			}
		}
	}
	for _, d := range c.m.deployments {
		check("Deployment "+d.Name, d.Spec.Template.Spec)
	}
	for _, j := range c.m.jobs {
		check("Job "+j.Name, j.Spec.Template.Spec)
	}
}

// scrapeSecret is the Secret (and key) holding Prometheus's scrape token, of role scrape:
// /metrics only (issue 39). gatewaySecret is the gateway's own, with the admin token.
const (
	scrapeSecret, scrapeKey = "seckill-prometheus-scrape", "token"
	gatewaySecret           = "seckill-gateway"
	tokensFileVar           = "SECKILL_ADMIN_TOKENS_FILE"
)

// scrapes: a PodMonitor endpoint on the gateway's admin port sends the scrape credential from
// scrapeSecret, never the admin token or anything else from the gateway's Secret (the scrape
// credential could then adjust stock and read pprof), and the gateway reads its tokens file,
// where that credential's role is set, from a mounted Secret. A monitored overlay scrapes the
// gateway, the consumer and the reconciler, with the job names the alert rules use.
func (c *checker) scrapes(gateways []*appsv1.Deployment, want shape) {
	jobs := map[string]bool{}
	for _, pm := range c.m.podMonitors {
		where := "PodMonitor " + pm.Metadata.Name
		for i, ep := range pm.Spec.Endpoints {
			for _, r := range ep.Relabelings {
				if r.TargetLabel == "job" {
					jobs[r.Replacement] = true
				}
			}
			gateway := false
			for _, d := range gateways {
				gateway = gateway || selects(&pm.Spec.Selector, d.Spec.Template.Labels)
			}
			if !gateway || ep.Port != "admin" {
				continue
			}
			auth := ep.Authorization
			switch {
			case auth == nil || auth.Credentials == nil:
				c.fail("%s endpoint %d scrapes the gateway's admin port without a credential (its /metrics answers 401)", where, i)
			case auth.Credentials.Name == gatewaySecret:
				c.fail("%s endpoint %d scrapes the gateway with %s key %s, the gateway's own Secret (the admin token): want %s key %s, a credential of role scrape",
					where, i, auth.Credentials.Name, auth.Credentials.Key, scrapeSecret, scrapeKey)
			case auth.Credentials.Name != scrapeSecret || auth.Credentials.Key != scrapeKey:
				c.fail("%s endpoint %d scrapes the gateway with %s key %s: want %s key %s, a credential of role scrape",
					where, i, auth.Credentials.Name, auth.Credentials.Key, scrapeSecret, scrapeKey)
			}
		}
	}
	if want.monitored {
		for _, job := range []string{"seckill-gateway", "seckill-consumer", "seckill-reconciler"} {
			if !jobs[job] {
				c.fail("no PodMonitor scrapes job %s (components/monitoring)", job)
			}
		}
	}
	for _, d := range gateways {
		c.tokensFile(d)
	}
}

// tokensFile: the gateway's SECKILL_ADMIN_TOKENS_FILE is a file of a Secret volume it mounts
// (the credentials and their roles, the scrape credential among them, re-read on change).
func (c *checker) tokensFile(d *appsv1.Deployment) {
	where := "Deployment " + d.Name
	pod := d.Spec.Template.Spec
	for _, ctr := range pod.Containers {
		path := ""
		for _, e := range ctr.Env {
			if e.Name == tokensFileVar {
				path = e.Value
			}
		}
		if path == "" {
			c.fail("%s container %s: no %s: the scrape credential's role has nowhere to be set", where, ctr.Name, tokensFileVar)
			continue
		}
		mounted := false
		for _, vm := range ctr.VolumeMounts {
			if !strings.HasPrefix(path, strings.TrimSuffix(vm.MountPath, "/")+"/") {
				continue
			}
			for _, v := range pod.Volumes {
				mounted = mounted || (v.Name == vm.Name && v.Secret != nil)
			}
		}
		if !mounted {
			c.fail("%s container %s: %s=%s is not in a mounted Secret volume", where, ctr.Name, tokensFileVar, path)
		}
	}
}

// egress: every workload's pods are selected by an Egress policy, and every egress rule
// names its ports, so a compromised pod reaches DNS and the servers' ports only (not the
// internet, not the cluster's other services on any port). A rule without ports, or with a
// port range, would admit everything again.
func (c *checker) egress(where string, podLabels map[string]string) {
	selected := false
	for _, np := range c.m.netpols {
		if !slices.Contains(np.Spec.PolicyTypes, networkingv1.PolicyTypeEgress) || !selects(&np.Spec.PodSelector, podLabels) {
			continue
		}
		selected = true
		for i, rule := range np.Spec.Egress {
			if len(rule.Ports) == 0 {
				c.fail("NetworkPolicy %s egress rule %d: no ports (admits every port of its peers)", np.Name, i)
			}
			for _, p := range rule.Ports {
				if p.Port == nil || p.EndPort != nil {
					c.fail("NetworkPolicy %s egress rule %d: a rule for all ports or a range", np.Name, i)
				}
			}
		}
	}
	if !selected {
		c.fail("%s: no NetworkPolicy restricts its egress (its pods may connect anywhere)", where)
	}
}

type checker struct {
	m    *manifests
	errs []error
}

func (c *checker) fail(format string, args ...any) {
	c.errs = append(c.errs, fmt.Errorf(format, args...))
}

// transport: secure by default means TLS to every server, verified (pkg/config refuses
// unverified TLS without the development setting), and that setting absent: a production
// overlay must not start with passwords on the network in plaintext, nor be one line away
// from it.
func (c *checker) transport() {
	for _, cm := range c.m.configMaps {
		if _, ok := cm.Data["SECKILL_REDIS_ADDR"]; !ok {
			continue
		}
		for _, k := range []string{"SECKILL_REDIS_TLS", "SECKILL_KAFKA_TLS", "SECKILL_MYSQL_TLS"} {
			if on, err := strconv.ParseBool(cm.Data[k]); err != nil || !on {
				c.fail("ConfigMap %s: %s=%q, want true (the production overlay is secure by default)", cm.Name, k, cm.Data[k])
			}
		}
	}
	for _, cm := range c.m.configMaps {
		if v, ok := cm.Data[config.InsecureDevVar]; ok {
			c.fail("ConfigMap %s: %s=%q: the development setting has no place in this overlay", cm.Name, config.InsecureDevVar, v)
		}
	}
	for _, d := range c.m.deployments {
		for _, ctr := range d.Spec.Template.Spec.Containers {
			for _, e := range ctr.Env {
				if e.Name == config.InsecureDevVar {
					c.fail("Deployment %s container %s: sets %s: the development setting has no place in this overlay", d.Name, ctr.Name, config.InsecureDevVar)
				}
			}
		}
	}
	c.userTokens()
}

// userTokens: the internet-facing gateway verifies the identity provider's public keys
// (SECKILL_JWT_JWKS_URL or _FILE) and holds no HS256 secret, which could mint any user's
// token.
func (c *checker) userTokens() {
	keySet := false
	for _, cm := range c.m.configMaps {
		keySet = keySet || cm.Data["SECKILL_JWT_JWKS_URL"] != "" || cm.Data["SECKILL_JWT_JWKS_FILE"] != ""
	}
	for _, d := range c.m.deployments {
		for _, ctr := range d.Spec.Template.Spec.Containers {
			if role(ctr) != "gateway" {
				continue
			}
			for _, e := range ctr.Env {
				switch e.Name {
				case "SECKILL_JWT_JWKS_URL", "SECKILL_JWT_JWKS_FILE":
					keySet = true
				case "SECKILL_JWT_SECRET", "SECKILL_JWT_SECRET_FILE", "SECKILL_JWT_SECRET_PREVIOUS", "SECKILL_JWT_SECRET_PREVIOUS_FILE":
					c.fail("Deployment %s container %s: sets %s: a gateway holding an HS256 secret can mint any user's token; verify the identity provider's keys (SECKILL_JWT_JWKS_URL)", d.Name, ctr.Name, e.Name)
				}
			}
		}
	}
	if !keySet {
		c.fail("no SECKILL_JWT_JWKS_URL or SECKILL_JWT_JWKS_FILE: the gateway has no identity provider's keys to verify user tokens with")
	}
}

func (c *checker) configMaps(known map[string]bool) {
	for _, cm := range c.m.configMaps {
		for k, v := range cm.Data {
			if isSecretName(k) {
				c.fail("ConfigMap %s: %s is a secret: give it from a Secret (secretKeyRef), never in a ConfigMap", cm.Name, k)
			}
			if strings.HasPrefix(k, "SECKILL_") && !known[k] {
				c.fail("ConfigMap %s: %s=%q is not a variable pkg/config reads (a typo leaves the default in force)", cm.Name, k, v)
			}
		}
		for k := range cm.BinaryData {
			c.fail("ConfigMap %s: binaryData %s: not expected", cm.Name, k)
		}
	}
}

// environment resolves a container's environment as the kubelet would. Values from a Secret
// are placeholders long enough for pkg/config's minimum lengths (the DSN: the local stack's,
// which has the options pkg/config demands); fromSecret names them.
func (c *checker) environment(where string, ctr corev1.Container) (env map[string]string, fromSecret map[string]bool) {
	env, fromSecret = map[string]string{}, map[string]bool{}
	for _, ef := range ctr.EnvFrom {
		switch {
		case ef.ConfigMapRef != nil:
			cm, ok := c.m.configMaps[ef.ConfigMapRef.Name]
			if !ok {
				c.fail("%s: envFrom ConfigMap %s: not in the manifests", where, ef.ConfigMapRef.Name)
				continue
			}
			for k, v := range cm.Data {
				env[ef.Prefix+k] = v
			}
		case ef.SecretRef != nil:
			c.fail("%s: envFrom Secret %s: name each secret variable with a secretKeyRef, so the test and a reader see which it is", where, ef.SecretRef.Name)
		}
	}
	for _, e := range ctr.Env {
		if e.Value != "" && e.ValueFrom != nil {
			c.fail("%s: env %s has a literal value and a valueFrom (the API refuses both)", where, e.Name)
		}
		switch {
		case e.ValueFrom == nil:
			if isSecretName(e.Name) && e.Value != "" {
				c.fail("%s: env %s has a literal value: a secret comes from a Secret (secretKeyRef)", where, e.Name)
			}
			env[e.Name] = e.Value
		case e.ValueFrom.SecretKeyRef != nil:
			fromSecret[e.Name] = true
			env[e.Name] = strings.Repeat("s", 64)
			if e.Name == "SECKILL_MYSQL_DSN" {
				env[e.Name] = config.DefaultMySQLDSN
			}
		case e.ValueFrom.ConfigMapKeyRef != nil:
			if isSecretName(e.Name) {
				c.fail("%s: env %s comes from a ConfigMap: a secret comes from a Secret (secretKeyRef)", where, e.Name)
			}
			ref := e.ValueFrom.ConfigMapKeyRef
			cm, ok := c.m.configMaps[ref.Name]
			if !ok {
				c.fail("%s: env %s: ConfigMap %s not in the manifests", where, e.Name, ref.Name)
				continue
			}
			env[e.Name] = cm.Data[ref.Key]
		default: // fieldRef, resourceFieldRef: not secrets
			if isSecretName(e.Name) {
				c.fail("%s: env %s: a secret comes from a Secret (secretKeyRef)", where, e.Name)
			}
			env[e.Name] = ""
		}
	}
	for name := range env {
		if isSecretName(name) && !fromSecret[name] && env[name] != "" {
			c.fail("%s: %s is set, but not from a Secret", where, name)
		}
	}
	return env, fromSecret
}

// listener is one address a service binds, and the container port it must be declared as.
type listener struct {
	name string // the variable that sets it
	addr string
}

func (c *checker) deployment(d *appsv1.Deployment, want shape, byRole map[string][]*appsv1.Deployment) {
	pod := d.Spec.Template.Spec
	if len(pod.Containers) != 1 || len(pod.InitContainers) != 0 {
		c.fail("Deployment %s: want exactly one container, found %d (and %d init containers)", d.Name, len(pod.Containers), len(pod.InitContainers))
		return
	}
	ctr := pod.Containers[0]
	r := role(ctr)
	byRole[r] = append(byRole[r], d)
	where := fmt.Sprintf("Deployment %s (%s)", d.Name, r)
	c.podSecurity(where, pod)
	env, fromSecret := c.environment(where, ctr)
	getenv := func(k string) string { return env[k] }

	required := []string{"SECKILL_MYSQL_DSN"}
	var listeners []listener
	var probeVar string
	var shutdown time.Duration
	drains := 1
	var grabPartitions int
	switch r {
	case "gateway":
		cfg, err := config.LoadGateway(getenv)
		if err != nil {
			c.fail("%s: pkg/config refuses its environment: %v", where, err)
			return
		}
		required = append(required, "SECKILL_ADMIN_TOKEN")
		if cfg.JWTSecret != "" || (cfg.JWTJWKSURL == "" && cfg.JWTJWKSFile == "") {
			required = append(required, "SECKILL_JWT_SECRET") // without a key set, HS256 is how tokens verify
		}
		listeners = []listener{{"SECKILL_GATEWAY_ADDR", cfg.HTTPAddr}, {"SECKILL_ADMIN_ADDR", cfg.AdminAddr}}
		probeVar, shutdown = "SECKILL_GATEWAY_ADDR", cfg.ShutdownTimeout
		// The HTTP servers drain, then the relay publishes what it holds, each within
		// SECKILL_SHUTDOWN_TIMEOUT (gateway/main.go).
		drains = 2
	case "consumer":
		cfg, err := config.LoadConsumer(getenv)
		if err != nil {
			c.fail("%s: pkg/config refuses its environment: %v", where, err)
			return
		}
		listeners = []listener{{"SECKILL_CONSUMER_ADDR", cfg.HTTPAddr}}
		probeVar, shutdown = "SECKILL_CONSUMER_ADDR", cfg.ShutdownTimeout
		grabPartitions = cfg.Topics.Grab.Partitions
	case "reconciler":
		cfg, err := config.LoadReconciler(getenv)
		if err != nil {
			c.fail("%s: pkg/config refuses its environment: %v", where, err)
			return
		}
		listeners = []listener{{"SECKILL_RECONCILER_ADDR", cfg.HTTPAddr}}
		probeVar, shutdown = "SECKILL_RECONCILER_ADDR", cfg.ShutdownTimeout
	default:
		c.fail("%s: not a service this test knows", where)
		return
	}
	for _, name := range required {
		if !fromSecret[name] {
			c.fail("%s: %s must come from a Secret (secretKeyRef)", where, name)
		}
	}
	// The defaults are the local stack's loopback addresses: a pod must be told its servers.
	for _, name := range []string{"SECKILL_REDIS_ADDR", "SECKILL_KAFKA_BROKERS"} {
		if strings.TrimSpace(env[name]) == "" {
			c.fail("%s: %s is not set (the default is the local stack's loopback address)", where, name)
		} else if strings.Contains(env[name], "127.0.0.1") || strings.Contains(env[name], "localhost") {
			c.fail("%s: %s=%s is a loopback address", where, name, env[name])
		}
	}

	ports := map[string]int32{} // variable -> port
	for _, l := range listeners {
		host, p, err := net.SplitHostPort(l.addr)
		port, perr := strconv.Atoi(p)
		if err != nil || perr != nil {
			c.fail("%s: %s=%q is not host:port", where, l.name, l.addr)
			continue
		}
		if host != "" && host != "0.0.0.0" && host != "::" {
			c.fail("%s: %s=%q listens on one address only: the kubelet's probes and the Services reach the pod's address (use :%d)", where, l.name, l.addr, port)
		}
		ports[l.name] = int32(port)
		if !slices.ContainsFunc(ctr.Ports, func(cp corev1.ContainerPort) bool { return cp.ContainerPort == int32(port) }) {
			c.fail("%s: %s port %d is not a containerPort", where, l.name, port)
		}
	}
	c.probes(where, r, ctr, ports[probeVar])

	preStop := int64(0)
	if ctr.Lifecycle != nil && ctr.Lifecycle.PreStop != nil && ctr.Lifecycle.PreStop.Sleep != nil {
		preStop = ctr.Lifecycle.PreStop.Sleep.Seconds
	}
	grace := int64(30) // the API's default
	if pod.TerminationGracePeriodSeconds != nil {
		grace = *pod.TerminationGracePeriodSeconds
	}
	need := time.Duration(preStop)*time.Second + time.Duration(drains)*shutdown + shutdownMargin
	if time.Duration(grace)*time.Second < need {
		c.fail("%s: terminationGracePeriodSeconds %d is shorter than its shutdown: preStop %ds + %d x SECKILL_SHUTDOWN_TIMEOUT %s + %s margin = %s",
			where, grace, preStop, drains, shutdown, shutdownMargin, need)
	}

	replicas := c.replicas(d)
	switch r {
	case "gateway":
		if replicas < want.minGateways {
			c.fail("%s: %d replicas, want at least %d", where, replicas, want.minGateways)
		}
		c.services(d, ctr, ports["SECKILL_GATEWAY_ADDR"], ports["SECKILL_ADMIN_ADDR"])
		c.networkPolicy(d, ctr, ports["SECKILL_ADMIN_ADDR"], ports["SECKILL_GATEWAY_ADDR"])
	case "consumer":
		lo, hi := want.consumers[0], want.consumers[1]
		if hi == 0 || hi > grabPartitions {
			hi = grabPartitions
		}
		if replicas < lo || replicas > hi {
			c.fail("%s: %d replicas, want %d to %d (a grab partition has one reader: the grab topic has %d)", where, replicas, lo, hi, grabPartitions)
		}
		c.services(d, ctr, 0, ports["SECKILL_CONSUMER_ADDR"])
		c.networkPolicy(d, ctr, ports["SECKILL_CONSUMER_ADDR"], 0)
	case "reconciler":
		if replicas != want.reconcilers {
			c.fail("%s: %d replicas, want %d", where, replicas, want.reconcilers)
		}
		c.services(d, ctr, 0, ports["SECKILL_RECONCILER_ADDR"])
		c.networkPolicy(d, ctr, ports["SECKILL_RECONCILER_ADDR"], 0)
	}
	if want.spread && !spreadsOverNodes(pod) {
		c.fail("%s: no topologySpreadConstraints or podAntiAffinity over kubernetes.io/hostname", where)
	}
	c.disruptionBudget(where, d, replicas)
}

// replicas is the Deployment's count, or its autoscaler's minimum.
func (c *checker) replicas(d *appsv1.Deployment) int {
	for _, h := range c.m.hpas {
		if h.Spec.ScaleTargetRef.Kind == "Deployment" && h.Spec.ScaleTargetRef.Name == d.Name {
			if d.Spec.Replicas != nil {
				c.fail("Deployment %s: has replicas and an autoscaler: each kubectl apply would reset the autoscaler's count", d.Name)
			}
			if h.Spec.MinReplicas == nil {
				return 1
			}
			return int(*h.Spec.MinReplicas)
		}
	}
	if d.Spec.Replicas == nil {
		return 1
	}
	return int(*d.Spec.Replicas)
}

func spreadsOverNodes(pod corev1.PodSpec) bool {
	for _, t := range pod.TopologySpreadConstraints {
		if t.TopologyKey == "kubernetes.io/hostname" {
			return true
		}
	}
	if pod.Affinity == nil || pod.Affinity.PodAntiAffinity == nil {
		return false
	}
	aa := pod.Affinity.PodAntiAffinity
	for _, t := range aa.RequiredDuringSchedulingIgnoredDuringExecution {
		if t.TopologyKey == "kubernetes.io/hostname" {
			return true
		}
	}
	for _, t := range aa.PreferredDuringSchedulingIgnoredDuringExecution {
		if t.PodAffinityTerm.TopologyKey == "kubernetes.io/hostname" {
			return true
		}
	}
	return false
}

// readinessPath is the path each service's readiness probe asks. The gateway's is /healthz:
// its Service must keep every gateway while a shared dependency fails over (README, "The
// cluster profile": the proxy checks /healthz for the same reason); the others route no
// traffic, and their readiness says their servers answer.
var readinessPath = map[string]string{"gateway": "/healthz", "consumer": "/readyz", "reconciler": "/readyz"}

// probes: liveness on /healthz, readiness on readinessPath (startup, if any, on /healthz),
// all on the listener the service serves them on.
func (c *checker) probes(where, role string, ctr corev1.Container, port int32) {
	for _, p := range []struct {
		kind, path string
		probe      *corev1.Probe
		required   bool
	}{
		{"livenessProbe", "/healthz", ctr.LivenessProbe, true},
		{"readinessProbe", readinessPath[role], ctr.ReadinessProbe, true},
		{"startupProbe", "/healthz", ctr.StartupProbe, false},
	} {
		if p.probe == nil {
			if p.required {
				c.fail("%s: no %s", where, p.kind)
			}
			continue
		}
		get := p.probe.HTTPGet
		if get == nil {
			c.fail("%s: %s is not an httpGet (the image has no shell)", where, p.kind)
			continue
		}
		if get.Path != p.path {
			c.fail("%s: %s on path %q, want %s", where, p.kind, get.Path, p.path)
		}
		if got, ok := containerPort(ctr, get.Port); !ok || got != port {
			c.fail("%s: %s on port %s (%d), want %d, where the service serves %s", where, p.kind, get.Port.String(), got, port, p.path)
		}
		if get.Scheme != "" && get.Scheme != corev1.URISchemeHTTP {
			c.fail("%s: %s scheme %s: the listeners speak plain HTTP", where, p.kind, get.Scheme)
		}
	}
}

// containerPort resolves a port given by number or by the container port's name.
func containerPort(ctr corev1.Container, p intstr.IntOrString) (int32, bool) {
	if p.Type == intstr.Int {
		return p.IntVal, p.IntVal > 0
	}
	for _, cp := range ctr.Ports {
		if cp.Name == p.StrVal {
			return cp.ContainerPort, true
		}
	}
	return 0, false
}

func (c *checker) podSecurity(where string, pod corev1.PodSpec) {
	psc := pod.SecurityContext
	if psc == nil {
		psc = &corev1.PodSecurityContext{}
	}
	if pod.HostNetwork || pod.HostPID || pod.HostIPC {
		c.fail("%s: shares a host namespace", where)
	}
	if pod.AutomountServiceAccountToken == nil || *pod.AutomountServiceAccountToken {
		c.fail("%s: automountServiceAccountToken is not false (the services never call the Kubernetes API)", where)
	}
	// Init containers run in the same pod under the same node's memory: the same rules
	// (a Job's init container without a memory limit was unchecked).
	for i, ctr := range slices.Concat(pod.InitContainers, pod.Containers) {
		w := fmt.Sprintf("%s container %s", where, ctr.Name)
		if i < len(pod.InitContainers) {
			w = fmt.Sprintf("%s init container %s", where, ctr.Name)
		}
		sc := ctr.SecurityContext
		if sc == nil {
			c.fail("%s: no securityContext", w)
			sc = &corev1.SecurityContext{}
		}
		nonRoot := psc.RunAsNonRoot
		if sc.RunAsNonRoot != nil {
			nonRoot = sc.RunAsNonRoot
		}
		if nonRoot == nil || !*nonRoot {
			c.fail("%s: runAsNonRoot is not true", w)
		}
		uid := psc.RunAsUser
		if sc.RunAsUser != nil {
			uid = sc.RunAsUser
		}
		if uid != nil && *uid == 0 {
			c.fail("%s: runAsUser 0", w)
		}
		if sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem {
			c.fail("%s: readOnlyRootFilesystem is not true", w)
		}
		if sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation {
			c.fail("%s: allowPrivilegeEscalation is not false", w)
		}
		if sc.Privileged != nil && *sc.Privileged {
			c.fail("%s: privileged", w)
		}
		if sc.Capabilities == nil || !slices.Contains(sc.Capabilities.Drop, "ALL") || len(sc.Capabilities.Add) > 0 {
			c.fail("%s: capabilities must drop ALL and add none", w)
		}
		seccomp := psc.SeccompProfile
		if sc.SeccompProfile != nil {
			seccomp = sc.SeccompProfile
		}
		if seccomp == nil || seccomp.Type == corev1.SeccompProfileTypeUnconfined {
			c.fail("%s: no seccompProfile (RuntimeDefault)", w)
		}
		for _, res := range []corev1.ResourceName{corev1.ResourceCPU, corev1.ResourceMemory} {
			req, hasReq := ctr.Resources.Requests[res]
			lim, hasLim := ctr.Resources.Limits[res]
			switch {
			case !hasReq || req.IsZero():
				c.fail("%s: no %s request", w, res)
			case !hasLim || lim.IsZero():
				c.fail("%s: no %s limit", w, res)
			case req.Cmp(lim) > 0:
				c.fail("%s: %s request %s above its limit %s", w, res, req.String(), lim.String())
			}
		}
		if img := ctr.Image; img == "" || strings.HasSuffix(img, ":latest") || !strings.ContainsAny(img, ":@") {
			c.fail("%s: image %q is not pinned to a tag or digest", w, img)
		}
	}
}

func selects(sel *metav1.LabelSelector, podLabels map[string]string) bool {
	if sel == nil {
		return false
	}
	s, err := metav1.LabelSelectorAsSelector(sel)
	if err != nil || s.Empty() {
		return false
	}
	return s.Matches(labels.Set(podLabels))
}

// disruptionBudget: a budget covers the pods and lets a node drain proceed.
func (c *checker) disruptionBudget(where string, d *appsv1.Deployment, replicas int) {
	for _, p := range c.m.pdbs {
		if !selects(p.Spec.Selector, d.Spec.Template.Labels) {
			continue
		}
		switch {
		case p.Spec.MaxUnavailable != nil:
			if v, err := intstr.GetScaledValueFromIntOrPercent(p.Spec.MaxUnavailable, replicas, true); err != nil || v < 1 {
				c.fail("%s: PodDisruptionBudget %s maxUnavailable %s lets no pod go: a node drain would hang", where, p.Name, p.Spec.MaxUnavailable.String())
			}
		case p.Spec.MinAvailable != nil:
			if v, err := intstr.GetScaledValueFromIntOrPercent(p.Spec.MinAvailable, replicas, true); err != nil || v >= replicas {
				c.fail("%s: PodDisruptionBudget %s minAvailable %s with %d replicas: a node drain would hang", where, p.Name, p.Spec.MinAvailable.String(), replicas)
			}
		}
		return
	}
	c.fail("%s: no PodDisruptionBudget selects its pods", where)
}

// services: the public port and the internal port (admin or ops) each have a Service
// selecting these pods, never the same Service, and the internal one stays in the cluster.
func (c *checker) services(d *appsv1.Deployment, ctr corev1.Container, public, internal int32) {
	var havePublic, haveInternal bool
	for _, s := range c.m.services {
		if !selects(&metav1.LabelSelector{MatchLabels: s.Spec.Selector}, d.Spec.Template.Labels) {
			continue
		}
		var targets []int32
		for _, sp := range s.Spec.Ports {
			tp := sp.TargetPort
			if tp.Type == intstr.Int && tp.IntVal == 0 {
				tp = intstr.FromInt32(sp.Port)
			}
			p, ok := containerPort(ctr, tp)
			if !ok {
				c.fail("Service %s: targetPort %s is not a port of %s", s.Name, tp.String(), d.Name)
			}
			targets = append(targets, p)
		}
		hasPublic := public != 0 && slices.Contains(targets, public)
		hasInternal := slices.Contains(targets, internal)
		havePublic, haveInternal = havePublic || hasPublic, haveInternal || hasInternal
		if hasPublic && hasInternal {
			c.fail("Service %s: exposes the public port %d and the internal port %d together; give each its own Service", s.Name, public, internal)
		}
		if hasInternal && s.Spec.Type != "" && s.Spec.Type != corev1.ServiceTypeClusterIP {
			c.fail("Service %s: type %s takes the internal port %d outside the cluster", s.Name, s.Spec.Type, internal)
		}
	}
	if public != 0 && !havePublic {
		c.fail("Deployment %s: no Service for the public port %d", d.Name, public)
	}
	if !haveInternal {
		c.fail("Deployment %s: no Service for the port %d (admin or metrics)", d.Name, internal)
	}
}

// networkPolicy: some policy selects the pods for ingress, and every rule of every such
// policy that admits the internal port admits only pods of the namespace labelled
// seckill.io/access in {operator, monitoring}; open, when not 0, must stay reachable.
func (c *checker) networkPolicy(d *appsv1.Deployment, ctr corev1.Container, internal, open int32) {
	var selected, openAdmitted bool
	for _, np := range c.m.netpols {
		if !selects(&np.Spec.PodSelector, d.Spec.Template.Labels) && !(len(np.Spec.PodSelector.MatchLabels) == 0 && len(np.Spec.PodSelector.MatchExpressions) == 0) {
			continue
		}
		if !slices.Contains(np.Spec.PolicyTypes, networkingv1.PolicyTypeIngress) && len(np.Spec.PolicyTypes) > 0 {
			continue
		}
		selected = true
		for i, rule := range np.Spec.Ingress {
			if open != 0 && admitsPort(rule, ctr, open) {
				openAdmitted = true
				// The public port is for the ingress only: any other pod that reaches it
				// directly skips what the ingress enforces (TLS, the user header's stripping,
				// X-Forwarded-For), and one in a proxy's address range could name its user.
				if len(rule.From) == 0 {
					c.fail("NetworkPolicy %s rule %d: admits the public port %d of %s from anywhere, want the ingress only", np.Name, i, open, d.Name)
				}
				for _, peer := range rule.From {
					if err := ingressPeer(peer); err != nil {
						c.fail("NetworkPolicy %s rule %d: admits the public port %d of %s from %v", np.Name, i, open, d.Name, err)
					}
				}
			}
			if !admitsPort(rule, ctr, internal) {
				continue
			}
			if len(rule.From) == 0 {
				c.fail("NetworkPolicy %s rule %d: admits port %d of %s from anywhere", np.Name, i, internal, d.Name)
			}
			for _, peer := range rule.From {
				if err := accessPeer(peer); err != nil {
					c.fail("NetworkPolicy %s rule %d: admits port %d of %s from %v", np.Name, i, internal, d.Name, err)
				}
			}
		}
	}
	if !selected {
		c.fail("Deployment %s: no NetworkPolicy restricts ingress to its pods (port %d open to every pod)", d.Name, internal)
	}
	if open != 0 && !openAdmitted {
		c.fail("Deployment %s: its NetworkPolicy admits nothing to the public port %d", d.Name, open)
	}
}

func admitsPort(rule networkingv1.NetworkPolicyIngressRule, ctr corev1.Container, port int32) bool {
	if len(rule.Ports) == 0 {
		return true
	}
	for _, p := range rule.Ports {
		if p.Protocol != nil && *p.Protocol != corev1.ProtocolTCP {
			continue
		}
		if p.Port == nil {
			return true
		}
		n, ok := containerPort(ctr, *p.Port)
		if !ok {
			continue
		}
		if n == port || (p.EndPort != nil && n <= port && port <= *p.EndPort) {
			return true
		}
	}
	return false
}

// accessPeer accepts only pods of the policy's namespace that carry the access label with
// allowed values: its requirements are ANDed, so one on the label restricts the peer.
func accessPeer(peer networkingv1.NetworkPolicyPeer) error {
	switch {
	case peer.IPBlock != nil:
		return errors.New("an ipBlock")
	case peer.NamespaceSelector != nil:
		return errors.New("other namespaces (namespaceSelector)")
	case peer.PodSelector == nil:
		return errors.New("an empty peer")
	}
	sel, err := metav1.LabelSelectorAsSelector(peer.PodSelector)
	if err != nil {
		return err
	}
	reqs, _ := sel.Requirements()
	for _, r := range reqs {
		if r.Key() != accessLabel {
			continue
		}
		switch r.Operator() {
		case selection.In, selection.Equals, selection.DoubleEquals:
			vals := r.Values().UnsortedList()
			if len(vals) > 0 && !slices.ContainsFunc(vals, func(v string) bool { return !slices.Contains(accessValues, v) }) {
				return nil
			}
		}
	}
	return fmt.Errorf("pods not required to carry %s in %v (selector %q)", accessLabel, accessValues, sel.String())
}

// ingressPeer accepts only pods carrying the ingress label in namespaces carrying it: both
// selectors present, each requiring the label (a peer's selectors are ANDed).
func ingressPeer(peer networkingv1.NetworkPolicyPeer) error {
	switch {
	case peer.IPBlock != nil:
		return errors.New("an ipBlock")
	case peer.NamespaceSelector == nil:
		return fmt.Errorf("pods of the gateway's own namespace (no namespaceSelector requiring %s=%s)", ingressLabel, ingressValue)
	case peer.PodSelector == nil:
		return fmt.Errorf("every pod of the selected namespaces (no podSelector requiring %s=%s)", ingressLabel, ingressValue)
	}
	for what, ls := range map[string]*metav1.LabelSelector{"namespaceSelector": peer.NamespaceSelector, "podSelector": peer.PodSelector} {
		sel, err := metav1.LabelSelectorAsSelector(ls)
		if err != nil {
			return err
		}
		reqs, _ := sel.Requirements()
		if !slices.ContainsFunc(reqs, func(r labels.Requirement) bool {
			vals := r.Values().UnsortedList()
			return r.Key() == ingressLabel && (r.Operator() == selection.Equals || r.Operator() == selection.In || r.Operator() == selection.DoubleEquals) &&
				len(vals) == 1 && vals[0] == ingressValue
		}) {
			return fmt.Errorf("a %s not requiring %s=%s (%q)", what, ingressLabel, ingressValue, sel.String())
		}
	}
	return nil
}

// migrationStep: the documented first step (apply only what carries the step label, wait
// for the Job) works only if the Job and all it needs carry the label.
func (c *checker) migrationStep(job string, pod corev1.PodSpec) {
	need := map[string]map[string]string{} // what -> its labels
	for _, j := range c.m.jobs {
		if j.Name == job {
			need["Job "+j.Name] = j.Labels
		}
	}
	for _, ef := range pod.Containers[0].EnvFrom {
		if ef.ConfigMapRef != nil {
			if cm, ok := c.m.configMaps[ef.ConfigMapRef.Name]; ok {
				need["ConfigMap "+cm.Name] = cm.Labels
			}
		}
	}
	for _, sa := range c.m.serviceAccts {
		if sa.Name == pod.ServiceAccountName {
			need["ServiceAccount "+sa.Name] = sa.Labels
		}
	}
	if _, ok := need["ServiceAccount "+pod.ServiceAccountName]; !ok && pod.ServiceAccountName != "" {
		c.fail("Job %s: ServiceAccount %s is not in the manifests", job, pod.ServiceAccountName)
	}
	for _, ns := range c.m.namespaces {
		need["Namespace "+ns.Name] = ns.Labels
	}
	for what, l := range need {
		if l[stepLabel] != stepMigrate {
			c.fail("%s: no label %s=%s, so the migration step would not apply it before the Job %s", what, stepLabel, stepMigrate, job)
		}
	}
}

func (c *checker) migrationJob() {
	found := 0
	for _, j := range c.m.jobs {
		pod := j.Spec.Template.Spec
		if len(pod.Containers) != 1 || role(pod.Containers[0]) != "migrate" {
			c.fail("Job %s: not the migration Job (gateway migrate)", j.Name)
			continue
		}
		found++
		where := "Job " + j.Name
		c.podSecurity(where, pod)
		if pod.RestartPolicy != corev1.RestartPolicyNever && pod.RestartPolicy != corev1.RestartPolicyOnFailure {
			c.fail("%s: restartPolicy %q", where, pod.RestartPolicy)
		}
		if j.Spec.BackoffLimit == nil {
			c.fail("%s: no backoffLimit (the default retries six times)", where)
		}
		env, fromSecret := c.environment(where, pod.Containers[0])
		if !fromSecret["SECKILL_MYSQL_DSN"] {
			c.fail("%s: SECKILL_MYSQL_DSN must come from a Secret (secretKeyRef)", where)
		}
		if _, err := config.LoadCommon(func(k string) string { return env[k] }); err != nil {
			c.fail("%s: pkg/config refuses its environment: %v", where, err)
		}
		c.migrationStep(j.Name, pod)
	}
	if found != 1 {
		c.fail("want one migration Job (gateway migrate), found %d", found)
	}
}
